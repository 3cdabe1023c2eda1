//! Why captures cannot be compared, or a gate not evaluated: each error names
//! the captures or the expression, and says what to do.

use std::path::PathBuf;

use crate::analysis::gate::GateError;

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum CompareError {
    /// A capture is damaged or was cut short: its metrics would be partial.
    #[error("cannot compare {}: {damage}; record it again", path.display())]
    Damaged { path: PathBuf, damage: String },
    /// Two captures were made by different scripts.
    #[error(
        "{} and {} were recorded with different scripts ({first} and {second}); \
         pass --allow-different-scripts to compare the metrics they share",
        first_path.display(),
        second_path.display()
    )]
    DifferentScripts {
        first_path: PathBuf,
        first: String,
        second_path: PathBuf,
        second: String,
    },
    /// `--paired` with sides of different sizes.
    #[error(
        "--paired needs as many baseline captures as candidate captures, one pair per run \
         (got {baseline} baseline and {candidate} candidate captures)"
    )]
    Unpaired { baseline: usize, candidate: usize },
    /// A gate names a metric the comparison does not have, or cannot be
    /// evaluated.
    #[error(transparent)]
    Gate(#[from] GateError),
}
