//! Attaches one loaded program by the kind of its [`AttachPoint`]
//! (tracepoint, raw tracepoint, uprobe, USDT, kprobe, fentry, perf event) and
//! turns libbpf's errors into the errno's meaning plus advice. The caller
//! ([`super::loader::Loaded::attach`]) owns the links it returns.

use libbpf_rs::{Link, ProgramMut, TracepointCategory, UprobeOpts};

use super::perf_event;
use crate::vocab::AttachPoint;

/// Attaches `prog` by the kind of `point`.
pub(super) fn attach_point(
    prog: &ProgramMut<'_>,
    point: &AttachPoint,
    pid: i32,
) -> Result<Vec<Link>, String> {
    match point {
        AttachPoint::Begin | AttachPoint::End => {
            Err("BEGIN/END probes run with run_once, not attach".into())
        }
        AttachPoint::Tracepoint { category, name } => attach_tracepoint(prog, category, name),
        AttachPoint::RawTracepoint { name } => prog
            .attach_raw_tracepoint(name)
            .map(|l| vec![l])
            .map_err(|e| {
                explain(
                    &e,
                    "list raw tracepoints in /sys/kernel/tracing/available_events",
                )
            }),
        AttachPoint::TpBtf { name } => prog.attach_trace().map(|l| vec![l]).map_err(|e| {
            explain(
                &e,
                &format!("check that `btf_trace_{name}` is in /sys/kernel/btf/vmlinux"),
            )
        }),
        AttachPoint::Uprobe {
            binary,
            offset,
            retprobe,
            ..
        } => attach_uprobe(prog, pid, binary, *offset, 0, *retprobe),
        AttachPoint::Usdt {
            binary,
            offset,
            semaphore_offset,
            ..
        } => attach_uprobe(prog, pid, binary, *offset, *semaphore_offset, false),
        AttachPoint::Kprobe {
            function,
            offset,
            retprobe,
        } => attach_kprobe(prog, function, *offset, *retprobe),
        AttachPoint::Fentry { .. } => prog.attach_trace().map(|l| vec![l]).map_err(|e| {
            explain(
                &e,
                "fentry/fexit need BPF trampolines; use a kprobe or tracepoint",
            )
        }),
        AttachPoint::PerfEvent {
            event,
            sample,
            all_cpus,
        } => perf_event::attach(prog, *event, *sample, *all_cpus),
    }
}

/// The error text plus advice keyed on the errno.
pub(super) fn explain(err: &libbpf_rs::Error, advice: &str) -> String {
    use libbpf_rs::ErrorKind as K;
    let errno_hint = match err.kind() {
        K::PermissionDenied => "run as root (CAP_BPF and CAP_PERFMON are needed); ",
        K::NotFound => "the target does not exist; ",
        K::Unsupported => "this kernel lacks the feature; ",
        _ => "",
    };
    format!("{err:#}; {errno_hint}{advice}")
}

fn attach_tracepoint(
    prog: &ProgramMut<'_>,
    category: &str,
    name: &str,
) -> Result<Vec<Link>, String> {
    prog.attach_tracepoint(TracepointCategory::Custom(category.into()), name)
        .map(|l| vec![l])
        .map_err(|e| {
            explain(
                &e,
                &format!("check /sys/kernel/tracing/events/{category}/{name} exists"),
            )
        })
}

fn attach_uprobe(
    prog: &ProgramMut<'_>,
    pid: i32,
    binary: &std::path::Path,
    offset: u64,
    ref_ctr_offset: u64,
    retprobe: bool,
) -> Result<Vec<Link>, String> {
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| format!("offset {v:#x} too large"));
    let opts = UprobeOpts {
        ref_ctr_offset: to_usize(ref_ctr_offset)?,
        retprobe,
        ..Default::default()
    };
    prog.attach_uprobe_with_opts(pid, binary, to_usize(offset)?, opts)
        .map(|l| vec![l])
        .map_err(|e| {
            let advice = if ref_ctr_offset != 0 && e.kind() == libbpf_rs::ErrorKind::InvalidInput {
                // uprobe_register: one address, one ref_ctr_offset (Linux 4.20+).
                "another uprobe at this address may use a different semaphore offset".to_string()
            } else {
                format!(
                    "check that {} exists and is readable, and that the process (-p) is alive",
                    binary.display()
                )
            };
            explain(&e, &advice)
        })
}

fn attach_kprobe(
    prog: &ProgramMut<'_>,
    function: &str,
    offset: u64,
    retprobe: bool,
) -> Result<Vec<Link>, String> {
    if offset != 0 {
        return Err("kprobes at an offset inside a function are not supported".into());
    }
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
        || std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists();
    prog.attach_kprobe(retprobe, function)
        .map(|l| vec![l])
        .map_err(|e| {
            if kprobes {
                explain(
                    &e,
                    &format!("check `{function}` is in /proc/kallsyms and not inlined"),
                )
            } else {
                explain(
                    &e,
                    "this kernel has no kprobes (CONFIG_KPROBES is off); use a tracepoint instead",
                )
            }
        })
}

#[cfg(test)]
mod tests {
    use crate::runtime::bpf::loader::{AttachOptions, load};
    use crate::runtime::bpf::test_support::*;
    use crate::vocab::{AttachPoint, MapId, MapKind};

    const COUNTS: MapId = MapId(1);

    #[unsafe(no_mangle)]
    #[inline(never)]
    extern "C" fn wprof_loader_uprobe_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_add(1)
    }

    /// File offset of a function of this binary, from /proc/self/maps.
    fn self_file_offset(addr: usize) -> (std::path::PathBuf, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        for line in maps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = fields[0].split_once('-').expect("range");
            let start = usize::from_str_radix(start, 16).expect("hex");
            let end = usize::from_str_radix(end, 16).expect("hex");
            if (start..end).contains(&addr) {
                let off = u64::from_str_radix(fields[2], 16).expect("hex");
                return (fields[5].into(), (addr - start) as u64 + off);
            }
        }
        panic!("address {addr:#x} not mapped");
    }

    /// A uprobe on a function of the test binary counts its calls (pid filter on).
    #[test]
    fn uprobe_counts_calls() {
        let addr = wprof_loader_uprobe_target as *const () as usize;
        let (binary, offset) = self_file_offset(addr);
        let mut asm = Assembler::new();
        asm.count(COUNTS).ret0();
        let attach = AttachPoint::Uprobe {
            binary,
            symbol: "wprof_loader_uprobe_target".into(),
            offset,
            retprobe: false,
        };
        let prog = asm.program("up", "uprobe:self:wprof_loader_uprobe_target", attach);
        let counts = map("counts", MapKind::Array, 4, 8, 1);
        let mut loaded = load(&with_ring(vec![counts], vec![prog])).expect("load");
        let pid = i32::try_from(std::process::id()).expect("pid");
        loaded
            .attach_all(AttachOptions { pid: Some(pid) })
            .expect("attach");
        for i in 0..4 {
            std::hint::black_box(wprof_loader_uprobe_target(i));
        }
        assert_eq!(sum_u64(&loaded.map_entries(COUNTS).expect("entries")), 4);
    }

    #[unsafe(no_mangle)]
    #[inline(never)]
    extern "C" fn wprof_loader_usdt_site(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    /// A USDT-style semaphore: non-zero initial value keeps it in `.data`,
    /// which is file-backed (the kernel only counts in file-backed pages).
    #[unsafe(no_mangle)]
    static WPROF_LOADER_SEMAPHORE: std::sync::atomic::AtomicU16 =
        std::sync::atomic::AtomicU16::new(0x100);

    /// A USDT attach bumps the semaphore through ref_ctr_offset while attached.
    #[test]
    fn usdt_semaphore_counts_attach() {
        use std::sync::atomic::Ordering;
        let (binary, offset) = self_file_offset(wprof_loader_usdt_site as *const () as usize);
        let sem_addr = &raw const WPROF_LOADER_SEMAPHORE as usize;
        let (_, semaphore_offset) = self_file_offset(sem_addr);
        let attach = AttachPoint::Usdt {
            binary,
            provider: "wprof".into(),
            name: "test".into(),
            offset,
            semaphore_offset,
        };
        let prog = empty_program("usdt", "usdt:self:wprof:test", attach);
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        let pid = i32::try_from(std::process::id()).expect("pid");
        loaded
            .attach_all(AttachOptions { pid: Some(pid) })
            .expect("attach");
        assert_eq!(WPROF_LOADER_SEMAPHORE.load(Ordering::SeqCst), 0x101);
        // The kernel refuses a second probe at one address with another
        // ref_ctr_offset (EINVAL), hence a site of its own.
        std::hint::black_box(wprof_loader_usdt_site(1));
        loaded.detach_all();
        assert_eq!(WPROF_LOADER_SEMAPHORE.load(Ordering::SeqCst), 0x100);
    }

    /// Attaching a kprobe fails with an AttachError naming the probe.
    #[test]
    fn kprobe_attach_error_names_probe() {
        let attach = AttachPoint::Kprobe {
            function: "wprof_no_such_function".into(),
            offset: 0,
            retprobe: false,
        };
        let prog = empty_program("kp", "kprobe:wprof_no_such_function", attach);
        let mut loaded = load(&with_ring(vec![], vec![prog])).expect("load");
        let err = loaded
            .attach_all(AttachOptions::default())
            .expect_err("kprobe attached");
        assert_eq!(err.probe, "kprobe:wprof_no_such_function");
        assert!(!err.reason.is_empty());
        println!("kprobe: {err}");
    }
}
