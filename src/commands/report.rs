//! `headroom report DIR…`: the derived reports of finished runs, written again from their files.

use crate::cli::ReportArgs;
use crate::report::artifacts;
use crate::report::rundata::RunData;

pub fn report(args: &ReportArgs) -> anyhow::Result<i32> {
    // Every folder is checked before anything is written.
    let runs = args
        .dirs
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
    Ok(0)
}
