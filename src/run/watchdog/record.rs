//! A run's record when the watchdog ends it: the stuck step's row appended to `events.csv`,
//! and `summary.json` rewritten as failed (wedged, exit 2) or interrupted (130), its phases as
//! `events.csv` has them — through the folder's `LateWrite`, from the last summary written.

use std::path::{Path, PathBuf};

use crate::folder::{LateEnd, LateWrite};
use crate::record::timeline::EventRow;
use crate::report::summary::RunStatus;
use crate::run::watchdog::{Cause, Fired, OnFire};

/// The record of a run whose folder exists but whose record has not begun (stuck in the
/// idle reading or the kernels' load): nothing to keep but the message.
pub fn early_record(dir: PathBuf) -> OnFire {
    Box::new(move |_: &Fired| nothing_yet(&dir))
}

/// The record of the run writing through `late`.
pub fn run_record(late: LateWrite) -> OnFire {
    Box::new(move |f: &Fired| write(&late, f))
}

fn nothing_yet(dir: &Path) {
    // An empty folder is not left behind as a result.
    let _ = std::fs::remove_dir(dir);
    if dir.exists() {
        crate::errln!("results so far (no summary yet): {}", dir.display());
    }
}

fn write(late: &LateWrite, f: &Fired) {
    if !late.begun() {
        nothing_yet(late.dir());
        return;
    }
    late.end(LateEnd {
        status: match f.cause {
            Cause::Wedged => RunStatus::Failed,
            Cause::Interrupted => RunStatus::Interrupted,
        },
        detail: &f.detail,
        exit_code: f.exit_code(),
        row: EventRow {
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
        },
    });
    crate::errln!("results so far: {}", late.dir().display());
}
