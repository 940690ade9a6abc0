//! Running a workload on a device and recording every view as it goes.
//!
//! The order of a run: idle readings (before and after the context), then each phase's actions
//! with an event-synchronous reading after every one, the background sampler filling in between;
//! after every phase the CSVs are flushed and `summary.json` rewritten, so a later OOM, error or
//! Ctrl-C never loses what came before. Whatever happens, the run then releases everything it
//! took and checks that device free memory is back at the idle reading.

mod evidence;
mod exec;
mod graphs;
mod groups;
pub mod outdir;
mod progress;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::Context;

use crate::alloc::Allocator;
use crate::alloc::adaptors::logging::LoggingAdaptor;
use crate::device::select::Opened;
use crate::device::{Device, NvmlMemory, StreamId};
use crate::oom::OomRecord;
use crate::record::timeline::{EventLog, FORMAT_VERSION, POLLERS, Recorder};
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};
use crate::report::summary::{
    Idle, IdleReading, MismatchRecord, Peaks, PhaseStatus, PhaseSummary, PolledPeaks, Release,
    RunStatus, Summary, WorkloadInfo,
};
use crate::sampler::{LatencyHistogram, LiveViews};
use crate::units::{GIB, MIB, utc_folder_stamp, utc_timestamp};
use crate::workload::{OomExpectation, Via, Workload};

/// How to run, beyond what the workload file says.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Exact output folder (must be new or empty).
    pub out_dir: Option<PathBuf>,
    /// Where `<stamp>-<workload>/` folders go when `out_dir` is not given.
    pub results_root: PathBuf,
    pub allow_oom: bool,
    /// An OOM is the expected outcome: it exits 0 and its absence exits 1.
    pub expect_oom: bool,
    pub keep_free_bytes: Option<u64>,
    pub sample_interval_ns: Option<u64>,
    /// Every `verify` mismatch fails the run (exit 1).
    pub fail_on_mismatch: bool,
    /// How `tenant` steps start a real process (`headroom hold`); `None` on the simulator,
    /// which models the tenant instead.
    pub tenant_launch: Option<TenantLaunch>,
    /// Set by Ctrl-C; checked between actions.
    pub interrupted: Arc<AtomicBool>,
    /// A progress bar on stderr (shown only on a terminal, for runs over a second).
    pub progress: bool,
    /// The capacity plan this run validates (`headroom validate`), copied into the summary.
    pub plan: Option<crate::report::summary::PlanMarks>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            out_dir: None,
            results_root: PathBuf::from("results"),
            allow_oom: false,
            expect_oom: false,
            keep_free_bytes: None,
            sample_interval_ns: None,
            fail_on_mismatch: false,
            tenant_launch: None,
            interrupted: Arc::new(AtomicBool::new(false)),
            progress: false,
            plan: None,
        }
    }
}

/// The allocator's call log in a run folder (headroom's log format, read by `headroom replay`).
pub const ALLOC_LOG: &str = "alloc-log.csv";

/// The command that starts a tenant process: this executable and the device arguments that
/// select the same GPU.
#[derive(Debug, Clone)]
pub struct TenantLaunch {
    pub exe: PathBuf,
    pub device_args: Vec<String>,
}

/// The floor of free memory a run keeps unless OOM is allowed: 1 GiB, or a sixteenth of a
/// small device.
pub fn default_keep_free(total_bytes: u64) -> u64 {
    GIB.min(total_bytes / 16)
}

/// A finished run: where it wrote, what it found, and the exit code it asks for.
pub struct RunReport {
    pub dir: PathBuf,
    pub summary: Summary,
    pub exit_code: i32,
}

/// One live allocation of the workload.
#[derive(Debug, Clone)]
pub(crate) struct LiveAlloc {
    pub ptr: u64,
    pub bytes: u64,
    pub via: Via,
}

/// What ended the action loop early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    Oom,
    Floor(String),
    Interrupted,
    Failed(String),
}

pub(crate) struct Runner<'w, 'd> {
    pub dev: &'d mut dyn Device,
    pub alloc: Box<dyn Allocator>,
    pub wl: &'w Workload,
    pub live: HashMap<String, LiveAlloc>,
    pub streams: HashMap<String, StreamId>,
    /// Bytes taken with `via = "driver"`, outside the allocator.
    pub driver_bytes: u64,
    pub recorder: Recorder,
    pub events: EventLog,
    pub live_views: Arc<LiveViews>,
    pub phase: u32,
    pub alloc_latency: LatencyHistogram,
    pub free_latency: LatencyHistogram,
    pub query_latency: LatencyHistogram,
    pub ooms: Vec<OomRecord>,
    pub mismatches: Vec<MismatchRecord>,
    pub keep_free_bytes: u64,
    pub allow_oom: bool,
    pub idle_free_bytes: u64,
    pub idle_used_bytes: u64,
    /// Memory other processes held at the idle reading.
    pub idle_others_bytes: u64,
    /// Nanoseconds of reorder slack for sampler readings that arrive late (real GPU only).
    pub watermark_slack_ns: u64,
    pub interrupted: Arc<AtomicBool>,
    /// Whether kernels were loaded or the stack raised: memory the context keeps.
    pub context_grew: bool,
    pub progress: progress::Progress,
    /// `headroom hold` children started by `tenant` steps; stopped and reaped at the end.
    pub tenants: Vec<crate::tenant::TenantProcess>,
    pub tenant_launch: Option<TenantLaunch>,
    /// Names whose allocation hit an OOM the workload continued past.
    pub failed_names: std::collections::HashSet<String>,
    /// CUDA graphs: handles, graph allocations, and what was measured.
    pub graphs: graphs::GraphRun,
}

/// Runs a parsed workload on an opened device and writes its results.
pub fn run(wl: &Workload, mut opened: Opened, opts: &RunOptions) -> anyhow::Result<RunReport> {
    if let Some(n) = &opened.notice {
        eprintln!("note: {n}");
    }
    run_on(wl, opened.device.as_mut(), opened.before_context, opts)
}

/// Runs a workload on a device that stays open afterwards (for several runs in one session).
/// `before_context` is NVML's reading from before the device's context was created.
pub fn run_on(
    wl: &Workload,
    device: &mut dyn Device,
    before_context: Option<NvmlMemory>,
    opts: &RunOptions,
) -> anyhow::Result<RunReport> {
    let started = SystemTime::now();
    let dir = outdir::create(
        opts.out_dir.as_deref(),
        &opts.results_root,
        &utc_folder_stamp(started),
        &wl.name,
    )?;
    let info = device.info().clone();
    let keep_free_bytes = opts
        .keep_free_bytes
        .or(wl.settings.keep_free_bytes)
        .unwrap_or_else(|| default_keep_free(info.total_bytes));
    let allow_oom = opts.allow_oom || wl.settings.allow_oom;
    let sample_interval_ns = opts
        .sample_interval_ns
        .unwrap_or(wl.settings.sample_interval_ns);

    // Idle, after the context: one reading before anything of the workload exists.
    let idle_mem = device
        .mem_info()
        .context("the idle reading (cuMemGetInfo) failed")?;
    let idle_nvml = device.nvml_memory();
    let idle_processes = device.processes();
    let idle_t = device.now_ns();
    let idle = Idle {
        before_context,
        after_context: IdleReading {
            t_ns: idle_t,
            device_free_bytes: idle_mem.free_bytes,
            device_used_bytes: idle_mem.used_bytes(),
            device_total_bytes: idle_mem.total_bytes,
            nvml: idle_nvml,
        },
        context_overhead_bytes: context_overhead(before_context, idle_nvml),
        processes: idle_processes,
    };

    let alloc = wl.allocator.build(&mut *device).map_err(|e| {
        anyhow::anyhow!(
            "{}: cannot set up the {} allocator: {e}",
            wl.file.display(),
            wl.allocator.kind()
        )
    })?;
    // Every allocator call is logged, so `headroom replay` can try the run's allocations
    // against another allocator or other settings.
    let log_path = dir.join(ALLOC_LOG);
    let alloc: Box<dyn Allocator> = Box::new(
        LoggingAdaptor::create(alloc, &log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?,
    );
    let phase_names: Vec<String> = wl.phases.iter().map(|p| p.name.clone()).collect();
    let start_ns = device.now_ns();
    let mut recorder = Recorder::create(&dir, phase_names, info.total_bytes, start_ns)
        .with_context(|| format!("cannot create {}", dir.join("timeline.csv").display()))?;
    let events = EventLog::create(&dir)
        .with_context(|| format!("cannot create {}", dir.join("events.csv").display()))?;
    recorder.push(Reading {
        t_ns: idle_t,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle_mem.free_bytes,
        views: ViewSet::default().with(View::OwnBytes, 0),
    });

    let live_views = Arc::new(LiveViews::default());
    live_views.publish(alloc.stats().views().with(View::OwnBytes, 0));
    device
        .start_sampler(sample_interval_ns, live_views.clone())
        .context("cannot start the background sampler")?;
    let watermark_slack_ns = if info.backend == "sim" { 0 } else { 5_000_000 };

    let mut runner = Runner {
        dev: device,
        alloc,
        wl,
        live: HashMap::new(),
        streams: HashMap::from([("main".to_string(), StreamId::MAIN)]),
        driver_bytes: 0,
        recorder,
        events,
        live_views,
        phase: NO_PHASE,
        alloc_latency: LatencyHistogram::default(),
        free_latency: LatencyHistogram::default(),
        query_latency: LatencyHistogram::default(),
        ooms: Vec::new(),
        mismatches: Vec::new(),
        keep_free_bytes,
        allow_oom,
        idle_free_bytes: idle_mem.free_bytes,
        idle_used_bytes: idle_mem.used_bytes(),
        idle_others_bytes: others_bytes(&idle.processes).min(idle_mem.used_bytes()),
        watermark_slack_ns,
        interrupted: opts.interrupted.clone(),
        context_grew: false,
        progress: progress::Progress::new(
            opts.progress,
            wl.phases.iter().map(|p| p.actions.len() as u64).sum(),
        ),
        failed_names: Default::default(),
        tenants: Vec::new(),
        tenant_launch: opts.tenant_launch.clone(),
        graphs: Default::default(),
    };
    runner.graph_start()?;
    runner.live_views.publish(runner.harness_views());
    let mut summary = Summary {
        format_version: FORMAT_VERSION,
        headroom_version: env!("CARGO_PKG_VERSION").to_string(),
        status: RunStatus::Running,
        status_detail: None,
        exit_code: None,
        workload: WorkloadInfo {
            name: wl.name.clone(),
            file: wl.file.display().to_string(),
            description: wl.description.clone(),
            allocator: wl.allocator.kind().to_string(),
            allocator_settings: serde_json::to_value(&wl.allocator).unwrap_or_default(),
            sample_interval_ns,
            keep_free_bytes,
            allow_oom,
        },
        device: info,
        started_utc: utc_timestamp(started),
        finished_utc: None,
        start_ns,
        end_ns: None,
        idle,
        phases: wl
            .phases
            .iter()
            .map(|p| PhaseSummary {
                name: p.name.clone(),
                status: PhaseStatus::Pending,
                start_ns: None,
                end_ns: None,
                actions_run: 0,
                actions_planned: p.actions.len() as u64,
                peaks: BTreeMap::new(),
            })
            .collect(),
        peaks: Peaks {
            run: BTreeMap::new(),
            headroom_at_peak_bytes: None,
            polled: BTreeMap::new(),
            pool_high_water: None,
        },
        sampler: Default::default(),
        latency: BTreeMap::new(),
        ooms: Vec::new(),
        mismatches: Vec::new(),
        expectations: Vec::new(),
        release: None,
        allocator_stats: None,
        plan: opts.plan.clone(),
        graphs: None,
        import: None,
        timeline_rows: 0,
        event_rows: 0,
    };

    let stop = runner.run_phases(&mut summary, &dir);
    let status = match &stop {
        None => RunStatus::Completed,
        Some(Stop::Oom) => RunStatus::Oom,
        Some(Stop::Floor(_)) => RunStatus::StoppedAtFloor,
        Some(Stop::Interrupted) => RunStatus::Interrupted,
        Some(Stop::Failed(_)) => RunStatus::Failed,
    };
    summary.status = status;
    summary.status_detail = match &stop {
        Some(Stop::Floor(m)) | Some(Stop::Failed(m)) => Some(m.clone()),
        Some(Stop::Interrupted) => Some("interrupted by Ctrl-C".into()),
        _ => None,
    };
    runner.finish(&mut summary, &dir, opts)?;
    let exit_code = summary.exit_code.unwrap_or(2);
    Ok(RunReport {
        dir,
        summary,
        exit_code,
    })
}

fn others_bytes(processes: &Option<Vec<crate::device::ProcessUsage>>) -> u64 {
    processes
        .iter()
        .flatten()
        .filter(|p| !p.is_self)
        .filter_map(|p| p.used_bytes)
        .sum()
}

fn context_overhead(before: Option<NvmlMemory>, after: Option<NvmlMemory>) -> Option<u64> {
    Some(after?.used_bytes.saturating_sub(before?.used_bytes))
}

impl Runner<'_, '_> {
    /// Runs every phase; returns what stopped it early, if anything.
    fn run_phases(&mut self, summary: &mut Summary, dir: &Path) -> Option<Stop> {
        let wl = self.wl;
        for (pi, phase) in wl.phases.iter().enumerate() {
            self.phase = pi as u32;
            self.live_views.set_phase(self.phase);
            let ps = &mut summary.phases[pi];
            ps.status = PhaseStatus::Running;
            ps.start_ns = Some(self.dev.now_ns());
            let mut stop = None;
            for planned in &phase.actions {
                let done = summary.phases.iter().map(|p| p.actions_run).sum();
                self.progress
                    .step(pi, wl.phases.len(), &phase.name, &planned.label, done);
                if self.interrupted.load(Ordering::Relaxed) {
                    stop = Some(Stop::Interrupted);
                    break;
                }
                match self.exec(&phase.name, planned) {
                    Ok(None) => summary.phases[pi].actions_run += 1,
                    Ok(Some(Stop::Oom)) if planned.continue_on_oom => {
                        summary.phases[pi].actions_run += 1;
                    }
                    Ok(Some(s)) => {
                        if s == Stop::Oom {
                            summary.phases[pi].actions_run += 1;
                        }
                        stop = Some(s);
                        break;
                    }
                    Err(e) => {
                        stop = Some(Stop::Failed(format!(
                            "phase {:?}, step {}: {e:#}",
                            phase.name, planned.label
                        )));
                        break;
                    }
                }
            }
            let ps = &mut summary.phases[pi];
            ps.end_ns = Some(self.dev.now_ns());
            ps.status = match &stop {
                None => PhaseStatus::Completed,
                Some(Stop::Oom) => PhaseStatus::Oom,
                Some(_) => PhaseStatus::Stopped,
            };
            self.checkpoint(summary, dir);
            if stop.is_some() {
                for later in &mut summary.phases[pi + 1..] {
                    later.status = PhaseStatus::Skipped;
                }
                return stop;
            }
        }
        None
    }

    /// Drains the sampler into the recorder and writes readings past the watermark.
    pub(crate) fn pump(&mut self) {
        let mut buf = Vec::new();
        self.dev.drain_samples(&mut buf);
        for r in buf {
            self.recorder.push(r);
        }
        let wm = self.dev.now_ns().saturating_sub(self.watermark_slack_ns);
        if let Err(e) = self.recorder.release_until(wm) {
            eprintln!("warning: writing timeline.csv: {e}");
        }
    }

    /// The harness-side views right now (no device query).
    pub(crate) fn harness_views(&self) -> ViewSet {
        let s = self.alloc.stats();
        let mut v = s.views();
        v.set(View::OwnBytes, self.driver_bytes + s.reserved_bytes);
        if self.alloc.kind() == "pool" {
            v.set(View::PoolUsed, s.allocated_bytes);
            v.set(View::PoolReserved, s.reserved_bytes);
        }
        self.graphs.views(&mut v);
        v
    }

    /// Takes an event-synchronous reading and publishes the harness views to the sampler.
    pub(crate) fn event_reading(&mut self) -> anyhow::Result<Reading> {
        self.pump();
        let views = self.harness_views();
        self.live_views.publish(views);
        let t0 = self.dev.now_ns();
        let mem = self.dev.mem_info().context("cuMemGetInfo failed")?;
        let t1 = self.dev.now_ns();
        self.query_latency.record(t1 - t0);
        self.progress.device_used(mem.used_bytes());
        let r = Reading {
            t_ns: t1,
            phase: self.phase,
            source: Source::Event,
            device_free_bytes: mem.free_bytes,
            views,
        };
        self.recorder.push(r);
        Ok(r)
    }

    /// Flushes files and rewrites `summary.json` so that what ran so far is on disk.
    fn checkpoint(&mut self, summary: &mut Summary, dir: &Path) {
        self.pump();
        if let Err(e) = self.recorder.flush().and_then(|_| self.events.flush()) {
            eprintln!("warning: flushing results: {e}");
        }
        self.fill_summary(summary);
        if let Err(e) = write_summary(dir, summary) {
            eprintln!("warning: writing summary.json: {e}");
        }
    }

    fn fill_summary(&mut self, summary: &mut Summary) {
        summary.peaks.run = self.recorder.run.to_map();
        summary.peaks.headroom_at_peak_bytes = self
            .recorder
            .run
            .get(View::DeviceUsed)
            .map(|p| summary.device.total_bytes.saturating_sub(p.bytes));
        for (ps, set) in summary.phases.iter_mut().zip(&self.recorder.phases) {
            ps.peaks = set.to_map();
        }
        summary.ooms = self.ooms.clone();
        summary.mismatches = self.mismatches.clone();
        summary.latency = BTreeMap::from([
            ("allocate".to_string(), self.alloc_latency.percentiles()),
            ("free".to_string(), self.free_latency.percentiles()),
            ("mem_get_info".to_string(), self.query_latency.percentiles()),
        ]);
        let driver_usage = summary.graphs.as_ref().and_then(|g| g.driver_usage);
        summary.graphs = self.graphs.summary(driver_usage);
        summary.timeline_rows = self.recorder.rows_written;
        summary.event_rows = self.events.rows_written;
    }

    /// Ends the run: sampler off, everything released, baseline checked, results written.
    fn finish(
        &mut self,
        summary: &mut Summary,
        dir: &Path,
        opts: &RunOptions,
    ) -> anyhow::Result<()> {
        self.progress.finish();
        self.pump();
        let end_ns = self.dev.now_ns();
        summary.end_ns = Some(end_ns);
        summary.sampler = self.dev.stop_sampler();
        self.pump();
        if self.alloc.kind() == "pool" {
            summary.peaks.pool_high_water = self.dev.pool_usage().ok();
        }
        summary.allocator_stats = Some(self.alloc.stats());
        if self.graphs.enabled() {
            summary.graphs = self.graphs.summary(self.dev.graph_mem_usage().ok());
        }
        // Release everything, whatever happened.
        let mut release_errors = Vec::new();
        if let Err(e) = self.graph_abort_capture() {
            release_errors.push(format!("ending an open capture: {e}"));
        }
        let mut driver_ptrs: Vec<(String, u64)> = self
            .live
            .iter()
            .filter(|(_, a)| a.via == Via::Driver)
            .map(|(n, a)| (n.clone(), a.ptr))
            .collect();
        driver_ptrs.sort();
        for (name, ptr) in driver_ptrs {
            if let Err(e) = self.dev.free(ptr) {
                release_errors.push(format!("{name}: {e}"));
            }
        }
        self.live.clear();
        self.driver_bytes = 0;
        for t in self.tenants.drain(..) {
            let pid = t.pid;
            if let Err(e) = t.stop() {
                release_errors.push(format!("tenant pid {pid}: {e:#}"));
            }
        }

        if let Err(e) = self.alloc.release_all(&mut *self.dev) {
            release_errors.push(format!("allocator: {e}"));
        }
        if let Err(e) = self.dev.release_all().and_then(|_| self.dev.synchronize()) {
            release_errors.push(format!("device: {e}"));
        }
        self.live_views.set_phase(NO_PHASE);
        let fin = self.dev.mem_info();
        if let Ok(mem) = fin {
            self.recorder.push(Reading {
                t_ns: self.dev.now_ns(),
                phase: NO_PHASE,
                source: Source::Final,
                device_free_bytes: mem.free_bytes,
                views: ViewSet::default().with(View::OwnBytes, 0),
            });
            let diff = mem.free_bytes as i64 - self.idle_free_bytes as i64;
            summary.release = Some(Release {
                idle_device_free_bytes: self.idle_free_bytes,
                final_device_free_bytes: mem.free_bytes,
                difference_bytes: diff,
                within_one_page: diff.unsigned_abs() <= 2 * MIB,
                note: if !release_errors.is_empty() {
                    Some(format!(
                        "errors while releasing: {}",
                        release_errors.join("; ")
                    ))
                } else if self.context_grew {
                    Some("kernels were loaded or the stack reservation was raised: the context keeps that memory until it is destroyed".into())
                } else {
                    None
                },
            });
        }
        // Pollers see the run up to its end.
        for (poller, (name, period)) in self.recorder.pollers.iter_mut().zip(POLLERS) {
            let (peaks, ticks) = poller.finish(end_ns);
            summary.peaks.polled.insert(
                name.to_string(),
                PolledPeaks {
                    period_ns: *period,
                    ticks,
                    peaks: View::ALL
                        .iter()
                        .filter_map(|v| peaks.get(*v).map(|p| (v.key().to_string(), p.bytes)))
                        .collect(),
                },
            );
        }
        self.recorder.flush().context("flushing timeline.csv")?;
        self.events.flush().context("flushing events.csv")?;
        self.fill_summary(summary);
        summary.finished_utc = Some(utc_timestamp(SystemTime::now()));
        summary.expectations = crate::expect::evaluate(&self.wl.expect, opts, summary);
        summary.exit_code = Some(exit_code(summary));
        write_summary(dir, summary).context("writing summary.json")?;
        // The run's record is complete on disk; a report that cannot be written is a warning
        // (`headroom report DIR` can write it again), not a different outcome of the run.
        if let Err(e) = crate::report::artifacts::write_all(dir, summary) {
            eprintln!("warning: writing the run's reports: {e:#}");
        }
        if !release_errors.is_empty() {
            eprintln!(
                "warning: could not release everything: {}",
                release_errors.join("; ")
            );
        }
        Ok(())
    }
}

/// 0: ran and every expectation held; 1: an expectation failed (an unexpected OOM is one);
/// 2: could not run (stopped at the floor, a device error); 130: interrupted.
fn exit_code(s: &Summary) -> i32 {
    match s.status {
        RunStatus::Interrupted => 130,
        RunStatus::Failed | RunStatus::StoppedAtFloor | RunStatus::Running => 2,
        RunStatus::Completed | RunStatus::Oom => {
            if s.expectations.iter().all(|e| e.held) {
                0
            } else {
                1
            }
        }
    }
}

pub fn write_summary(dir: &Path, summary: &Summary) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(summary).map_err(std::io::Error::other)?;
    text.push(b'\n');
    outdir::write_atomic(&dir.join("summary.json"), &text)
}

/// Whether `label` (as in `phase/step`) matches an OOM expectation.
pub fn oom_matches(expect: &OomExpectation, phase: &str, step: &str) -> bool {
    match expect {
        OomExpectation::None => false,
        OomExpectation::Any => true,
        OomExpectation::At(at) => {
            let full = format!("{phase}/{step}");
            full == *at || full.starts_with(&format!("{at}."))
        }
    }
}
