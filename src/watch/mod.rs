//! `headroom watch`: the true peak of a user's own job, not only of headroom's workloads.
//!
//! headroom runs the job as a child (or attaches to a running process) and samples, until it
//! ends: device used through NVML at `--interval` (no CUDA context: watching takes no device
//! memory), and the job's own memory from NVML's process list — summed over its process tree —
//! at a slower interval chosen from the list's measured cost. The job can mark phases through
//! a FIFO named in `HEADROOM_MARK`; its stderr passes through unchanged while every CUDA
//! out-of-memory message in it is recorded with headroom's readings at that instant and a
//! diagnosis. Signals to headroom reach the job; headroom exits with the job's status. The
//! result folder is a run's: timeline, events, summary (idle, true and polled peaks, release),
//! plots, report, JUnit and trace.

mod drive;
pub mod evidence;
mod finish;
pub mod marks;
pub mod proctree;
pub mod sampling;
pub mod script;
pub mod session;
pub mod signals;
pub mod source;
pub mod stderr;
pub mod table;

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use anyhow::{Context, bail};

use crate::cli::DeviceArgs;
use crate::record::timeline::{EventLog, Recorder};
use crate::record::{NO_PHASE, Reading, Source, ViewSet};
use crate::report::summary::{Idle, IdleReading, Peaks, RunStatus, Summary, WorkloadInfo};
use crate::report::watch::{
    EndedBy, JobExit, JobInfo, MARK_ENV, Marks, ProcessListSampling, Sampling, WatchSection,
};
use crate::units::{utc_folder_stamp, utc_timestamp};
use crate::watch::sampling::{JobReading, Tree};
use crate::watch::source::{CudaInfo, DeviceProbe, NvmlProbe, Origin, ProcessProbe};

/// What the samplers, the mark reader and the stderr reader send to the watch loop.
pub enum Msg {
    Reading(Reading),
    Job(JobReading),
    Mark(marks::Mark),
    Oom(Box<stderr::StderrOom>),
    /// The job's stderr reached its end.
    StderrClosed,
}

/// What to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Run this command as a child.
    Launch(Vec<OsString>),
    /// A process already running.
    Attach(u32),
}

#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub target: Target,
    /// The device view's interval (0: back to back).
    pub interval_ns: u64,
    /// The process list's interval; `None` chooses it from the list's cost.
    pub process_interval_ns: Option<u64>,
    /// Stop watching after this long (a launched job is then sent SIGTERM).
    pub duration_ns: Option<u64>,
    pub out_dir: Option<PathBuf>,
    pub results_root: PathBuf,
    /// Read `cuMemGetInfo` from headroom's own context (which costs device memory).
    pub cuda_info: bool,
    /// Replay this usage script on the simulated device instead of reading a driver.
    pub sim_script: Option<PathBuf>,
}

/// A finished watch.
pub struct WatchReport {
    pub dir: PathBuf,
    pub summary: Summary,
    pub watch: WatchSection,
    /// The job's status (launched), 0 (attached), as headroom exits.
    pub exit_code: i32,
}

/// Where readings come from, for one watch.
pub(crate) struct Inputs<'a> {
    pub device: &'a dyn DeviceProbe,
    pub list: &'a dyn ProcessProbe,
    /// `--cuda-info`: device rows, idle and release from `cuMemGetInfo`.
    pub cuda: Option<CudaInfo>,
    pub sim: Option<&'a script::SimJob>,
    pub device_view: &'static str,
    pub job_view: &'static str,
}

impl Inputs<'_> {
    /// Device free now, from the device view's source.
    pub fn free_now(&mut self) -> anyhow::Result<u64> {
        match &mut self.cuda {
            Some(c) => Ok(c
                .device
                .mem_info()
                .context("cuMemGetInfo failed")?
                .free_bytes),
            None => Ok(self.device.read().map_err(anyhow::Error::msg)?.free_bytes),
        }
    }

    pub fn modeled(&self) -> bool {
        self.sim.is_some()
    }
}

/// Watches a job (or a process) and writes its result folder.
pub fn watch(
    dev: &DeviceArgs,
    opts: &WatchOptions,
    interrupted: &AtomicBool,
) -> anyhow::Result<WatchReport> {
    let origin = Instant::now();
    let origin_wall = SystemTime::now();
    match &opts.target {
        Target::Launch(argv) if argv.is_empty() => bail!("no command to watch: give it after --"),
        Target::Attach(pid) if !proctree::still_running(*pid, None) => {
            bail!("--pid {pid}: no such process")
        }
        _ => {}
    }
    let opened = source::open(dev, opts.sim_script.as_deref(), opts.cuda_info, origin)?;
    let info = opened.info;
    let clock = (origin, origin_wall);
    match opened.origin {
        Origin::Sim(job) => {
            let inputs = Inputs {
                device: &*job,
                list: &*job,
                cuda: None,
                sim: Some(&*job),
                device_view: "sim-script",
                job_view: "sim-script",
            };
            run(info, inputs, opts, clock, interrupted)
        }
        Origin::Nvml { nvml, cuda } => {
            let probe = NvmlProbe::new(&nvml)?;
            let device_view = if cuda.is_some() { "cuda" } else { "nvml" };
            let inputs = Inputs {
                device: &probe,
                list: &probe,
                cuda,
                sim: None,
                device_view,
                job_view: "nvml",
            };
            run(info, inputs, opts, clock, interrupted)
        }
    }
}

/// The job as started: a child, or the process attached to.
pub(crate) enum Job {
    Child {
        child: std::process::Child,
        pid: u32,
    },
    Attached {
        pid: u32,
        start_time: Option<u64>,
    },
}

impl Job {
    pub fn pid(&self) -> u32 {
        match self {
            Job::Child { pid, .. } | Job::Attached { pid, .. } => *pid,
        }
    }
}

fn job_name(target: &Target) -> String {
    match target {
        Target::Launch(argv) => Path::new(&argv[0])
            .file_name()
            .map_or("job".into(), |n| n.to_string_lossy().into_owned()),
        Target::Attach(pid) => format!("pid-{pid}"),
    }
}

fn run(
    info: crate::device::DeviceInfo,
    mut inputs: Inputs<'_>,
    opts: &WatchOptions,
    (origin, origin_wall): (Instant, SystemTime),
    interrupted: &AtomicBool,
) -> anyhow::Result<WatchReport> {
    let since = |t: Instant| t.saturating_duration_since(origin).as_nanos() as u64;
    // The process list's cost decides how often it is read.
    // A driver without a usable process list (some vGPU and MIG setups) still gives the
    // device view: the job's is then not read, and the report says why.
    let (call, list_error) = match sampling::measure_process_list(inputs.list, 9) {
        Ok(h) => (h.percentiles(), None),
        Err(e) => {
            eprintln!(
                "warning: the driver's process list cannot be read ({e:#}): job_used_bytes will not be recorded"
            );
            (Default::default(), Some(format!("{e:#}")))
        }
    };
    let (process_interval_ns, interval_reason) = match &list_error {
        None => sampling::process_interval(opts.process_interval_ns, opts.interval_ns, call.p50_ns),
        Some(e) => (
            0,
            format!("not read: the process list failed before the job started ({e})"),
        ),
    };

    // The idle reading: before the job starts (or, attached, as it runs).
    let idle_free = inputs.free_now().context("the idle reading failed")?;
    let idle_t = since(Instant::now());
    let idle_processes = inputs.list.processes().ok();
    let total_bytes = match &inputs.cuda {
        Some(c) => c.device.info().total_bytes,
        None => idle_free + inputs.device.read().map_or(0, |r| r.used_bytes),
    };
    let idle_nvml = match &mut inputs.cuda {
        Some(c) => c.device.nvml_memory(),
        None => None,
    };
    let dir_existed = opts.out_dir.as_ref().is_some_and(|d| d.exists());
    let dir = crate::outdir::create(
        opts.out_dir.as_deref(),
        &opts.results_root,
        &utc_folder_stamp(origin_wall),
        &job_name(&opts.target),
    )?;
    if interrupted.load(Ordering::SeqCst) {
        bail!("interrupted before the job started");
    }
    signals::install().context("cannot install the signal handlers")?;

    // Launch (or attach) right after a reading at the start, the pollers' first tick.
    let fifo = match opts.target {
        Target::Launch(_) => Some(marks::MarkFifo::create()?),
        Target::Attach(_) => None,
    };
    let start_free = inputs.free_now().context("reading the device failed")?;
    let start_ns = since(Instant::now());
    let (mut job, stderr_pipe) = match &opts.target {
        Target::Launch(argv) => {
            // Orphans of the job are re-parented to headroom, so they stay in its tree.
            // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
            unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]).stderr(Stdio::piped());
            if let Some(f) = &fifo {
                cmd.env(MARK_ENV, f.path());
            }
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    if !dir_existed {
                        let _ = std::fs::remove_dir(&dir);
                    }
                    return Err(e)
                        .with_context(|| format!("cannot start {}", argv[0].to_string_lossy()));
                }
            };
            let pipe = child.stderr.take();
            let pid = child.id();
            (Job::Child { child, pid }, pipe)
        }
        Target::Attach(pid) => (
            Job::Attached {
                pid: *pid,
                start_time: proctree::start_time(*pid),
            },
            None,
        ),
    };
    let pid = job.pid();
    if let Some(sim) = inputs.sim {
        sim.start(pid);
    }
    let tree = match job {
        Job::Child { .. } => Tree {
            root: std::process::id(),
            exclude: std::process::id(),
        },
        Job::Attached { pid, .. } => Tree {
            root: pid,
            exclude: std::process::id(),
        },
    };
    let job_at_idle: Option<u64> = match job {
        _ if list_error.is_some() => None,
        Job::Attached { .. } => idle_processes
            .as_deref()
            .and_then(|ps| tree.split(ps).0.iter().map(|m| m.1).sum()),
        Job::Child { .. } => Some(0),
    };

    let mut recorder = Recorder::create(&dir, Vec::new(), total_bytes, start_ns)
        .with_context(|| format!("cannot create {}", dir.join("timeline.csv").display()))?;
    let mut events = EventLog::create(&dir)
        .with_context(|| format!("cannot create {}", dir.join("events.csv").display()))?;
    events.set_flush_each_row(true);
    recorder.push(Reading {
        t_ns: idle_t,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle_free,
        views: job_at_idle.map_or(ViewSet::default(), |b| {
            ViewSet::default().with(crate::record::View::JobUsed, b)
        }),
    });
    let command = match &opts.target {
        Target::Launch(argv) => Some(
            argv.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>(),
        ),
        Target::Attach(_) => None,
    };
    let summary = Summary {
        format_version: crate::record::timeline::FORMAT_VERSION,
        headroom_version: env!("CARGO_PKG_VERSION").to_string(),
        status: RunStatus::Running,
        status_detail: None,
        exit_code: None,
        workload: WorkloadInfo {
            name: job_name(&opts.target),
            file: command.as_deref().map_or(
                format!("pid {pid}"),
                crate::report::watch_markdown::shell_words,
            ),
            description: match &opts.target {
                Target::Launch(_) => format!("headroom watch of a job started as pid {pid}"),
                Target::Attach(_) => format!("headroom watch attached to pid {pid}"),
            },
            // headroom allocates nothing here: the job's memory is its own allocator's.
            allocator: crate::alloc::AllocatorKind::Direct,
            allocator_settings: serde_json::json!({
                "watch": "headroom allocated nothing: the job's memory is whatever its own allocator took from the driver"
            }),
            sample_interval_ns: opts.interval_ns,
            keep_free_bytes: 0,
            allow_oom: true,
        },
        device: info,
        started_utc: utc_timestamp(origin_wall),
        finished_utc: None,
        start_ns,
        end_ns: None,
        idle: Idle {
            before_context: inputs.cuda.as_ref().map(|c| c.before).or(idle_nvml),
            after_context: IdleReading {
                t_ns: idle_t,
                device_free_bytes: idle_free,
                device_used_bytes: total_bytes.saturating_sub(idle_free),
                device_total_bytes: total_bytes,
                nvml: idle_nvml,
            },
            context_overhead_bytes: inputs
                .cuda
                .as_ref()
                .map(|c| c.cost.cost_bytes.max(0) as u64),
            kernels: None,
            processes: idle_processes.clone(),
            processes_doubt: None,
        },
        phases: Vec::new(),
        peaks: Peaks {
            run: Default::default(),
            headroom_at_peak_bytes: None,
            polled: Default::default(),
            pool_high_water: None,
        },
        sampler: Default::default(),
        sampler_perturbation: None,
        latency: Default::default(),
        ooms: Vec::new(),
        mismatches: Vec::new(),
        expectations: Vec::new(),
        release: None,
        allocator_stats: None,
        plan: None,
        graphs: None,
        timeline_rows: 0,
        event_rows: 0,
        watch: None,
    };
    let watch = WatchSection {
        job: JobInfo {
            command,
            pid,
            attached: matches!(job, Job::Attached { .. }),
            exit: None,
            job_used_at_start_bytes: job_at_idle,
            ended_by: EndedBy::Exit,
            signals: Vec::new(),
        },
        sampling: Sampling {
            device_view: inputs.device_view.to_string(),
            job_view: inputs.job_view.to_string(),
            modeled: inputs.modeled(),
            device_interval_ns: opts.interval_ns,
            process_list: ProcessListSampling {
                asked_interval_ns: opts.process_interval_ns,
                interval_ns: process_interval_ns,
                interval_reason,
                call_latency: call,
                stats: Default::default(),
                changes: 0,
                shortest_change_interval_ns: None,
                resolution_note: None,
                lock_share: None,
            },
        },
        cuda_context: inputs.cuda.as_ref().map(|c| c.cost),
        job_processes: Vec::new(),
        processes_doubt: None,
        marks: Marks {
            path: fifo.as_ref().map(|f| f.path().display().to_string()),
            lines: 0,
            beyond_limit: 0,
        },
        ooms: Vec::new(),
        ooms_beyond_limit: 0,
        release_settle_ns: None,
    };
    crate::report::watch::write_summary(&dir, &summary, &watch)
        .with_context(|| format!("cannot write {}", dir.join("summary.json").display()))?;
    let idle_pids: HashSet<u32> = idle_processes.iter().flatten().map(|p| p.pid).collect();
    let mut session = session::Session::new(session::Start {
        origin,
        origin_wall,
        dir,
        recorder,
        events,
        summary,
        watch,
        idle_pids,
        start_ns,
        total_bytes,
        start_job_bytes: job_at_idle,
        start_free_bytes: start_free,
    });
    session.on_reading(Reading {
        t_ns: start_ns,
        phase: NO_PHASE,
        source: Source::Sampler,
        device_free_bytes: start_free,
        views: ViewSet::default(),
    });
    let detail = match &job {
        Job::Child { .. } => format!("started as pid {pid}"),
        Job::Attached { .. } => format!("attached to pid {pid}"),
    };
    let name = session.summary.workload.file.clone();
    session.job_event(start_ns, "start", &name, "ok", &detail);
    let plan = drive::Plan {
        interval_ns: opts.interval_ns,
        process_interval_ns: (list_error.is_none()).then_some(process_interval_ns),
        duration_ns: opts.duration_ns,
        tree,
    };
    let end = drive::drive(
        &mut session,
        &mut inputs,
        &mut job,
        fifo,
        stderr_pipe,
        &plan,
    );
    // Attached: the release is judged against the device without the job's memory.
    let release_ref = job_at_idle.map(|j| idle_free + j);
    finish::finish(session, &mut inputs, end, release_ref)
}

/// A job's exit status as a shell reports it.
pub fn job_exit(status: std::process::ExitStatus) -> JobExit {
    use std::os::unix::process::ExitStatusExt;
    let code = status.code();
    let signal = status.signal();
    JobExit {
        code,
        signal,
        status: code.unwrap_or_else(|| 128 + signal.unwrap_or(0)),
    }
}
