//! A run's record when the watchdog ends it: the stuck step's row appended to `events.csv`,
//! and `summary.json` rewritten as failed (wedged, exit 2) or interrupted (130), its phases as
//! `events.csv` has them.

use std::path::{Path, PathBuf};

use crate::record::timeline::{EventRow, append_event_row};
use crate::report::summary::{RunStatus, Summary};
use crate::run::watchdog::{Cause, Fired, OnFire};
use crate::units::utc_timestamp;

/// The record of the run writing into `dir`.
pub fn run_record(dir: PathBuf) -> OnFire {
    Box::new(move |f: &Fired| write(&dir, f))
}

fn write(dir: &Path, f: &Fired) {
    if !dir.join("summary.json").is_file() {
        // Stuck before the record began (the idle reading, the kernels' load): nothing
        // to keep but the message; an empty folder is not left behind as a result.
        let _ = std::fs::remove_dir(dir);
        if dir.exists() {
            crate::errln!("results so far (no summary yet): {}", dir.display());
        }
        return;
    }
    let row = EventRow {
        t_ns: f.t_ns,
        phase: &f.phase,
        step: &f.step,
        op: &f.op,
        name: &f.name,
        stream: &f.stream,
        requested_bytes: None,
        size_bytes: None,
        latency_ns: f.waited_ns,
        result: f.result(),
        device_free_bytes: None,
        detail: &f.detail,
    };
    if let Err(e) = append_event_row(&dir.join("events.csv"), &row) {
        crate::errln!("warning: recording the stuck call in events.csv: {e}");
    }
    if let Err(e) = mark_summary(dir, f) {
        crate::errln!("warning: recording the stuck call in summary.json: {e:#}");
    }
    crate::errln!("results so far: {}", dir.display());
}

/// Rewrites the last `summary.json` with the watchdog's finding and the phases as
/// `events.csv` has them.
fn mark_summary(dir: &Path, f: &Fired) -> anyhow::Result<()> {
    let path = dir.join("summary.json");
    let text = std::fs::read(&path)?;
    let mut s: Summary = serde_json::from_slice(&text)?;
    s.status = match f.cause {
        Cause::Wedged => RunStatus::Failed,
        Cause::Interrupted => RunStatus::Interrupted,
    };
    s.status_detail = Some(f.detail.clone());
    s.exit_code = Some(f.exit_code());
    s.finished_utc = Some(utc_timestamp(std::time::SystemTime::now()));
    match crate::report::progress::events_progress(&dir.join("events.csv")) {
        Ok(p) => crate::report::progress::apply_events(&mut s, &p),
        Err(e) => crate::errln!("warning: reading events.csv back: {e:#}"),
    }
    crate::folder::write_summary(dir, &s)?;
    Ok(())
}
