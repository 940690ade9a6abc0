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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::device::prelude::*;

use crate::device::{DeviceInfo, NvmlMemory};
use crate::outdir;
use crate::plan::budget::Budget;
use crate::plan::file::{CapacitySource, Plan, Shape};
use crate::plan::probe::ProbeShape;
use crate::record::View;
use crate::report::summary::{PlanMarks, RunStatus, Summary};
use crate::run::{RunOptions, default_keep_free, run_on};
use crate::workload::Workload;

pub const FORMAT_VERSION: u32 = 1;

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

/// How one probe ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Outcome {
    /// Completed with at least the margin free at the true peak.
    Admitted,
    /// Completed, but less than the margin was free at the peak.
    MarginViolated {
        free_at_peak_bytes: u64,
        short_by_bytes: u64,
    },
    /// An allocation was refused (`phase/step`).
    Oom { at: String, requested_bytes: u64 },
}

impl Outcome {
    pub fn admitted(&self) -> bool {
        *self == Outcome::Admitted
    }

    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::MarginViolated { .. } => "margin violated",
            Outcome::Oom { .. } => "OOM",
        }
    }
}

/// One probe: a request count, its outcome and its peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProbeRecord {
    pub requests: u64,
    pub outcome: Outcome,
    /// The probe's run folder, relative to the validation's folder.
    pub dir: String,
    pub device_used_peak_bytes: Option<u64>,
    pub own_peak_bytes: Option<u64>,
    pub headroom_at_peak_bytes: Option<u64>,
    /// Free memory at the peak fell below the floor a run without `--allow-oom` keeps
    /// (a plain `headroom run` of this probe would have stopped before its peak).
    pub below_floor: bool,
}

/// One planned category next to what the planned run measured for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct CategoryRow {
    pub category: String,
    pub planned_bytes: u64,
    /// What the workload asked the driver and allocator for in that phase (`own_bytes`).
    pub own_bytes: Option<u64>,
    /// What device used rose by in that phase (`device_used_bytes`), rounding included.
    pub device_bytes: Option<u64>,
}

/// One view's true peak in the planned run, next to what the plan's categories add up to in
/// that view's scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ViewRow {
    pub view: String,
    pub peak_bytes: u64,
    pub planned_bytes: Option<u64>,
}

/// The planned run, measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PlannedRun {
    pub requests: u64,
    pub dir: String,
    pub status: RunStatus,
    pub outcome: Outcome,
    pub headroom_at_peak_bytes: Option<u64>,
    pub categories: Vec<CategoryRow>,
    pub views: Vec<ViewRow>,
}

/// Memory at the planned run's peak that none of the plan's categories named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Unnamed {
    /// Device used at the idle reading after the context: context, other processes, driver.
    pub idle_used_bytes: u64,
    /// What creating the context took (NVML before and after), where NVML is there.
    pub context_overhead_bytes: Option<u64>,
    /// Other processes at the idle reading, where the driver lists them.
    pub other_processes_bytes: Option<u64>,
    /// Device used at the peak − idle used − `own_bytes` at the peak: the driver's page
    /// rounding (and anything else that appeared on the device during the run).
    pub driver_rounding_bytes: i64,
    /// Allocator reserved − requested at the peak: the allocator's rounding and caching.
    pub allocator_rounding_bytes: Option<i64>,
    /// The plan's capacity − the device's CUDA-visible total: memory the plan counted that the
    /// device does not have (negative: memory the plan set aside, e.g. for the context).
    pub capacity_beyond_device_bytes: i64,
    /// The sum of the above (context and processes are inside idle used).
    pub total_bytes: i64,
    /// What the plan left beyond its margin at the planned count: KV budget − requests × KV per
    /// request. The margin holds when the unnamed total does not exceed it.
    pub plan_slack_bytes: i64,
}

/// Where admission really stops, next to the planned count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Admission {
    pub planned_requests: u64,
    /// The most requests admitted (None: not even zero fit).
    pub admitted_requests: Option<u64>,
    /// The fewest requests that failed, and how (None: none failed up to the bound).
    pub first_failure: Option<ProbeRecord>,
    /// planned − admitted: positive when the plan over-admits.
    pub over_admitted_by: Option<i64>,
    /// A count whose requested bytes alone exceed the device: failure is certain there.
    pub bound_requests: u64,
    /// Where whole-page arithmetic put the limit (where probing started).
    pub guess_requests: u64,
    pub probes: Vec<ProbeRecord>,
}

/// The plan as it was checked.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PlanReport {
    pub name: String,
    pub description: String,
    pub file: Option<PathBuf>,
    pub capacity_source: CapacitySource,
    #[serde(flatten)]
    pub budget: Budget,
    pub arithmetic: Vec<String>,
    pub shape: Option<Shape>,
    pub blocks_per_request: u64,
    pub block_bytes: u64,
    pub weight_tensors: usize,
    pub activations_bytes: u64,
    pub workspace_bytes: u64,
}

/// Everything `validation.json` holds for one plan.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Validation {
    pub format_version: u32,
    pub plan: PlanReport,
    pub device: DeviceInfo,
    pub planned_requests: u64,
    /// `concurrency` (the plan's claim) or `arithmetic`.
    pub planned_from: &'static str,
    pub margin_bytes: u64,
    /// Device total − margin: device used at the true peak must stay at or under it.
    pub margin_line_bytes: u64,
    /// The free-memory floor a run without `--allow-oom` keeps on this device.
    pub floor_bytes: u64,
    pub planned_run: PlannedRun,
    pub unnamed: Unnamed,
    pub admission: Admission,
    /// Whether the margin was free at the planned run's true peak (None: the run ended in an
    /// OOM before reaching its peak).
    pub margin_held: Option<bool>,
    pub planned_admitted: bool,
    pub exit_code: i32,
}

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
        let peak = |v: View| sm.peaks.run.get(v.key()).map(|p| p.bytes);
        let headroom = sm.peaks.headroom_at_peak_bytes;
        let margin = self.r.plan.margin_bytes;
        let outcome = match sm.status {
            RunStatus::Interrupted => return Err(Interrupted.into()),
            RunStatus::Oom => {
                let o = sm.ooms.first();
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
                "the probe with {n} requests could not run ({other:?}): {} (see {})",
                sm.status_detail.clone().unwrap_or_default(),
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
            eprintln!(
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
    let idle_used = prober.runs[&n].summary.idle.after_context.device_used_bytes;
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
    let v = Validation {
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
    };
    write_json(dir, &v)?;
    Ok(v)
}

/// Writes `validation.json` (raw bytes throughout).
pub fn write_json<T: Serialize>(dir: &Path, v: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_vec_pretty(v)?;
    text.push(b'\n');
    let path = dir.join("validation.json");
    outdir::write_atomic(&path, &text).with_context(|| format!("cannot write {}", path.display()))
}

fn phase_peak(s: &Summary, phase: &str, view: View) -> Option<u64> {
    s.phases
        .iter()
        .find(|p| p.name == phase)?
        .peaks
        .get(view.key())
        .map(|p| p.bytes)
}

fn has_phase(s: &Summary, phase: &str) -> bool {
    s.phases.iter().any(|p| p.name == phase)
}

/// The planned run's categories and views against the plan.
fn measure(r: &Resolved, rec: &ProbeRecord, s: &Summary) -> PlannedRun {
    let n = rec.requests;
    let p = &r.probe;
    let idle_used = s.idle.after_context.device_used_bytes;
    let mut prev_own = Some(0u64);
    let mut prev_dev = Some(idle_used);
    let mut categories = Vec::new();
    for (phase, category, planned) in [
        ("weights", "weights".to_string(), p.weights_bytes),
        (
            "kv",
            format!("KV, {n} request{}", if n == 1 { "" } else { "s" }),
            n * p.kv_per_request_bytes(),
        ),
        ("other-peak", "other peak".to_string(), p.other_peak_bytes),
    ] {
        let (own, dev) = if has_phase(s, phase) {
            let own = phase_peak(s, phase, View::OwnBytes);
            let dev = phase_peak(s, phase, View::DeviceUsed);
            let row = (
                own.zip(prev_own).map(|(a, b)| a.saturating_sub(b)),
                dev.zip(prev_dev).map(|(a, b)| a.saturating_sub(b)),
            );
            prev_own = own;
            prev_dev = dev;
            row
        } else {
            (Some(0), Some(0))
        };
        categories.push(CategoryRow {
            category,
            planned_bytes: planned,
            own_bytes: own,
            device_bytes: dev,
        });
    }
    let planned_total = p.planned_total_bytes(n);
    let through_allocator = planned_total - p.workspace_bytes();
    let views = View::ALL
        .iter()
        .filter_map(|v| s.peaks.run.get(v.key()).map(|peak| (*v, peak.bytes)))
        .map(|(v, peak_bytes)| ViewRow {
            view: v.key().to_string(),
            peak_bytes,
            planned_bytes: match v {
                View::DeviceUsed | View::OwnBytes => Some(planned_total),
                View::AllocAllocated
                | View::AllocReserved
                | View::AllocActive
                | View::AllocRequested
                | View::PoolUsed
                | View::PoolReserved => Some(through_allocator),
                _ => None,
            },
        })
        .collect();
    PlannedRun {
        requests: n,
        dir: rec.dir.clone(),
        status: s.status,
        outcome: rec.outcome.clone(),
        headroom_at_peak_bytes: rec.headroom_at_peak_bytes,
        categories,
        views,
    }
}

fn unnamed(r: &Resolved, s: &Summary, total: u64) -> Unnamed {
    let peak = |v: View| s.peaks.run.get(v.key()).map(|p| p.bytes);
    let idle_used = s.idle.after_context.device_used_bytes;
    let own = peak(View::OwnBytes).unwrap_or(0);
    let dev = peak(View::DeviceUsed).unwrap_or(idle_used);
    let driver_rounding = dev as i64 - idle_used as i64 - own as i64;
    let allocator_rounding = peak(View::AllocReserved)
        .zip(peak(View::AllocRequested))
        .map(|(a, b)| a as i64 - b as i64);
    let capacity_beyond = r.budget.inputs.capacity_bytes as i64 - total as i64;
    let n = r.planned_requests as i128;
    let slack = r.budget.kv_budget_bytes as i128 - n * r.plan.kv_per_request_bytes as i128;
    Unnamed {
        idle_used_bytes: idle_used,
        context_overhead_bytes: s.idle.context_overhead_bytes,
        other_processes_bytes: s.idle.processes.as_ref().map(|ps| {
            ps.iter()
                .filter(|p| !p.is_self)
                .filter_map(|p| p.used_bytes)
                .sum()
        }),
        driver_rounding_bytes: driver_rounding,
        allocator_rounding_bytes: allocator_rounding,
        capacity_beyond_device_bytes: capacity_beyond,
        total_bytes: idle_used as i64
            + driver_rounding
            + allocator_rounding.unwrap_or(0)
            + capacity_beyond,
        plan_slack_bytes: slack as i64,
    }
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
