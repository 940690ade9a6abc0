//! `headroom crosscheck`: the same workloads on the real GPU and on the simulator with the
//! calibrated profile, side by side — per workload and view, real peak vs simulated peak, and
//! whether the OOM outcomes agree.
//!
//! Agreement means within 1% of the device total or 64 MiB, whichever is larger.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::record::View;
use crate::report::summary::Summary;
use crate::text_table::{Align, TextTable};
use crate::units::{Bytes, MIB, SignedBytes};

/// One workload and view.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Row {
    pub workload: String,
    pub view: String,
    pub real_peak_bytes: Option<u64>,
    pub sim_peak_bytes: Option<u64>,
    /// sim − real.
    pub difference_bytes: Option<i64>,
    /// |difference| as a percentage of the real device's total.
    pub difference_pct_of_total: Option<f64>,
    pub tolerance_bytes: u64,
    pub within_tolerance: bool,
}

/// One workload's OOM outcome on both.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Outcome {
    pub workload: String,
    /// `none`, `phase/step` of the first OOM, or `skipped`.
    pub real_oom: String,
    pub sim_oom: String,
    pub agree: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Crosscheck {
    pub rows: Vec<Row>,
    pub outcomes: Vec<Outcome>,
    /// Workloads that ran on only one side.
    pub unpaired: Vec<String>,
}

impl Crosscheck {
    pub fn all_agree(&self) -> bool {
        self.rows.iter().all(|r| r.within_tolerance)
            && self.outcomes.iter().all(|o| o.agree)
            && self.unpaired.is_empty()
    }
}

/// The views compared: what the device shows and what the run took from it.
const VIEWS: [View; 4] = [
    View::DeviceUsed,
    View::OwnBytes,
    View::AllocReserved,
    View::PoolReserved,
];

fn load_runs(dir: &Path) -> anyhow::Result<BTreeMap<String, (PathBuf, Summary)>> {
    let mut runs = BTreeMap::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for e in entries {
        let path = e?.path();
        let file = path.join("summary.json");
        if !file.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let s: Summary = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a headroom summary", file.display()))?;
        runs.insert(s.workload().name.clone(), (path, s));
    }
    anyhow::ensure!(
        !runs.is_empty(),
        "{}: holds no run folders (folders with a summary.json)",
        dir.display()
    );
    Ok(runs)
}

/// `none`, `phase/step` of the first OOM, or `skipped` (the workload did not fit the device).
fn first_oom(s: &Summary) -> String {
    if s.status() == crate::report::summary::RunStatus::Skipped {
        return "skipped".into();
    }
    s.ooms()
        .first()
        .map_or("none".to_string(), |o| format!("{}/{}", o.phase, o.step))
}

/// Pairs the runs under `real_dir` and `sim_dir` by workload name and compares them.
pub fn crosscheck(real_dir: &Path, sim_dir: &Path) -> anyhow::Result<Crosscheck> {
    let real = load_runs(real_dir)?;
    let sim = load_runs(sim_dir)?;
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();
    let mut unpaired: Vec<String> = real
        .keys()
        .filter(|k| !sim.contains_key(*k))
        .cloned()
        .collect();
    unpaired.extend(sim.keys().filter(|k| !real.contains_key(*k)).cloned());
    for (name, (_, r)) in &real {
        let Some((_, s)) = sim.get(name) else {
            continue;
        };
        let total = r.device().total_bytes;
        let tolerance_bytes = (total / 100).max(64 * MIB);
        for v in VIEWS {
            let rp = r.peaks().run.get(v.key()).map(|p| p.bytes);
            let sp = s.peaks().run.get(v.key()).map(|p| p.bytes);
            if rp.is_none() && sp.is_none() {
                continue;
            }
            let diff = match (rp, sp) {
                (Some(a), Some(b)) => Some(b as i64 - a as i64),
                _ => None,
            };
            rows.push(Row {
                workload: name.clone(),
                view: v.key().to_string(),
                real_peak_bytes: rp,
                sim_peak_bytes: sp,
                difference_bytes: diff,
                difference_pct_of_total: diff
                    .map(|d| d.unsigned_abs() as f64 * 100.0 / total as f64),
                tolerance_bytes,
                within_tolerance: diff.is_some_and(|d| d.unsigned_abs() <= tolerance_bytes),
            });
        }
        let (ro, so) = (first_oom(r), first_oom(s));
        outcomes.push(Outcome {
            workload: name.clone(),
            agree: ro == so,
            real_oom: ro,
            sim_oom: so,
        });
    }
    Ok(Crosscheck {
        rows,
        outcomes,
        unpaired,
    })
}

pub fn render(c: &Crosscheck) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let cell = |v: Option<u64>| v.map_or("-".to_string(), |b| Bytes(b).to_string());
    let mut peaks = TextTable::new(&[
        ("workload", Align::Left),
        ("view", Align::Left),
        ("real peak", Align::Right),
        ("sim peak", Align::Right),
        ("sim − real", Align::Right),
        ("% total", Align::Right),
        ("agree", Align::Left),
    ]);
    for r in &c.rows {
        peaks.row([
            r.workload.clone(),
            r.view.clone(),
            cell(r.real_peak_bytes),
            cell(r.sim_peak_bytes),
            r.difference_bytes
                .map_or("-".into(), |d| SignedBytes(d as i128).to_string()),
            r.difference_pct_of_total
                .map_or("-".into(), |p| format!("{p:.2}")),
            (if r.within_tolerance { "yes" } else { "NO" }).to_string(),
        ]);
    }
    o.push_str(&peaks.render());
    let _ = writeln!(o);
    let mut ooms = TextTable::new(&[
        ("workload", Align::Left),
        ("OOM on the GPU", Align::Left),
        ("OOM on the simulator", Align::Left),
        ("agree", Align::Left),
    ]);
    for x in &c.outcomes {
        ooms.row([
            x.workload.clone(),
            x.real_oom.clone(),
            x.sim_oom.clone(),
            (if x.agree { "yes" } else { "NO" }).to_string(),
        ]);
    }
    o.push_str(&ooms.render());
    for u in &c.unpaired {
        let _ = writeln!(o, "ran on one side only: {u}");
    }
    o
}

/// The rows as CSV (raw bytes).
pub fn to_csv(c: &Crosscheck) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in &c.rows {
        w.serialize(r)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}
