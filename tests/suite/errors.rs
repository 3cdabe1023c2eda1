//! Rejected scripts: the exact text wprof prints on stderr (miette's plain
//! rendering, as stderr is not a terminal here), with `name:line:col` and a
//! caret, a failing exit code, and never a panic.

use wprof::runtime::targets::features;

use super::{one_error, workload, wprof_fails, wprof_ok};
use crate::require_bpf;

/// Runs `script` with `-e`, expects failure and exactly `body` as the one error.
#[track_caller]
fn assert_rejected(script: &str, body: &str) {
    let out = wprof_fails(&["-e", script]);
    assert_eq!(out.stderr, one_error(body), "script: {script}");
    assert_eq!(out.stdout, "", "a rejected script attaches nothing");
}

/// A syntax error points at the unexpected token.
#[test]
fn syntax_error() {
    assert_rejected(
        r#"BEGIN { printf("hi\n" }"#,
        r#"  × expected `,` or `)`, found `}`
   ╭─[<script>:1:23]
 1 │ BEGIN { printf("hi\n" }
   ·                       ┬
   ·                       ╰── unexpected `}`
   ╰────"#,
    );
}

/// An unknown function is named, on its call, with line and column of a later line.
#[test]
fn unknown_builtin() {
    assert_rejected(
        "BEGIN {\n  @x = 1;\n  foo(@x);\n}",
        "  × unknown function `foo`
   ╭─[<script>:3:3]
 2 │   @x = 1;
 3 │   foo(@x);
   ·   ───────
 4 │ }
   ╰────",
    );
}

/// A map assigned an integer and a string is a type error on the second assignment.
#[test]
fn type_error_conflicting_map_values() {
    assert_rejected(
        r#"BEGIN { @x = 1; @x = "s"; }"#,
        "  × @x holds int64 elsewhere; cannot store string[2]
   ╭─[<script>:1:17]
 1 │ BEGIN { @x = 1; @x = \"s\"; }
   ·                 ──
   ╰────",
    );
}

/// Arithmetic on a string is a type error naming both types.
#[test]
fn type_error_in_arithmetic() {
    assert_rejected(
        "BEGIN { $x = comm + 1; }",
        "  × `+` cannot combine string[16] and int64
   ╭─[<script>:1:14]
 1 │ BEGIN { $x = comm + 1; }
   ·              ────────
   ╰────",
    );
}

/// An unknown probe type lists the known ones.
#[test]
fn unknown_probe_type() {
    assert_rejected(
        "bogus:x { }",
        "  × unknown probe type `bogus`
   ╭─[<script>:1:1]
 1 │ bogus:x { }
   · ───────
   ╰────
  help: probe types: BEGIN, END, uprobe, uretprobe, usdt, tracepoint, rawtracepoint, tp_btf, kprobe, kretprobe, fentry, fexit, profile, interval, software, hardware, watchpoint, asyncwatchpoint, iter",
    );
}

/// A tracepoint that does not exist is named in the error.
#[test]
fn missing_tracepoint() {
    require_bpf!();
    assert_rejected(
        "tracepoint:syscalls:sys_enter_nope { }",
        "  × tracepoint not found: syscalls:sys_enter_nope (searched /sys/kernel/tracing/available_events)
   ╭─[<script>:1:1]
 1 │ tracepoint:syscalls:sys_enter_nope { }
   · ──────────────────────────────────
   ╰────",
    );
}

/// A uprobe on a function the binary lacks names the function and the binary.
#[test]
fn missing_function_in_binary() {
    // A short path, so the message fits one line wherever the checkout is
    // (miette wraps at 80 columns).
    let dir = tempfile::tempdir().expect("a temporary directory");
    let t = dir.path().join("t");
    std::fs::copy(workload("uprobe_target"), &t).expect("copy the workload");
    let t = t.display();
    let script = format!("uprobe:{t}:no_such_function {{ }}");
    let out = wprof_fails(&["-e", &script]);
    let underline = "─".repeat(script.len() - 4);
    let expected = one_error(&format!(
        "  × no function matching `no_such_function` in {t}
   ╭─[<script>:1:1]
 1 │ {script}
   · {underline}
   ╰────
  help: the function may be in another library the program loads (e.g. pthread_create is in libc.so.6 since glibc 2.34: uprobe:libc:pthread_create)"
    ));
    assert_eq!(out.stderr, expected);
}

/// printf with fewer arguments than conversions is rejected on the call.
#[test]
fn printf_argument_count_mismatch() {
    assert_rejected(
        r#"BEGIN { printf("%d %d\n", 1); }"#,
        r#"  × the format has 2 conversions but 1 arguments follow
   ╭─[<script>:1:9]
 1 │ BEGIN { printf("%d %d\n", 1); }
   ·         ────────────────────
   ╰────"#,
    );
}

/// A statement needing more than 512 bytes of BPF stack is a diagnostic naming
/// the limit and pointing at that statement.
#[test]
fn stack_limit_points_at_the_statement() {
    let args = ["str(0)"; 9].join(", ");
    let script = format!(
        "BEGIN {{\n  $x = 1;\n  printf(\"{}\\n\", {args});\n}}",
        "%s ".repeat(9).trim_end()
    );
    let out = wprof_fails(&["-e", &script]);
    let line = script.lines().nth(2).expect("line 3");
    // The span covers the call, not its `;`.
    let underline = "─".repeat(line.trim().trim_end_matches(';').len());
    let expected = one_error(&format!(
        "  × `BEGIN` needs 1168 bytes of BPF stack; the kernel allows 512
   ╭─[<script>:3:3]
 2 │   $x = 1;
 3 │ {line}
   ·   {underline}
 4 │ }}
   ╰────
  help: this statement needs the most: split it, or use shorter strings (`str(p, N)`) and fewer string arguments"
    ));
    assert_eq!(out.stderr, expected);
}

/// The same script without the wide printf compiles (the limit is not hit by accident).
#[test]
fn stack_limit_not_hit_by_small_printf() {
    let out = wprof_ok(&[
        "--dump-bpf",
        "-e",
        r#"BEGIN { printf("%s %s\n", comm, str(0)); }"#,
    ]);
    assert!(out.stdout.starts_with("; BEGIN ("), "{}", out.stdout);
}

/// Scripts whose probes this kernel cannot run fail with a message naming the
/// missing feature, pointing at the probe; `--dump-bpf` still compiles them.
#[test]
fn missing_kernel_features_are_named() {
    require_bpf!();
    let found = features::detect();
    let cases = [
        (
            "kprobe:do_nanosleep { }",
            found.kprobes.reason().map(str::to_owned),
            "this kernel has no kprobe support",
        ),
        (
            "fentry:vfs_read { }",
            found.fentry().reason().map(str::to_owned),
            "this kernel refuses fentry/fexit programs",
        ),
        (
            "hardware:cycles:1000000 { }",
            found.hardware_pmu.reason().map(str::to_owned),
            "this machine has no hardware PMU",
        ),
    ];
    for (script, missing, needle) in cases {
        let dump = wprof_ok(&["--dump-bpf", "-e", script]);
        assert!(
            dump.stdout.contains("instructions)"),
            "{script}: {}",
            dump.stdout
        );
        let Some(reason) = missing else {
            eprintln!(
                "SKIPPED {script}: this kernel has the feature, so there is no error to check"
            );
            continue;
        };
        let out = wprof_fails(&["-e", script]);
        assert!(out.stderr.contains(needle), "{script}: {}", out.stderr);
        let head = out.stderr.lines().nth(3).unwrap_or_default();
        assert!(
            head.starts_with("  × cannot run `"),
            "{script}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("[<script>:1:1]"),
            "{script}: {}",
            out.stderr
        );
        assert!(!reason.is_empty());
        assert_eq!(out.stdout, "");
    }
}

/// Each provider refuses a target that does not exist before anything is
/// attached: the message names the probe's target and where it was looked
/// for, and points at the probe (line 2, column 3); nothing runs.
#[test]
fn missing_probe_targets_are_named_per_provider() {
    require_bpf!();
    let cases = [
        (
            "tracepoint:sched:nosuch_evt",
            "tracepoint not found: sched:nosuch_evt (searched /sys/kernel/tracing/available_events)",
        ),
        (
            "rawtracepoint:nosuch_tp",
            "`rawtracepoint:nosuch_tp`: no BTF tracepoint `nosuch_tp` (no `btf_trace_nosuch_tp` in \
             kernel BTF); raw tracepoints are the kernel's tracepoints (`wprof -l 'tracepoint:*'` \
             lists them)",
        ),
        (
            "uprobe:/bin/true:nosuch_fn",
            "no function matching `nosuch_fn` in /bin/true",
        ),
        (
            "uretprobe:/no/such/bin:f",
            "cannot find binary or library `/no/such/bin` (searched the path as given)",
        ),
        (
            "usdt:/bin/true:nosuch:probe",
            "no USDT probe matching `nosuch:probe` in /bin/true",
        ),
        (
            "kprobe:nosuch_fn",
            "`kprobe:nosuch_fn`: no kernel function matches `nosuch_fn` in /proc/kallsyms",
        ),
        (
            "kretprobe:nosuch_fn",
            "`kretprobe:nosuch_fn`: no kernel function matches `nosuch_fn` in /proc/kallsyms",
        ),
        (
            "kfunc:nosuch_fn",
            "`kfunc:nosuch_fn`: no kernel function matches `nosuch_fn` in /sys/kernel/btf/vmlinux",
        ),
        ("profile:hz:0", "`0` is not a positive number"),
        ("interval:ms:0", "`0` is not a positive number"),
        (
            "software:nosuch:1",
            "unknown software event `nosuch` (known: alignment-faults",
        ),
        (
            "watchpoint:0x1000:3:w",
            "`3`: watchpoint length must be one of (1,2,4,8)",
        ),
        (
            "iter:nosuch",
            "`iter:nosuch`: unsupported iter type `nosuch` (wprof iterates `task` and `task_file`)",
        ),
        ("BEGIN:x", "`BEGIN:x`: expected the form `BEGIN`"),
    ];
    for (probe, message) in cases {
        let script = format!("BEGIN {{ }}\n  {probe} {{ @ = count(); }}");
        let out = wprof_fails(&["-e", &script]);
        for wanted in [format!("× {message}"), "[<script>:2:3]".to_string()] {
            assert!(
                out.stderr.contains(&wanted),
                "{probe}: no {wanted:?} in\n{}",
                out.stderr
            );
        }
        assert!(!out.stderr.contains("close names: \n"), "{}", out.stderr);
        assert_eq!(out.stdout, "", "{probe}: a refused script attaches nothing");
    }
}

/// The kprobe error's exact text on this machine (CONFIG_KPROBES off).
#[test]
fn missing_kprobes_exact_message() {
    require_bpf!();
    if features::detect().kprobes.reason().is_none() {
        eprintln!("SKIPPED missing_kprobes_exact_message: this kernel has kprobes");
        return;
    }
    assert_rejected(
        "kprobe:do_nanosleep { }",
        "  × cannot run `kprobe:do_nanosleep`: this kernel has no kprobe support (CONFIG_KPROBES is off: /sys/kernel/tracing/kprobe_events and /sys/bus/event_source/devices/kprobe are missing)
   ╭─[<script>:1:1]
 1 │ kprobe:do_nanosleep { }
   · ───────────────────────
   ╰────",
    );
}

/// `system()` without `--unsafe` is refused, and the help names the flag.
#[test]
fn unsafe_builtin_needs_the_flag() {
    assert_rejected(
        r#"BEGIN { system("ls"); }"#,
        r#"  × system() is an unsafe function: it runs a shell command for each event
   ╭─[<script>:1:9]
 1 │ BEGIN { system("ls"); }
   ·         ────────────
   ╰────
  help: run wprof with --unsafe to allow it"#,
    );
}

/// `path()` outside fentry/fexit names the kernel helper it needs.
#[test]
fn path_needs_a_tracing_program() {
    assert_rejected(
        r#"tracepoint:syscalls:sys_enter_openat { printf("%s", path(args->filename)); }"#,
        r#"  × path() can only be used in fentry and fexit (kfunc, kretfunc) probes
   ╭─[<script>:1:53]
 1 │ tracepoint:syscalls:sys_enter_openat { printf("%s", path(args->filename)); }
   ·                                                     ────────────────────
   ╰────
  help: bpf_d_path, which path() calls, is a helper of BPF tracing programs only"#,
    );
}

/// `skboutput()` is unknown, and the help says which helper it would need.
#[test]
fn skboutput_names_its_helper() {
    assert_rejected(
        r#"BEGIN { @x = skboutput("f", 0, 1, 0); }"#,
        r#"  × unknown function `skboutput`
   ╭─[<script>:1:14]
 1 │ BEGIN { @x = skboutput("f", 0, 1, 0); }
   ·              ───────────────────────
   ╰────
  help: wprof does not support skboutput(): bpftrace writes packets to a pcap file with it (bpf_skb_output, a helper of fentry/fexit programs); capture packets with tcpdump"#,
    );
}

/// A stack deeper than bpftrace's limit is refused on the depth.
#[test]
fn stack_depth_limit() {
    assert_rejected(
        r#"BEGIN { printf("%s\n", kstack(2000)); }"#,
        r#"  × kstack's depth must be from 1 to 1024, not 2000
   ╭─[<script>:1:31]
 1 │ BEGIN { printf("%s\n", kstack(2000)); }
   ·                               ────
   ╰────"#,
    );
}

/// A top-level `struct X y;` or `enum E;` (no body) is an error naming the
/// type, not a crash (found by the compile fuzzer).
#[test]
fn type_definition_without_body() {
    assert_rejected(
        "struct X y; BEGIN {}",
        "  × expected a `{ … }` body or `;` after `struct X`
   ╭─[<script>:1:1]
 1 │ struct X y; BEGIN {}
   · ────────
   ╰────",
    );
    assert_rejected(
        "enum E; BEGIN {}",
        "  × expected a `{ … }` body after `enum E`
   ╭─[<script>:1:1]
 1 │ enum E; BEGIN {}
   · ──────
   ╰────",
    );
}

/// Every bpftrace 0.17 construct wprof refuses: the message names it, the
/// position points at it, and the help says what to write instead.
#[test]
fn refused_bpftrace_constructs_say_what_to_write_instead() {
    let cases = [
        (
            r#"BEGIN { skboutput("x", 0, 1, 0); }"#,
            "unknown function `skboutput`",
            "1:9",
            "wprof does not support skboutput(): bpftrace writes packets to a pcap file with it \
             (bpf_skb_output, a helper of fentry/fexit programs); capture packets with tcpdump",
        ),
        (
            "BEGIN { $x = 1;\n  $y = &$x; }",
            "`&` (address-of) is not supported, as in bpftrace 0.17",
            "2:8",
            "use the pointer a value was read through; a member's address is the pointer plus \
             the member's offset: `(uint64)$p + 8`",
        ),
        (
            "struct S { int a __attribute__((aligned(8))); }; BEGIN { }",
            "`__attribute__` is not supported in script type definitions",
            "1:18",
            "script structs get C's natural layout: drop the attribute and spell the layout out \
             with padding members (`char __pad[4];`) where it differs",
        ),
        (
            "struct S { __attribute__((packed)) int a; }; BEGIN { }",
            "`__attribute__` is not supported in script type definitions",
            "1:12",
            "script structs get C's natural layout: drop the attribute and spell the layout out \
             with padding members (`char __pad[4];`) where it differs",
        ),
        (
            r#"BEGIN { printf("%s\n", "\xff"); }"#,
            "escaped characters above `\\x7f` are not supported in strings",
            "1:25",
            "strings are text here; print a byte with `%c`: `printf(\"%c\", 0xff)`",
        ),
        (
            r#"BEGIN { printf("%r\n", buf("hi")); }"#,
            "buf() expects a length argument for non-array type string",
            "1:24",
            "give the bytes to take: `buf(x, len)`",
        ),
        (
            r#"BEGIN { printf("%d\n", TASK_RUNNING); }"#,
            "unknown identifier `TASK_RUNNING`",
            "1:24",
            "`TASK_RUNNING` is a macro of the kernel's <linux/sched.h>: add `#include <linux/sched.h>`",
        ),
        (
            "BEGIN { system(\"true\"); }",
            "system() is an unsafe function: it runs a shell command for each event",
            "1:9",
            "run wprof with --unsafe to allow it",
        ),
    ];
    for (script, message, position, help) in cases {
        let out = wprof_fails(&["-e", script]);
        for wanted in [
            format!("× {message}\n"),
            format!("[<script>:{position}]"),
            format!("help: {help}\n"),
        ] {
            assert!(
                out.stderr.contains(&wanted),
                "{script}: no {wanted:?} in\n{}",
                out.stderr
            );
        }
    }
}
