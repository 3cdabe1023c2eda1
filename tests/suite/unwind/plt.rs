//! Frames in PLT stubs are named `func@plt`, as objdump names the stubs,
//! in the capture's NDJSON and its folded profile: timer samples of
//! `plt_loop.c`, which calls `labs` through its stub in a loop,
//! built with the classic PLT and for indirect branch tracking (`.plt.sec`).

use std::path::Path;
use std::process::Command;

use super::super::{path_str, wprof_ok};
use super::captures::capture_keeping;
use super::workloads::c_plt_loop;
use crate::require_bpf;

/// The PLT section objdump shows `<NAME@plt>` in, in `binary`.
fn objdump_stub_section(binary: &Path, name: &str) -> Option<String> {
    let out = Command::new("objdump").arg("-d").arg(binary).output();
    let text = String::from_utf8_lossy(&out.expect("run objdump").stdout).into_owned();
    let label = format!("<{name}@plt>:");
    let mut section = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("Disassembly of section ") {
            section = Some(name.trim_end_matches(':').to_owned());
        } else if line.trim_end().ends_with(&label) {
            return section;
        }
    }
    None
}

/// Samples `binary` (`-S timer=997hz`); checks that objdump has the stub
/// `labs@plt` in `section`, that samples in it are named so in the
/// NDJSON (and none `_init`, the symbol before the PLT), and that the folded
/// profile has `main;labs@plt`.
fn stub_frames_named(test: &str, binary: &Path, section: &str) {
    let name = "labs@plt";
    let found = objdump_stub_section(binary, "labs");
    assert_eq!(found.as_deref(), Some(section), "objdump's {name}");
    let comm = binary.file_name().and_then(|n| n.to_str()).expect("name");
    // About a fifth of the samples land in the stub; 1.5 s gives tens of
    // them even when the workload gets a small share of a loaded machine.
    let command = format!("{} 1500", path_str(binary));
    let args = ["-S", "timer=997hz", "-c", &command];
    let (ndjson, data) = capture_keeping(test, comm, &args);
    let firsts: Vec<&str> = (ndjson.events.iter())
        .filter(|e| e["t"] == "timer" && e["task"]["pcomm"] == comm)
        .filter_map(|e| ndjson.stack_of(e).first().map(String::as_str))
        .collect();
    let in_stub = (firsts.iter())
        .filter(|f| f.starts_with(&format!("[U] {name}+0x")))
        .count();
    eprintln!("{in_stub} of {} timer samples in {name}", firsts.len());
    assert!(
        in_stub >= 3,
        "{in_stub} of {} samples in {name}",
        firsts.len()
    );
    let init = firsts
        .iter()
        .filter(|f| f.starts_with("[U] _init+"))
        .count();
    assert_eq!(init, 0, "samples named _init");

    let folded = path_str(&data.with_file_name("f.txt"));
    let data = path_str(&data);
    wprof_ok(&["-R", "-D", &data, "--profile", "cpu", "--folded", &folded]);
    let text = std::fs::read_to_string(&folded).expect("folded profile written");
    let _ = std::fs::remove_file(&data);
    let stub_line = format!(";main;{name} ");
    assert!(
        text.lines().any(|l| l.contains(&stub_line)),
        "no folded stack ends in main;{name}:\n{text}"
    );
}

/// The classic PLT (`.plt`, `jmp *GOT` first in each stub).
#[test]
fn plt_stub_frames_are_named() {
    require_bpf!();
    stub_frames_named("unwind-plt", &c_plt_loop(false), ".plt");
}

/// The IBT layout: the stubs called are in `.plt.sec`.
#[test]
fn plt_sec_stub_frames_are_named() {
    require_bpf!();
    stub_frames_named("unwind-plt-sec", &c_plt_loop(true), ".plt.sec");
}
