//! Code generation: the `--dump-bpf` listing of every `tests/codegen/*.bt`
//! script is an insta snapshot (reviewed as a diff), and each script also
//! passes the kernel verifier for real; `--builtins` prints the reference of
//! the built-ins.

use std::path::{Path, PathBuf};

use super::{map_lines, path_str, wprof_ok};
use crate::require_bpf;

/// The scripts under `tests/codegen/`, sorted.
fn codegen_scripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/codegen");
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|x| x == "bt"))
        .collect();
    scripts.sort();
    assert!(
        scripts.len() >= 8,
        "expected the codegen scripts in {}",
        dir.display()
    );
    scripts
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

/// `listing` with the recorder's wake-up threshold, a quarter of a capture
/// ring that grows with the CPU count (1–16 MiB), written `RING/4`.
fn ring_independent(listing: &str) -> String {
    let mut listing = listing.to_owned();
    for quarter in ["0x100000", "0x200000", "0x400000", "0x800000", "0x1000000"] {
        listing = listing.replace(&format!("<= {quarter} goto"), "<= RING/4 goto");
    }
    listing
}

/// The annotated listing of each codegen script matches its reviewed snapshot.
#[test]
fn dump_bpf_listings_match_snapshots() {
    // Tracepoint scripts read their formats from tracefs, which needs root.
    require_bpf!();
    for script in codegen_scripts() {
        let out = wprof_ok(&["--dump-bpf", "-f", "none", &path_str(&script)]);
        let mut settings = insta::Settings::clone_current();
        settings.set_input_file(&script);
        settings.set_prepend_module_to_snapshot(false);
        let listing = ring_independent(&out.stdout);
        settings.bind(|| insta::assert_snapshot!(format!("codegen__{}", stem(&script)), listing));
    }
}

/// Every codegen script loads through the verifier and attaches (`-d 1` stops at once).
#[test]
fn codegen_scripts_pass_the_verifier() {
    require_bpf!();
    for script in codegen_scripts() {
        let out = wprof_ok(&["-d", "1", &path_str(&script)]);
        assert!(
            out.stdout.starts_with("Attaching "),
            "{}: {}",
            script.display(),
            out.stdout
        );
        let maps = map_lines(&out.stdout);
        // Scripts that run in BEGIN also compute known values.
        let expected: &[(&str, &str)] = match stem(&script).as_str() {
            "loops" => &[("@sum", "528")],
            "maps" => &[("@by_int[42]", "12"), ("@counter", "1"), ("@plain", "1")],
            _ => &[],
        };
        for (name, value) in expected {
            assert_eq!(
                maps.get(*name).map(String::as_str),
                Some(*value),
                "{}: {}",
                script.display(),
                out.stdout
            );
        }
    }
}

/// `--builtins` prints the reference of the language's built-ins, by kind,
/// and needs no root.
#[test]
fn builtins_reference() {
    let out = wprof_ok(&["--builtins"]);
    for line in [
        "Values (expressions):",
        "  printf(fmt, args...)",
        "  lhist(x, min, max, step)",
    ] {
        assert!(out.stdout.contains(line), "{line}:\n{}", out.stdout);
    }
}
