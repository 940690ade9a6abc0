//! What a run hands back: `summary.json` and the summary table on the terminal.

pub mod artifacts;
pub mod graphs;
pub mod summary;
pub mod table;
