//! Running a workload on a device and recording every view as it goes.
//!
//! The order of a run (`run_on`): the kernels loaded and the idle reading taken (`setup`),
//! then each phase's steps (`steps`), each one acted out by its handler (`actions`), read back
//! and recorded (`recording`), an OOM with its evidence (`evidence`); after every phase the
//! CSVs are flushed and `summary.json` rewritten, so a later OOM, error or Ctrl-C never loses
//! what came before. Whatever happens, the run then releases everything it took and checks
//! that device free memory is back at the idle reading (`finish`). `holdings` is what the run
//! holds on the device by name; `watchdog` ends a run whose driver call never returns.

mod actions;
mod evidence;
mod finish;
mod holdings;
mod progress;
mod recording;
mod setup;
mod skip;
mod steps;
pub mod watchdog;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use anyhow::Context;

use crate::alloc::Allocator;
use crate::device::select::Opened;
use crate::device::{Device, NvmlMemory};
use crate::folder::RunFolder;
use crate::oom::OomRecord;
use crate::record::{NO_PHASE, Reading, Source, View};
use crate::report::summary::{MismatchRecord, RunStatus, Summary};
use crate::sampler::{LiveViews, StartSampler};
use crate::units::{GIB, utc_folder_stamp};
use crate::workload::Workload;

use actions::Floor;
pub(crate) use actions::GraphRun;
use holdings::Holdings;
use recording::Recording;
pub use skip::record_skipped;

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
    /// How long a step may wait for the driver beyond its own sleeps and spins before the
    /// run is declared wedged (exit 2). `None`: `watchdog::DEFAULT_WATCHDOG_NS` on a real
    /// driver, none on the simulator (whose calls cannot hang).
    pub watchdog_ns: Option<u64>,
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
            watchdog_ns: None,
        }
    }
}

impl RunOptions {
    /// The free-memory floor: the option, else the workload's, else `default_keep_free`.
    pub fn keep_free_bytes_for(&self, wl: &Workload, total_bytes: u64) -> u64 {
        self.keep_free_bytes
            .or(wl.settings.keep_free_bytes)
            .unwrap_or_else(|| default_keep_free(total_bytes))
    }

    pub fn allow_oom_for(&self, wl: &Workload) -> bool {
        self.allow_oom || wl.settings.allow_oom
    }

    pub fn sample_interval_ns_for(&self, wl: &Workload) -> u64 {
        self.sample_interval_ns
            .unwrap_or(wl.settings.sample_interval_ns)
    }

    /// The run's result folder, created for `wl` started at `started`.
    pub fn create_folder(&self, wl: &Workload, started: SystemTime) -> anyhow::Result<PathBuf> {
        crate::outdir::create(
            self.out_dir.as_deref(),
            &self.results_root,
            &utc_folder_stamp(started),
            &wl.name,
        )
    }
}

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

/// What ended the step loop early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    Oom,
    Floor(String),
    Interrupted,
    Failed(String),
}

/// The idle reading the run is measured against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Baseline {
    pub free_bytes: u64,
    pub used_bytes: u64,
    /// Memory other processes held then (0 when their list cannot be believed).
    pub others_bytes: u64,
}

/// What bounds the run: the free-memory floor, Ctrl-C, the watchdog, how tenants start.
pub(crate) struct Limits {
    pub floor: Floor,
    /// Set by Ctrl-C; checked between steps.
    pub interrupted: Arc<AtomicBool>,
    /// The run's watchdog windows (budgeted on real drivers only).
    pub watchdog: watchdog::Watchdog,
    /// The longest `spin` of the workload: what a synchronize may legitimately wait for.
    pub longest_spin_ns: u64,
    /// How `tenant` steps start a real process; `None` on the simulator.
    pub tenant_launch: Option<TenantLaunch>,
}

/// One run in progress: the device and allocator it drives, what it holds, how it records.
pub(crate) struct Runner<'w, 'd> {
    dev: &'d mut dyn Device,
    alloc: Box<dyn Allocator>,
    wl: &'w Workload,
    held: Holdings,
    rec: Recording,
    limits: Limits,
    baseline: Baseline,
    /// Index of the phase running (`NO_PHASE` outside them).
    phase: u32,
    ooms: Vec<OomRecord>,
    mismatches: Vec<MismatchRecord>,
    /// A kernel raised the stack reservation: memory the context keeps.
    context_grew: bool,
}

/// Runs a parsed workload on an opened device and writes its results.
pub fn run(wl: &Workload, mut opened: Opened, opts: &RunOptions) -> anyhow::Result<RunReport> {
    if let Some(n) = &opened.notice {
        crate::output::note(n);
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
    let dir = opts.create_folder(wl, started)?;
    // From here a stuck driver call or a signal the run cannot act on leaves this record.
    let record_on_fire = RecordOnFire::new(&dir);
    let info = device.info().clone();
    let keep_free_bytes = opts.keep_free_bytes_for(wl, info.total_bytes);
    let allow_oom = opts.allow_oom_for(wl);
    let sample_interval_ns = opts.sample_interval_ns_for(wl);
    let mut before = setup::before_first_step(wl, device, before_context, sample_interval_ns)?;

    let alloc = wl.allocator.build(&mut *device).map_err(|e| {
        anyhow::anyhow!(
            "{}: cannot set up the {} allocator: {e}",
            wl.file.display(),
            wl.allocator.kind()
        )
    })?;
    // Every allocator call is logged, so `headroom replay` can try the run's allocations
    // against another allocator or other settings.
    let alloc: Box<dyn Allocator> = Box::new(crate::folder::records::alloc_log(alloc, &dir)?);
    let start_ns = device.now_ns();
    let summary = setup::initial_summary(
        setup::SummaryStart {
            wl,
            device: info.clone(),
            started,
            start_ns,
            sample_interval_ns,
            keep_free_bytes,
            allow_oom,
            plan: opts.plan.clone(),
        },
        &mut before,
    );
    let rec = start_recording(
        wl,
        device,
        &dir,
        summary,
        &before,
        sample_interval_ns,
        opts,
        &*alloc,
    )?;
    let limits = Limits {
        floor: Floor {
            keep_free_bytes,
            allow_oom,
        },
        interrupted: opts.interrupted.clone(),
        watchdog: run_watchdog(opts, info.is_sim()),
        longest_spin_ns: wl.facts.longest_spin_ns,
        tenant_launch: opts.tenant_launch.clone(),
    };
    let mut runner = Runner {
        dev: device,
        alloc,
        wl,
        held: Holdings::new(),
        rec,
        limits,
        baseline: before.baseline,
        phase: NO_PHASE,
        ooms: Vec::new(),
        mismatches: Vec::new(),
        context_grew: false,
    };
    // From here a stuck driver call or a signal the run cannot act on leaves this record.
    record_on_fire.arm(runner.rec.folder.late_write());
    runner.held.graphs.start(wl, &mut *runner.dev)?;
    let views = runner
        .held
        .views(runner.alloc.kind(), &runner.alloc.stats());
    runner.rec.live.publish(views);

    // The record exists from the start: a run that never finishes still has one.
    runner
        .rec
        .folder
        .write_summary()
        .context("writing summary.json")?;
    let stop = runner.run_phases();
    let status = match &stop {
        None => RunStatus::Completed,
        Some(Stop::Oom) => RunStatus::Oom,
        Some(Stop::Floor(_)) => RunStatus::StoppedAtFloor,
        Some(Stop::Interrupted) => RunStatus::Interrupted,
        Some(Stop::Failed(_)) => RunStatus::Failed,
    };
    let detail = match &stop {
        Some(Stop::Floor(m)) | Some(Stop::Failed(m)) => Some(m.clone()),
        Some(Stop::Interrupted) => Some("interrupted by Ctrl-C".into()),
        _ => None,
    };
    runner.rec.folder.set_status(status, detail);
    runner.finish(opts)?;
    drop(record_on_fire);
    let summary = runner.rec.folder.into_summary();
    let exit_code = summary.exit_code().unwrap_or(2);
    Ok(RunReport {
        dir,
        summary,
        exit_code,
    })
}

/// The timeline and event files, the idle reading written first, and the sampler started.
#[allow(clippy::too_many_arguments)]
fn start_recording(
    wl: &Workload,
    device: &mut dyn Device,
    dir: &Path,
    summary: Summary,
    before: &setup::Before,
    sample_interval_ns: u64,
    opts: &RunOptions,
    alloc: &dyn Allocator,
) -> anyhow::Result<Recording> {
    let info = device.info();
    let phase_names: Vec<String> = wl.phases.iter().map(|p| p.name.clone()).collect();
    let mut folder = RunFolder::create(dir, summary, phase_names, device.now_ns())?;
    let record = folder.record_mut();
    // On a real driver every row reaches the file at once: a run that ends inside a wedged
    // driver call keeps every step before it.
    record.set_flush_each_row(!info.is_sim());
    let idle = &before.idle.after_context;
    record.reading(Reading {
        t_ns: idle.t_ns,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle.device_free_bytes,
        views: crate::record::idle_views(alloc.stats().views()),
    });
    // On disk at once with the header: a run killed from here on leaves a typed first row.
    record
        .flush_timeline()
        .with_context(|| format!("cannot write {}", dir.join("timeline.csv").display()))?;
    let live = Arc::new(LiveViews::default());
    live.publish(alloc.stats().views().with(View::OwnBytes, 0));
    // Readings from a thread arrive late; they are held back this long on a real GPU.
    let watermark_slack_ns = if info.is_sim() { 0 } else { 5_000_000 };
    let sampler = device
        .start_sampler(sample_interval_ns, live.clone())
        .context("cannot start the background sampler")?;
    let progress =
        progress::Progress::new(opts.progress, wl.phases.iter().map(|p| p.planned).sum());
    Ok(Recording::new(
        folder,
        live,
        sampler,
        watermark_slack_ns,
        progress,
    ))
}

/// The run's watchdog windows: budgeted by default on a real driver only (the simulator's
/// calls cannot hang).
fn run_watchdog(opts: &RunOptions, is_sim: bool) -> watchdog::Watchdog {
    let slack = match opts.watchdog_ns {
        Some(ns) => Some(ns),
        None if is_sim => None,
        None => watchdog::budget_ns().or(Some(0)),
    };
    watchdog::Watchdog::new(slack.filter(|ns| *ns > 0))
}

/// The run's record is what the watchdog writes while this lives: before the folder has its
/// record, only the folder itself (an empty one is removed); then through the folder's
/// handle.
struct RecordOnFire;

impl RecordOnFire {
    fn new(dir: &Path) -> RecordOnFire {
        watchdog::on_fire(Some(watchdog::early_record(dir.to_path_buf())));
        RecordOnFire
    }

    fn arm(&self, late: crate::folder::LateWrite) {
        watchdog::on_fire(Some(watchdog::run_record(late)));
    }
}

impl Drop for RecordOnFire {
    fn drop(&mut self) {
        watchdog::on_fire(None);
    }
}

impl Runner<'_, '_> {
    /// Everything recorded so far, into `summary`.
    fn fill_summary(&mut self) {
        self.rec.fill_summary();
        self.rec.folder.set_ooms(self.ooms.clone());
        self.rec.folder.set_mismatches(self.mismatches.clone());
        let driver_usage = self
            .rec
            .folder
            .summary()
            .graphs()
            .as_ref()
            .and_then(|g| g.driver_usage);
        let graphs = self.held.graphs.summary(driver_usage);
        self.rec.folder.set_graphs(graphs);
    }
}

/// 0: ran and every expectation held (or was skipped as unfit for the device, as asked); 1:
/// an expectation failed (an unexpected OOM is one); 2: could not run (stopped at the floor, a
/// device error); 130: interrupted.
fn exit_code(s: &Summary) -> i32 {
    match s.status() {
        RunStatus::Interrupted => 130,
        RunStatus::Failed | RunStatus::StoppedAtFloor | RunStatus::Running => 2,
        RunStatus::Skipped => 0,
        RunStatus::Completed | RunStatus::Oom => {
            if s.expectations().iter().all(|e| e.held) {
                0
            } else {
                1
            }
        }
    }
}
