//! The unwinding workloads, built for the tests: C without frame pointers,
//! a shared library for `dlopen`, and a Rust release binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::common::scratch_dir;

/// C flags of every unwinding workload: optimised, no frame pointers.
pub const NO_FP_CFLAGS: &[&str] = &["-O2", "-fomit-frame-pointer", "-g"];

static BUILD_LOCK: Mutex<()> = Mutex::new(());

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/unwind")
        .join(name)
}

/// Builds `tests/data/unwind/<src>` into `<out>` with `compiler flags... -o
/// OUT SRC tail...`, unless the output is newer than the source and
/// `spin.h`; returns the output path.
#[track_caller]
fn build(src: &str, out: &str, compiler: &str, flags: &[&str], tail: &[&str]) -> PathBuf {
    let src = source(src);
    let out = scratch_dir("unwind").join(out);
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let newest_input = modified(&src).max(modified(&source("spin.h")));
    if matches!((modified(&out), newest_input), (Some(o), Some(s)) if o >= s) {
        return out;
    }
    // Build to a private name and rename, so no test sees a partial file.
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let result = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .args(tail)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        result.status.success(),
        "building {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("rename {}: {e}", tmp.display()));
    out
}

/// `chain.c`: main → a → b → c, spinning in c, built without frame pointers.
#[track_caller]
pub fn c_chain() -> PathBuf {
    build("chain.c", "chain", "cc", NO_FP_CFLAGS, &[])
}

/// `chain.c` built with frame pointers, where both unwinders find every frame.
#[track_caller]
pub fn c_chain_with_frame_pointers() -> PathBuf {
    build(
        "chain.c",
        "chain_fp",
        "cc",
        &["-O2", "-fno-omit-frame-pointer"],
        &[],
    )
}

/// `plt_loop.c` (`-fno-builtin`), calling `labs` through its PLT stub in a loop:
/// with the classic PLT (`.plt`), or built for indirect branch tracking
/// (`ibt`: the stubs called are in `.plt.sec`, `endbr64; bnd jmp *GOT`).
#[track_caller]
pub fn c_plt_loop(ibt: bool) -> PathBuf {
    match ibt {
        true => {
            let ibt = ["-fno-builtin", "-fcf-protection=full", "-Wl,-z,ibtplt"];
            let flags = [NO_FP_CFLAGS, &ibt].concat();
            build("plt_loop.c", "plt_loop_ibt", "cc", &flags, &[])
        }
        false => {
            let flags = [NO_FP_CFLAGS, &["-fno-builtin"]].concat();
            build("plt_loop.c", "plt_loop", "cc", &flags, &[])
        }
    }
}

/// `uprobe_hot.c` (main alternating `hot` and `cold`, timing each) built
/// with frame pointers, so the kernel's walk finds the callers too.
#[track_caller]
pub fn c_uprobe_hot() -> PathBuf {
    let flags = ["-O2", "-g", "-fno-omit-frame-pointer"];
    build("uprobe_hot.c", "uprobe_hot", "cc", &flags, &[])
}

/// `libc_burst.c`: its own `_start`, a wait on stdin, then a burst in
/// `qsort` and an immediate exit; built without frame pointers.
#[track_caller]
pub fn c_libc_burst() -> PathBuf {
    let flags = [NO_FP_CFLAGS, &["-nostartfiles"]].concat();
    build("libc_burst.c", "libc_burst", "cc", &flags, &[])
}

/// `jit.c`: runs a loop it copied into anonymous executable memory.
#[track_caller]
pub fn c_jit() -> PathBuf {
    build("jit.c", "jit", "cc", NO_FP_CFLAGS, &[])
}

/// `chain.rs` built with `rustc -C opt-level=2`.
#[track_caller]
pub fn rust_chain() -> PathBuf {
    build("chain.rs", "chain_rs", "rustc", &["-C", "opt-level=2"], &[])
}

/// `spin_sleep.c` (main alternating `spin_here` and `sleep_here`) built
/// without frame pointers, or with them (`frame_pointers`).
#[track_caller]
pub fn c_spin_sleep(frame_pointers: bool) -> PathBuf {
    match frame_pointers {
        true => build(
            "spin_sleep.c",
            "spin_sleep_fp",
            "cc",
            &["-O2", "-g", "-fno-omit-frame-pointer"],
            &[],
        ),
        false => build("spin_sleep.c", "spin_sleep", "cc", NO_FP_CFLAGS, &[]),
    }
}

/// `uretprobe_nest.c` (main → nest → … → nest, the innermost spinning
/// and sleeping) built without frame pointers, or with them
/// (`frame_pointers`).
#[track_caller]
pub fn c_uretprobe_nest(frame_pointers: bool) -> PathBuf {
    match frame_pointers {
        true => build(
            "uretprobe_nest.c",
            "uretprobe_fp",
            "cc",
            &["-O2", "-g", "-fno-omit-frame-pointer"],
            &[],
        ),
        false => build(
            "uretprobe_nest.c",
            "uretprobe_nest",
            "cc",
            NO_FP_CFLAGS,
            &[],
        ),
    }
}

/// `naps.c` (main → nap → nanosleep, sleeping first) built without frame
/// pointers.
#[track_caller]
pub fn c_naps() -> PathBuf {
    build("naps.c", "naps", "cc", NO_FP_CFLAGS, &[])
}

/// `spin_sleep.rs` built as a release binary: `rustc -C opt-level=3`.
#[track_caller]
pub fn rust_spin_sleep() -> PathBuf {
    build(
        "spin_sleep.rs",
        "spin_sleep_rs",
        "rustc",
        &["-C", "opt-level=3"],
        &[],
    )
}

/// `spin_lib.c` as a shared library without frame pointers.
#[track_caller]
pub fn spin_lib() -> PathBuf {
    let flags = [NO_FP_CFLAGS, &["-shared", "-fPIC"]].concat();
    build("spin_lib.c", "libspin.so", "cc", &flags, &[])
}

/// `dlopen_main.c`: loads [`spin_lib`] when told to, then spins in it.
#[track_caller]
pub fn dlopen_main() -> PathBuf {
    build(
        "dlopen_main.c",
        "dlopen_main",
        "cc",
        NO_FP_CFLAGS,
        &["-ldl"],
    )
}

/// The C library the workloads run with.
pub fn libc_path() -> PathBuf {
    PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
}

/// The largest shared library of the Rust toolchain (rustc's driver,
/// ~150 MB), or `None` when the toolchain has none.
pub fn large_binary() -> Option<PathBuf> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let lib = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()).join("lib");
    std::fs::read_dir(lib)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().contains("librustc_driver"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
}
