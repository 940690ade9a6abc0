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
pub mod early;
pub mod evidence;
mod finish;
pub mod marks;
pub mod proctree;
pub mod sampling;
pub mod script;
pub mod session;
pub mod signals;
pub mod source;
mod start;
pub mod stderr;
pub mod table;

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use anyhow::{Context, bail};

use crate::device::reading::Reader;
use crate::device_args::DeviceArgs;
use crate::record::{NO_PHASE, Reading, Source, ViewSet};
use crate::report::summary::Summary;
use crate::report::watch::{JobExit, WatchSection};
use crate::units::utc_folder_stamp;
use crate::watch::sampling::{JobReading, Tree};
use crate::watch::source::{CudaInfo, NvmlProbe, Origin, ProcessProbe};

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
    /// Send a launched job's stdout to headroom's stderr (`--json`: stdout holds one document).
    pub job_stdout_to_stderr: bool,
    /// Variables set in a launched job's environment (`--torch`: its bootstrap).
    pub job_env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// `--keep-orphans`: end the watch when the job's own process exits, leaving the processes
    /// it started running (named on stderr and in `events.csv`).
    pub keep_orphans: bool,
    /// Hears where the watch's record stands (what is known before the folder exists, then
    /// the folder's late-write handle once its record has begun, then its end): the command
    /// arms the watchdog's record with it, so that a driver call that never returns, before
    /// the folder or after, still leaves the folder `failed`.
    pub on_record: OnRecord,
}

/// Where a watch's record stands, for `WatchOptions::on_record`.
pub enum Recording {
    /// Before the folder: the watchdog makes it from what is known so far.
    Pending(Box<early::Pending>),
    /// The folder's late-write handle, with the watch's clock origin.
    Begun(crate::folder::LateWrite, Instant),
    /// The watch no longer writes the folder.
    Ended,
}

/// See `WatchOptions::on_record`.
pub type OnRecord = fn(Recording);

/// Tells `on_record` that the watch no longer writes the folder, however `watch` returns.
struct RecordArmed(OnRecord);

impl Drop for RecordArmed {
    fn drop(&mut self) {
        (self.0)(Recording::Ended);
    }
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
    pub device: &'a dyn Reader,
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
                .context("reading device memory")?
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
    let clock = (origin, origin_wall);
    // From the device's facts on (before NVML's first call), a hung call leaves a folder.
    let _armed = RecordArmed(opts.on_record);
    let arm = |info: &crate::device::DeviceInfo| {
        (opts.on_record)(Recording::Pending(Box::new(early::Pending::new(
            opts, clock, info,
        ))));
    };
    let opened = source::open(
        dev,
        opts.sim_script.as_deref(),
        opts.cuda_info,
        origin,
        &arm,
    )?;
    let info = opened.info;
    let pending = early::Pending::new(opts, clock, &info);
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
            run(info, inputs, opts, (clock, &pending), interrupted)
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
            run(info, inputs, opts, (clock, &pending), interrupted)
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
    ((origin, origin_wall), pending): ((Instant, SystemTime), &early::Pending),
    interrupted: &AtomicBool,
) -> anyhow::Result<WatchReport> {
    let since = |t: Instant| t.saturating_duration_since(origin).as_nanos() as u64;
    let lp = start::plan_process_list(&inputs, opts);
    // The idle reading: before the job starts (or, attached, as it runs).
    let idle_free = inputs.free_now().context("the idle reading failed")?;
    let idle_t = since(Instant::now());
    (opts.on_record)(Recording::Pending(Box::new(pending.with_idle(
        idle_t,
        idle_free,
        info.total_bytes,
    ))));
    let (idle_processes, idle_processes_unavailable) = match inputs.list.processes() {
        Ok(ps) => (Some(ps), None),
        Err(why) => (None, Some(why)),
    };
    let total_bytes = match &inputs.cuda {
        Some(c) => c.device.info().total_bytes,
        None => idle_free + inputs.device.read().map_or(0, |r| r.used_bytes()),
    };
    (opts.on_record)(Recording::Pending(Box::new(pending.with_idle(
        idle_t,
        idle_free,
        total_bytes,
    ))));
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
    (opts.on_record)(Recording::Pending(Box::new(
        pending
            .with_idle(idle_t, idle_free, total_bytes)
            .in_dir(&dir),
    )));
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
    let (mut job, stderr_pipe) = start::start_job(opts, fifo.as_ref(), &dir, dir_existed)?;
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
        _ if lp.error.is_some() => None,
        Job::Attached { .. } => idle_processes
            .as_deref()
            .and_then(|ps| tree.split(ps).0.iter().map(|m| m.1).sum()),
        Job::Child { .. } => Some(0),
    };

    let mut record = crate::folder::Record::create(&dir, Vec::new(), total_bytes, start_ns)?;
    record.set_flush_each_row(true);
    record.reading(Reading {
        t_ns: idle_t,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle_free,
        views: job_at_idle.map_or(ViewSet::default(), |b| {
            ViewSet::default().with(crate::record::View::JobUsed, b)
        }),
    });
    let command = start::command_words(&opts.target);
    let summary = start::initial_summary(start::Record {
        info,
        opts,
        inputs: &inputs,
        command: command.as_deref(),
        pid,
        origin_wall,
        start_ns,
        idle_t,
        idle_free,
        total_bytes,
        idle_nvml,
        idle_processes: idle_processes.clone(),
        idle_processes_unavailable,
    });
    let watch = start::watch_section(
        opts,
        &inputs,
        command,
        &job,
        job_at_idle,
        &lp,
        fifo.as_ref().map(|f| f.path().display().to_string()),
    );
    let mut folder = record.with_summary(summary);
    folder.set_watch(watch.clone());
    (opts.on_record)(Recording::Begun(folder.late_write(), origin));
    folder
        .write_summary()
        .with_context(|| format!("cannot write {}", dir.join("summary.json").display()))?;
    let idle_pids: HashSet<u32> = idle_processes.iter().flatten().map(|p| p.pid).collect();
    let mut session = session::Session::new(session::Start {
        origin,
        origin_wall,
        folder,
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
    let name = session.folder.summary().workload().file.clone();
    session.job_event(
        start_ns,
        "start",
        &name,
        crate::record::timeline::EventResult::Ok,
        &detail,
    );
    let plan = drive::Plan {
        interval_ns: opts.interval_ns,
        process_interval_ns: lp.error.is_none().then_some(lp.interval_ns),
        duration_ns: opts.duration_ns,
        tree,
        keep_orphans: opts.keep_orphans,
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
