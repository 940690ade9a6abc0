//! The reports written next to a run's CSVs once it has finished, each derived only from the
//! run's own files (so `headroom report DIR` can write them again at any time).
//!
//! One small trait, one file per format: adding a format is one more entry in `ALL`.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::outdir::write_atomic;
use crate::report::deadline::{Deadline, OutOfTime};
use crate::report::rundata::{ORIGINAL_FILES, RunData};
use crate::report::summary::Summary;
use crate::report::{junit, markdown, plot, trace};

/// One derived report of a run.
pub trait Artifact: Sync {
    /// The file it is written to, inside the run folder.
    fn file_name(&self) -> &'static str;
    /// Its content.
    fn render(&self, run: &RunData) -> anyhow::Result<Vec<u8>>;
}

struct Svg;
struct Png;
struct Trace;
struct Markdown;
struct Junit;

impl Artifact for Svg {
    fn file_name(&self) -> &'static str {
        "timeline.svg"
    }
    fn render(&self, run: &RunData) -> anyhow::Result<Vec<u8>> {
        Ok(plot::svg::render(&plot::scene(run)).into_bytes())
    }
}

impl Artifact for Png {
    fn file_name(&self) -> &'static str {
        "timeline.png"
    }
    fn render(&self, run: &RunData) -> anyhow::Result<Vec<u8>> {
        plot::png::render(&plot::scene(run))
    }
}

impl Artifact for Trace {
    fn file_name(&self) -> &'static str {
        "trace.json"
    }
    fn render(&self, run: &RunData) -> anyhow::Result<Vec<u8>> {
        trace::render(run)
    }
}

impl Artifact for Markdown {
    fn file_name(&self) -> &'static str {
        "report.md"
    }
    fn render(&self, run: &RunData) -> anyhow::Result<Vec<u8>> {
        Ok(markdown::render(run).into_bytes())
    }
}

impl Artifact for Junit {
    fn file_name(&self) -> &'static str {
        "junit.xml"
    }
    fn render(&self, run: &RunData) -> anyhow::Result<Vec<u8>> {
        Ok(junit::render(run).into_bytes())
    }
}

/// Every derived report, in the order they are written.
pub const ALL: &[&dyn Artifact] = &[&Markdown, &Junit, &Trace, &Svg, &Png];

/// Writes every derived report of a run into `dir`, reading its CSVs from there. Each report
/// is tried even when another fails; the error names every one that could not be written.
pub fn write_all(dir: &Path, summary: &Summary) -> anyhow::Result<Vec<PathBuf>> {
    let run = RunData::with_summary(dir, summary.clone())?;
    write_run(&run)
}

/// What `write_within` did: the reports it wrote, and the ones it left for `headroom report`.
#[derive(Debug, Default)]
pub struct WrittenWithin {
    pub written: Vec<&'static str>,
    pub skipped: Vec<&'static str>,
}

/// Writes the derived reports of a run that was interrupted, in `ALL`'s order (the cheap text
/// reports first), starting none after `deadline` and giving up the one under way when it
/// passes (a report over every event checks it as it reads them); `on_start` hears each file
/// as it begins.
/// The run's own files are already complete: what is skipped `headroom report DIR` writes.
pub fn write_within(
    dir: &Path,
    summary: &Summary,
    deadline: Deadline,
    mut on_start: impl FnMut(&'static str),
) -> anyhow::Result<WrittenWithin> {
    let mut out = WrittenWithin::default();
    let all = || ALL.iter().map(|a| a.file_name());
    let run = match RunData::with_summary_by(dir, summary.clone(), deadline) {
        Ok(run) => run,
        Err(e) if e.downcast_ref::<OutOfTime>().is_some() => {
            out.skipped.extend(all());
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    let mut failed = Vec::new();
    for a in ALL {
        if deadline.passed() {
            out.skipped.push(a.file_name());
            continue;
        }
        on_start(a.file_name());
        match write_one(&run, *a) {
            Ok(_) => out.written.push(a.file_name()),
            // Stopped part-way by the deadline (a report over every event): left undone.
            Err(e) if e.downcast_ref::<OutOfTime>().is_some() => out.skipped.push(a.file_name()),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    Ok(out)
}

fn write_one(run: &RunData, a: &dyn Artifact) -> anyhow::Result<PathBuf> {
    debug_assert!(!ORIGINAL_FILES.contains(&a.file_name()));
    let path = run.dir.join(a.file_name());
    a.render(run)
        .and_then(|bytes| write_atomic(&path, &bytes).map_err(Into::into))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Writes every derived report of a loaded run into its folder (never an original file).
pub fn write_run(run: &RunData) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut failed = Vec::new();
    for a in ALL {
        match write_one(run, *a) {
            Ok(path) => written.push(path),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    Ok(written)
}
