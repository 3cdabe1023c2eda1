//! Unwind tables against `readelf --debug-dump=frames-interp`, row for row,
//! and what they cost to build and store.

use std::path::Path;
use std::time::Instant;

use wprof::unwind::rules::{Cfa, Rule};
use wprof::unwind::table::UnwindTable;

use super::readelf::{disagreements, readelf_fdes};
use super::workloads::{c_chain, large_binary, libc_path, rust_chain};

/// Builds the table of `path` and compares it with readelf; returns it.
#[track_caller]
fn check_against_readelf(path: &Path) -> UnwindTable {
    let elf = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let table = UnwindTable::build(&elf).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut fdes = readelf_fdes(path);
    assert!(
        !fdes.is_empty(),
        "readelf found no FDE in {}",
        path.display()
    );
    let wrong = disagreements(&table, &mut fdes);
    assert!(
        wrong.is_empty(),
        "{}: {} of the rules differ from readelf, first:\n{}",
        path.display(),
        wrong.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
    println!(
        "{}: {} FDEs, {} rows ({} before merging), {} unsupported, {} bytes",
        path.display(),
        table.stats.fdes,
        table.rows.len(),
        table.stats.raw_rows,
        table.stats.unsupported_rows,
        table.bytes()
    );
    table
}

/// The C workload (-O2 -fomit-frame-pointer): every rule matches readelf,
/// and the PLT's expression is recognised as the PLT rule.
#[test]
fn c_program_matches_readelf() {
    let table = check_against_readelf(&c_chain());
    let plt = table.rows.iter().any(|r| {
        matches!(
            r.rule,
            Rule::Frame {
                cfa: Cfa::Plt { threshold: 11 },
                ..
            }
        )
    });
    assert!(plt, "no PLT row in {:?}", table.rows);
}

/// libc: every rule matches readelf (signal trampolines and the like are
/// marked unsupported exactly where readelf shows expressions or other registers).
#[test]
fn libc_matches_readelf() {
    let table = check_against_readelf(&libc_path());
    assert!(table.rows.len() > 10_000, "{} rows", table.rows.len());
}

/// A Rust release binary: every rule matches readelf.
#[test]
fn rust_binary_matches_readelf() {
    check_against_readelf(&rust_chain());
}

/// A file with only `.debug_frame` (no `.eh_frame`) gets its table from it.
#[test]
fn debug_frame_only_file() {
    let dir = crate::common::scratch_dir("unwind");
    let out = dir.join("chain_debug_frame.o");
    let status = std::process::Command::new("cc")
        .args(["-c", "-O2", "-g", "-fomit-frame-pointer"])
        .args([
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-o",
        ])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/unwind/chain.c"))
        .status()
        .expect("run cc");
    assert!(status.success());
    let elf = std::fs::read(&out).expect("read object");
    let file = object::File::parse(&*elf).expect("parse");
    use object::Object as _;
    assert!(
        file.section_by_name(".eh_frame").is_none(),
        "cc still wrote .eh_frame"
    );
    let table = UnwindTable::build(&elf).expect("table from .debug_frame");
    assert!(table.stats.fdes >= 4, "{:?}", table.stats);
    assert!(
        table
            .rows
            .iter()
            .any(|r| matches!(r.rule, Rule::Frame { .. }))
    );
}

/// Build time and size per MiB of code for libc and a large binary
/// (rustc's driver library); printed for the docs (run with --nocapture).
#[test]
fn table_cost_of_libc_and_a_large_binary() {
    let mut files = vec![libc_path()];
    match large_binary() {
        Some(path) => files.push(path),
        None => println!("no large binary in the Rust toolchain: measuring libc only"),
    }
    for path in files {
        let t = Instant::now();
        let elf = std::fs::read(&path).expect("read");
        let read = t.elapsed();
        let table = UnwindTable::build(&elf).expect("table");
        let mib = table.stats.text_bytes as f64 / (1 << 20) as f64;
        println!(
            "{}: {mib:.1} MiB of text, {} FDEs, {} rows, {} KiB = {:.0} bytes per MiB of text, \
             built in {:?} (file read {read:?})",
            path.display(),
            table.stats.fdes,
            table.rows.len(),
            table.bytes() / 1024,
            table.bytes_per_text_mib(),
            table.stats.build_time,
        );
        assert!(
            table.bytes_per_text_mib() < 200_000.0,
            "tables bigger than a fifth of the code"
        );
    }
}
