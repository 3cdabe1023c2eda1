//! bpftrace's command line: `-l`/`-lv` (against bpftrace's own listing where
//! it is installed), `--info`, `--version`, `-q`, `-o`, a script on standard
//! input, `-v`, `--emit-elf`, and the messages for bad pids, missing files and
//! refused options.

use std::process::Command;

use super::{RUN_TIMEOUT, path_str, wprof, wprof_fails, wprof_ok};
use crate::common::{find_in_path, run_with_timeout, scratch_dir, wprof_bin};
use crate::require_bpf;

/// `bpftrace ARGS`' standard output, or `None` (said why) without bpftrace.
fn bpftrace_stdout(args: &[&str]) -> Option<String> {
    let Some(bpftrace) = find_in_path("bpftrace") else {
        eprintln!("SKIPPED the bpftrace comparison: bpftrace is not installed");
        return None;
    };
    let out = run_with_timeout(Command::new(bpftrace).args(args), RUN_TIMEOUT).ok()?;
    Some(out.stdout)
}

/// `--version` names wprof's version and the language, with bpftrace's `v`.
#[test]
fn version() {
    let out = wprof_ok(&["--version"]);
    assert_eq!(out.stdout, "wprof v0.1.0 (bpftrace 0.17 language)\n");
}

/// Tracepoints and their fields list exactly as bpftrace lists them.
#[test]
fn lists_tracepoints_as_bpftrace() {
    require_bpf!();
    for args in [
        &["-l", "tracepoint:sched:sched_sw*"][..],
        &["-lv", "tracepoint:syscalls:sys_enter_openat"],
        &["-l", "*nanosleep*"],
        &["-lv", "t:block:block_rq_issue"],
    ] {
        let ours = wprof_ok(args).stdout;
        assert!(ours.lines().count() >= 2, "{args:?}: {ours}");
        if let Some(theirs) = bpftrace_stdout(args) {
            // bpftrace 0.17 prints `software:*nanosleep*:` for a pattern it cannot match.
            let theirs: String = theirs
                .lines()
                .filter(|l| l.starts_with("tracepoint:") || l.starts_with("    "))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_eq!(ours, theirs, "{args:?}");
        }
    }
}

/// Functions of a binary list as `uprobe:PATH:NAME`; events and iterators
/// are in the full listing.
#[test]
fn lists_uprobes_events_and_iterators() {
    require_bpf!();
    let out = wprof_ok(&["-l", "uprobe:/bin/bash:echo_builtin"]);
    assert_eq!(out.stdout, "uprobe:/bin/bash:echo_builtin\n");
    let all = wprof_ok(&["-l"]).stdout;
    for line in [
        "iter:task",
        "software:cpu-clock:",
        "hardware:cpu-cycles:",
        "tracepoint:sched:sched_switch",
    ] {
        assert!(all.lines().any(|l| l == line), "{line} missing");
    }
    let error = wprof_fails(&["-l", "usdt:*"]).stderr;
    assert!(error.contains("cannot find binary"), "{error}");
}

/// `--info` keeps bpftrace's `  name: yes|no` lines, with what runs here.
#[test]
fn info_reports_this_kernel() {
    require_bpf!();
    let out = wprof_ok(&["--info"]).stdout;
    for line in [
        "  tracepoint: yes",
        "  Loop support: yes",
        "  probe_read_kernel: yes",
        "  btf: yes",
        "  send_signal: yes",
        "  iter:task: yes",
        "  hash: yes",
    ] {
        assert!(out.lines().any(|l| l == line), "`{line}` missing:\n{out}");
    }
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
    let expected = format!("  kprobe: {}", if kprobes { "yes" } else { "no" });
    assert!(out.lines().any(|l| l == expected), "{out}");
}

/// `-q` drops the attach line, `-o` sends the script's output to a file.
#[test]
fn quiet_and_output_file() {
    require_bpf!();
    let dir = scratch_dir("command_line_output");
    let file = dir.join("out.txt");
    let script = r#"BEGIN { printf("to the file\n"); exit(); }"#;
    let out = wprof_ok(&["-q", "-o", &path_str(&file), "-e", script]);
    assert_eq!(out.stdout, "");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.starts_with("to the file\n"), "{written:?}");
    let out = wprof_ok(&["-q", "-e", script]);
    assert!(out.stdout.starts_with("to the file\n"), "{}", out.stdout);
}

/// `-` reads the script from standard input, named `stdin` in diagnostics.
#[test]
fn script_from_stdin() {
    require_bpf!();
    let dir = scratch_dir("command_line_stdin");
    let script = dir.join("script.bt");
    std::fs::write(&script, "BEGIN { printf(\"from stdin\\n\"); exit(); }").unwrap();
    let run = |script: &std::path::Path| {
        let mut shell = Command::new("sh");
        shell.args(["-c", r#"exec "$0" -q - < "$1""#]);
        shell.arg(wprof_bin()).arg(script);
        run_with_timeout(&mut shell, RUN_TIMEOUT).unwrap()
    };
    let out = run(&script);
    assert!(out.stdout.starts_with("from stdin\n"), "{out:?}");
    std::fs::write(&script, "BEGIN { printf(\"x\" }").unwrap();
    let out = run(&script);
    assert!(out.stderr.contains("[stdin:1:20]"), "{}", out.stderr);
}

/// Bad pids, a missing script and refused options get their messages.
#[test]
fn usage_errors() {
    for (args, message) in [
        (
            &["-p", "a1111", "-e", "BEGIN {}"][..],
            "pid 'a1111' is not a valid decimal number",
        ),
        (
            &["-p", "5000000", "-e", "BEGIN {}"],
            "pid '5000000' out of valid pid range [1,4194304]",
        ),
        (
            &["non_existent_file.bt"],
            "failed to open file 'non_existent_file.bt': No such file or directory",
        ),
        (&["-I", "/tmp"], "use `--include-dir DIR`"),
        (&["--emit-llvm", "x.ll", "-e", "BEGIN {}"], "without LLVM"),
    ] {
        let out = wprof(args);
        assert!(!out.success(), "{args:?} succeeded");
        assert!(out.stderr.contains(message), "{args:?}: {}", out.stderr);
    }
}

/// SIGUSR1 prints every map while tracing goes on (the traced shell signals
/// its parent, wprof).
#[test]
fn sigusr1_prints_all_maps() {
    require_bpf!();
    let out = wprof_ok(&[
        "-e",
        "interval:ms:50 { @b = 1; }",
        "--",
        "sh",
        "-c",
        "sleep 0.5; kill -USR1 $PPID; sleep 0.5",
    ]);
    assert_eq!(out.stdout.matches("@b: 1\n").count(), 2, "{}", out.stdout);
}

/// `BPFTRACE_MAP_KEYS_MAX` bounds script maps: the third key is not stored.
#[test]
fn map_keys_max_from_the_environment() {
    require_bpf!();
    let mut command = Command::new(wprof_bin());
    command.env("BPFTRACE_MAP_KEYS_MAX", "2").args([
        "-q",
        "-e",
        "BEGIN { @[1] = 1; @[2] = 2; @[3] = 3; exit(); }",
    ]);
    let out = run_with_timeout(&mut command, RUN_TIMEOUT).unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "\n\n@[1]: 1\n@[2]: 2\n");
    command.env("BPFTRACE_MAP_KEYS_MAX", "many");
    let out = run_with_timeout(&mut command, RUN_TIMEOUT).unwrap();
    assert!(
        out.stderr
            .contains("Env var 'BPFTRACE_MAP_KEYS_MAX' did not contain a valid uint64_t"),
        "{out:?}"
    );
}

/// `BPFTRACE_NO_USER_SYMBOLS=1` prints user addresses unresolved;
/// `BPFTRACE_PERF_RB_PAGES` sizes the output buffer; a variable that would
/// change nothing in wprof is refused, naming it.
#[test]
fn bpftrace_variables_act_or_are_refused() {
    require_bpf!();
    // usym() resolves in the process's mappings as wprof first reads them
    // (when its first event arrives), as bpftrace reads /proc/PID/maps when
    // printing. bash 5.2 execs the last command of `-c` in place, so with
    // `echo; sleep 1` the pid may already map `sleep` when the event is
    // read and the address stays raw; bash forks `sleep` when a command
    // follows it, and keeps its own mappings for that second.
    let script = "uprobe:/bin/bash:echo_builtin /pid == cpid/ { printf(\"%s\\n\", usym(reg(\"ip\"))); exit(); }";
    let run = |name: &str, value: &str| {
        let mut command = Command::new(wprof_bin());
        command.env(name, value).args([
            "-q",
            "-e",
            script,
            "-c",
            "/bin/bash -c 'echo; sleep 1; true'",
        ]);
        run_with_timeout(&mut command, RUN_TIMEOUT).unwrap()
    };
    let sized = run("BPFTRACE_PERF_RB_PAGES", "1");
    assert!(sized.success(), "{sized:?}");
    assert!(
        sized.stdout.lines().any(|line| line == "echo_builtin"),
        "{}",
        sized.stdout
    );
    let unresolved = run("BPFTRACE_NO_USER_SYMBOLS", "1");
    assert!(unresolved.success(), "{unresolved:?}");
    assert!(
        unresolved.stdout.lines().any(|line| line.starts_with("0x")),
        "{}",
        unresolved.stdout
    );
    let refused = run("BPFTRACE_VMLINUX", "/boot/vmlinux");
    assert_eq!(refused.status.and_then(|s| s.code()), Some(1));
    assert!(
        refused
            .stderr
            .contains("Env var 'BPFTRACE_VMLINUX' has no effect in wprof"),
        "{}",
        refused.stderr
    );
}

/// `-v` prints each program's id and verifier log as it loads (stdout) and
/// the probe it attaches (stderr), as bpftrace -v; the script still runs.
#[test]
fn verbose_prints_verifier_logs() {
    require_bpf!();
    let out = wprof_ok(&["-v", "-e", "BEGIN { printf(\"hello\\n\"); exit(); }"]);
    let after_id = (out
        .stdout
        .split_once("\nProgram ID: ")
        .map(|(_, rest)| rest))
    .unwrap_or_else(|| panic!("no program id: {}", out.stdout));
    let (id, rest) = after_id.split_once('\n').expect("a line");
    assert!(id.parse::<u32>().is_ok_and(|id| id > 0), "{id}");
    assert!(
        rest.starts_with("\nThe verifier log: \nprocessed "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("\nhello\n"), "{}", out.stdout);
    assert!(out.stderr.contains("Attaching BEGIN\n"), "{}", out.stderr);
}

/// `--emit-elf FILE` writes the programs as an ELF object other tools read:
/// one section per program named for its program type, a symbol per
/// program, the license; nothing is loaded or run.
#[test]
fn emit_elf_writes_the_programs() {
    let file = scratch_dir("emit-elf").join("programs.o");
    let script = "BEGIN { printf(\"not run\\n\"); } interval:s:1 { @n = count(); }";
    let out = wprof_ok(&["--emit-elf", &path_str(&file), "-e", script]);
    assert_eq!(out.stdout, "", "a dry run prints nothing");
    let image = std::fs::read(&file).expect("the ELF file is written");
    assert_eq!(&image[..4], b"\x7fELF");
    let Some(readelf) = find_in_path("readelf") else {
        eprintln!("SKIPPED the readelf check: readelf (binutils) is not installed");
        return;
    };
    let listing = |flag: &str| {
        let mut command = Command::new(&readelf);
        command.args([flag, "-W", &path_str(&file)]);
        run_with_timeout(&mut command, RUN_TIMEOUT)
            .expect("readelf runs")
            .stdout
    };
    let sections = listing("-S");
    for section in [" raw_tp ", " perf_event ", " license "] {
        assert!(sections.contains(section), "{section} missing:\n{sections}");
    }
    let symbols = listing("-s");
    assert!(
        symbols.contains("FUNC    GLOBAL DEFAULT    1 p0_BEGIN"),
        "{symbols}"
    );
    assert!(symbols.contains(" p1_"), "{symbols}");
}
