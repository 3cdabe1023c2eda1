//! Parser tests.

use super::*;

/// Placeholder.
#[test]
fn smoke() {
    let script = parse("BEGIN { printf(\"hi\\n\"); }", "x").unwrap();
    assert_eq!(script.probes.len(), 1);
}
