//! `Summary`'s fields, which are private to `report`: read by anyone through the methods
//! here, begun by a producer with `Summary::begin`, and written afterwards only through the
//! result folder's writer (`folder::RunFolder`, which alone holds a summary being written and
//! calls the `pub(crate)` writers below).

use std::collections::BTreeMap;

use crate::device::{DeviceInfo, PoolUsage};
use crate::oom::OomRecord;
use crate::report::graphs::GraphsSummary;
use crate::report::imported::ImportInfo;
use crate::report::summary::{
    ExpectationResult, Idle, MismatchRecord, Peaks, PhaseStatus, PhaseSummary, PlanMarks,
    PolledPeaks, Release, RunStatus, SamplerPerturbation, Summary, WorkloadInfo,
};
use crate::report::watch::WatchSection;
use crate::sampler::{Percentiles, SamplerStats};

/// What a producer knows of its folder when it begins: the rest starts empty (status
/// `running`, no peaks, no OOM) and is written through the folder.
pub struct SummaryStart {
    pub workload: WorkloadInfo,
    /// The device; a `total_bytes` of 0 is written as null (an import's unknown total).
    pub device: DeviceInfo,
    pub started_utc: String,
    /// Device time at the first phase.
    pub start_ns: u64,
    pub idle: Option<Idle>,
    /// Why `idle` is null, or what it is derived from; `None` when measured.
    pub idle_basis: Option<String>,
    pub phases: Vec<PhaseSummary>,
    pub sampler_perturbation: Option<SamplerPerturbation>,
    pub plan: Option<PlanMarks>,
}

impl Summary {
    /// A summary as its producer begins it: status `running`, nothing recorded yet.
    pub fn begin(s: SummaryStart) -> Summary {
        Summary {
            format_version: crate::record::timeline::FORMAT_VERSION,
            headroom_version: env!("CARGO_PKG_VERSION").to_string(),
            status: RunStatus::Running,
            status_detail: None,
            exit_code: None,
            workload: s.workload,
            device: s.device,
            started_utc: s.started_utc,
            finished_utc: None,
            start_ns: s.start_ns,
            end_ns: None,
            idle: s.idle,
            idle_basis: s.idle_basis,
            phases: s.phases,
            peaks: Peaks {
                run: BTreeMap::new(),
                headroom_at_peak_bytes: None,
                polled: BTreeMap::new(),
                pool_high_water: None,
            },
            sampler: Default::default(),
            sampler_perturbation: s.sampler_perturbation,
            latency: BTreeMap::new(),
            ooms: Vec::new(),
            mismatches: Vec::new(),
            expectations: Vec::new(),
            release: None,
            allocator_stats: None,
            plan: s.plan,
            graphs: None,
            import: None,
            timeline_rows: 0,
            event_rows: 0,
            watch: None,
        }
    }

    pub fn format_version(&self) -> u32 {
        self.format_version
    }
    pub fn headroom_version(&self) -> &str {
        &self.headroom_version
    }
    pub fn status(&self) -> RunStatus {
        self.status
    }
    pub fn status_detail(&self) -> &Option<String> {
        &self.status_detail
    }
    pub fn exit_code(&self) -> Option<i32> {
        self.exit_code
    }
    pub fn workload(&self) -> &WorkloadInfo {
        &self.workload
    }
    /// The device (`device_total` for its total where known).
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }
    pub fn started_utc(&self) -> &String {
        &self.started_utc
    }
    pub fn finished_utc(&self) -> &Option<String> {
        &self.finished_utc
    }
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }
    pub fn end_ns(&self) -> Option<u64> {
        self.end_ns
    }
    pub fn idle(&self) -> &Option<Idle> {
        &self.idle
    }
    pub fn idle_basis(&self) -> &Option<String> {
        &self.idle_basis
    }
    pub fn phases(&self) -> &[PhaseSummary] {
        &self.phases
    }
    pub fn peaks(&self) -> &Peaks {
        &self.peaks
    }
    pub fn sampler(&self) -> &SamplerStats {
        &self.sampler
    }
    pub fn sampler_perturbation(&self) -> Option<SamplerPerturbation> {
        self.sampler_perturbation
    }
    pub fn latency(&self) -> &BTreeMap<String, Percentiles> {
        &self.latency
    }
    pub fn ooms(&self) -> &[OomRecord] {
        &self.ooms
    }
    pub fn mismatches(&self) -> &[MismatchRecord] {
        &self.mismatches
    }
    pub fn expectations(&self) -> &[ExpectationResult] {
        &self.expectations
    }
    pub fn release(&self) -> &Option<Release> {
        &self.release
    }
    pub fn allocator_stats(&self) -> &Option<crate::alloc::AllocStats> {
        &self.allocator_stats
    }
    pub fn plan(&self) -> &Option<PlanMarks> {
        &self.plan
    }
    pub fn graphs(&self) -> &Option<GraphsSummary> {
        &self.graphs
    }
    pub fn import(&self) -> &Option<ImportInfo> {
        &self.import
    }
    pub fn timeline_rows(&self) -> u64 {
        self.timeline_rows
    }
    pub fn event_rows(&self) -> u64 {
        self.event_rows
    }
    pub fn watch(&self) -> &Option<WatchSection> {
        &self.watch
    }
}

/// The writers, for `folder::RunFolder` (and the watchdog's late write through it): a
/// producer holds no `&mut Summary` to call them with.
impl Summary {
    pub(crate) fn set_status(&mut self, status: RunStatus, detail: Option<String>) {
        self.status = status;
        self.status_detail = detail;
    }
    pub(crate) fn add_detail(&mut self, what: String) {
        self.status_detail = Some(match self.status_detail.take() {
            Some(d) => format!("{d}; {what}"),
            None => what,
        });
    }
    pub(crate) fn set_exit_code(&mut self, code: i32) {
        self.exit_code = Some(code);
    }
    pub(crate) fn set_finished_utc(&mut self, utc: String) {
        self.finished_utc = Some(utc);
    }
    pub(crate) fn set_end_ns(&mut self, end_ns: u64) {
        self.end_ns = Some(end_ns);
    }
    pub(crate) fn phase_mut(&mut self, pi: usize) -> &mut PhaseSummary {
        &mut self.phases[pi]
    }
    pub(crate) fn phases_mut(&mut self) -> &mut [PhaseSummary] {
        &mut self.phases
    }
    pub(crate) fn push_phase(&mut self, name: &str, t_ns: u64) {
        self.phases.push(PhaseSummary {
            name: name.to_string(),
            status: PhaseStatus::Running,
            start_ns: Some(t_ns),
            end_ns: None,
            actions_run: 0,
            actions_planned: 0,
            peaks: BTreeMap::new(),
        });
    }
    pub(crate) fn peaks_mut(&mut self) -> &mut Peaks {
        &mut self.peaks
    }
    pub(crate) fn add_polled(&mut self, polled: BTreeMap<String, PolledPeaks>) {
        self.peaks.polled.extend(polled);
    }
    pub(crate) fn set_rows(&mut self, timeline_rows: u64, event_rows: u64) {
        self.timeline_rows = timeline_rows;
        self.event_rows = event_rows;
    }
    pub(crate) fn set_sampler(&mut self, stats: SamplerStats) {
        self.sampler = stats;
    }
    pub(crate) fn set_latency(&mut self, latency: BTreeMap<String, Percentiles>) {
        self.latency = latency;
    }
    pub(crate) fn set_pool_high_water(&mut self, usage: Option<PoolUsage>) {
        self.peaks.pool_high_water = usage;
    }
    pub(crate) fn set_allocator_stats(&mut self, stats: crate::alloc::AllocStats) {
        self.allocator_stats = Some(stats);
    }
    pub(crate) fn set_graphs(&mut self, graphs: Option<GraphsSummary>) {
        self.graphs = graphs;
    }
    pub(crate) fn set_ooms(&mut self, ooms: Vec<OomRecord>) {
        self.ooms = ooms;
    }
    pub(crate) fn set_mismatches(&mut self, mismatches: Vec<MismatchRecord>) {
        self.mismatches = mismatches;
    }
    pub(crate) fn set_release(&mut self, release: Release) {
        self.release = Some(release);
    }
    pub(crate) fn set_expectations(&mut self, expectations: Vec<ExpectationResult>) {
        self.expectations = expectations;
    }
    pub(crate) fn set_import(&mut self, import: ImportInfo) {
        self.import = Some(import);
    }
    pub(crate) fn set_watch(&mut self, watch: Option<WatchSection>) {
        self.watch = watch;
    }
}
