//! A whole node: every GPU (or a list of them) at once, one worker process per GPU, and a node
//! summary of its own next to the workers' result folders.
//!
//! `--device all` (or `0,2,5`) on `run`, `validate`, `bandwidth` and `calibrate` starts one
//! `headroom … --device N` child per GPU, each writing its usual result into
//! `NODE/gpu<index>-<uuid prefix>/`. A worker that dies is a failed GPU, not a failed node; a
//! GPU another process uses is skipped unless `--shared-ok`. `node.json` and `node.md` hold one
//! row per GPU, the spread across GPUs and the GPUs that differ from the others; the node exits
//! with the worst worker's code.

pub mod flags;
pub mod instances;
pub mod inventory;
pub mod launch;
pub mod render;
pub mod results;
pub mod safety;
pub mod summary;
pub mod workers;

pub use launch::{NodeJob, run_node};
