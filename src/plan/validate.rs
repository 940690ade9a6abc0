//! Checking a plan on the device: the planned count run for real, the memory the plan did not
//! name measured, and the real admission limit found by probing request counts.
//!
//! Each probe is an ordinary run (`run_on`) of the plan's workload at one request count, in its
//! own folder under the validation's folder. Probes allow OOM: an OOM is an outcome to record,
//! not a reason to stop short at the free-memory floor. A probe is *admitted* when it completes
//! and the device still has the plan's margin free at the run's true peak. Because more requests
//! only ever add memory, the outcome is monotone in the count, so the limit is found by
//! bisection, starting next to where whole-page arithmetic says it should be.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::device::prelude::*;

use crate::device::NvmlMemory;
use crate::plan::budget::Budget;
use crate::plan::file::{CapacitySource, Plan};
use crate::plan::probe::ProbeShape;
use crate::record::View;
use crate::report::summary::{PlanMarks, RunStatus, Summary};
use crate::run::{RunOptions, default_keep_free, run_on};
use crate::workload::Workload;

pub use crate::plan::findings::{
    Admission, CategoryRow, Outcome, PlanReport, PlannedRun, ProbeRecord, Unnamed, Validation,
    ViewRow,
};
use crate::plan::findings::{measure, unnamed};

/// 2: `claims` added (the top-level junit.xml's test cases).
pub const FORMAT_VERSION: u32 = 2;

/// The most KV allocations a probe may make: beyond this, per-block probing is too slow to be
/// useful and the plan's blocks are too small for the device.
pub const MAX_PROBE_ALLOCATIONS: u64 = 500_000;

/// A plan with its arithmetic done against a device, ready to run.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub plan: Plan,
    pub budget: Budget,
    /// The count validated: the claimed concurrency, else the arithmetic's count.
    pub planned_requests: u64,
    pub probe: ProbeShape,
}

impl Resolved {
    /// Does the arithmetic (capacity: the plan's, else `device_total_bytes`) and lays the KV
    /// out in the shape's blocks. Errors show the arithmetic that failed.
    pub fn new(plan: &Plan, device_total_bytes: u64) -> anyhow::Result<Resolved> {
        let plan = &plan.at_capacity(device_total_bytes);
        let budget = crate::plan::budget_for(plan, Some(device_total_bytes))?;
        let (blocks_per_request, block_bytes) =
            plan.blocks_per_request().map_err(anyhow::Error::msg)?;
        let shape = plan
            .shape
            .as_ref()
            .expect("blocks_per_request needs a shape");
        let probe = ProbeShape {
            plan_name: plan.name.clone(),
            plan_file: plan
                .file
                .as_ref()
                .map_or("flags".into(), |f| f.display().to_string()),
            weights_bytes: plan.weights_bytes,
            weight_tensors: shape.weight_tensors,
            other_peak_bytes: plan.other_peak_bytes,
            blocks_per_request,
            block_bytes,
            min_headroom_bytes: plan.margin_bytes,
            allocator: plan.allocator.clone(),
        };
        let planned_requests = plan.claimed_concurrency().unwrap_or(budget.requests);
        // The search stays at or below the planned count and the bound.
        let most_requests = planned_requests.max(probe.bound(device_total_bytes));
        let most = most_requests.saturating_mul(blocks_per_request);
        if most > MAX_PROBE_ALLOCATIONS {
            bail!(
                "probing up to {most_requests} requests of {blocks_per_request} blocks is {most} KV allocations, more than the {MAX_PROBE_ALLOCATIONS} a probe may make; use larger blocks (block_tokens) or a smaller claim"
            );
        }
        Ok(Resolved {
            planned_requests,
            budget,
            probe,
            plan: plan.clone(),
        })
    }
}

/// The open device the probes run on, and how to talk to the person watching.
pub struct Session<'d> {
    pub device: &'d mut dyn Device,
    pub before_context: Option<NvmlMemory>,
    pub interrupted: Arc<AtomicBool>,
    /// One line per probe on stderr as it finishes.
    pub progress: bool,
}

/// Ctrl-C stopped a probe; the command exits 130.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by Ctrl-C")]
pub struct Interrupted;

struct ProbeRun {
    record: ProbeRecord,
    summary: Summary,
}

struct Prober<'a, 'd> {
    s: &'a mut Session<'d>,
    r: &'a Resolved,
    dir: &'a Path,
    marks: PlanMarks,
    runs: BTreeMap<u64, ProbeRun>,
}

impl Prober<'_, '_> {
    /// Runs the workload with `n` requests (once; later calls return the recorded outcome).
    fn run(&mut self, n: u64) -> anyhow::Result<bool> {
        if let Some(p) = self.runs.get(&n) {
            return Ok(p.record.outcome.admitted());
        }
        let name = format!("requests-{n:04}");
        let pdir = self.dir.join(&name);
        std::fs::create_dir_all(&pdir)
            .with_context(|| format!("cannot create {}", pdir.display()))?;
        let wl_path = pdir.join("workload.toml");
        std::fs::write(&wl_path, self.r.probe.workload_toml(n))
            .with_context(|| format!("cannot write {}", wl_path.display()))?;
        let total = self.s.device.info().total_bytes;
        let wl = Workload::load(&wl_path, total).map_err(|e| anyhow::anyhow!("{e}"))?;
        let opts = RunOptions {
            out_dir: Some(pdir.clone()),
            results_root: self.dir.to_path_buf(),
            interrupted: self.s.interrupted.clone(),
            plan: Some(self.marks.clone()),
            ..RunOptions::default()
        };
        let report = run_on(&wl, &mut *self.s.device, self.s.before_context, &opts)
            .with_context(|| format!("the probe with {n} requests ({})", pdir.display()))?;
        let sm = report.summary;
        let peak = |v: View| sm.peaks().run.get(v.key()).map(|p| p.bytes);
        let headroom = sm.peaks().headroom_at_peak_bytes;
        let margin = self.r.plan.margin_bytes;
        let outcome = match sm.status() {
            RunStatus::Interrupted => return Err(Interrupted.into()),
            RunStatus::Oom => {
                let o = sm.ooms().first();
                Outcome::Oom {
                    at: o.map_or("?".into(), |o| format!("{}/{}", o.phase, o.step)),
                    requested_bytes: o.map_or(0, |o| o.requested_bytes),
                }
            }
            RunStatus::Completed => match headroom {
                Some(h) if h >= margin => Outcome::Admitted,
                h => Outcome::MarginViolated {
                    free_at_peak_bytes: h.unwrap_or(0),
                    short_by_bytes: margin - h.unwrap_or(0).min(margin),
                },
            },
            other => bail!(
                "the probe with {n} requests could not run (status {}): {} (see {})",
                crate::report::word(&other),
                sm.status_detail().clone().unwrap_or_default(),
                pdir.display()
            ),
        };
        let record = ProbeRecord {
            requests: n,
            dir: name,
            device_used_peak_bytes: peak(View::DeviceUsed),
            own_peak_bytes: peak(View::OwnBytes),
            headroom_at_peak_bytes: headroom,
            below_floor: headroom.is_none_or(|h| h < default_keep_free(total)),
            outcome,
        };
        if self.s.progress {
            crate::errln!(
                "  {n:>5} requests: {}{}",
                record.outcome.word(),
                headroom.map_or(String::new(), |h| format!(
                    ", {} free at the peak",
                    crate::units::Bytes(h)
                ))
            );
        }
        let admitted = record.outcome.admitted();
        self.runs.insert(
            n,
            ProbeRun {
                record,
                summary: sm,
            },
        );
        Ok(admitted)
    }
}

/// The search's result: the largest admitted and the smallest failed count probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, schemars::JsonSchema)]
pub struct Limit {
    pub admitted: Option<u64>,
    pub first_failure: Option<u64>,
}

/// Finds the largest admitted count in `0..=bound`, assuming the outcome is monotone (admitted
/// below some count, failed from it on). Probes `planned` first, then `guess` and its
/// neighbour, then bisects what is left open. `bound` is a count known to fail.
pub fn search(
    planned: u64,
    guess: u64,
    bound: u64,
    probe: &mut dyn FnMut(u64) -> anyhow::Result<bool>,
) -> anyhow::Result<Limit> {
    let mut known: BTreeMap<u64, bool> = BTreeMap::new();
    let mut run = |n: u64, known: &mut BTreeMap<u64, bool>| -> anyhow::Result<bool> {
        if let Some(ok) = known.get(&n) {
            return Ok(*ok);
        }
        let ok = probe(n)?;
        known.insert(n, ok);
        Ok(ok)
    };
    let lo = |k: &BTreeMap<u64, bool>| k.iter().filter(|e| *e.1).map(|e| *e.0).max();
    let hi = |k: &BTreeMap<u64, bool>| k.iter().filter(|e| !*e.1).map(|e| *e.0).min();
    // The open interval of counts not yet settled, with -1 and bound + 1 as the sentinels.
    let open = |k: &BTreeMap<u64, bool>| {
        (
            lo(k).map_or(-1, |x| x as i128),
            hi(k).map_or(bound as i128 + 1, |x| x as i128),
        )
    };
    let inside = |k: &BTreeMap<u64, bool>, n: u64| {
        let (l, h) = open(k);
        l < n as i128 && (n as i128) < h
    };
    run(planned, &mut known)?;
    let guess = guess.min(bound);
    if inside(&known, guess) {
        run(guess, &mut known)?;
    }
    let neighbour = match known.get(&guess) {
        Some(true) => guess.checked_add(1),
        Some(false) => guess.checked_sub(1),
        None => None,
    };
    if let Some(n) = neighbour.filter(|n| inside(&known, *n)) {
        run(n, &mut known)?;
    }
    loop {
        let (l, h) = open(&known);
        if h - l <= 1 {
            break;
        }
        run(((l + h) / 2) as u64, &mut known)?;
    }
    Ok(Limit {
        admitted: lo(&known),
        first_failure: hi(&known),
    })
}

/// Validates one resolved plan on the session's device, writing probes and `validation.json`
/// into `dir`.
pub fn validate(r: &Resolved, s: &mut Session<'_>, dir: &Path) -> anyhow::Result<Validation> {
    let info = s.device.info().clone();
    let total = info.total_bytes;
    let margin = r.plan.margin_bytes;
    let n = r.planned_requests;
    let marks = PlanMarks {
        capacity_bytes: r.budget.inputs.capacity_bytes,
        margin_line_bytes: total.saturating_sub(margin),
        kv_budget_bytes: r.budget.kv_budget_bytes,
        label: format!("{}: {n} requests planned", r.plan.name),
    };
    let bound = r.probe.bound(total);
    let mut prober = Prober {
        s,
        r,
        dir,
        marks,
        runs: BTreeMap::new(),
    };
    prober.run(n)?;
    let idle_used = super::findings::idle_used(&prober.runs[&n].summary);
    let guess = r.probe.guess(total, idle_used);
    let limit = search(n, guess, bound, &mut |k| prober.run(k))?;

    let planned = &prober.runs[&n];
    let planned_run = measure(r, &planned.record, &planned.summary);
    let unnamed = unnamed(r, &planned.summary, total);
    let probes: Vec<ProbeRecord> = prober.runs.values().map(|p| p.record.clone()).collect();
    let admission = Admission {
        planned_requests: n,
        admitted_requests: limit.admitted,
        first_failure: limit
            .first_failure
            .and_then(|f| prober.runs.get(&f).map(|p| p.record.clone())),
        over_admitted_by: limit.admitted.map(|a| n as i64 - a as i64),
        bound_requests: bound,
        guess_requests: guess,
        probes,
    };
    let margin_held = match planned_run.outcome {
        Outcome::Admitted => Some(true),
        Outcome::MarginViolated { .. } => Some(false),
        Outcome::Oom { .. } => None,
    };
    let planned_admitted = planned_run.outcome.admitted();
    let plan = &r.plan;
    let mut v = Validation {
        format_version: FORMAT_VERSION,
        plan: PlanReport {
            name: plan.name.clone(),
            description: plan.description.clone(),
            file: plan.file.clone(),
            capacity_source: plan.capacity_source.unwrap_or(CapacitySource::Device),
            budget: r.budget,
            arithmetic: vec![r.budget.budget_line(), r.budget.requests_line()],
            shape: plan.shape.clone(),
            blocks_per_request: r.probe.blocks_per_request,
            block_bytes: r.probe.block_bytes,
            weight_tensors: r.probe.weight_tensor_bytes().len(),
            activations_bytes: r.probe.activations_bytes(),
            workspace_bytes: r.probe.workspace_bytes(),
        },
        device: info,
        planned_requests: n,
        planned_from: if plan.claimed_concurrency().is_some() {
            "concurrency"
        } else {
            "arithmetic"
        },
        margin_bytes: margin,
        margin_line_bytes: total.saturating_sub(margin),
        floor_bytes: default_keep_free(total),
        planned_run,
        unnamed,
        admission,
        margin_held,
        planned_admitted,
        exit_code: if planned_admitted { 0 } else { 1 },
        claims: Vec::new(),
    };
    v.claims = crate::plan::claims::claims(&v);
    write_json(dir, &v)?;
    Ok(v)
}

/// Writes `validation.json` (raw bytes throughout).
pub fn write_json<T: Serialize>(dir: &Path, v: &T) -> anyhow::Result<()> {
    crate::folder::write_json(dir, "validation.json", v)
        .with_context(|| format!("cannot write {}", dir.join("validation.json").display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_probes(planned: u64, guess: u64, bound: u64, limit: Option<u64>) -> (Limit, usize) {
        let mut seen = Vec::new();
        let l = search(planned, guess, bound, &mut |n| {
            seen.push(n);
            Ok(limit.is_some_and(|l| n <= l))
        })
        .unwrap();
        let mut uniq = seen.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), seen.len(), "no count is probed twice: {seen:?}");
        (l, seen.len())
    }

    #[test]
    fn a_good_guess_settles_in_three_probes() {
        let (l, probes) = count_probes(20, 16, 25, Some(16));
        assert_eq!((l.admitted, l.first_failure), (Some(16), Some(17)));
        assert_eq!(probes, 3);
    }

    #[test]
    fn bisection_finds_the_limit_from_any_guess() {
        for limit in [None, Some(0), Some(1), Some(7), Some(99), Some(100)] {
            for guess in [0, 5, 50, 200] {
                for planned in [0, 10, 100, 101] {
                    let (l, probes) = count_probes(planned, guess, 101, limit);
                    assert_eq!(l.admitted, limit, "{planned} {guess} {limit:?}");
                    assert_eq!(
                        l.first_failure,
                        Some(limit.map_or(0, |x| x + 1)),
                        "{planned} {guess} {limit:?}"
                    );
                    assert!(probes <= 12, "{probes}");
                }
            }
        }
    }
}
