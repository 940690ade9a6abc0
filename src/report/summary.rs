//! `summary.json`: everything a run found, in one document with raw byte counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::device::{DeviceInfo, Mismatch, NvmlMemory, PoolUsage, ProcessUsage};
use crate::oom::OomRecord;
use crate::record::peaks::Peak;
use crate::sampler::{Percentiles, SamplerStats};

pub use super::summary_fields::SummaryStart;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Still going (a summary written after a phase).
    Running,
    /// Every step ran.
    Completed,
    /// An allocation was refused; the steps after it did not run.
    Oom,
    /// A step would have gone below the free-memory floor and was not run.
    StoppedAtFloor,
    /// Ctrl-C.
    Interrupted,
    /// A device or I/O error stopped the run.
    Failed,
    /// Not run: the workload does not fit the device (its stated minimum total, or a
    /// capability the device lacks), and `--skip-unfit` asked for a skip; `status_detail`
    /// says why.
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkloadInfo {
    pub name: String,
    pub file: String,
    pub description: String,
    pub allocator: crate::alloc::AllocatorKind,
    pub allocator_settings: serde_json::Value,
    pub sample_interval_ns: u64,
    pub keep_free_bytes: u64,
    pub allow_oom: bool,
}

/// One reading of the device taken while nothing of the workload was allocated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IdleReading {
    pub t_ns: u64,
    pub device_free_bytes: u64,
    pub device_used_bytes: u64,
    pub device_total_bytes: u64,
    pub nvml: Option<NvmlMemory>,
}

/// A 2 MiB `cuMemAlloc` + `cuMemFree` pair timed without and with the sampler at full rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SamplerPerturbation {
    /// Pairs timed each way.
    pub pairs: u32,
    pub alloc_free_p50_without_sampler_ns: u64,
    pub alloc_free_p50_with_sampler_ns: u64,
}

/// What loading headroom's kernel modules took, measured as a drop in device free memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelLoad {
    /// PTX modules loaded (JIT-compiled by the driver).
    pub modules: u32,
    /// Device free before the load minus after it (modules and `verify`'s result buffer).
    pub device_bytes: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Idle {
    /// NVML before this process created its context (None without NVML).
    pub before_context: Option<NvmlMemory>,
    /// After the context existed, before the first step.
    pub after_context: IdleReading,
    /// NVML used after − before: what creating the context took.
    pub context_overhead_bytes: Option<u64>,
    /// headroom's kernels, loaded before the idle reading (absent when the workload launches
    /// none): their memory is the context's from then on, not the first kernel step's.
    #[serde(default)]
    pub kernels: Option<KernelLoad>,
    pub processes: Option<Vec<ProcessUsage>>,
    /// Why the process list cannot be believed, if it cannot (`device::process_list_doubt`).
    #[serde(default)]
    pub processes_doubt: Option<String>,
    /// Why there is no process list, when there is none (no NVML; NVML refused it, as on a
    /// MIG instance without privileges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_unavailable: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseSummary {
    pub name: String,
    pub status: PhaseStatus,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub actions_run: u64,
    pub actions_planned: u64,
    pub peaks: BTreeMap<String, Peak>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PhaseStatus {
    Pending,
    Running,
    Completed,
    Oom,
    Stopped,
    Skipped,
}

/// What a poller at a fixed rate would have reported as the peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PolledPeaks {
    pub period_ns: u64,
    pub ticks: u64,
    pub peaks: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Peaks {
    /// True interval peak of each view over the whole run.
    pub run: BTreeMap<String, Peak>,
    /// Device free memory at the device-used peak.
    pub headroom_at_peak_bytes: Option<u64>,
    pub polled: BTreeMap<String, PolledPeaks>,
    /// The driver's own high-water marks (stream-ordered pool), which see what readings miss.
    pub pool_high_water: Option<PoolUsage>,
}

/// A `verify` that found wrong words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MismatchRecord {
    pub phase: String,
    pub step: String,
    pub name: String,
    pub bytes: u64,
    #[serde(flatten)]
    pub mismatch: Mismatch,
}

/// One verify's mismatches for people: `3 mismatches; first at 0x7f…00 (offset 1048576):
/// expected 0x1234abcd, read 0xdeadbeef` (the offset when the buffer's base is known).
pub fn mismatch_line(m: &crate::device::Mismatch, base: Option<crate::device::DevPtr>) -> String {
    let offset = base.map_or(String::new(), |b| {
        format!(" (offset {})", m.first_address.saturating_sub(b))
    });
    format!(
        "{} mismatches; first at {:#x}{offset}: expected {:#010x}, read {:#010x}",
        m.count, m.first_address, m.expected, m.actual
    )
}

impl MismatchRecord {
    /// `buf (phase step 2): 1 mismatches; first at …`.
    pub fn line(&self) -> String {
        format!(
            "{} ({} step {}): {}",
            self.name,
            self.phase,
            self.step,
            mismatch_line(&self.mismatch, None)
        )
    }
}

/// The check that the run gave back everything it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Release {
    pub idle_device_free_bytes: u64,
    pub final_device_free_bytes: u64,
    /// final − idle: negative when memory stayed held.
    pub difference_bytes: i64,
    /// |difference| ≤ one 2 MiB page.
    pub within_one_page: bool,
    /// Why memory may legitimately stay held (a raised stack reservation, loaded kernels).
    pub note: Option<String>,
    /// How long device free took to come back after tenant processes were stopped (the
    /// driver frees a killed process's memory late); absent when no process was stopped.
    #[serde(default)]
    pub tenant_settle_ns: Option<u64>,
}

/// One expectation from the workload's `[expect]` and whether the run met it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExpectationResult {
    pub name: String,
    pub expected: String,
    pub actual: String,
    pub held: bool,
}

/// A capacity plan's lines, for reports and plots of a validation run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanMarks {
    /// The capacity the plan starts from.
    pub capacity_bytes: u64,
    /// Device total − safety margin: device used must stay at or under this for the margin to
    /// hold (the margin is free memory at the true peak).
    pub margin_line_bytes: u64,
    /// The planned KV budget.
    pub kv_budget_bytes: u64,
    pub label: String,
}

impl Summary {
    /// A view's value at the idle reading, where the idle reading knows it.
    pub fn idle_view(&self, v: crate::record::View) -> Option<u64> {
        self.idle.as_ref()?;
        match v {
            crate::record::View::DeviceUsed => self
                .idle
                .as_ref()
                .map(|i| i.after_context.device_used_bytes),
            crate::record::View::OwnBytes => Some(0),
            _ => None,
        }
    }

    /// The device's total memory: `None` for an import whose evidence does not record it
    /// (a PyTorch snapshot without `--device-total` or `--profile`).
    pub fn device_total(&self) -> Option<u64> {
        (self.device.total_bytes > 0).then_some(self.device.total_bytes)
    }

    /// The idle reading after the context, where there is one.
    pub fn idle_after(&self) -> Option<&IdleReading> {
        self.idle.as_ref().map(|i| &i.after_context)
    }

    /// Why there is no idle reading, or what it is derived from, in a few words: `not in the
    /// snapshot`, `derived from --device-total 4294967296`; None when it was measured.
    pub fn idle_basis_short(&self) -> Option<&str> {
        let b = self.idle_basis.as_deref()?;
        Some(b[..b.find([':', '(']).unwrap_or(b.len())].trim_end())
    }

    /// The idle reading's source for people: `none (not in the snapshot)` when absent.
    pub fn idle_missing(&self) -> String {
        format!("none ({})", self.idle_basis_short().unwrap_or("not taken"))
    }

    /// The peak a poller (`1hz`, `10hz`) would have reported for a view.
    pub fn polled_peak(&self, poller: &str, v: crate::record::View) -> Option<u64> {
        self.peaks
            .polled
            .get(poller)
            .and_then(|p| p.peaks.get(v.key()).copied())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub(in crate::report) format_version: u32,
    pub(in crate::report) headroom_version: String,
    pub(in crate::report) status: RunStatus,
    pub(in crate::report) status_detail: Option<String>,
    pub(in crate::report) exit_code: Option<i32>,
    pub(in crate::report) workload: WorkloadInfo,
    /// The device; its `total_bytes` is null for an import whose evidence does not record
    /// it (`device_total` reads it).
    #[serde(with = "crate::report::device_total")]
    #[schemars(schema_with = "crate::report::device_total::schema")]
    pub(in crate::report) device: DeviceInfo,
    pub(in crate::report) started_utc: String,
    pub(in crate::report) finished_utc: Option<String>,
    /// Device time (ns since open) at the first phase and at the end.
    pub(in crate::report) start_ns: u64,
    pub(in crate::report) end_ns: Option<u64>,
    /// The idle reading; null where there was none to take (an imported snapshot records
    /// none: `idle_basis` says why).
    pub(in crate::report) idle: Option<Idle>,
    /// Where the idle reading comes from when it was not measured: why it is null ("not in the
    /// snapshot"), or what it is derived from (`--device-total`, `--profile`); absent when
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::report) idle_basis: Option<String>,
    pub(in crate::report) phases: Vec<PhaseSummary>,
    pub(in crate::report) peaks: Peaks,
    pub(in crate::report) sampler: SamplerStats,
    /// A sampler reading back to back competes with the run for the driver: what it did to a
    /// plain allocation's latency, measured before the idle reading (real drivers, 0 ns only).
    #[serde(default)]
    pub(in crate::report) sampler_perturbation: Option<SamplerPerturbation>,
    /// Latency of the harness's own calls: `allocate`, `free`, `mem_get_info`.
    pub(in crate::report) latency: BTreeMap<String, Percentiles>,
    pub(in crate::report) ooms: Vec<OomRecord>,
    pub(in crate::report) mismatches: Vec<MismatchRecord>,
    pub(in crate::report) expectations: Vec<ExpectationResult>,
    pub(in crate::report) release: Option<Release>,
    /// The allocator's counters at the end of the run, before the release (retries and OOMs
    /// included).
    #[serde(default)]
    pub(in crate::report) allocator_stats: Option<crate::alloc::AllocStats>,
    /// Set when the run validates a capacity plan (`headroom validate`): the lines to draw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::report) plan: Option<PlanMarks>,
    /// CUDA graphs: each graph's memory, trims, and `graphs` pattern reports (set when the
    /// workload has graph steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::report) graphs: Option<crate::report::graphs::GraphsSummary>,
    /// Set when the run was imported from another tool's evidence (`headroom import`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::report) import: Option<crate::report::imported::ImportInfo>,
    /// Rows in `timeline.csv`: a sampler reading equal to the one before is left out
    /// (`sampler.readings` counts them all).
    pub(in crate::report) timeline_rows: u64,
    pub(in crate::report) event_rows: u64,
    /// A `headroom watch` folder's section: the watched job, its phases and its messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::report) watch: Option<crate::report::watch::WatchSection>,
}
