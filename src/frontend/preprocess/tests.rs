use std::process::Command;

use super::*;

fn run(text: &str) -> Result<Preprocessed, Vec<ScriptError>> {
    preprocess(
        text,
        &Setup {
            have_btf: true,
            ..Setup::default()
        },
    )
}

#[track_caller]
fn output(text: &str) -> String {
    match run(text) {
        Ok(p) => p.text,
        Err(errors) => panic!("preprocessing failed: {errors:?}"),
    }
}

#[track_caller]
fn error(text: &str) -> ScriptError {
    match run(text) {
        Ok(p) => panic!("expected an error, got {:?}", p.text),
        Err(mut errors) => errors.remove(0),
    }
}

/// The value `name` expands to after the script's includes, evaluated.
#[track_caller]
fn value(includes: &str, name: &str) -> i64 {
    let text = output(&format!("{includes}\n{name}"));
    let expression = text.lines().last().expect("a line");
    let zero = |_: &str| Ok(0);
    cond::evaluate(&tokens_of(expression, 0, None), &zero)
        .unwrap_or_else(|e| panic!("`{name}` → `{expression}`: {e}"))
        .as_i64()
}

/// Directive lines become blank lines; text keeps its offsets.
#[test]
fn blanks_directives_and_keeps_offsets() {
    let text = "#define A 1\nBEGIN { }\n";
    let out = output(text);
    assert_eq!(out, "           \nBEGIN { }\n");
    assert_eq!(out.len(), text.len());
}

/// Macro uses in the script are replaced; spans map back to the use.
#[test]
fn expands_uses_and_maps_spans() {
    let text = "#define B (A+2)\n#define A 1\nBEGIN { @x = B * 2; }";
    let pre = run(text).expect("preprocesses");
    assert!(
        pre.text.ends_with("BEGIN { @x = (1+2) * 2; }"),
        "{}",
        pre.text
    );
    let at = pre.text.find("(1+2)").expect("expansion");
    let written = pre.map.to_written(Span::new(at + 1, at + 2));
    assert_eq!(&text[written.start..written.end], "B");
    assert_eq!(
        pre.expansions[0].help(),
        "`B` is a macro; it expands to `(1+2)`"
    );
    let star = pre.text.find("* 2").expect("rest");
    let mapped = pre.map.to_written(Span::new(star, star + 1));
    assert_eq!(&text[mapped.start..mapped.end], "*");
}

/// Function-like macros (an extension over bpftrace 0.17) expand with
/// their arguments, spanning lines.
#[test]
fn expands_function_like_macros() {
    let out = output("#define MAX(a, b) ((a) > (b) ? (a) : (b))\nBEGIN { $x = MAX(1,\n 2); }");
    assert!(out.contains("$x = ((1) > (2) ? (1) : (2));"), "{out}");
}

/// Macros never expand inside strings, `$vars` or `@maps`.
#[test]
fn leaves_strings_and_script_words_alone() {
    let out = output("#define x 5\nBEGIN { @x[$x] = x; printf(\"x\"); }");
    assert!(
        out.ends_with("BEGIN { @x[$x] = 5; printf(\"x\"); }"),
        "{out}"
    );
}

/// `#ifndef BPFTRACE_HAVE_BTF` takes its `#else` branch when BTF loads,
/// and its first branch otherwise.
#[test]
fn have_btf_selects_branches() {
    let text = "#ifndef BPFTRACE_HAVE_BTF\nstruct x { int a; };\n#else\nok\n#endif\n";
    let with = output(text);
    assert!(with.contains("ok") && !with.contains("struct"), "{with}");
    let without = preprocess(text, &Setup::default())
        .expect("preprocesses")
        .text;
    assert!(
        without.contains("struct") && !without.contains("ok"),
        "{without}"
    );
}

/// `#if`/`#elif`/`#else` chains take exactly one branch, nested ones too.
#[test]
fn conditional_chains() {
    let text = "#define V 3\n#if V == 1\none\n#elif V > 2 && defined(V)\n#if 0\nno\n#else\nthree\n#endif\n#else\nelse\n#endif";
    let out = output(text);
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words, ["three"]);
}

/// `#include <sys/socket.h>` gives `AF_INET` and `AF_INET6`, with the
/// values gcc's own preprocessor computes.
#[test]
fn socket_header_matches_cpp() {
    let names = [
        "AF_INET",
        "AF_INET6",
        "AF_UNIX",
        "SOCK_STREAM",
        "SOCK_DGRAM",
        "MSG_PEEK",
        "SOL_SOCKET",
        "SO_REUSEADDR",
    ];
    let ours: Vec<i64> = names
        .iter()
        .map(|n| value("#include <sys/socket.h>", n))
        .collect();
    assert_eq!(ours[..2], [2, 10]);
    let Some(theirs) = cpp_values("sys/socket.h", &names) else {
        println!("skipped the cpp comparison: cpp is not installed");
        return;
    };
    assert_eq!(ours, theirs);
}

/// The values gcc's `cpp` gives `names` after `#include <header>`.
fn cpp_values(header: &str, names: &[&str]) -> Option<Vec<i64>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("t.c");
    let body = names.join("\n");
    std::fs::write(&source, format!("#include <{header}>\n{body}\n")).expect("source");
    let out = Command::new("cpp").arg("-P").arg(&source).output().ok()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let zero = |_: &str| Ok(0);
    Some(
        lines[lines.len() - names.len()..]
            .iter()
            .map(|l| {
                cond::evaluate(&tokens_of(l, 0, None), &zero)
                    .expect("cpp output")
                    .as_i64()
            })
            .collect(),
    )
}

/// Other headers bpftrace's runtime tests include preprocess cleanly.
#[test]
fn reads_common_headers() {
    assert_eq!(value("#include <errno.h>", "EPERM"), 1);
    assert_eq!(value("#include <errno.h>", "ENOENT"), 2);
    output("#include <sys/xattr.h>\n#include <sys/types.h>\n#include <signal.h>\nBEGIN {}");
    assert_eq!(value("#include <limits.h>", "INT_MAX"), i64::from(i32::MAX));
    assert_eq!(
        value("#include <stddef.h>\n#include <stdint.h>", "UINT8_MAX"),
        255
    );
}

/// `<linux/sched.h>` defines the kernel's task states, which the UAPI
/// header lacks.
#[test]
fn sched_header_defines_task_states() {
    assert_eq!(value("#include <linux/sched.h>", "TASK_RUNNING"), 0);
    assert_eq!(value("#include <linux/sched.h>", "TASK_UNINTERRUPTIBLE"), 2);
    assert_eq!(value("#include <linux/sched.h>", "TASK_REPORT_IDLE"), 0x80);
    assert_eq!(value("#include <linux/sched.h>", "SCHED_FIFO"), 1);
}

/// The task-state table agrees with the letters the running kernel's
/// `sched_switch` format prints for each state.
#[test]
fn task_states_match_sched_switch_format() {
    let path = "/sys/kernel/tracing/events/sched/sched_switch/format";
    let Ok(format) = std::fs::read_to_string(path) else {
        println!("skipped: cannot read {path} (tracefs not mounted or not root)");
        return;
    };
    let flags = print_flags(&format);
    assert!(flags.len() >= 8, "{flags:?} from {format}");
    for (name, letter) in REPORTED_STATE_LETTERS {
        let ours = value("#include <linux/sched.h>", name) as u64;
        let kernel = if *letter == 'R' {
            0
        } else {
            flags
                .iter()
                .find(|(_, l)| l == letter)
                .map(|(v, _)| *v)
                .expect("letter")
        };
        assert_eq!(ours, kernel, "{name} ({letter})");
    }
}

/// The `{ 0x1, "S" }` pairs of a format's `__print_flags`.
fn print_flags(format: &str) -> Vec<(u64, char)> {
    let Some(start) = format.find("__print_flags") else {
        return Vec::new();
    };
    format[start..]
        .split('{')
        .skip(1)
        .map_while(|pair| {
            let (number, rest) = pair.split_once(',')?;
            let letter = rest.trim().strip_prefix('"')?.chars().next()?;
            let number = u64::from_str_radix(number.trim().trim_start_matches("0x"), 16).ok()?;
            Some((number, letter))
        })
        .collect()
}

/// A missing top-level header is an error saying "file not found" and
/// where it looked; it points at the `#include`.
#[test]
fn missing_include_is_an_error() {
    let text = "BEGIN { }\n#include <lol/no.h>\n";
    let error = error(text);
    assert!(
        error
            .message
            .starts_with("`lol/no.h`: file not found (searched "),
        "{}",
        error.message
    );
    assert_eq!(
        &text[error.span.start..error.span.end],
        "#include <lol/no.h>"
    );
}

/// Errors inside a header point at the script's `#include` and name the
/// header's line.
#[test]
fn header_errors_point_at_the_include() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("bad.h"), "#define OK 1\n#error nope\n").expect("header");
    let script = dir.path().join("s.bt");
    let text = "#include \"bad.h\"\nBEGIN { }";
    let errors = preprocess(
        text,
        &Setup {
            script_path: Some(&script),
            ..Setup::default()
        },
    )
    .expect_err("#error");
    assert!(
        errors[0].message.ends_with("bad.h:2: #error nope"),
        "{}",
        errors[0].message
    );
    assert_eq!(errors[0].span, Span::new(0, 16));
}

/// `--include FILE` and `--include-dir DIR` work as bpftrace's options.
#[test]
fn include_options() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("mine.h"), "#define MINE 42\n").expect("header");
    let forced = dir.path().join("mine.h");
    let dirs = [dir.path().to_path_buf()];
    let setup = Setup {
        include_dirs: &dirs,
        ..Setup::default()
    };
    let pre = preprocess("#include <mine.h>\nMINE", &setup).expect("found in the include dir");
    assert!(pre.text.ends_with("42"), "{}", pre.text);
    let files = [forced];
    let pre = preprocess(
        "MINE",
        &Setup {
            include_files: &files,
            ..Setup::default()
        },
    )
    .expect("forced include");
    assert_eq!(pre.text, "42");
    let by_name = [PathBuf::from("mine.h")];
    let setup = Setup {
        include_dirs: &dirs,
        include_files: &by_name,
        ..Setup::default()
    };
    let pre = preprocess("MINE", &setup).expect("forced include found in the include dir");
    assert_eq!(pre.text, "42");
    let missing = [PathBuf::from("/nonexistent/x.h")];
    let error = preprocess(
        "BEGIN {}",
        &Setup {
            include_files: &missing,
            ..Setup::default()
        },
    )
    .expect_err("missing");
    assert!(
        error[0]
            .message
            .starts_with("--include /nonexistent/x.h: file not found (searched ."),
        "{}",
        error[0].message
    );
}

/// Malformed directives are errors at the directive.
#[test]
fn reports_bad_directives() {
    assert_eq!(
        error("#bogus\n").message,
        "unknown preprocessor directive `#bogus`"
    );
    assert_eq!(error("#if 1\nx\n").message, "this `#if` has no `#endif`");
    assert_eq!(error("#endif\n").message, "`#endif` without `#if`");
    assert_eq!(error("#else\n").message, "`#else` without `#if`");
    assert_eq!(error("#error stop here\n").message, "#error stop here");
    assert_eq!(
        error("#if 1 +\n#endif").message,
        "in `#if`: the expression ends too early"
    );
    assert_eq!(
        error("#if F(1)\n#endif").message,
        "in `#if`: `F` is not a defined function-like macro"
    );
    assert_eq!(
        error("#define F(a) a\nF(1, 2)").message,
        "`F` takes 1 argument but 2 were given"
    );
}

/// A `#!` first line is not a directive.
#[test]
fn shebang_is_ignored() {
    assert_eq!(
        output("#!/usr/bin/bpftrace\nBEGIN {}"),
        format!("{}\nBEGIN {{}}", " ".repeat(19))
    );
}
