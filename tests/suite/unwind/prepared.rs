//! The `-c` command's files have their tables built before it runs: the
//! program, its loader and every library the loader loads for it,
//! indirect ones included (`unwind::program_files`). A program that sleeps
//! in a library loaded only through another (`prog → libmid → libleaf`,
//! found through the program's inherited `DT_RPATH`) gets no table built
//! once it is released, while its long blocks' user stacks ask for the
//! tables of every file they run through (`WPROF_TIMINGS`: "unwind
//! tables built after the command was released"). Before, `libleaf` was
//! built after the release, inside the command's run.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::super::capture::fresh_dir;
use super::super::{RUN_TIMEOUT, path_str};
use crate::common::{run_with_timeout, wprof_bin};
use crate::require_bpf;

const LEAF: &str = r#"
#include <time.h>
/* Sleeps in the indirect library: the blocks' stacks run through it. */
long leaf_nap(long ms)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
	return nanosleep(&ts, 0);
}
"#;
const MID: &str = "long leaf_nap(long);\nlong mid_nap(long ms) { return leaf_nap(ms) + 0; }\n";
const PROG: &str = r#"
long mid_nap(long);
int main(void)
{
	long failed = 0;
	for (int i = 0; i < 10; i++)
		failed += mid_nap(3);
	return failed != 0;
}
"#;

/// Builds the program and its two libraries in `dir`; `None` without a C
/// compiler.
fn build(dir: &Path) -> Option<PathBuf> {
    for sub in ["mid", "leaf"] {
        std::fs::create_dir_all(dir.join(sub)).ok()?;
    }
    for (name, text) in [("leaf.c", LEAF), ("mid.c", MID), ("prog.c", PROG)] {
        std::fs::write(dir.join(name), text).ok()?;
    }
    let cc = |args: &[&str]| {
        let status = Command::new("cc").current_dir(dir).args(args).status();
        status.is_ok_and(|s| s.success())
    };
    let built = cc(&["-O2", "-shared", "-fPIC", "-o", "leaf/libleaf.so", "leaf.c"])
        && cc(&[
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            "mid/libmid.so",
            "mid.c",
            "-Lleaf",
            "-lleaf",
        ])
        && cc(&[
            "-O2",
            "-o",
            "prog",
            "prog.c",
            "-Lmid",
            "-lmid",
            "-Wl,-rpath-link,leaf",
            "-Wl,--disable-new-dtags,-rpath,$ORIGIN/mid:$ORIGIN/leaf",
        ]);
    built.then(|| dir.join("prog"))
}

#[test]
fn no_table_is_built_after_the_command_is_released() {
    require_bpf!();
    let dir = fresh_dir("unwind-prepared");
    let Some(program) = build(&dir) else {
        eprintln!("SKIPPED: no C compiler to build the workload");
        return;
    };
    let data = dir.join("c.data");
    let out = run_with_timeout(
        Command::new(wprof_bin())
            .env("WPROF_TIMINGS", "1")
            .args(["-S", "offcpu=1ms", "--only-command", "-D"])
            .arg(&data)
            .arg("-c")
            .arg(path_str(&program)),
        RUN_TIMEOUT,
    )
    .expect("wprof runs");
    assert!(out.success(), "{}", out.stderr);
    let built_after = (out.stderr.lines())
        .find_map(|l| {
            l.strip_prefix("wprof: timing: unwind tables built after the command was released: ")
        })
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| {
            panic!(
                "no count of tables built after the release:\n{}",
                out.stderr
            )
        });
    assert_eq!(built_after, "0", "{}", out.stderr);
    let _ = std::fs::remove_file(&data);
}
