//! The joined table: unique names where they are looked up, docs on every
//! entry, examples that compile.

use super::*;
use crate::capture::model::RecordOrigin;
use crate::driver::{self, Source};
use crate::frontend::fake_machine::FakeMachine;
use crate::frontend::options::CompileOptions;
use crate::frontend::pmu::parse_counters;

/// A name stands once among the built-ins of one kind and way of writing.
#[test]
fn names_are_unique_where_looked_up() {
    let mut seen = std::collections::HashSet::new();
    for entry in ALL.iter() {
        let kind = std::mem::discriminant(&entry.kind);
        for call in [false, true] {
            if entry.written.fits(call) {
                assert!(
                    seen.insert((entry.name, kind, call)),
                    "`{}` is declared twice",
                    entry.name
                );
            }
        }
    }
}

/// Every entry has a signature naming it, docs and an example using it.
#[test]
fn every_entry_is_documented() {
    for entry in ALL.iter() {
        let name = entry.name;
        assert!(
            entry.signature.contains(name),
            "{name}: {}",
            entry.signature
        );
        assert!(entry.doc.ends_with('.'), "{name}: the doc is a sentence");
        assert!(entry.example.contains(name), "{name}: {}", entry.example);
    }
}

/// Every example compiles (on the fake machine, with `-S timer`, one
/// `--pmu` counter and `--unsafe` for the built-ins that need them).
#[test]
fn every_example_compiles() {
    let options = CompileOptions {
        stacks: ["timer".to_string()].into(),
        pmu: parse_counters(&["cpu-cycles".to_string()]).expect("a known counter"),
        unsafe_builtins: true,
        ..CompileOptions::default()
    };
    for entry in ALL.iter() {
        let source = Source {
            name: "example.bt".into(),
            text: entry.example.into(),
            origin: RecordOrigin::Script,
        };
        if let Err(errors) = driver::compile(&[source], &[], &FakeMachine, &options) {
            panic!("{}: {}\n{}", entry.name, entry.example, errors.render());
        }
    }
}

/// Lookups honour how a built-in is written and where it stands, and find
/// indexed names with their number.
#[test]
fn lookups() {
    assert!(expression("pid", false).is_some());
    assert!(expression("pid", true).is_none());
    assert!(expression("str", false).is_none());
    assert_eq!(expression("arg12", false).map(|f| f.index), Some(12));
    assert!(expression("arg", false).is_none());
    assert!(statement("printf").is_some() && expression("printf", true).is_none());
    assert!(record_item("stack", true).is_some() && record_item("ustack", true).is_none());
    assert_eq!(
        misplaced_call("hist").as_deref(),
        Some("hist() must be assigned to a map: `@x = hist(...)`")
    );
    assert_eq!(
        misplaced_call("exit").as_deref(),
        Some("exit() has no value")
    );
    assert_eq!(misplaced_call("nosuchfn"), None);
    assert!(unsupported("skboutput").is_some_and(|why| why.contains("bpf_skb_output")));
}

/// The reference lists every entry under the section of its kind.
#[test]
fn reference_lists_every_entry() {
    let text = reference();
    for entry in ALL.iter() {
        assert!(text.contains(entry.signature), "{}", entry.name);
    }
    let statements = text.find("Statements").expect("a statements section");
    let printf = text.find("printf(fmt, args...)").expect("printf");
    assert!(printf > statements, "printf is listed as a statement");
}
