//! The derived reports of a result folder (`report.md`, the plots, `trace.json`,
//! `junit.xml`), written from its record by `report::artifacts` once the record is on disk.

use std::path::Path;
use std::time::Duration;

use crate::report::deadline::Deadline;
use crate::report::rundata::RunData;
use crate::report::summary::Summary;
use crate::report::watch::WatchSection;

/// After Ctrl-C, how long the derived reports may take: whoever pressed it wants out.
pub const INTERRUPTED_REPORTS_BUDGET: Duration = Duration::from_millis(500);

/// Every derived report of the folder `dir` whose record `summary` completes; a signal
/// meanwhile stops them (the record is on disk: nothing is lost), naming the ones not written.
pub fn write(dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    let done =
        crate::report::artifacts::write_within(dir, summary, Deadline::none().or_signal(), |_| {})?;
    if !done.skipped.is_empty() {
        crate::errln!(
            "interrupted: a signal came while the reports were written; the run is {} as \
             recorded, {} not written (`headroom report {}` writes them)",
            crate::report::markdown::status_name(summary),
            done.skipped.join(", "),
            dir.display()
        );
    }
    Ok(())
}

/// The derived reports of a watch: the run's and the `watch` section's.
pub fn write_watch(dir: &Path, summary: &Summary, watch: &WatchSection) -> anyhow::Result<()> {
    let mut run = RunData::with_summary(dir, summary.clone())?;
    run.watch = Some(watch.clone());
    crate::report::artifacts::write_run(&run).map(|_| ())
}

/// The derived reports of an interrupted run, each said on stderr as it starts, none started
/// past the budget; the ones skipped are named with the command that writes them.
pub fn write_interrupted(dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    let deadline = Deadline::after(INTERRUPTED_REPORTS_BUDGET);
    let done = crate::report::artifacts::write_within(dir, summary, deadline, |file| {
        crate::errln!("interrupted: writing {file}");
    })?;
    if !done.skipped.is_empty() {
        crate::errln!(
            "interrupted: skipped {} (more than {} ms; `headroom report {}` writes them)",
            done.skipped.join(", "),
            INTERRUPTED_REPORTS_BUDGET.as_millis(),
            dir.display()
        );
    }
    Ok(())
}
