//! The environment variables bpftrace 0.17 reads, read once at start-up.
//! Input: the process environment; output: [`BpftraceEnv`], the settings
//! that change what wprof does, or bpftrace's message for a bad value.
//! Every variable bpftrace reads is checked as bpftrace checks it;
//! [`VARIABLES`] says what each one does here. One that would change
//! nothing in wprof (`BPFTRACE_BTF`: types come from the running kernel) is
//! refused with why, never silently ignored; `BPFTRACE_VERIFY_LLVM_IR` alone
//! is accepted without effect, as bpftrace's test runner sets it everywhere.

use std::ffi::OsString;

/// The longest `str()` bpftrace allows: strings live on the 512-byte BPF stack.
pub const MAX_STRLEN: u64 = 200;

/// What one variable holds, as bpftrace parses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An unsigned number.
    Number,
    /// `0` or `1`.
    Flag,
    /// A file path.
    Path,
}

/// What wprof does with one variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// It acts as in bpftrace: what it sets.
    Applied(&'static str),
    /// It would be a silent no-op here, so setting it is refused (with why),
    /// unless to the value wprof always behaves as.
    Refused {
        accepted: Option<&'static str>,
        why: &'static str,
    },
}

/// Every variable bpftrace 0.17 reads (its `parse_env` and usage text), its
/// kind, and what it does in wprof.
pub const VARIABLES: [(&str, Kind, Effect); 15] = [
    (
        "BPFTRACE_STRLEN",
        Kind::Number,
        Effect::Applied("bytes `str()` reads (default 64, at most 200)"),
    ),
    (
        "BPFTRACE_MAP_KEYS_MAX",
        Kind::Number,
        Effect::Applied("entries a script map holds (default 4096)"),
    ),
    (
        "BPFTRACE_CAT_BYTES_MAX",
        Kind::Number,
        Effect::Applied("bytes `cat()` prints (default 10240; read when it prints)"),
    ),
    (
        "BPFTRACE_MAX_PROBES",
        Kind::Number,
        Effect::Applied("most probes a script attaches (default 512)"),
    ),
    (
        "BPFTRACE_MAX_BPF_PROGS",
        Kind::Number,
        Effect::Applied("most BPF programs a script loads (default 512)"),
    ),
    (
        "BPFTRACE_PERF_RB_PAGES",
        Kind::Number,
        Effect::Applied(
            "pages of output buffer per CPU (default: a 1 MiB ring); wprof's one ring \
             buffer holds as many as bpftrace's per-CPU buffers together",
        ),
    ),
    (
        "BPFTRACE_NO_CPP_DEMANGLE",
        Kind::Flag,
        Effect::Applied("1 prints C++ user symbols mangled"),
    ),
    (
        "BPFTRACE_NO_USER_SYMBOLS",
        Kind::Flag,
        Effect::Applied("1 prints user addresses (`usym`, `ustack`) unresolved"),
    ),
    (
        "BPFTRACE_CACHE_USER_SYMBOLS",
        Kind::Flag,
        Effect::Refused {
            accepted: Some("1"),
            why: "wprof always caches symbols per executable (by file offset, so ASLR cannot \
                  break the cache)",
        },
    ),
    (
        "BPFTRACE_LOG_SIZE",
        Kind::Number,
        Effect::Refused {
            accepted: None,
            why: "wprof sizes the verifier log itself, large enough for the whole log",
        },
    ),
    (
        "BPFTRACE_MAX_TYPE_RES_ITERATIONS",
        Kind::Number,
        Effect::Refused {
            accepted: None,
            why: "wprof resolves nested types from BTF without a bound on the passes",
        },
    ),
    (
        "BPFTRACE_NODE_MAX",
        Kind::Number,
        Effect::Refused {
            accepted: None,
            why: "wprof bounds scripts by their size, not their number of nodes",
        },
    ),
    (
        "BPFTRACE_VERIFY_LLVM_IR",
        Kind::Flag,
        // Accepted, not refused: bpftrace's own test runner sets it for every run.
        Effect::Applied(
            "checked only: there is no LLVM IR; what it asks (a well-formed program) the \
             kernel verifier checks at every load",
        ),
    ),
    (
        "BPFTRACE_VMLINUX",
        Kind::Path,
        Effect::Refused {
            accepted: None,
            why: "wprof reads kernel symbols from /proc/kallsyms only",
        },
    ),
    (
        "BPFTRACE_BTF",
        Kind::Path,
        Effect::Refused {
            accepted: None,
            why: "wprof reads kernel types from /sys/kernel/btf/vmlinux only",
        },
    ),
];

/// Whether `BPFTRACE_NO_USER_SYMBOLS` asks for user addresses unresolved.
pub fn user_symbols_off() -> bool {
    std::env::var("BPFTRACE_NO_USER_SYMBOLS").is_ok_and(|value| value.trim() == "1")
}

/// The settings the environment gives, `None` where a variable is unset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BpftraceEnv {
    pub strlen: Option<u32>,
    pub map_keys_max: Option<u32>,
    /// `BPFTRACE_PERF_RB_PAGES`.
    pub output_pages_per_cpu: Option<u32>,
    pub max_probes: Option<u64>,
    pub max_programs: Option<u64>,
}

/// A value bpftrace would refuse, in bpftrace's words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("Env var '{0}' did not contain a valid uint64_t, or was zero-valued.")]
    NotANumber(&'static str),
    #[error("Env var '{0}' did not contain a valid value (0 or 1).")]
    NotAFlag(&'static str),
    #[error(
        "'BPFTRACE_STRLEN' {0} exceeds the current maximum of {MAX_STRLEN} bytes.\n\
         This limitation is because strings are currently stored on the 512 byte BPF stack."
    )]
    StrlenTooLarge(u64),
    #[error("Env var '{0}' is too large for wprof (at most {max})", max = u32::MAX)]
    TooLarge(&'static str),
    #[error("Env var '{name}' has no effect in wprof ({why}); unset it{}", accepted.map_or(String::new(), |a| format!(" or set it to {a}")))]
    NoEffect {
        name: &'static str,
        why: &'static str,
        accepted: Option<&'static str>,
    },
}

impl BpftraceEnv {
    /// The settings of this process's environment.
    pub fn read() -> Result<BpftraceEnv, EnvError> {
        BpftraceEnv::from_lookup(|name| std::env::var_os(name))
    }

    /// The settings `lookup` gives (a variable's value, if set); every
    /// variable is checked, the first bad one is the error.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Self, EnvError> {
        let mut numbers = Vec::new();
        for (name, kind, effect) in VARIABLES {
            let Some(value) = lookup(name) else {
                numbers.push(None);
                continue;
            };
            let text = value.to_string_lossy();
            if let Effect::Refused { accepted, why } = effect
                && accepted != Some(text.trim())
            {
                return Err(EnvError::NoEffect {
                    name,
                    why,
                    accepted,
                });
            }
            numbers.push(match kind {
                Kind::Number => Some(parse_number(name, &text)?),
                Kind::Flag if text == "0" || text == "1" => None,
                Kind::Flag => return Err(EnvError::NotAFlag(name)),
                Kind::Path => None,
            });
        }
        let number = |name: &str| {
            let index = VARIABLES.iter().position(|(n, _, _)| *n == name);
            index.and_then(|i| numbers[i])
        };
        let narrow = |name: &'static str| match number(name) {
            Some(n) => u32::try_from(n)
                .map(Some)
                .map_err(|_| EnvError::TooLarge(name)),
            None => Ok(None),
        };
        if let Some(strlen) = number("BPFTRACE_STRLEN").filter(|&n| n > MAX_STRLEN) {
            return Err(EnvError::StrlenTooLarge(strlen));
        }
        Ok(BpftraceEnv {
            strlen: narrow("BPFTRACE_STRLEN")?,
            map_keys_max: narrow("BPFTRACE_MAP_KEYS_MAX")?,
            output_pages_per_cpu: narrow("BPFTRACE_PERF_RB_PAGES")?,
            max_probes: number("BPFTRACE_MAX_PROBES"),
            max_programs: number("BPFTRACE_MAX_BPF_PROGS"),
        })
    }
}

/// The default of `BPFTRACE_MAX_PROBES` and `BPFTRACE_MAX_BPF_PROGS`.
const DEFAULT_MAX: u64 = 512;

/// Too many probes or programs for the limits the environment sets.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error(
        "Can't attach to {probes} probes because it exceeds the current limit of {limit} probes.\n\
         You can increase the limit through the BPFTRACE_MAX_PROBES environment variable, but \
         BE CAREFUL since a high number of probes attached can cause your system to crash."
    )]
    Probes { probes: usize, limit: u64 },
    #[error(
        "Your program is trying to generate more than {programs} BPF programs, which exceeds \
         the current limit of {limit}.\nYou can increase the limit through the \
         BPFTRACE_MAX_BPF_PROGS environment variable."
    )]
    Programs { programs: usize, limit: u64 },
}

impl BpftraceEnv {
    /// Whether `probes` attach points and `programs` BPF programs are
    /// within `BPFTRACE_MAX_PROBES` and `BPFTRACE_MAX_BPF_PROGS`.
    pub fn check_limits(&self, probes: usize, programs: usize) -> Result<(), LimitError> {
        let limit = self.max_programs.unwrap_or(DEFAULT_MAX);
        if programs as u64 > limit {
            return Err(LimitError::Programs { programs, limit });
        }
        let limit = self.max_probes.unwrap_or(DEFAULT_MAX);
        if probes as u64 > limit {
            return Err(LimitError::Probes { probes, limit });
        }
        Ok(())
    }
}

/// A positive decimal number, with bpftrace's message otherwise.
fn parse_number(name: &'static str, text: &str) -> Result<u64, EnvError> {
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(EnvError::NotANumber(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<BpftraceEnv, EnvError> {
        BpftraceEnv::from_lookup(|name| {
            (pairs.iter())
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    /// Set variables become settings; unset ones stay `None`.
    #[test]
    fn reads_the_settings() {
        let read = env(&[("BPFTRACE_STRLEN", "100"), ("BPFTRACE_MAP_KEYS_MAX", "2")]);
        let read = read.expect("valid");
        assert_eq!(read.strlen, Some(100));
        assert_eq!(read.map_keys_max, Some(2));
        assert_eq!(read.max_probes, None);
        assert_eq!(env(&[]), Ok(BpftraceEnv::default()));
    }

    /// Bad values get bpftrace's messages, also for variables without effect here.
    #[test]
    fn refuses_as_bpftrace() {
        assert_eq!(
            env(&[("BPFTRACE_STRLEN", "201")]).unwrap_err().to_string(),
            "'BPFTRACE_STRLEN' 201 exceeds the current maximum of 200 bytes.\n\
             This limitation is because strings are currently stored on the 512 byte BPF stack."
        );
        assert_eq!(
            env(&[("BPFTRACE_PERF_RB_PAGES", "big")])
                .unwrap_err()
                .to_string(),
            "Env var 'BPFTRACE_PERF_RB_PAGES' did not contain a valid uint64_t, or was zero-valued."
        );
        assert_eq!(
            env(&[("BPFTRACE_NO_CPP_DEMANGLE", "yes")]),
            Err(EnvError::NotAFlag("BPFTRACE_NO_CPP_DEMANGLE"))
        );
        assert_eq!(
            env(&[("BPFTRACE_MAP_KEYS_MAX", "0")]),
            Err(EnvError::NotANumber("BPFTRACE_MAP_KEYS_MAX"))
        );
    }

    /// A variable that would change nothing here is refused, naming it and
    /// why, unless set to what wprof always does.
    #[test]
    fn refuses_variables_without_effect() {
        assert_eq!(
            env(&[("BPFTRACE_BTF", "/nowhere")])
                .unwrap_err()
                .to_string(),
            "Env var 'BPFTRACE_BTF' has no effect in wprof (wprof reads kernel types from \
             /sys/kernel/btf/vmlinux only); unset it"
        );
        let cache = env(&[("BPFTRACE_CACHE_USER_SYMBOLS", "0")]).unwrap_err();
        assert!(
            cache.to_string().ends_with("; unset it or set it to 1"),
            "{cache}"
        );
        assert!(env(&[("BPFTRACE_CACHE_USER_SYMBOLS", "1")]).is_ok());
        assert!(env(&[("BPFTRACE_VERIFY_LLVM_IR", "1")]).is_ok());
        assert!(env(&[("BPFTRACE_LOG_SIZE", "100")]).is_err());
        let pages = env(&[
            ("BPFTRACE_PERF_RB_PAGES", "16"),
            ("BPFTRACE_NO_USER_SYMBOLS", "1"),
        ]);
        assert_eq!(pages.expect("valid").output_pages_per_cpu, Some(16));
    }

    /// Probe and program counts past the limits are refused, at the defaults too.
    #[test]
    fn limits_probes_and_programs() {
        let limited = env(&[("BPFTRACE_MAX_PROBES", "2")]).expect("valid");
        assert_eq!(limited.check_limits(2, 1), Ok(()));
        assert_eq!(
            limited.check_limits(3, 1),
            Err(LimitError::Probes {
                probes: 3,
                limit: 2
            })
        );
        assert!(
            (BpftraceEnv::default()
                .check_limits(1, 513)
                .unwrap_err()
                .to_string())
            .starts_with("Your program is trying to generate more than 513 BPF programs")
        );
    }
}
