//! wprof run under the name `bpftrace` (a symlink): bpftrace 0.17's
//! `--version`, `ERROR:` messages and usage errors, diagnostics in
//! bpftrace's form, and `-c` split at spaces as bpftrace splits it.

use std::process::Command;

use super::RUN_TIMEOUT;
use crate::common::{RunOutput, run_with_timeout, scratch_dir, wprof_bin};
use crate::require_bpf;

/// Runs wprof through a symlink named `bpftrace`.
fn as_bpftrace(args: &[&str]) -> RunOutput {
    let dir = scratch_dir("as-bpftrace");
    let link = dir.join("bpftrace");
    if std::fs::read_link(&link).ok() != Some(wprof_bin()) {
        // Made under a private name and renamed over the link: the tests
        // running at once never find it missing.
        let thread = format!("{:?}", std::thread::current().id());
        let private = dir.join(format!("bpftrace-{}-{thread}", std::process::id()));
        let _ = std::fs::remove_file(&private);
        std::os::unix::fs::symlink(wprof_bin(), &private)
            .unwrap_or_else(|e| panic!("symlink {}: {e}", private.display()));
        std::fs::rename(&private, &link)
            .unwrap_or_else(|e| panic!("rename to {}: {e}", link.display()));
    }
    run_with_timeout(Command::new(&link).args(args), RUN_TIMEOUT)
        .unwrap_or_else(|e| panic!("cannot run bpftrace {args:?}: {e}"))
}

fn exit_code(out: &RunOutput) -> Option<i32> {
    out.status.and_then(|status| status.code())
}

/// `--version` starts as bpftrace's; refused option values and missing
/// files print bpftrace's `ERROR:` lines and exit 1.
#[test]
fn version_and_usage_errors() {
    let version = as_bpftrace(&["--version"]);
    assert_eq!(version.stdout, "bpftrace v0.17.0 (wprof v0.1.0)\n");
    for (args, wanted) in [
        (
            &["-p", "a1111", "file.bt"][..],
            "ERROR: pid 'a1111' is not a valid decimal number\n",
        ),
        (
            &["-q", "-f", "jsonx", "-e", "BEGIN {}"],
            "ERROR: Invalid output format \"jsonx\"\nValid formats: 'text', 'json'\n",
        ),
        (
            &["no_such_file.bt"],
            "ERROR: failed to open file 'no_such_file.bt': No such file or directory (ENOENT)\n",
        ),
        (
            &["-l", "\\n"],
            "ERROR: invalid character '\\\\' in the -l pattern's probe type or search word `\\n`\n",
        ),
    ] {
        let out = as_bpftrace(args);
        assert_eq!(out.stderr, wanted, "{args:?}");
        assert_eq!(exit_code(&out), Some(1), "{args:?}");
    }
}

/// Script errors print as bpftrace's: location (`stdin` for -e), line and
/// `~` under the text; wprof's help follows as a hint.
#[test]
fn script_errors_in_bpftrace_form() {
    let out = as_bpftrace(&["-e", "BEGIN { nosuch(); }"]);
    assert_eq!(
        out.stderr,
        "stdin:1:9-17: ERROR: unknown function `nosuch`\nBEGIN { nosuch(); }\n        ~~~~~~~~\n"
    );
    assert_eq!(exit_code(&out), Some(1));
}

/// `-c` is split at spaces, quotes kept, as bpftrace 0.17 does.
#[test]
fn command_split_at_spaces() {
    require_bpf!();
    let out = as_bpftrace(&["-e", "END {}", "-c", "/bin/echo 'A'  b"]);
    assert!(out.stdout.contains("'A' b\n"), "{}", out.stdout);
}
