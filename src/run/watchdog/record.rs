//! A run's record when the watchdog ends it: the stuck step's row appended to `events.csv`,
//! and `summary.json` rewritten as failed (wedged, exit 2) or interrupted (130), its phases as
//! `events.csv` has them — through the folder's `LateWrite`, from the last summary written.

use std::path::{Path, PathBuf};
use std::time::Instant;

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

/// The record of a watch writing through `late`, whose clock began at `origin`: the run's
/// (the stuck call's row at the watch's time, named), then the derived reports from the
/// folder as it now is (the readings so far, the job's exit when it had exited).
pub fn watch_record(late: LateWrite, origin: Instant) -> OnFire {
    Box::new(move |f: &Fired| {
        let mut at = f.clone();
        at.t_ns = origin.elapsed().as_nanos() as u64;
        if at.op.is_empty() {
            at.op = "call".into();
            at.name = f.call.unwrap_or_default().into();
        }
        write(&late, &at);
        if late.begun() {
            let reports = crate::report::rundata::RunData::load(late.dir())
                .and_then(|run| crate::report::artifacts::write_run(&run));
            if let Err(e) = reports {
                crate::errln!(
                    "warning: the reports were not written ({e:#}); `headroom report {}` writes them",
                    late.dir().display()
                );
            }
        }
    })
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
