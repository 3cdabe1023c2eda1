//! Runtime, `--info`: what this kernel and this wprof support, in
//! bpftrace's `--info` layout (sections of `  name: value` lines, which
//! bpftrace's runtime-test runner greps for `name: yes`). Input:
//! [`KernelFeatures`] and libbpf's program, helper and map-type probes;
//! output: the text. Values say whether wprof can *run* the feature here
//! (bpftrace says `kprobe: yes` where kprobes load but cannot attach).

use std::fmt::Write;
use std::path::Path;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapType, ProgramType};

use super::features::KernelFeatures;

/// The text of `--info`.
pub fn report(features: &KernelFeatures) -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|text| text.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    };
    let release = read("/proc/sys/kernel/osrelease");
    let fentry = features.fentry().is_available();
    let sections = [
        Section {
            title: "System",
            lines: vec![
                (
                    "OS",
                    format!("Linux {release} {}", read("/proc/sys/kernel/version")),
                ),
                ("Arch", std::env::consts::ARCH.into()),
            ],
        },
        Section {
            title: "Build",
            lines: vec![
                ("version", format!("v{}", env!("CARGO_PKG_VERSION"))),
                ("LLVM", "none (wprof compiles to BPF itself)".into()),
                ("unsafe uprobe", yes_no(false)),
                ("bfd", yes_no(false)),
                // DWARF is read with gimli, not libdw: `args.NAME` and `-lv` in uprobes.
                ("libdw (DWARF support)", yes_no(true)),
            ],
        },
        helpers_section(fentry),
        kernel_section(features, &release),
        Section {
            title: "Map types",
            lines: [
                ("hash", MapType::Hash),
                ("percpu hash", MapType::PercpuHash),
                ("array", MapType::Array),
                ("percpu array", MapType::PercpuArray),
                ("stack_trace", MapType::StackTrace),
                ("perf_event_array", MapType::PerfEventArray),
                ("ringbuf", MapType::RingBuf),
            ]
            .into_iter()
            .map(|(name, map)| (name, yes_no(map.is_supported().unwrap_or(false))))
            .collect(),
        },
        probes_section(features, fentry),
    ];
    let mut text = String::new();
    for (i, section) in sections.iter().enumerate() {
        let blank = if i == 0 { "" } else { "\n" };
        let _ = writeln!(text, "{blank}{}", section.title);
        for (name, value) in &section.lines {
            let _ = writeln!(text, "  {name}: {value}");
        }
    }
    text
}

struct Section {
    title: &'static str,
    lines: Vec<(&'static str, String)>,
}

fn yes_no(available: bool) -> String {
    if available { "yes" } else { "no" }.into()
}

/// Helpers as a kprobe program sees them; `d_path` and `skb_output` need
/// a tracing (fentry) program.
fn helpers_section(fentry: bool) -> Section {
    let kprobe = |helper| {
        ProgramType::Kprobe
            .is_helper_supported(helper)
            .unwrap_or(false)
    };
    let mut lines: Vec<(&'static str, String)> = [
        ("probe_read", libbpf_sys::BPF_FUNC_probe_read),
        ("probe_read_str", libbpf_sys::BPF_FUNC_probe_read_str),
        ("probe_read_user", libbpf_sys::BPF_FUNC_probe_read_user),
        (
            "probe_read_user_str",
            libbpf_sys::BPF_FUNC_probe_read_user_str,
        ),
        ("probe_read_kernel", libbpf_sys::BPF_FUNC_probe_read_kernel),
        (
            "probe_read_kernel_str",
            libbpf_sys::BPF_FUNC_probe_read_kernel_str,
        ),
        (
            "get_current_cgroup_id",
            libbpf_sys::BPF_FUNC_get_current_cgroup_id,
        ),
        ("send_signal", libbpf_sys::BPF_FUNC_send_signal),
        ("override_return", libbpf_sys::BPF_FUNC_override_return),
        ("get_boot_ns", libbpf_sys::BPF_FUNC_ktime_get_boot_ns),
    ]
    .into_iter()
    .map(|(name, helper)| (name, yes_no(kprobe(helper))))
    .collect();
    lines.push(("dpath", yes_no(fentry)));
    lines.push(("skboutput", yes_no(fentry)));
    Section {
        title: "Kernel helpers",
        lines,
    }
}

/// Verifier limits follow the kernel version: one million instructions
/// since 5.2, bounded loops since 5.3, map batch operations since 5.6.
fn kernel_section(features: &KernelFeatures, release: &str) -> Section {
    let version = kernel_version(release).unwrap_or((0, 0));
    let ref_ctr = Path::new("/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset").exists();
    Section {
        title: "Kernel features",
        lines: vec![
            (
                "Instruction limit",
                if version >= (5, 2) { "1000000" } else { "4096" }.into(),
            ),
            ("Loop support", yes_no(version >= (5, 3))),
            ("btf", yes_no(features.btf.is_available())),
            ("map batch", yes_no(version >= (5, 6))),
            (
                "uprobe refcount (depends on Build:bcc bpf_attach_uprobe refcount)",
                yes_no(ref_ctr),
            ),
        ],
    }
}

fn probes_section(features: &KernelFeatures, fentry: bool) -> Section {
    let iterators = features.task_iterators().is_available();
    let kprobes = features.kprobes.is_available();
    let loads = |ty: ProgramType| ty.is_supported().unwrap_or(false);
    Section {
        title: "Probe types",
        lines: vec![
            ("kprobe", yes_no(kprobes)),
            ("tracepoint", yes_no(features.tracepoints.is_available())),
            ("perf_event", yes_no(loads(ProgramType::PerfEvent))),
            ("kfunc", yes_no(fentry)),
            ("iter:task", yes_no(iterators)),
            ("iter:task_file", yes_no(iterators)),
            ("kprobe_multi", yes_no(false)),
            ("raw_tp_special", yes_no(loads(ProgramType::RawTracepoint))),
            ("uprobe", yes_no(features.uprobes.is_available())),
            ("watchpoint", yes_no(features.breakpoints.is_available())),
            ("hardware", yes_no(features.hardware_pmu.is_available())),
        ],
    }
}

/// `6.18.44-fc` → (6, 18).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernel releases give their major and minor numbers.
    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.18.44-fc-v769"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0"), Some((5, 4)));
        assert_eq!(kernel_version("unknown"), None);
    }

    /// Every section has its title and lines in `  name: value` form, the
    /// values this machine is known to have among them.
    #[test]
    fn report_layout() {
        let text = report(&KernelFeatures::all_available());
        for title in [
            "System",
            "Build",
            "Kernel helpers",
            "Kernel features",
            "Map types",
            "Probe types",
        ] {
            assert!(text.lines().any(|l| l == title), "{title}:\n{text}");
        }
        assert!(text.contains("\n  iter:task: yes\n"), "{text}");
        assert!(text.contains("\n  kfunc: yes\n"), "{text}");
        assert!(text.contains("\n  Arch: x86_64\n"), "{text}");
        assert!(
            text.lines()
                .filter(|l| l.starts_with("  "))
                .all(|l| l.contains(": "))
        );
    }
}
