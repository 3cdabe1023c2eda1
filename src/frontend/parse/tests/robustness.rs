//! Rejected scripts (rendered errors as insta snapshots), garbage input, deep
//! nesting, and the sample scripts under `tests/frontend/`.

use super::*;

/// A missing `;` between statements names both the expected tokens and the culprit.
#[test]
fn rejects_missing_semicolon() {
    insta::assert_snapshot!(rendered_error(
        "BEGIN {\n  printf(\"a\\n\")\n  printf(\"b\\n\");\n}\n"
    ));
}

/// A dangling operator asks for an expression.
#[test]
fn rejects_missing_operand() {
    insta::assert_snapshot!(rendered_error("kprobe:f {\n  $x = 1 + ;\n}\n"));
}

/// An unclosed block points at the end and at the `{` left open.
#[test]
fn rejects_missing_closing_brace() {
    insta::assert_snapshot!(rendered_error(
        "BEGIN {\n  @a[pid] = count();\n\nEND { print(@a); }\n"
    ));
}

/// A string running to the end of its line.
#[test]
fn rejects_unterminated_string() {
    insta::assert_snapshot!(rendered_error("BEGIN {\n  printf(\"hello\n}\n"));
}

/// A predicate without its closing `/`.
#[test]
fn rejects_unclosed_predicate() {
    insta::assert_snapshot!(rendered_error(
        "tracepoint:syscalls:sys_enter_openat /pid == 1 {\n  @ = count();\n}\n"
    ));
}

/// An unclosed call argument list.
#[test]
fn rejects_unclosed_call() {
    insta::assert_snapshot!(rendered_error("BEGIN { printf(\"%d\", pid; }"));
}

/// Bad escapes and bad literals are all reported, not only the first.
#[test]
fn reports_every_literal_error() {
    insta::assert_snapshot!(rendered_error(
        "BEGIN {\n  $a = \"\\q\";\n  $b = 99999999999999999999;\n  $c = 089;\n}\n"
    ));
}

/// A statement outside any probe.
#[test]
fn rejects_statement_at_top_level() {
    insta::assert_snapshot!(rendered_error("printf(\"hi\\n\");\n"));
}

/// An unterminated block comment.
#[test]
fn rejects_unterminated_comment() {
    insta::assert_snapshot!(rendered_error("BEGIN { exit(); }\n/* trailing\n"));
}

/// A small deterministic generator, so the fuzz test needs no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

const SAMPLE: &str = "#include <x.h>\nkprobe:a,\nuprobe:/bin/x:f+0x1 /pid == $1 && @m[tid]/ {\n\
    $x = (struct s *)arg0; @m[tid, comm] += $x->f.0[2] ? -1 : 0x1_0;\n\
    if (!$x) { unroll(2) { $i++ } } else if ($y) { while (1) { break } } else { return }\n\
    printf(\"%s \\x41\\n\", str($x)); /* c */ let $t = (1, \"a\"); // c\n}\nEND { exit(); }\n";

/// Every prefix of a valid script, and random text, parses or fails without panicking.
#[test]
fn never_panics() {
    for end in (0..=SAMPLE.len()).filter(|&end| SAMPLE.is_char_boundary(end)) {
        let _ = parse(&SAMPLE[..end], "prefix.bt");
    }
    let alphabet: Vec<char> = "{}()[]/*+-=!<>&|^~?:;,.\"\\$@#'abc01x_ \n\té€"
        .chars()
        .collect();
    let mut rng = Lcg(7);
    for _ in 0..2000 {
        let len = (rng.next() % 60) as usize;
        let text: String = (0..len)
            .map(|_| alphabet[(rng.next() as usize) % alphabet.len()])
            .collect();
        let _ = parse(&text, "random.bt");
        let splice = (rng.next() as usize) % SAMPLE.len();
        let mixed = format!("{}{text}", &SAMPLE[..splice]);
        let _ = parse(&mixed, "mixed.bt");
    }
}

/// Pathological nesting is a diagnostic, not a stack overflow.
#[test]
fn deep_nesting_is_an_error() {
    let n = 20_000;
    let cases = [
        format!("BEGIN {{ {}1{} }}", "(".repeat(n), ")".repeat(n)),
        format!("BEGIN {{ {}1 }}", "!".repeat(n)),
        format!("BEGIN {{ {}1 }}", "- ".repeat(n)),
        format!("BEGIN {{ 1{} }}", " + 1".repeat(n)),
        format!("BEGIN {{ x{} }}", ".f".repeat(n)),
        format!("BEGIN {{ {}{} }}", "if (1) { ".repeat(n), "}".repeat(n)),
        format!("BEGIN {{ if (a) {{ }}{} }}", " else if (a) { }".repeat(n)),
        format!("BEGIN {{ a{} }}", " ? a : a".repeat(n)),
        format!("BEGIN {{ @m[{}1{}] }}", "@m[".repeat(n), "]".repeat(n)),
    ];
    for source in cases {
        let errors = parse(&source, "deep.bt").expect_err("too deep to accept");
        let text = errors.render();
        assert!(
            text.contains("nested too deeply"),
            "{}",
            &text[..text.len().min(500)]
        );
    }
}

/// Nesting that real scripts use is well within the limits.
#[test]
fn moderate_nesting_is_fine() {
    let n = 40;
    ok(&format!("BEGIN {{ {}1{} }}", "(".repeat(n), ")".repeat(n)));
    ok(&format!(
        "BEGIN {{ {}{} }}",
        "if (1) { ".repeat(n),
        "}".repeat(n)
    ));
    ok(&format!("BEGIN {{ 1{} }}", " + 1".repeat(100)));
}

/// Every sample script under `tests/frontend/` parses.
#[test]
fn sample_scripts_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/frontend");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/frontend exists") {
        let path = entry.expect("readable directory entry").path();
        if path.extension().is_some_and(|ext| ext == "bt") {
            let source = std::fs::read_to_string(&path).expect("readable script");
            let name = path.display().to_string();
            if let Err(errors) = parse(&source, &name) {
                panic!("{}", errors.render());
            }
            count += 1;
        }
    }
    assert!(count >= 5, "only {count} scripts in {}", dir.display());
}

/// `/*` inside an attach point's path is a wildcard (as bpftrace lexes it);
/// after a space, and inside a block, it still starts a comment.
#[test]
fn path_wildcard_is_not_a_comment() {
    let script = "uprobe:/usr/lib/*/libc.so.6:malloc /* c */ { /* d */ exit(); }";
    assert_eq!(
        ok(script).probes[0].specs[0].parts[0],
        "/usr/lib/*/libc.so.6"
    );
    let error = rendered_error("uprobe:/bin/x:f { exit(); } /* open");
    assert!(error.contains("unterminated comment"), "{error}");
}
