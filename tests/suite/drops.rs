//! Drop accounting against the real kernel: each record kind's lost events
//! are counted apart, by reason, so that under overload a probe's kept and
//! dropped events add up to its calls exactly, with the trackers on; and
//! stacks are not lost in ordinary use.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::capture::{fresh_dir, summary_events};
use super::{machine_lock, path_str, workload, wprof_ok};
use crate::common::{find_in_path, run_with_timeout, wprof_bin};
use crate::require_bpf;

/// Longest the capture over a parallel build may take.
const BUILD_RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// The script's probe in the overload test.
const FLOODED: &str = "sys_enter_getppid";

/// wprof stopped (by the workload) while 1,000,000 getppid calls fire its
/// tracepoint: the ring buffer fills, the script's probe loses events, and
/// kept + dropped is exactly the calls the workload counted; the trackers'
/// drops are counted apart, and the global counts are the sums of the
/// per-kind ones in `-I`, NDJSON and the end-of-capture warning.
#[test]
fn kept_plus_dropped_is_calls_under_overload() {
    require_bpf!();
    let _machine = machine_lock();
    let dir = fresh_dir("drops_overload");
    let data = path_str(&dir.join("flood.data"));
    let flood = workload("capture_flood");
    let script = format!("tracepoint:syscalls:{FLOODED} /pid == cpid/ < >");
    let out = wprof_ok(&["-e", &script, "-D", &data, "-c", &flood]);
    let calls: u64 = (out.stdout.lines())
        .find_map(|l| l.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the workload counts its calls:\n{}", out.stdout));

    let header = ndjson_header(&data);
    let probes = header["probes"].as_array().expect("probes");
    let flooded = (probes.iter())
        .find(|p| p["name"] == FLOODED)
        .unwrap_or_else(|| panic!("no {FLOODED} probe in {header}"));
    let dropped = flooded["dropped"]["ring_buffer_full"].as_u64().unwrap_or(0);
    let summary = wprof_ok(&["-R", "-I", "-D", &data]).stdout;
    let kept = summary_events(&summary, FLOODED);
    assert!(dropped > 0, "the ring buffer never filled:\n{summary}");
    assert_eq!(kept + dropped, calls, "kept + dropped != calls:\n{summary}");
    assert_eq!(summary_dropped(&summary, FLOODED), dropped, "{summary}");
    assert_global_drops_are_sums(&header);
    let warning = format!("of `{FLOODED}` (ring buffer full)");
    assert!(
        out.stderr.contains("wprof: warning: dropped ") && out.stderr.contains(&warning),
        "{}",
        out.stderr
    );
}

/// `uprobe:libc:malloc < stack; >` for 1 s while `make -j2` builds a small
/// C tree (the compilers' mallocs, with the trackers on) loses no stack:
/// record stacks are inline, so only a probe nested deeper than the scratch
/// buffers could lose one. Ring-buffer losses (whole events, which a slow
/// consumer on a loaded machine can cause) are shown, not asserted.
#[test]
fn parallel_build_loses_no_stacks() {
    require_bpf!();
    let _machine = machine_lock();
    let Some(make) = find_in_path("make") else {
        eprintln!("SKIPPED {}: make is not installed", module_path!());
        return;
    };
    let dir = fresh_dir("drops_build");
    let tree = dir.join("tree");
    write_c_tree(&tree, 6);
    let data = path_str(&dir.join("build.data"));
    let _build = Build::start(&make, &tree);
    let script = "uprobe:libc:malloc < stack; >";
    let names = ["-n", "make", "-n", "cc*", "-n", "gcc", "-n", "as"];
    let mut args = vec!["-e", script, "-d", "1s", "-D", &data];
    args.extend(names);
    // Every malloc of wprof's own traps too while the probe is attached, so
    // on a machine loaded by other work the run outlasts `RUN_TIMEOUT`.
    let run = run_with_timeout(Command::new(wprof_bin()).args(&args), BUILD_RUN_TIMEOUT)
        .expect("run wprof");
    assert!(
        run.success(),
        "wprof {args:?}: {:?} after {:?}\n{}",
        run.status,
        run.elapsed,
        run.stderr
    );
    eprintln!("the 1 s capture over make -j2 took {:?}", run.elapsed);
    let summary = wprof_ok(&["-R", "-I", "-D", &data]).stdout;
    let drops = &summary[summary.find("\ndrops").unwrap_or(0)..];
    eprintln!("drops of malloc with stacks over make -j2:{drops}");
    assert!(
        summary_events(&summary, "malloc") >= 100,
        "the build's mallocs were not seen:\n{summary}"
    );
    let header = ndjson_header(&data);
    assert_eq!(
        header["drops"]["stack_lost"],
        Value::Null,
        "stacks lost:\n{summary}"
    );
    assert_global_drops_are_sums(&header);
}

/// `count` small C files that allocate, and a Makefile that compiles each.
fn write_c_tree(tree: &Path, count: usize) {
    fs::create_dir_all(tree).expect("create the C tree");
    for i in 0..count {
        let source = format!(
            "#include <stdlib.h>\n#include <string.h>\n\
             struct node{i} {{ int v; struct node{i} *next; char name[32]; }};\n\
             int work{i}(int k) {{ struct node{i} *h = 0; int s = 0;\n\
             for (int j = 0; j < k; j++) {{ struct node{i} *n = malloc(sizeof *n);\n\
             n->v = j; n->next = h; strcpy(n->name, \"node\"); h = n; }}\n\
             while (h) {{ struct node{i} *n = h->next; s += h->v; free(h); h = n; }}\n\
             return s; }}\n"
        );
        fs::write(tree.join(format!("f{i}.c")), source).expect("write a C file");
    }
    let makefile = "OBJS = $(patsubst %.c,%.o,$(wildcard *.c))\nall: $(OBJS)\n\
                    %.o: %.c\n\t$(CC) -O2 -g -c -o $@ $<\nclean:\n\trm -f *.o\n";
    fs::write(tree.join("Makefile"), makefile).expect("write the Makefile");
}

/// A parallel build of a C tree, again and again (at most 50 times) until
/// dropped: its process group is then killed.
struct Build(Child);

impl Build {
    #[track_caller]
    fn start(make: &Path, tree: &Path) -> Build {
        let make = make.display();
        let tree = tree.display();
        let rounds = format!(
            "for i in $(seq 50); do {make} -s -j2 -C {tree}; {make} -s -C {tree} clean; done"
        );
        let child = Command::new("sh")
            .args(["-c", &rounds])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start the build");
        Build(child)
    }
}

impl Drop for Build {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the group is our own child's.
        unsafe {
            libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// The NDJSON header of capture `data`.
#[track_caller]
fn ndjson_header(data: &str) -> Value {
    let out = wprof_ok(&["-R", "-J", "-", "-D", data]);
    let line = out.stdout.lines().next().expect("a header line");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad header {line}: {e}"))
}

/// The `dropped` column of probe `name` in a `-I` summary.
#[track_caller]
fn summary_dropped(summary: &str, name: &str) -> u64 {
    let row = (summary.lines())
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() >= 5 && w[1] == name && (w[2] == "instant" || w[2] == "span"))
        .unwrap_or_else(|| panic!("no probe row for {name} in:\n{summary}"));
    row[4].parse().expect("dropped column")
}

/// The header's drops by reason are the sums of every probe's `dropped` and
/// `internal_dropped`.
#[track_caller]
fn assert_global_drops_are_sums(header: &Value) {
    let global = header["drops"].as_object().expect("a finished capture");
    let probes = header["probes"].as_array().expect("probes");
    for reason in ["ring_buffer_full", "stack_lost", "unmatched_span_end"] {
        let sum: u64 = (probes.iter())
            .filter_map(|p| p["dropped"][reason].as_u64())
            .sum::<u64>()
            + header["internal_dropped"][reason].as_u64().unwrap_or(0);
        let total = global.get(reason).and_then(Value::as_u64).unwrap_or(0);
        assert_eq!(sum, total, "{reason}: {header}");
    }
}
