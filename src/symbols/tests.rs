//! Tests against real processes: a C program built here, normalized while it
//! runs, killed, then symbolized.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Instant;

use super::*;

/// A program whose functions print their addresses, then wait to be killed.
const TARGET_C: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static void *return_address;
static volatile sig_atomic_t map_requested;

static void on_usr1(int sig) {
    (void)sig;
    map_requested = 1;
}

__attribute__((noinline)) int wprof_leaf(int x) {
    return_address = __builtin_return_address(0);
    return x * 3 + 1;
}

__attribute__((noinline)) int wprof_middle(int x) {
    int y = wprof_leaf(x); /* CALL_LINE */
    return y + 7;
}

/* SIGUSR1 maps the program's own file once more and prints where. */
int main(int argc, char **argv) {
    (void)argc;
    signal(SIGUSR1, on_usr1);
    int r = wprof_middle(1);
    printf("%p %p %p %d\n", (void *)wprof_leaf, (void *)wprof_middle, return_address, r);
    fflush(stdout);
    for (;;) {
        /* Polling, not pause(): a signal landing between the check and
           pause() would be lost. */
        usleep(1000);
        if (map_requested) {
            map_requested = 0;
            int fd = open(argv[0], O_RDONLY);
            printf("%p\n", mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0));
            fflush(stdout);
        }
    }
}
"#;

/// The C target running: its pid and the addresses it printed.
struct Target {
    child: Child,
    stdout: BufReader<ChildStdout>,
    leaf: u64,
    middle: u64,
    /// Where `wprof_leaf` returns to in `wprof_middle`.
    return_address: u64,
    _dir: tempfile::TempDir,
}

impl Target {
    #[track_caller]
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let src = dir.path().join("target.c");
        std::fs::write(&src, TARGET_C).expect("write target.c");
        let exe = dir.path().join("target");
        compile(&src, &exe);
        let mut child = Command::new(&exe)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the target");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stdout = BufReader::new(stdout);
        let addrs = read_addrs(&mut stdout);
        Self {
            child,
            stdout,
            leaf: addrs[0],
            middle: addrs[1],
            return_address: addrs[2],
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Makes the target map its own file again; returns the new mapping.
    #[track_caller]
    fn map_again(&mut self) -> u64 {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid fits pid_t");
        // SAFETY: plain kill(2) on our own child.
        let rc = unsafe { libc::kill(pid, libc::SIGUSR1) };
        assert_eq!(rc, 0, "signal the target");
        read_addrs(&mut self.stdout)[0]
    }

    #[track_caller]
    fn kill(&mut self) {
        self.child.kill().expect("kill the target");
        self.child.wait().expect("reap the target");
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads one line of hex addresses (the last field of the first line is not
/// an address).
#[track_caller]
fn read_addrs(stdout: &mut BufReader<ChildStdout>) -> Vec<u64> {
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("read the target's output");
    line.split_whitespace()
        .filter_map(|a| u64::from_str_radix(a.strip_prefix("0x")?, 16).ok())
        .collect()
}

#[track_caller]
fn compile(src: &Path, exe: &PathBuf) {
    let status = Command::new("cc")
        .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(exe)
        .arg(src)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed on {}", src.display());
}

/// The 1-based line of `TARGET_C` holding `marker`.
fn line_of(marker: &str) -> u32 {
    let index = TARGET_C
        .lines()
        .position(|l| l.contains(marker))
        .expect("marker in TARGET_C");
    u32::try_from(index + 1).expect("small line number")
}

#[track_caller]
fn normalized_frame(normalized: NormalizedAddr) -> RawFrame {
    match normalized {
        NormalizedAddr::Normalized { .. } => RawFrame::from_normalized(0, normalized),
        NormalizedAddr::Unknown { reason } => panic!("address not normalized: {reason:?}"),
    }
}

/// Addresses normalized while the process lives symbolize after it is killed,
/// with file:line, and return addresses resolve to the calling line.
#[test]
fn symbols_survive_the_process() {
    let mut target = Target::start();
    let mut normalizer = StackNormalizer::new();
    let addrs = [target.leaf + 4, target.middle, target.return_address];
    let normalized = normalizer.normalize_user(target.pid(), &addrs);
    target.kill();

    let frames: Vec<_> = normalized.into_iter().map(normalized_frame).collect();
    assert!(
        matches!(
            &frames[0],
            RawFrame::User {
                build_id: Some(_),
                ..
            }
        ),
        "cc output has a build id: {frames:?}"
    );
    let input = [
        (frames[0].clone(), AddrKind::Ip),
        (frames[1].clone(), AddrKind::Ip),
        (frames[2].clone(), AddrKind::Return),
    ];
    let out = symbolize(
        &input,
        &SymbolizeOptions::default(),
        &KernelSymbols::default(),
    );
    let names: Vec<_> = out.symbols.iter().map(|s| s.function.as_deref()).collect();
    assert_eq!(
        names,
        [
            Some("wprof_leaf"),
            Some("wprof_middle"),
            Some("wprof_middle")
        ]
    );
    assert_eq!(out.symbols[0].offset, 4);
    assert_eq!(
        out.symbols[2].offset,
        target.return_address - target.middle,
        "offset of the real return address"
    );
    let call = &out.symbols[2];
    assert!(
        call.file
            .as_deref()
            .is_some_and(|f| f.ends_with("target.c")),
        "{call:?}"
    );
    assert_eq!(call.line, Some(line_of("CALL_LINE")), "the calling line");
    assert_eq!(out.stats.unresolved, 0);
}

/// A return address just past a function's end resolves to that function
/// (looked up at `addr - 1`), while an instruction pointer there does not.
#[test]
fn return_address_at_function_end_resolves_to_caller() {
    let mut target = Target::start();
    let mut normalizer = StackNormalizer::new();
    // `wprof_middle` directly follows `wprof_leaf`: its first byte is the end
    // of `wprof_leaf`.
    let normalized = normalizer.normalize_user(target.pid(), &[target.middle]);
    target.kill();
    let frame = normalized_frame(normalized[0].clone());
    let input = [(frame.clone(), AddrKind::Return), (frame, AddrKind::Ip)];
    let out = symbolize(
        &input,
        &SymbolizeOptions::default(),
        &KernelSymbols::default(),
    );
    assert_eq!(out.symbols[0].function.as_deref(), Some("wprof_leaf"));
    assert_eq!(out.symbols[0].offset, target.middle - target.leaf);
    assert_eq!(out.symbols[1].function.as_deref(), Some("wprof_middle"));
    assert_eq!(out.symbols[1].offset, 0);
}

/// A pid that does not exist normalizes to `ProcessGone`, without a panic.
#[test]
fn exited_pid_is_unknown() {
    let mut target = Target::start();
    let pid = target.pid();
    target.kill();
    let mut normalizer = StackNormalizer::new();
    let normalized = normalizer.normalize_user(pid, &[target.leaf, 1]);
    let gone = NormalizedAddr::Unknown {
        reason: UnknownReason::ProcessGone,
    };
    assert_eq!(normalized, [gone.clone(), gone]);
    assert_eq!(normalizer.normalize_user(0, &[1]).len(), 1);
}

/// Addresses outside every mapping are `Unmapped`, and a mapping added after
/// the cache was filled is found by refreshing it.
#[test]
fn cache_refreshes_on_new_mapping() {
    let mut target = Target::start();
    let pid = target.pid();
    let mut normalizer = StackNormalizer::new();
    let unmapped = NormalizedAddr::Unknown {
        reason: UnknownReason::Unmapped,
    };
    let first = normalizer.normalize_user(pid, &[8, target.leaf]);
    assert_eq!(first[0], unmapped);
    let base = target.map_again();
    let found = normalizer.normalize_user(pid, &[base + 16, 8]);
    assert!(
        matches!(
            &found[0],
            NormalizedAddr::Normalized {
                file_offset: 16,
                ..
            }
        ),
        "{found:?}"
    );
    assert_eq!(found[1], unmapped);
    assert_eq!(normalizer.stats().maps_reads, 2);
    // The known-unmapped address alone does not force another read.
    normalizer.normalize_user(pid, &[8]);
    assert_eq!(normalizer.stats().maps_reads, 2);
    // After exit, the cache still answers; `forget` drops it.
    target.kill();
    let after_exit = normalizer.normalize_user(pid, &[target.leaf]);
    assert!(matches!(after_exit[0], NormalizedAddr::Normalized { .. }));
    normalizer.forget(pid);
    let forgotten = normalizer.normalize_user(pid, &[target.leaf]);
    assert_eq!(
        forgotten[0],
        NormalizedAddr::Unknown {
            reason: UnknownReason::ProcessGone
        }
    );
}

/// A kernel address from `/proc/kallsyms` resolves to its name.
#[test]
fn kernel_address_resolves() {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
    let addr = kallsyms
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let addr = u64::from_str_radix(fields.next()?, 16).ok()?;
            let name = fields.nth(1)?;
            (name == "do_sys_openat2").then_some(addr)
        })
        .next()
        .expect("do_sys_openat2 in kallsyms");
    if addr == 0 {
        eprintln!("skipped: kallsyms hides addresses (kptr_restrict, not root)");
        return;
    }
    let frames = [
        (RawFrame::Kernel { addr: addr + 5 }, AddrKind::Ip),
        (RawFrame::Kernel { addr: addr + 5 }, AddrKind::Return),
    ];
    let out = symbolize(
        &frames,
        &SymbolizeOptions::default(),
        &KernelSymbols::default(),
    );
    for symbol in &out.symbols {
        assert_eq!(symbol.function.as_deref(), Some("do_sys_openat2"));
        assert_eq!(symbol.offset, 5);
    }
    assert!(!out.stats.kernel_unavailable);
}

/// Deleted or replaced files and unknown frames give `None`, counted once per
/// file rather than reported per frame.
#[test]
fn missing_and_replaced_files_are_counted() {
    let frames = [
        RawFrame::User {
            path: "/nonexistent/libgone.so".into(),
            build_id: None,
            file_offset: 0x1000,
        },
        RawFrame::User {
            path: "/nonexistent/libgone.so".into(),
            build_id: None,
            file_offset: 0x2000,
        },
        RawFrame::User {
            path: "/bin/sh".into(),
            build_id: Some(vec![0xde, 0xad]),
            file_offset: 0x1000,
        },
        RawFrame::UnknownUser { addr: 0x1234 },
    ];
    let input: Vec<_> = frames.into_iter().map(|f| (f, AddrKind::Ip)).collect();
    let out = symbolize(
        &input,
        &SymbolizeOptions::default(),
        &KernelSymbols::default(),
    );
    assert!(out.symbols.iter().all(|s| s.function.is_none()));
    assert_eq!(out.stats.missing_files, 1);
    assert_eq!(out.stats.replaced_files, 1);
    assert_eq!(out.stats.unresolved, 4);
}

/// 1k distinct addresses spread over libc's text and 1k kernel text
/// addresses all resolve to functions, and print how long that takes (the
/// 100k-address figures are in the closing notes; raise `COUNT` to redo them).
#[test]
fn symbolizes_a_thousand_addresses() {
    const COUNT: u64 = 1_000;
    let frames = text_frames(&libc_path(), COUNT);
    let out = report("libc", &frames, &SymbolizeOptions::default());
    assert!(
        out.stats.resolved as u64 >= COUNT * 9 / 10,
        "{:?}",
        out.stats
    );
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("read kallsyms");
    let kernel: Vec<_> = kallsyms
        .lines()
        .filter(|l| l.contains(" t ") || l.contains(" T "))
        .filter_map(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
        .filter(|addr| *addr != 0)
        .take(COUNT as usize)
        .map(|addr| (RawFrame::Kernel { addr: addr + 1 }, AddrKind::Return))
        .collect();
    if kernel.is_empty() {
        eprintln!("SKIPPED kernel part: /proc/kallsyms shows no addresses (not root?)");
        return;
    }
    let out = report("kernel", &kernel, &SymbolizeOptions::default());
    assert_eq!(out.stats.resolved, kernel.len(), "{:?}", out.stats);
}

/// The innermost user frame of a stack taken in the kernel is the
/// interrupted instruction, not a return address: a sample preempted at a
/// function's first byte (a PLT stub after its `call`) must not be looked up
/// in the function before.
#[test]
fn innermost_frame_of_each_part_is_an_instruction() {
    let kinds: Vec<_> = (0..5).map(|i| AddrKind::in_stack(i, 3)).collect();
    use AddrKind::{Ip, Return};
    assert_eq!(kinds, [Ip, Return, Return, Ip, Return]);
    assert_eq!(AddrKind::in_stack(0, 0), Ip);
    assert_eq!(AddrKind::in_stack(1, 0), Return);
}

fn report(name: &str, frames: &[(RawFrame, AddrKind)], options: &SymbolizeOptions) -> Symbolized {
    let start = Instant::now();
    let out = symbolize(frames, options, &KernelSymbols::default());
    let elapsed = start.elapsed();
    let lines = out.symbols.iter().filter(|s| s.line.is_some()).count();
    let inlined = out.symbols.iter().filter(|s| !s.inlined.is_empty()).count();
    eprintln!(
        "{name}: {} frames in {elapsed:?}: {} named, {lines} with lines, {inlined} with inlined",
        frames.len(),
        out.stats.resolved,
    );
    out
}

/// `count` distinct return-address frames spread over `path`'s `.text`.
fn text_frames(path: &str, count: u64) -> Vec<(RawFrame, AddrKind)> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(path).expect("read ELF");
    let elf = object::File::parse(&*data).expect("parse ELF");
    let text = elf.section_by_name(".text").expect(".text");
    let (start, size) = text.file_range().expect(".text in file");
    let step = (size / count).max(1);
    (0..count)
        .map(|i| RawFrame::User {
            path: path.to_string(),
            build_id: None,
            file_offset: start + (i * step) % size,
        })
        .map(|f| (f, AddrKind::Return))
        .collect()
}

fn libc_path() -> String {
    maps_line_for("libc.so").1
}

/// Start address and path of the first mapping of a file matching `name`.
fn maps_line_for(name: &str) -> (u64, String) {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read maps");
    let line = maps
        .lines()
        .find(|l| l.contains(name))
        .expect("mapping present");
    let start = line.split('-').next().expect("range");
    let path = line.split_whitespace().last().expect("path");
    (
        u64::from_str_radix(start, 16).expect("hex start"),
        path.to_string(),
    )
}
