//! What a validation found, as `validation.json` and the text give it: each probe's outcome,
//! the planned run's categories and views against the plan, the memory the plan did not name,
//! and the admission limit; and how the planned run's summary is measured into them.

use std::path::PathBuf;

use serde::Serialize;

use crate::device::DeviceInfo;
use crate::plan::budget::Budget;
use crate::plan::file::{CapacitySource, Shape};
use crate::plan::validate::Resolved;
use crate::record::View;
use crate::report::summary::{RunStatus, Summary};

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
    /// The plan's claims, each held or failed (`headroom validate`'s junit.xml has one test
    /// case per claim).
    pub claims: Vec<crate::plan::claims::Claim>,
}

fn phase_peak(s: &Summary, phase: &str, view: View) -> Option<u64> {
    s.phases()
        .iter()
        .find(|p| p.name == phase)?
        .peaks
        .get(view.key())
        .map(|p| p.bytes)
}

/// Device used at the idle reading: a plan's probe runs always take one (only an imported
/// snapshot has none, and a plan never reads one).
pub(super) fn idle_used(s: &Summary) -> u64 {
    s.idle_after().map_or(0, |i| i.device_used_bytes)
}

fn has_phase(s: &Summary, phase: &str) -> bool {
    s.phases().iter().any(|p| p.name == phase)
}

/// The planned run's categories and views against the plan.
pub(super) fn measure(r: &Resolved, rec: &ProbeRecord, s: &Summary) -> PlannedRun {
    let n = rec.requests;
    let p = &r.probe;
    let idle_used = idle_used(s);
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
        .filter_map(|v| s.peaks().run.get(v.key()).map(|peak| (*v, peak.bytes)))
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
        status: s.status(),
        outcome: rec.outcome.clone(),
        headroom_at_peak_bytes: rec.headroom_at_peak_bytes,
        categories,
        views,
    }
}

pub(super) fn unnamed(r: &Resolved, s: &Summary, total: u64) -> Unnamed {
    let peak = |v: View| s.peaks().run.get(v.key()).map(|p| p.bytes);
    let idle_used = idle_used(s);
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
        context_overhead_bytes: s.idle().as_ref().and_then(|i| i.context_overhead_bytes),
        other_processes_bytes: s
            .idle()
            .as_ref()
            .and_then(|i| i.processes.as_ref())
            .map(|ps| {
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
