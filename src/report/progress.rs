//! What a run's CSVs hold, read back when `summary.json` cannot say: the run was killed, or
//! the watchdog ended it inside a step. Both files are streamed (a killed run's `events.csv`
//! may hold millions of rows).

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;

use crate::report::summary::{PhaseStatus, Summary};

/// One phase as `events.csv` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseProgress {
    pub name: String,
    /// Steps with a row that ran to their end (a fill's members count as their one step).
    pub actions_done: u64,
    pub rows: u64,
    /// The result of its last row (`ok`, `oom`, `wedged`, …).
    pub last_result: String,
    /// The time of its first and last rows (`None`: a row without one).
    pub first_t_ns: Option<u64>,
    pub last_t_ns: Option<u64>,
}

/// Results that mean the step did not run to its end.
const UNFINISHED: [&str; 3] = ["wedged", "interrupted", "stopped"];

/// The phases of `events.csv` in the order their first rows appear.
pub fn events_progress(path: &Path) -> anyhow::Result<Vec<PhaseProgress>> {
    let mut r = crate::bounded::csv_reader(
        path,
        crate::bounded::EVENTS_LINE_MAX_BYTES,
        csv::ReaderBuilder::new().flexible(true),
    )
    .with_context(|| format!("cannot read {}", path.display()))?;
    let headers = r.headers()?.clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("{}: no {name:?} column", path.display()))
    };
    let (phase_col, step_col, result_col) = (col("phase")?, col("step")?, col("result")?);
    let t_col = col("t_ns")?;
    let mut out: Vec<PhaseProgress> = Vec::new();
    let mut done: HashSet<(usize, String)> = HashSet::new();
    let mut rec = csv::StringRecord::new();
    // A row cut short by a kill ends the reading, not the report.
    while r.read_record(&mut rec).unwrap_or(false) {
        let (Some(phase), Some(step), Some(result)) =
            (rec.get(phase_col), rec.get(step_col), rec.get(result_col))
        else {
            break;
        };
        let i = match out.iter().position(|p| p.name == phase) {
            Some(i) => i,
            None => {
                out.push(PhaseProgress {
                    name: phase.to_string(),
                    actions_done: 0,
                    rows: 0,
                    last_result: String::new(),
                    first_t_ns: None,
                    last_t_ns: None,
                });
                out.len() - 1
            }
        };
        let p = &mut out[i];
        p.rows += 1;
        p.last_result = result.to_string();
        let t_ns = rec.get(t_col).and_then(|t| t.parse::<u64>().ok());
        p.first_t_ns = p.first_t_ns.or(t_ns);
        p.last_t_ns = t_ns.or(p.last_t_ns);
        let top = step.split('.').next().unwrap_or(step);
        if !UNFINISHED.contains(&result) && !top.is_empty() && done.insert((i, top.to_string())) {
            p.actions_done += 1;
        }
    }
    Ok(out)
}

/// Sets the phases of `summary` that it left pending or running to what `events.csv` holds:
/// the phase the run stopped in is `stopped` with its steps done and the times of its first
/// and last rows (where the summary has none); phases after it `skipped`.
pub fn apply_events(summary: &mut Summary, progress: &[PhaseProgress]) {
    let last_seen = summary
        .phases
        .iter()
        .rposition(|ps| progress.iter().any(|p| p.name == ps.name));
    for (i, ps) in summary.phases.iter_mut().enumerate() {
        if !matches!(ps.status, PhaseStatus::Pending | PhaseStatus::Running) {
            continue;
        }
        match progress.iter().find(|p| p.name == ps.name) {
            Some(p) => {
                ps.actions_run = p.actions_done;
                ps.status = PhaseStatus::Stopped;
                ps.start_ns = ps.start_ns.or(p.first_t_ns);
                ps.end_ns = ps.end_ns.or(p.last_t_ns);
            }
            None if last_seen.is_some_and(|l| i > l) => ps.status = PhaseStatus::Skipped,
            None => {}
        }
    }
}

/// What `timeline.csv` holds: its rows and the highest device use and own bytes in them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimelineProgress {
    pub rows: u64,
    pub last_t_ns: u64,
    pub peak_device_used_bytes: Option<u64>,
    pub peak_own_bytes: Option<u64>,
}

pub fn timeline_progress(path: &Path) -> anyhow::Result<TimelineProgress> {
    let mut r = crate::bounded::csv_reader(
        path,
        crate::bounded::TABLE_LINE_MAX_BYTES,
        csv::ReaderBuilder::new().flexible(true),
    )
    .with_context(|| format!("cannot read {}", path.display()))?;
    let headers = r.headers()?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let (t_col, used_col, own_col) = (col("t_ns"), col("device_used_bytes"), col("own_bytes"));
    let mut out = TimelineProgress::default();
    let mut rec = csv::StringRecord::new();
    let num = |rec: &csv::StringRecord, c: Option<usize>| -> Option<u64> {
        c.and_then(|c| rec.get(c)).and_then(|v| v.parse().ok())
    };
    while r.read_record(&mut rec).unwrap_or(false) {
        if rec.len() != headers.len() {
            break;
        }
        out.rows += 1;
        out.last_t_ns = num(&rec, t_col).unwrap_or(out.last_t_ns);
        if let Some(v) = num(&rec, used_col) {
            out.peak_device_used_bytes = Some(out.peak_device_used_bytes.map_or(v, |p| p.max(v)));
        }
        if let Some(v) = num(&rec, own_col) {
            out.peak_own_bytes = Some(out.peak_own_bytes.map_or(v, |p| p.max(v)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_counted_per_phase_once_each_and_unfinished_ones_left_out() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("events.csv");
        std::fs::write(
            &p,
            "t_ns,phase,step,op,result\n1,a,s1,allocate,ok\n2,a,s2,fill_device,ok\n\
             3,a,s2.1,allocate,ok\n4,a,s2.2,allocate,full\n5,b,s1,allocate,ok\n\
             6,b,s2,synchronize,wedged\n7,b,s3,fr",
        )
        .unwrap();
        let got = events_progress(&p).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].actions_done, got[0].rows), (2, 4));
        assert_eq!((got[1].actions_done, got[1].rows), (1, 2));
        assert_eq!(got[1].last_result, "wedged");
    }
}
