//! `headroom report DIR…`: the derived reports of finished runs, written again from their files.
//!
//! A folder whose run never finished (killed, its disk full: `summary.json` still says
//! `running`, or a CSV ends mid-row) gets no report that would look like a result: headroom
//! says it is incomplete, what its `events.csv` and `timeline.csv` hold (steps done per phase,
//! the peaks so far), and exits 2.

use std::path::Path;

use crate::cli::ReportArgs;
use crate::report::artifacts;
use crate::report::complete::{describe, incomplete_reasons};
use crate::report::progress::{events_progress, timeline_progress};
use crate::report::rundata::{RunData, load_summary};
use crate::units::{Bytes, Nanos};

pub fn report(args: &ReportArgs) -> anyhow::Result<i32> {
    // Nothing is held: a signal ends the process at once (each report file is written whole).
    let _reading = crate::signals::loading();
    let (incomplete, finished): (Vec<&Path>, Vec<&Path>) = args
        .dirs
        .iter()
        .map(|d| d.as_path())
        // A summary that is not one headroom wrote is refused by the load, with its reason.
        .partition(|d| load_summary(d).is_ok() && !incomplete_reasons(d).is_empty());
    // Every finished folder is checked before anything is written.
    let runs = finished
        .iter()
        .map(|d| RunData::load(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for run in &runs {
        let written = artifacts::write_run(run)?;
        let names: Vec<String> = written
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        crate::outln!("{}: {}", run.dir.display(), names.join(", "))?;
    }
    // A refusal, with what the folder holds: on standard error, so that standard output
    // holds only what was written.
    for dir in &incomplete {
        crate::output::eprint(&incomplete_report(dir));
    }
    Ok(if incomplete.is_empty() { 0 } else { 2 })
}

/// What an unfinished folder holds, in words, with raw byte counts beside the human sizes.
pub fn incomplete_report(dir: &Path) -> String {
    let mut out = format!(
        "{}: incomplete, no report written: {}\n",
        dir.display(),
        describe(&incomplete_reasons(dir))
    );
    match events_progress(&dir.join("events.csv")) {
        Ok(phases) if phases.is_empty() => out.push_str("  events.csv holds no step\n"),
        Ok(phases) => {
            let rows: u64 = phases.iter().map(|p| p.rows).sum();
            out.push_str(&format!("  events.csv holds {rows} rows:\n"));
            for p in phases {
                out.push_str(&format!(
                    "    phase {:?}: {} steps done, {} rows, the last {}\n",
                    p.name, p.actions_done, p.rows, p.last_result
                ));
            }
        }
        Err(e) => out.push_str(&format!("  events.csv: {e:#}\n")),
    }
    match timeline_progress(&dir.join("timeline.csv")) {
        Ok(t) => {
            out.push_str(&format!(
                "  timeline.csv holds {} readings, up to {}",
                t.rows,
                Nanos(t.last_t_ns)
            ));
            if let Some(b) = t.peak_device_used_bytes {
                out.push_str(&format!(
                    "; peak device used so far {b} bytes ({})",
                    Bytes(b)
                ));
            }
            if let Some(b) = t.peak_own_bytes {
                out.push_str(&format!("; peak own {b} bytes ({})", Bytes(b)));
            }
            out.push('\n');
        }
        Err(e) => out.push_str(&format!("  timeline.csv: {e:#}\n")),
    }
    out
}
