//! The other ways bpftrace scripts spell a uprobe: by address, with a quoted
//! function name and an offset, and with a path relative to the working
//! directory. Each attaches to `uprobe_target` and counts exactly.

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol};

use super::{RUN_TIMEOUT, map_lines, workload, wprof_fails, wprof_ok};
use crate::common::{find_in_path, run_with_timeout, wprof_bin};
use crate::require_bpf;

/// The link-time address of `name` in `binary`.
fn symbol_address(binary: &str, name: &str) -> u64 {
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no {name} in {binary}"))
        .address()
}

/// Runs `script` on `uprobe_target 6` from `dir`; the `@calls` count.
fn calls(dir: &Path, script: &str) -> String {
    let target = workload("uprobe_target");
    let mut command = Command::new(wprof_bin());
    command
        .current_dir(dir)
        .args(["-e", script, "-c", &format!("{target} 6")]);
    let out = run_with_timeout(&mut command, RUN_TIMEOUT).unwrap();
    assert!(out.success(), "{script}: {out:?}");
    map_lines(&out.stdout)
        .remove("@calls")
        .unwrap_or_else(|| panic!("{script}: no @calls in {}", out.stdout))
}

/// An address inside a function, a quoted name with an offset and a
/// relative path all attach where their function runs (`add`: 6 calls).
#[test]
fn uprobe_spellings_attach() {
    require_bpf!();
    let target = workload("uprobe_target");
    let add = symbol_address(&target, "add");
    let path = Path::new(&target);
    let (dir, file) = (path.parent().unwrap(), path.file_name().unwrap());
    let parent = dir.parent().unwrap();
    let relative = format!(
        "{}/{}",
        dir.file_name().unwrap().to_str().unwrap(),
        file.to_str().unwrap()
    );
    for (from, script) in [
        (
            dir,
            format!("uprobe:{target}:{add:#x} /pid == cpid/ {{ @calls = count(); }}"),
        ),
        (
            dir,
            format!("uprobe:{target}:\"add\"+0 /pid == cpid/ {{ @calls = count(); }}"),
        ),
        (
            parent,
            format!("uprobe:{relative}:add /pid == cpid/ {{ @calls = count(); }}"),
        ),
    ] {
        assert_eq!(calls(from, &script), "6", "{script}");
    }
}

/// In a block with several attach points a missing function is skipped with
/// a warning naming it; a block left with none is an error with a hint.
#[test]
fn missing_functions_are_skipped_in_a_shared_block() {
    require_bpf!();
    let target = workload("uprobe_target");
    let script = format!(
        "uprobe:{target}:add, uprobe:{target}:no_such_fn /pid == cpid/ {{ @calls = count(); }}"
    );
    let out = wprof_ok(&["-e", &script, "-c", &format!("{target} 6")]);
    assert_eq!(map_lines(&out.stdout)["@calls"], "6", "{}", out.stdout);
    assert!(
        out.stderr.contains(&format!(
            "warning: skipping `uprobe:{target}:no_such_fn`: no function matching `no_such_fn`"
        )),
        "{}",
        out.stderr
    );
    let out = wprof_fails(&["-e", &format!("uprobe:{target}:no_such_fn {{ exit(); }}")]);
    assert!(out.stderr.contains("glibc 2.34"), "{}", out.stderr);
}

/// A uprobe on a function its binary lacks but a library it loads has
/// (threadsnoop's `uprobe:libpthread:pthread_create` since glibc 2.34):
/// `--dump-bpf` and `--emit-elf` compile it as written, warning with the
/// binary, the function and where it really is, as `bpftrace -d` compiles
/// it; a run refuses it with the same words.
#[test]
fn function_of_a_loaded_library_compiles_only_when_nothing_attaches() {
    let target = workload("uprobe_target");
    let script = format!("uprobe:{target}:getpid {{ @calls = count(); }}");
    let why = format!("no function matching `getpid` in {target} (getpid is in ");
    let hint = "libc.so.6, which it loads: uprobe:libc:getpid)";
    let dump = wprof_ok(&["--dump-bpf", "-e", &script]);
    let warning = format!("warning: `uprobe:{target}:getpid`: {why}");
    assert!(dump.stderr.contains(&warning), "{}", dump.stderr);
    assert!(
        dump.stderr.contains(&format!(
            "{hint}: compiled as written, attaching it would fail"
        )),
        "{}",
        dump.stderr
    );
    let program = format!("; uprobe:{target}:getpid (uprobe, ");
    assert!(dump.stdout.contains(&program), "{}", dump.stdout);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let elf = dir.path().join("p.o");
    let elf = elf.to_str().expect("a UTF-8 path");
    let emitted = wprof_ok(&["--emit-elf", elf, "-e", &script]);
    assert!(emitted.stderr.contains(&warning), "{}", emitted.stderr);
    let data = std::fs::read(elf).expect("the ELF file is written");
    let file = object::File::parse(&*data).expect("a valid ELF file");
    assert!(
        file.sections().any(|s| s.name() == Ok("uprobe")),
        "no uprobe program in the ELF file"
    );
    let run = wprof_fails(&["-e", &script]);
    assert!(run.stderr.contains(&why), "{}", run.stderr);
    assert!(run.stderr.contains(hint), "{}", run.stderr);
    assert!(
        !run.stderr.contains("compiled as written"),
        "{}",
        run.stderr
    );
}

/// An address no function holds is refused with bpftrace's phrase.
#[test]
fn unresolvable_address() {
    let out = wprof_fails(&["-e", "uprobe:/bin/bash:10 { exit(); }"]);
    assert!(
        out.stderr
            .contains("Could not resolve address: /bin/bash:0xa"),
        "{}",
        out.stderr
    );
}

/// A USDT argument relative to `%rip` (`-4@level(%rip)`, a global) reads the
/// global's value at each firing (bpftrace 0.17 cannot: "deref ident is not
/// handled yet").
#[test]
fn usdt_rip_relative_argument() {
    require_bpf!();
    let target = workload("usdt_operands");
    let script = format!("usdt:{target}:wprof:global {{ printf(\"level %d\\n\", arg0); }}");
    let out = wprof_ok(&["-e", &script, "-c", &target]);
    let levels: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("level"))
        .collect();
    assert_eq!(
        levels,
        ["level 8", "level 9", "level 10", "level 11"],
        "{}",
        out.stdout
    );
}

/// `-l` expands wildcarded file names as bpftrace 0.17 does (the oracle,
/// when installed): `/usr/lib/*/libc.so.6` lists libc's functions, and a
/// glob over the workloads' directory lists the USDT probes of each match.
#[test]
fn listing_expands_file_globs() {
    let libc = wprof_ok(&["-l", "uprobe:/usr/lib/*/libc.so.6:mallo*"]).stdout;
    assert!(
        libc.lines()
            .any(|l| l == "uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc"),
        "{libc}"
    );
    let operands = workload("usdt_operands");
    let pattern = format!("usdt:{}*:*", &operands[..operands.len() - 3]);
    let usdt = wprof_ok(&["-l", &pattern]).stdout;
    assert!(
        usdt.contains(&format!("usdt:{operands}:wprof:sib\n")),
        "{usdt}"
    );
    // Only exported functions: bpftrace also reads libc's detached debug
    // symbols (`malloc_consolidate`), which wprof does not.
    let libc = "uprobe:/usr/lib/*/libc.so.6:malloc_t*".to_string();
    listings_match_bpftrace("-l", &[libc, pattern]);
}

/// `wprof FLAG PATTERN` prints what bpftrace (the oracle) prints, for each
/// pattern; without bpftrace, says so and checks nothing more.
#[track_caller]
fn listings_match_bpftrace(flag: &str, patterns: &[String]) {
    let Some(bpftrace) = find_in_path("bpftrace") else {
        eprintln!("bpftrace is not installed: listings checked without the oracle");
        return;
    };
    for pattern in patterns {
        let mut command = Command::new(&bpftrace);
        let oracle = run_with_timeout(command.args([flag, pattern]), RUN_TIMEOUT).unwrap();
        assert_eq!(
            wprof_ok(&[flag, pattern]).stdout,
            oracle.stdout,
            "{pattern}"
        );
    }
}

/// `-l` of a C++ binary lists mangled symbols, and a quoted demangled name or
/// a wildcard over demangled names selects them, as bpftrace 0.17 (the
/// oracle, when installed) lists them.
#[test]
fn listing_cpp_functions() {
    let target = workload("cpp_target");
    let patterns = [
        format!("uprobe:{target}:\"ns::func(int)\""),
        format!("uprobe:{target}:\"ns::*\""),
        format!("uprobe:{target}:_ZN2ns*"),
    ];
    let listed = wprof_ok(&["-l", &patterns[1]]).stdout;
    let expected = ["_ZN2ns4funcEi", "_ZN2ns4funcEl", "_ZNK2ns6Widget4sizeEi"]
        .map(|symbol| format!("uprobe:{target}:{symbol}\n"))
        .concat();
    assert_eq!(listed, expected);
    listings_match_bpftrace("-l", &patterns);
}

/// `BPFTRACE_NO_CPP_DEMANGLE=1` prints `func`, `usym` and `ustack` frames
/// mangled, as bpftrace does; the demangled name still attaches.
#[test]
fn no_cpp_demangle_keeps_mangled_names() {
    require_bpf!();
    let target = workload("cpp_target");
    let script = format!(
        "uprobe:{target}:\"ns::func(int)\" /pid == cpid/ {{ printf(\"%s %s\\n\", func, usym(reg(\"ip\"))); print(ustack(1)); exit(); }}"
    );
    let mut command = Command::new(wprof_bin());
    command
        .env("BPFTRACE_NO_CPP_DEMANGLE", "1")
        .args(["-e", &script, "-c", &target]);
    let out = run_with_timeout(&mut command, RUN_TIMEOUT).unwrap();
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout.contains("_ZN2ns4funcEi _ZN2ns4funcEi\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("        _ZN2ns4funcEi+0\n"),
        "{}",
        out.stdout
    );
}

/// `-lv` lists a uprobe's parameters from DWARF as bpftrace 0.17 (the
/// oracle, when installed) spells them: typedef names, `const` placement,
/// `<unknown type>` for volatile.
#[test]
fn verbose_listing_spells_parameter_types() {
    let target = workload("params_target");
    let pattern = format!("uprobe:{target}:typed");
    let listed = wprof_ok(&["-lv", &pattern]).stdout;
    let expected = format!(
        "uprobe:{target}:typed\n    size_t n\n    const char* s\n    uint8_t byte\n    \
         long long unsigned int wide\n    const pair_t* const pair\n    const <unknown type>* level\n"
    );
    assert_eq!(listed, expected);
    listings_match_bpftrace("-lv", &[format!("uprobe:{target}:*")]);
}

/// Integer parameters after the sixth are read from the caller's stack at
/// the function's entry (bpftrace 0.17 cannot compile `args.g` here).
#[test]
fn stack_passed_parameters() {
    require_bpf!();
    let target = workload("params_target");
    let script = format!(
        "uprobe:{target}:many /pid == cpid/ {{ printf(\"%d %d %d\\n\", args.a, args.g, args.h); }}"
    );
    let out = wprof_ok(&["-e", &script, "-c", &target]);
    assert!(out.stdout.contains("1 7 8\n"), "{}", out.stdout);
    let script = format!("uprobe:{target}:many+4 /pid == cpid/ {{ printf(\"%d\\n\", args.g); }}");
    let out = wprof_fails(&["-e", &script]);
    assert!(
        out.stderr.contains("only at the function's entry"),
        "{}",
        out.stderr
    );
}

/// Structs passed by value take their SysV registers (an 8-byte pair: one;
/// 32 bytes: the stack), so the parameters after them are read right; the
/// structs themselves are refused with the reason, as bpftrace cannot read
/// them either.
#[test]
fn parameters_after_structs_by_value() {
    require_bpf!();
    let target = workload("params_target");
    let script = format!(
        "uprobe:{target}:by_value /pid == cpid/ {{ printf(\"%d %d %s\\n\", args.color, args.after, str(args.argv[0])); }}"
    );
    let out = wprof_ok(&["-e", &script, "-c", &target]);
    assert!(
        out.stdout.contains(&format!("1 9 {target}\n")),
        "{}",
        out.stdout
    );
    for field in ["pair.a", "big.x[0]"] {
        let script = format!(
            "uprobe:{target}:by_value /pid == cpid/ {{ printf(\"%d\\n\", args.{field}); }}"
        );
        let out = wprof_fails(&["-e", &script]);
        assert!(out.stderr.contains("is passed by value"), "{}", out.stderr);
    }
}

/// `--usdt-file-activation` sets a USDT probe's semaphore in every process
/// mapping the file, not only the `-p` one: a second process's guarded probe
/// then runs (without the option it stays off).
#[test]
fn usdt_file_activation_sets_every_semaphore() {
    require_bpf!();
    let target = workload("usdt_semaphore");
    let script = format!("usdt:{target}:wprof:gated {{ @ = count(); }}");
    for (option, other_active) in [(None, false), (Some("--usdt-file-activation"), true)] {
        let spawn = || {
            Command::new(&target)
                .arg("30")
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start the workload")
        };
        let (traced, other) = (spawn(), spawn());
        let pid = traced.id().to_string();
        let mut args = vec!["-p", &pid, "-d", "600ms", "-e", &script];
        args.extend(option);
        wprof_ok(&args);
        let traced = traced.wait_with_output().expect("traced workload");
        let other = other.wait_with_output().expect("other workload");
        let active =
            |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).contains("active");
        assert!(
            active(&traced),
            "{option:?}: the -p process never ran its probe"
        );
        assert_eq!(
            active(&other),
            other_active,
            "{option:?}: the other process"
        );
    }
}
