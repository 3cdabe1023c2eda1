//! Sessions end to end: BEGIN and END, `exit()`, `-d`, `-c`, `cpid`, maps
//! printed at exit, and verifier rejections reported on the script.

use std::time::Duration;

use wprof::capture::model::RecordOrigin;
use wprof::driver::{self, Source};
use wprof::frontend::ast::Span;
use wprof::frontend::options::CompileOptions;
use wprof::runtime::bpf::loader::LoadError;
use wprof::runtime::targets::environment::SystemEnvironment;

use super::{one_error, workload, wprof, wprof_fails, wprof_ok};
use crate::require_bpf;

/// BEGIN fires once before any event, END once after the last one, and maps print after END.
#[test]
fn begin_and_end_fire_once_in_order() {
    require_bpf!();
    let t = workload("syscalls");
    let script = r#"BEGIN { printf("begin\n"); @begins = count(); }
                    tracepoint:syscalls:sys_enter_getppid /pid == cpid/ { printf("event\n"); @events = count(); }
                    END { printf("end\n"); @ends = count(); }"#;
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 3")]);
    let expected = "Attaching 3 probes...\nbegin\nevent\nevent\nevent\nend\n\n\n@begins: 1\n@ends: 1\n@events: 3\n";
    assert_eq!(out.stdout, expected);
}

/// `exit()` in BEGIN ends the session at once (END still runs) without waiting
/// for the `-c` command, which is then stopped.
#[test]
fn exit_stops_the_session() {
    require_bpf!();
    let script = r#"BEGIN { printf("one\n"); exit(); } END { printf("end\n"); }"#;
    let out = wprof_ok(&["-e", script, "-c", "sleep 30"]);
    assert_eq!(out.stdout, "Attaching 2 probes...\none\nend\n\n\n");
    assert!(
        out.elapsed < Duration::from_secs(20),
        "took {:?}",
        out.elapsed
    );
}

/// `-d 300ms` stops after 300 ms (and not much later), then runs END.
#[test]
fn duration_stops_on_time() {
    require_bpf!();
    let script = r#"BEGIN { printf("go\n"); } END { printf("end\n"); }"#;
    let out = wprof_ok(&["-d", "300ms", "-e", script]);
    assert_eq!(out.stdout, "Attaching 2 probes...\ngo\nend\n\n\n");
    assert!(
        out.elapsed >= Duration::from_millis(300),
        "stopped early: {:?}",
        out.elapsed
    );
    assert!(
        out.elapsed < Duration::from_secs(10),
        "stopped late: {:?}",
        out.elapsed
    );
}

/// The session ends when the `-c` command exits, and `cpid` is that command's pid.
#[test]
fn command_ends_session_and_sets_cpid() {
    require_bpf!();
    let script = r#"BEGIN { printf("cpid %d\n", cpid); }"#;
    let out = wprof_ok(&["-e", script, "-c", "sh -c 'echo child $$ >&2'"]);
    let cpid = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("cpid "))
        .unwrap_or_else(|| panic!("no cpid line in {}", out.stdout));
    let child = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .unwrap_or_else(|| panic!("the child printed no pid: {}", out.stderr));
    assert_eq!(cpid, child);
    assert_ne!(cpid, "0");
    assert!(
        out.elapsed < Duration::from_secs(20),
        "took {:?}",
        out.elapsed
    );
}

/// Maps print at exit in bpftrace's format: sorted by value, histograms with bars,
/// `avg`/`stats` followed by a blank line.
#[test]
fn maps_print_in_bpftrace_format() {
    require_bpf!();
    let t = workload("syscalls");
    let script = "tracepoint:syscalls:sys_enter_write /pid == cpid && args.fd == 3/ {
                    @h = hist(args.count); @l = lhist(args.count, 0, 50, 10);
                    @s = stats(args.count); @a = avg(args.count); @small[args.count < 25] = count(); }";
    let out = wprof_ok(&["-e", script, "-c", &format!("{t} 5")]);
    // write(fd, buf, 10 * i + 1) for i in 0..5: 1, 11, 21, 31, 41.
    let expected = "\
Attaching 1 probe...


@a: 21

@h: 
[1]                    1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |
[2, 4)                 0 |                                                    |
[4, 8)                 0 |                                                    |
[8, 16)                1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |
[16, 32)               2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[32, 64)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |

@l: 
[0, 10)                1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[10, 20)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[20, 30)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[30, 40)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[40, 50)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

@s: count 5, average 21, total 105

@small[0]: 2
@small[1]: 3
";
    assert_eq!(out.stdout, expected);
}

/// A program the verifier rejects (an endless loop) is reported on the script
/// line that produced the failing instruction, with the verifier's reason.
#[test]
fn verifier_rejection_points_at_the_script() {
    require_bpf!();
    let script = "BEGIN {\n  $i = 0;\n  while (1) {\n    $i++;\n  }\n}";
    let out = wprof_fails(&["-e", script]);
    let head = one_error(
        "  × the BPF verifier rejected `BEGIN` at instruction 7
   ╭─[<script>:4:5]
 3 │   while (1) {
 4 │     $i++;
   ·     ──┬─
   ·       ╰── the failing instruction came from here
 5 │   }
   ╰────
  help: verifier log (last lines; see the full program with --dump-bpf):",
    );
    let head = head.trim_end();
    assert!(
        out.stderr.starts_with(head),
        "expected:\n{head}\n\ngot:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("BPF program is too large"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout, "", "the verifier runs before anything attaches");
}

/// `verifier_diagnostic` turns a verifier log into an error on the span of the
/// failing instruction, with the log's last lines as help (no kernel needed).
#[test]
fn verifier_diagnostic_points_at_failing_instruction() {
    let source = Source {
        name: "t.bt".into(),
        text: "BEGIN {\n  @x = 1;\n  printf(\"%d\\n\", 2);\n}\n".into(),
        origin: RecordOrigin::Script,
    };
    let sources = std::slice::from_ref(&source);
    let options = CompileOptions::default();
    let (_, compiled) =
        driver::compile(sources, &[], &SystemEnvironment::default(), &options).expect("compiles");
    let program = &compiled.programs[0];
    let printf_at = source.text.find("printf").expect("printf");
    let insn = (0..program.insns.len())
        .find(|&i| program.spans[i].is_some_and(|s: Span| s.start == printf_at))
        .expect("some instruction comes from printf");
    let log = "0: (bf) r6 = r1\nR1 invalid mem access 'scalar'\nprocessed 9 insns\n".to_string();
    let error = LoadError::Verifier {
        program: program.name.clone(),
        probe: "BEGIN".into(),
        log,
        failing_insn: Some(insn),
    };
    let rendered = driver::verifier_diagnostic(&error, &compiled, &driver::source_map(sources))
        .expect("a verifier error")
        .render();
    let expected = format!(
        "  × the BPF verifier rejected `BEGIN` at instruction {insn}
   ╭─[t.bt:3:3]
 2 │   @x = 1;
 3 │   printf(\"%d\\n\", 2);
   ·   ────────┬────────
   ·           ╰── the failing instruction came from here
 4 │ }}
   ╰────
  help: verifier log (last lines; see the full program with --dump-bpf):
        0: (bf) r6 = r1
        R1 invalid mem access 'scalar'
        processed 9 insns
"
    );
    assert!(
        rendered.ends_with(&expected),
        "expected:\n{expected}\ngot:\n{rendered}"
    );
    let other = LoadError::Verifier {
        program: "no_such_program".into(),
        probe: "x".into(),
        log: String::new(),
        failing_insn: None,
    };
    assert!(driver::verifier_diagnostic(&other, &compiled, &driver::source_map(sources)).is_none());
}

/// A run with nothing to do but BEGIN and `exit()` prints only its output.
#[test]
fn begin_exit_prints_output_and_maps() {
    require_bpf!();
    let script = r#"BEGIN { printf("hi %d\n", 1); @a[1, "x"] = count(); exit(); }"#;
    let out = wprof(&["-e", script]);
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "Attaching 1 probe...\nhi 1\n\n\n@a[1, x]: 1\n");
}

/// A `-c` command that cannot be executed is an error naming it, not a silent
/// successful run.
#[test]
fn command_that_cannot_start_is_an_error() {
    require_bpf!();
    let out = wprof(&[
        "-e",
        r#"BEGIN { printf("x\n"); }"#,
        "-c",
        "/nonexistent/wprof-test-cmd",
    ]);
    assert!(!out.success(), "wprof succeeded:\n{}", out.stdout);
    assert!(
        out.stderr.contains("/nonexistent/wprof-test-cmd"),
        "{}",
        out.stderr
    );
}

/// `-p` with a pid no process has is an error, not a session that never ends.
#[test]
fn pid_option_rejects_missing_process() {
    require_bpf!();
    // Pids are always below pid_max, so this one cannot exist.
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").expect("read pid_max");
    let script = r#"BEGIN { printf("x\n"); }"#;
    let mut command = std::process::Command::new(crate::common::wprof_bin());
    command.args(["-p", pid_max.trim(), "-e", script]);
    let out =
        crate::common::run_with_timeout(&mut command, Duration::from_secs(10)).expect("run wprof");
    assert!(
        out.status.is_some(),
        "wprof -p {} did not stop within 10 s",
        pid_max.trim()
    );
    assert!(!out.success(), "wprof succeeded:\n{}", out.stdout);
}
