//! Hostile and careless input at the command line (issue 9): huge lines and
//! floods of errors, scripts that are not text or never end, outputs that
//! are planted links, captures that are FIFOs or directories, and I/O
//! errors that must name their cause.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::capture::fresh_dir;
use super::{path_str, wprof, wprof_fails, wprof_ok};
use crate::require_bpf;

/// A diagnostic past column 65,536 is rendered (miette used to panic) and
/// names the real column.
#[test]
fn diagnostic_past_column_65536() {
    let script = format!("{}BEGIN {{ foo }}", " ".repeat(70_000));
    let out = wprof_fails(&["--dump-bpf", "-e", &script]);
    assert!(out.stderr.contains("[<script>:1:70009]"), "{}", out.stderr);
    assert!(out.stderr.contains("BEGIN { foo }"), "{}", out.stderr);
}

/// 5,000 errors on one 65 KB line print a few kilobytes, with the count.
#[test]
fn error_flood_is_capped() {
    let dir = fresh_dir("error_flood");
    let body: Vec<String> = (0..5000).map(|i| format!("@x = foo{i};")).collect();
    let script = dir.join("many.bt");
    fs::write(&script, format!("BEGIN {{ {} }}", body.join(" "))).unwrap();
    let out = wprof_fails(&["--dump-bpf", &path_str(&script)]);
    assert!(
        out.stderr
            .contains("the script has 5000 errors; the first 20 are shown"),
        "{}",
        &out.stderr[..out.stderr.len().min(500)]
    );
    assert!(
        out.stderr.len() < 20_000,
        "{} bytes of errors",
        out.stderr.len()
    );
}

/// A script that is not UTF-8 is refused with the line and column of the
/// first bad byte; one that never ends (`/dev/zero`) with the size limit.
#[test]
fn script_files_that_are_not_programs() {
    let dir = fresh_dir("not_programs");
    let script = dir.join("latin1.bt");
    fs::write(&script, b"BEGIN {\n  printf(\"caf\xe9\\n\");\n}\n").unwrap();
    let out = wprof_fails(&["--dump-bpf", &path_str(&script)]);
    assert_eq!(
        out.stderr,
        format!(
            "wprof: {}:2:14: the script is not UTF-8 text (byte 21 is 0xe9)\n",
            script.display()
        )
    );
    let started = Instant::now();
    let out = wprof_fails(&["--dump-bpf", "/dev/zero"]);
    assert!(
        out.stderr.contains("wprof's limit for programs"),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A program file over 1 MiB is refused naming the limit (an `-e` program
/// cannot be that large: Linux caps one argument at 128 KiB).
#[test]
fn program_size_limit() {
    let dir = fresh_dir("program_size");
    let script = dir.join("big.bt");
    let probe = "BEGIN { @x = 1; }\n";
    fs::write(&script, probe.repeat((1 << 20) / probe.len() + 1)).unwrap();
    let out = wprof_fails(&["--dump-bpf", &path_str(&script)]);
    assert_eq!(
        out.stderr,
        format!(
            "wprof: {} is larger than 1048576 bytes (1 MiB), wprof's limit for programs\n",
            script.display()
        )
    );
}

/// `--dump-bpf` of `probes` `BEGIN` probes, from a file: the fastest of
/// two runs.
fn dump_time(dir: &Path, probes: usize) -> Duration {
    let script = dir.join(format!("{probes}.bt"));
    let text: String = (0..probes)
        .map(|i| format!("BEGIN {{ @x[{i}] = count(); }}\n"))
        .collect();
    fs::write(&script, text).unwrap();
    let run = || wprof_ok(&["--dump-bpf", "-f", "none", &path_str(&script)]).elapsed;
    run().min(run())
}

/// Compile time and the listing grow linearly with the program: sixteen
/// times the probes take well under 256 times as long (the listing once
/// counted lines from the start of the script for every instruction).
#[test]
fn compile_time_is_linear_in_program_size() {
    let dir = fresh_dir("program_growth");
    let small = dump_time(&dir, 500);
    let large = dump_time(&dir, 8000);
    assert!(
        large < small * 32,
        "500 probes: {small:?}, 8000 probes: {large:?}"
    );
}

/// A FIFO made in `dir`, `dir` itself and `/dev/zero`, each with what it
/// is as wprof names it.
fn special_files(dir: &Path) -> [(String, &'static str); 3] {
    let fifo = dir.join("fifo");
    let c_path = std::ffi::CString::new(path_str(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    [
        (path_str(&fifo), "a FIFO"),
        (path_str(dir), "a directory"),
        ("/dev/zero".to_owned(), "a device"),
    ]
}

/// `-R -D` on a FIFO, a directory or a device fails at once instead of
/// blocking or reading forever.
#[test]
fn replay_refuses_special_files() {
    let dir = fresh_dir("special_files");
    for (path, kind) in special_files(&dir) {
        let out = wprof_fails(&["-R", "-I", "-D", &path]);
        assert_eq!(
            out.stderr,
            format!("wprof: {path} is {kind}, not a capture file\n")
        );
    }
}

/// A uprobe or USDT target that is a FIFO, a device or a directory fails at
/// once, named, instead of blocking or reading `/dev/zero` forever.
#[test]
fn probe_targets_must_be_regular_files() {
    let dir = fresh_dir("probe_target_fifo");
    for (path, kind) in special_files(&dir) {
        for probe in [format!("uprobe:{path}:main"), format!("usdt:{path}:p:n")] {
            let out = wprof_fails(&["--dump-bpf", "-e", &format!("{probe} {{ }}")]);
            assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
            let message = format!("× {path} is {kind}, not an ELF file");
            assert!(out.stderr.contains(&message), "{probe}: {}", out.stderr);
        }
    }
}

/// A program without probes (empty, or only comments) is an error, not a
/// wait for Ctrl-C with nothing attached.
#[test]
fn program_without_probes_is_an_error() {
    for program in ["", "// nothing\n", "/* nothing */"] {
        let out = wprof_fails(&["-e", program]);
        assert_eq!(
            out.stderr, "wprof: <script> has no probes: nothing to attach\n",
            "{program:?}"
        );
    }
}

/// Every output that cannot be written is found before recording (not
/// after a 30 s capture), and nothing is captured.
#[test]
fn unwritable_outputs_fail_before_recording() {
    require_bpf!();
    let dir = fresh_dir("unwritable_outputs");
    let data = path_str(&dir.join("c.data"));
    let missing = path_str(&dir.join("no/such/dir/out"));
    let link = dir.join("link");
    std::os::unix::fs::symlink(dir.join("target"), &link).unwrap();
    let link = path_str(&link);
    let flags = [
        "-T",
        "-J",
        "--folded",
        "--flamegraph",
        "--pprof",
        "--report",
    ];
    let cases = (flags
        .iter()
        .map(|flag| (*flag, missing.as_str(), "(ENOENT)")))
    .chain([("--metrics", dir.to_str().unwrap(), "(EISDIR)")])
    .chain([("-T", link.as_str(), "symbolic link")]);
    for (flag, path, cause) in cases {
        let out = wprof_fails(&["-d", "30s", "-D", &data, flag, path]);
        assert!(
            out.elapsed < Duration::from_secs(10),
            "{flag}: {:?}",
            out.elapsed
        );
        assert!(
            out.stderr.contains(path) && out.stderr.contains(cause),
            "{flag}: {}",
            out.stderr
        );
        assert!(!Path::new(&data).exists(), "{flag}: a capture was recorded");
    }
    let out = wprof_fails(&["-d", "30s", "-D", &missing]);
    assert!(out.stderr.contains("(ENOENT)"), "{}", out.stderr);
}

/// A missing capture names the OS error.
#[test]
fn replay_names_the_os_error() {
    let out = wprof_fails(&["-R", "-I", "-D", "/nonexistent/wprof.data"]);
    assert_eq!(
        out.stderr,
        "wprof: cannot open /nonexistent/wprof.data: No such file or directory (ENOENT)\n"
    );
}

/// A capture that cannot be created, or written, says why (ENOENT, ENOSPC).
#[test]
fn capture_write_errors_name_the_cause() {
    require_bpf!();
    let script = "BEGIN { record hello < x = 1 >; exit(); }";
    let out = wprof_fails(&["-f", "none", "-e", script, "-D", "/nonexistent/c.data"]);
    assert!(
        out.stderr
            .contains("cannot create /nonexistent/c.data: No such file or directory (ENOENT)"),
        "{}",
        out.stderr
    );
    let out = wprof_fails(&["-f", "none", "-e", script, "-D", "/dev/full"]);
    assert!(
        out.stderr
            .contains("cannot write /dev/full: No space left on device (ENOSPC)"),
        "{}",
        out.stderr
    );
}

/// A planted symbolic link as the capture (`-D`) or as a `-T`/`-J` output
/// is refused, and what it points at is untouched.
#[test]
fn outputs_refuse_planted_symlinks() {
    require_bpf!();
    let dir = fresh_dir("planted_links");
    let victim = dir.join("victim");
    fs::write(&victim, "precious").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let data = dir.join("ok.data");
    let script = "BEGIN { record hello < x = 1 >; exit(); }";
    let refused = format!(
        "refusing to write {}: it is a symbolic link",
        link.display()
    );
    let out = wprof_fails(&["-f", "none", "-e", script, "-D", &path_str(&link)]);
    assert!(out.stderr.contains(&refused), "{}", out.stderr);
    wprof_ok(&["-f", "none", "-e", script, "-D", &path_str(&data)]);
    for flag in ["-T", "-J"] {
        let out = wprof_fails(&["-R", "-D", &path_str(&data), flag, &path_str(&link)]);
        assert!(out.stderr.contains(&refused), "{flag}: {}", out.stderr);
    }
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
}

/// Captures and rendered outputs are created 0600.
#[test]
fn outputs_are_private() {
    require_bpf!();
    let dir = fresh_dir("private_outputs");
    let data = dir.join("p.data");
    let (trace, json) = (dir.join("t.pb"), dir.join("e.json"));
    let script = "BEGIN { record hello < x = 1 >; exit(); }";
    let out = wprof(&[
        "-f",
        "none",
        "-e",
        script,
        "-D",
        &path_str(&data),
        "-T",
        &path_str(&trace),
        "-J",
        &path_str(&json),
    ]);
    assert!(out.success(), "{}", out.stderr);
    for path in [&data, &trace, &json] {
        assert_eq!(mode(path), 0o600, "{}", path.display());
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}
