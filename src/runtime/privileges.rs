//! Runtime, before anything is loaded: does this process hold the
//! privileges tracing needs? Input: the effective capability set in
//! `/proc/self/status`; output: nothing, or an error naming what is missing
//! (instead of the kernel's bare "Operation not permitted" later).

use std::fs;

/// Capability numbers (`linux/capability.h`).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// What tracing needs and this process lacks.
#[derive(Debug, thiserror::Error)]
#[error(
    "tracing needs privileges: run wprof as root, or with CAP_BPF and CAP_PERFMON (and read \
     access to tracefs); this process (uid {uid}) lacks {missing}"
)]
pub struct MissingPrivilege {
    uid: u32,
    missing: String,
}

/// Checks that loading programs and opening perf events will be allowed:
/// CAP_SYS_ADMIN, or both CAP_BPF and CAP_PERFMON, in the effective set.
/// An unreadable status file is not an error here: the kernel decides later.
pub fn check() -> Result<(), MissingPrivilege> {
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return Ok(());
    };
    let Some(effective) = effective_capabilities(&status) else {
        return Ok(());
    };
    let missing = missing_capabilities(effective);
    if missing.is_empty() {
        return Ok(());
    }
    Err(MissingPrivilege {
        // SAFETY: geteuid has no preconditions and cannot fail.
        uid: unsafe { libc::geteuid() },
        missing: missing.join(" and "),
    })
}

/// The `CapEff:` mask of a `/proc/PID/status` text.
fn effective_capabilities(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// The capabilities tracing needs that `effective` lacks (none when it has
/// CAP_SYS_ADMIN, which covers both).
fn missing_capabilities(effective: u64) -> Vec<&'static str> {
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(cap, _)| !has(cap))
        .map(|(_, name)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CAP_SYS_ADMIN alone, or CAP_BPF with CAP_PERFMON, is enough; what
    /// is missing is named.
    #[test]
    fn names_missing_capabilities() {
        assert!(missing_capabilities(1 << CAP_SYS_ADMIN).is_empty());
        assert!(missing_capabilities((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
        assert_eq!(missing_capabilities(1 << CAP_BPF), ["CAP_PERFMON"]);
        assert_eq!(missing_capabilities(0), ["CAP_BPF", "CAP_PERFMON"]);
    }

    /// The effective mask is read from a status text.
    #[test]
    fn reads_the_effective_mask() {
        let status = "Name:\tx\nCapPrm:\t0000000000000001\nCapEff:\t000001fffeffffff\n";
        assert_eq!(effective_capabilities(status), Some(0x1fffeffffff));
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
    }
}
