//! The result folder's writer: the files every producer of a result folder (`run`, `watch`,
//! `import`, a node's workers, which are runs) writes the same way: the record as it goes
//! (`records`: `timeline.csv`, `events.csv`, `alloc-log.csv`, the pollers' peaks),
//! `summary.json` (here) and the derived reports (`reports`).
//!
//! It sits above `record` (the timeline and event writers) and `report` (the summary's types
//! and the derived reports), and below the producers: `report` reads folders back and derives
//! from them, it never writes a record.

pub mod records;
pub mod reports;
mod run_folder;

pub use run_folder::{LateEnd, LateWrite, Record, RunFolder};

use std::path::Path;

use serde::Serialize;

use crate::report::summary::Summary;
use crate::report::watch::WatchSection;

/// The allocator's call log in a result folder (headroom's log format, read by `headroom
/// replay`).
pub const ALLOC_LOG: &str = "alloc-log.csv";

/// The run's record of itself in a result folder.
pub const SUMMARY: &str = "summary.json";

/// Writes the JSON file `name` into `dir` whole (atomically: a reader never sees half of it),
/// pretty-printed with a final newline: `summary.json`, a node's `node.json`, a validation's
/// `validation.json`.
pub fn write_json<T: Serialize + ?Sized>(dir: &Path, name: &str, value: &T) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    text.push(b'\n');
    crate::outdir::write_atomic(&dir.join(name), &text)
}

/// Writes `summary.json` into `dir`.
pub fn write_summary(dir: &Path, summary: &Summary) -> std::io::Result<()> {
    write_json(dir, SUMMARY, summary)
}

/// Writes a watch's `summary.json`: the run's keys and `watch`.
pub fn write_watch_summary(
    dir: &Path,
    summary: &Summary,
    watch: &WatchSection,
) -> std::io::Result<()> {
    let mut s = summary.clone();
    s.set_watch(Some(watch.clone()));
    write_summary(dir, &s)
}
