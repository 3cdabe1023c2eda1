//! The 38 tools bpftrace 0.17 ships in `/usr/sbin/*.bt`, one entry each: every
//! tool either compiles under `--dump-bpf` or fails for the reason recorded here;
//! the kprobe tools' programs pass the kernel verifier and a run names the
//! missing kernel feature. Tools that need constructs other branches of issue 13
//! add are in [`PENDING`] with the construct and today's first error: the test
//! fails when one of them starts compiling, so the entry is moved out and its
//! full checks run. Running the tools against bpftrace is in `tools_run.rs`.

use std::fs;
use std::path::Path;

use wprof::capture::model::RecordOrigin;
use wprof::driver::{self, Source};
use wprof::frontend::options::CompileOptions;
use wprof::runtime::bpf::loader;
use wprof::runtime::targets::environment::SystemEnvironment;
use wprof::runtime::targets::features;

use super::{wprof, wprof_fails};
use crate::require_bpf;

/// Where Debian's bpftrace package installs its tools.
pub const TOOLS_DIR: &str = "/usr/sbin";

/// What a tool needs from this kernel, which decides what is checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// Tracepoints, uprobes, profile/interval: bpftrace and wprof run it here
    /// (compared in `tools_run.rs`).
    Runs,
    /// kprobe/kretprobe: the programs load (the verifier accepts them) but this
    /// kernel cannot attach them. bpftrace "runs" some of them degenerately,
    /// skipping every kprobe with a warning; wprof refuses, naming the feature.
    Kprobe,
    /// Cannot run here under either tool: a run fails saying `reason`;
    /// `compiles` tells whether `--dump-bpf` still succeeds.
    Refused {
        reason: &'static str,
        compiles: bool,
    },
}

/// Every shipped tool and its kind.
pub const TOOLS: &[(&str, Kind)] = &[
    ("bashreadline", Kind::Runs),
    ("biolatency", Kind::Kprobe),
    ("biosnoop", Kind::Kprobe),
    ("biostacks", Kind::Kprobe),
    ("bitesize", Kind::Runs),
    ("capable", Kind::Kprobe),
    ("cpuwalk", Kind::Runs),
    ("dcsnoop", Kind::Kprobe),
    ("execsnoop", Kind::Runs),
    ("gethostlatency", Kind::Runs),
    ("killsnoop", Kind::Runs),
    // `avenrun` is not in /proc/kallsyms (CONFIG_KALLSYMS_ALL is off).
    (
        "loads",
        Kind::Refused {
            reason: "KALLSYMS_ALL",
            compiles: true,
        },
    ),
    // md_flush_request is in the md module, not loaded here; `--dump-bpf`
    // compiles the probe as written with a warning, as bpftrace does.
    (
        "mdflush",
        Kind::Refused {
            reason: "no kernel function matches `md_flush_request`",
            compiles: true,
        },
    ),
    ("naptime", Kind::Runs),
    ("oomkill", Kind::Kprobe),
    ("opensnoop", Kind::Runs),
    ("pidpersec", Kind::Runs),
    // Tracepoints only, but `#include <linux/sched.h>` has no TASK_RUNNING here
    // (bpftrace's clang fails on the UAPI header); needs wprof's task-state table.
    ("runqlat", Kind::Runs),
    // `struct cfs_rq` has no `nr_running` on Linux 6.18 (it is `nr_queued`).
    (
        "runqlen",
        Kind::Refused {
            reason: "nr_running",
            compiles: false,
        },
    ),
    ("setuids", Kind::Runs),
    ("ssllatency", Kind::Runs),
    ("sslsnoop", Kind::Runs),
    ("statsnoop", Kind::Runs),
    // swap_readpage is swap_read_folio since Linux 6.6 (compiled as mdflush).
    (
        "swapin",
        Kind::Refused {
            reason: "no kernel function matches `swap_readpage`",
            compiles: true,
        },
    ),
    ("syncsnoop", Kind::Runs),
    ("syscount", Kind::Runs),
    ("tcpaccept", Kind::Kprobe),
    ("tcpconnect", Kind::Kprobe),
    // bpftrace cannot run it here (its clang fails on `net/sock.h`); wprof can,
    // but no workload here makes a drop with a socket, so only the header shows.
    ("tcpdrop", Kind::Runs),
    ("tcplife", Kind::Kprobe),
    ("tcpretrans", Kind::Kprobe),
    ("tcpsynbl", Kind::Kprobe),
    // libpthread.so.0 is a stub since glibc 2.34: pthread_create is in libc
    // (`--dump-bpf` compiles the probe as written with a warning, as
    // `bpftrace -d` does; a bpftrace run drops the probe silently).
    (
        "threadsnoop",
        Kind::Refused {
            reason: "no function matching `pthread_create`",
            compiles: true,
        },
    ),
    ("undump", Kind::Kprobe),
    ("vfscount", Kind::Kprobe),
    ("vfsstat", Kind::Kprobe),
    ("writeback", Kind::Runs),
    ("xfsdist", Kind::Kprobe),
];

/// Tools that need a construct another issue-13 branch adds: (tool, the
/// construct and its branch, the first error wprof reports without it).
pub const PENDING: &[(&str, &str, &str)] = &[];

/// The installed tool's path, or `None` (with a printed reason) when bpftrace's
/// tools are not installed.
pub fn tool_path(name: &str) -> Option<String> {
    let path = format!("{TOOLS_DIR}/{name}.bt");
    if Path::new(&path).exists() {
        return Some(path);
    }
    eprintln!("SKIPPED {name}: {path} is missing (Debian package bpftrace)");
    None
}

/// The pending entry of `name`, if its compilation waits for another branch.
pub fn pending(name: &str) -> Option<(&'static str, &'static str)> {
    PENDING
        .iter()
        .find(|(tool, ..)| *tool == name)
        .map(|&(_, construct, error)| (construct, error))
}

/// `--dump-bpf` of a pending tool fails with its recorded error; once it
/// compiles, the test says to move it out of [`PENDING`].
#[track_caller]
pub fn assert_still_pending(name: &str, path: &str, construct: &str, error: &str) {
    let out = wprof(&["--dump-bpf", path]);
    assert!(
        !out.success(),
        "{name} now compiles: remove it from PENDING in tests/suite/tools.rs ({construct})"
    );
    assert!(
        out.stderr.contains(error),
        "{name} fails differently than recorded ({error}):\n{}",
        out.stderr
    );
    eprintln!("PENDING {name}: needs {construct}");
}

/// The catalog names exactly the tools bpftrace installs, each once.
#[test]
fn catalog_lists_every_shipped_tool() {
    let Ok(dir) = fs::read_dir(TOOLS_DIR) else {
        eprintln!("SKIPPED catalog_lists_every_shipped_tool: cannot read {TOOLS_DIR}");
        return;
    };
    let mut installed: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".bt").map(str::to_owned))
        .collect();
    if installed.is_empty() {
        eprintln!("SKIPPED catalog_lists_every_shipped_tool: no *.bt in {TOOLS_DIR} (bpftrace)");
        return;
    }
    installed.sort();
    let catalog: Vec<String> = TOOLS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        catalog, installed,
        "TOOLS must list /usr/sbin/*.bt in order"
    );
    assert_eq!(catalog.len(), 38);
    for (name, ..) in PENDING {
        assert!(
            catalog.iter().any(|n| n == name),
            "{name} is pending but not a tool"
        );
    }
}

/// Every tool compiles under `--dump-bpf`, except the pending ones, which fail
/// with their recorded first error, and the refused ones that cannot compile
/// on this kernel (checked by [`refused_tools_say_why`]).
#[test]
fn every_tool_compiles_or_is_pending() {
    for (name, kind) in TOOLS {
        let Some(path) = tool_path(name) else { return };
        if let Kind::Refused {
            compiles: false, ..
        } = kind
        {
            continue;
        }
        if let Some((construct, error)) = pending(name) {
            assert_still_pending(name, &path, construct, error);
            continue;
        }
        let out = wprof(&["--dump-bpf", &path]);
        assert!(out.success(), "--dump-bpf {name} failed:\n{}", out.stderr);
        assert!(
            out.stdout.contains(" instructions)"),
            "--dump-bpf {name} printed no program:\n{}",
            out.stdout
        );
    }
}

/// The kprobe tools' programs pass the kernel verifier (loaded, not attached),
/// and running one fails naming the missing kernel feature.
#[test]
fn kprobe_tools_verify_and_name_the_missing_feature() {
    require_bpf!();
    let kprobes_missing = features::detect().kprobes.reason().map(str::to_owned);
    for (name, kind) in TOOLS {
        if *kind != Kind::Kprobe || pending(name).is_some() {
            continue;
        }
        let Some(path) = tool_path(name) else { return };
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        let sources = [Source {
            name: path.clone(),
            text,
            origin: RecordOrigin::Script,
        }];
        let env = SystemEnvironment::default();
        let (_, compiled) = driver::compile(&sources, &[], &env, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{name} does not compile: {e:?}"));
        let loaded = loader::load(&compiled);
        assert!(
            loaded.is_ok(),
            "the verifier rejected {name}: {:?}",
            loaded.err()
        );
        let Some(reason) = &kprobes_missing else {
            eprintln!("{name}: this kernel has kprobes; the refusal is not checked");
            continue;
        };
        // The message is wrapped; its first clause stays on one line.
        let reason = reason.split(" (").next().unwrap_or(reason);
        let out = wprof_fails(&[&path]);
        assert!(
            out.stderr.contains(reason),
            "{name}: the run should name the missing feature ({reason}):\n{}",
            out.stderr
        );
    }
}

/// Tools that cannot run on this machine under either tool fail with the
/// reason recorded in the catalog.
#[test]
fn refused_tools_say_why() {
    require_bpf!();
    for (name, kind) in TOOLS {
        let Kind::Refused { reason, .. } = kind else {
            continue;
        };
        let Some(path) = tool_path(name) else { return };
        if let Some((construct, error)) = pending(name) {
            assert_still_pending(name, &path, construct, error);
            continue;
        }
        let out = wprof_fails(&[&path]);
        assert!(
            out.stderr.contains(reason),
            "{name}: expected `{reason}` in:\n{}",
            out.stderr
        );
    }
}
