//! The start of a watch: how often the process list is read, the job started or attached
//! to, and the summary and watch records as they stand before the first reading.

use std::os::fd::AsFd;
use std::path::Path;
use std::process::{ChildStderr, Command, Stdio};
use std::time::SystemTime;

use anyhow::Context;

use crate::device::NvmlMemory;
use crate::device::ProcessUsage;
use crate::report::summary::{Idle, IdleReading, Summary, SummaryStart, WorkloadInfo};
use crate::report::watch::{
    EndedBy, JobInfo, MARK_ENV, Marks, ProcessListSampling, Sampling, WatchSection,
};
use crate::sampler::Percentiles;
use crate::units::utc_timestamp;

use super::{Inputs, Job, Target, WatchOptions, job_name, marks, proctree, sampling};

/// How the job's own memory will be sampled.
pub(super) struct ProcessListPlan {
    /// What one read of the process list cost (nine reads).
    pub call_latency: Percentiles,
    /// Why the list cannot be read, when it cannot.
    pub error: Option<String>,
    /// The interval chosen (0 when not read), and why.
    pub interval_ns: u64,
    pub reason: String,
}

/// How often the job's own memory is read, from what one read of the process list costs. A
/// driver without a usable process list (some vGPU and MIG setups) still gives the device
/// view: the job's is then not read, and the report says why.
pub(super) fn plan_process_list(inputs: &Inputs<'_>, opts: &WatchOptions) -> ProcessListPlan {
    let (call_latency, error) = match sampling::measure_process_list(inputs.list, 9) {
        Ok(h) => (h.percentiles(), None),
        Err(e) => {
            crate::errln!(
                "warning: the driver's process list cannot be read ({e:#}): job_used_bytes will not be recorded"
            );
            (Default::default(), Some(format!("{e:#}")))
        }
    };
    let (interval_ns, reason) = match &error {
        None => sampling::process_interval(
            opts.process_interval_ns,
            opts.interval_ns,
            call_latency.p50_ns,
        ),
        Some(e) => (
            0,
            format!("not read: the process list failed before the job started ({e})"),
        ),
    };
    ProcessListPlan {
        call_latency,
        error,
        interval_ns,
        reason,
    }
}

/// Starts the job as a child (its stderr piped to headroom, `HEADROOM_MARK` naming the mark
/// FIFO; under `--json` its stdout on headroom's stderr, so headroom's stdout carries the one
/// JSON document), or attaches to the process. A job that cannot start leaves no folder
/// behind.
pub(super) fn start_job(
    opts: &super::WatchOptions,
    fifo: Option<&marks::MarkFifo>,
    dir: &Path,
    dir_existed: bool,
) -> anyhow::Result<(Job, Option<ChildStderr>)> {
    Ok(match &opts.target {
        Target::Launch(argv) => {
            // Orphans of the job are re-parented to headroom, so they stay in its tree.
            // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
            unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]).stderr(Stdio::piped());
            if opts.job_stdout_to_stderr {
                // A closed stderr leaves nowhere to put it: the job's stdout is dropped.
                cmd.stdout(
                    std::io::stderr()
                        .as_fd()
                        .try_clone_to_owned()
                        .map_or_else(|_| Stdio::null(), Stdio::from),
                );
            }
            if let Some(f) = fifo {
                cmd.env(MARK_ENV, f.path());
            }
            cmd.envs(opts.job_env.iter().map(|(k, v)| (k, v)));
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    if !dir_existed {
                        let _ = std::fs::remove_dir(dir);
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
    })
}

/// The command as words, for a launched job.
pub(super) fn command_words(target: &Target) -> Option<Vec<String>> {
    match target {
        Target::Launch(argv) => Some(
            argv.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        ),
        Target::Attach(_) => None,
    }
}

/// What the first summary is made of.
pub(super) struct Record<'a> {
    pub info: crate::device::DeviceInfo,
    pub opts: &'a WatchOptions,
    pub inputs: &'a Inputs<'a>,
    pub command: Option<&'a [String]>,
    pub pid: u32,
    pub origin_wall: SystemTime,
    pub start_ns: u64,
    pub idle_t: u64,
    pub idle_free: u64,
    pub total_bytes: u64,
    pub idle_nvml: Option<NvmlMemory>,
    pub idle_processes: Option<Vec<ProcessUsage>>,
    /// Why there is no idle process list, when there is none.
    pub idle_processes_unavailable: Option<String>,
}

/// The summary as it stands when the job starts: `running`, with the idle reading.
pub(super) fn initial_summary(r: Record<'_>) -> Summary {
    let Record {
        info,
        opts,
        inputs,
        command,
        pid,
        origin_wall,
        start_ns,
        idle_t,
        idle_free,
        total_bytes,
        idle_nvml,
        idle_processes,
        idle_processes_unavailable,
    } = r;
    Summary::begin(SummaryStart {
        workload: WorkloadInfo {
            name: job_name(&opts.target),
            file: command.map_or(
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
        start_ns,
        idle_basis: None,
        idle: Some(Idle {
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
            processes: idle_processes,
            processes_doubt: None,
            processes_unavailable: idle_processes_unavailable,
        }),
        phases: Vec::new(),
        sampler_perturbation: None,
        plan: None,
    })
}

/// The watch record as it stands when the job starts.
pub(super) fn watch_section(
    opts: &WatchOptions,
    inputs: &Inputs<'_>,
    command: Option<Vec<String>>,
    job: &Job,
    job_at_idle: Option<u64>,
    lp: &ProcessListPlan,
    mark_path: Option<String>,
) -> WatchSection {
    let pid = job.pid();
    WatchSection {
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
                interval_ns: lp.interval_ns,
                interval_reason: lp.reason.clone(),
                call_latency: lp.call_latency,
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
            path: mark_path,
            lines: 0,
            beyond_limit: 0,
        },
        ooms: Vec::new(),
        ooms_beyond_limit: 0,
        release_settle_ns: None,
    }
}
