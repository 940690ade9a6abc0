//! A watched job's part of `summary.json` (`headroom watch`): what ran or was attached to and
//! how it ended, how each view was read and how fast, the job's processes, its phases' marks,
//! and every out-of-memory message in its output with the views at that instant and a
//! diagnosis. Written as the top-level key `watch` beside the run's own keys, so every reader
//! of a run folder reads a watch folder too.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::cause::Cause;
use crate::device::ProcessUsage;
use crate::report::summary::Summary;
use crate::sampler::{Percentiles, SamplerStats};

/// The environment variable that names the file or FIFO a job writes phase marks to.
pub const MARK_ENV: &str = "HEADROOM_MARK";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WatchSection {
    pub job: JobInfo,
    pub sampling: Sampling,
    /// headroom's own CUDA context (`--cuda-info`) and what creating it took.
    pub cuda_context: Option<ContextCost>,
    /// Every process of the job NVML listed (at most `MAX_JOB_PROCESSES`), by first sight.
    pub job_processes: Vec<JobProcess>,
    /// Why `job_used_bytes` may miss part of the job (listed PIDs not visible from here).
    pub processes_doubt: Option<String>,
    pub marks: Marks,
    pub ooms: Vec<WatchOom>,
    /// Messages past the first 100, counted only.
    #[serde(default)]
    pub ooms_beyond_limit: u64,
    /// How long device free took to come back within a page of the idle reading after the
    /// job ended (the driver frees a dead process's memory late); `None` when it did not.
    pub release_settle_ns: Option<u64>,
}

/// The most processes of one job listed in the summary (a data loader can fork many).
pub const MAX_JOB_PROCESSES: usize = 64;

/// What was watched and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobInfo {
    /// The command as given (`watch -- CMD…`); `None` when attached to a running process.
    pub command: Option<Vec<String>>,
    /// The launched child, or the process attached to.
    pub pid: u32,
    pub attached: bool,
    /// How the child ended; `None` when attached (another process's status cannot be read).
    pub exit: Option<JobExit>,
    /// The job's memory when the watch started: 0 for a job launched then; for a process
    /// attached to, its processes' total in NVML's list then (`None` if unknown).
    pub job_used_at_start_bytes: Option<u64>,
    pub ended_by: EndedBy,
    /// Signals headroom received while the job ran, and whether it passed each on.
    pub signals: Vec<ReceivedSignal>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// The job exited (launched) or disappeared (attached).
    Exit,
    /// `--duration` ran out (a launched job is then sent SIGTERM).
    Duration,
    /// headroom was interrupted (SIGINT, SIGTERM, SIGHUP).
    Signal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobExit {
    /// The exit code, when the child exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// The status a shell reports (`code`, or 128 + `signal`): headroom's own exit code.
    pub status: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReceivedSignal {
    pub t_ns: u64,
    /// `SIGINT`, `SIGTERM`, `SIGHUP`.
    pub signal: String,
    /// `terminal` (Ctrl-C at the terminal reaches the job's process group itself), `process`
    /// (sent to headroom alone), or `duration` (headroom ended the job at `--duration`).
    pub origin: String,
    /// Whether headroom sent it to the job (it does not when the job already got it, and never
    /// to a process it attached to).
    pub forwarded: bool,
}

/// How each view was read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Sampling {
    /// Where `device_used_bytes` came from: `nvml` (memory info, no CUDA context),
    /// `cuda` (`cuMemGetInfo` from headroom's own context, `--cuda-info`) or `sim-script`.
    pub device_view: String,
    /// Where `job_used_bytes` came from: `nvml` (the process list) or `sim-script`.
    pub job_view: String,
    /// True when the figures come from a usage script on the simulated device, not a driver.
    pub modeled: bool,
    /// The device view's interval as asked (`--interval`; 0: back to back).
    pub device_interval_ns: u64,
    pub process_list: ProcessListSampling,
}

/// The process list: read slower than the device, at a rate chosen from its measured cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcessListSampling {
    /// `--process-interval` when given.
    pub asked_interval_ns: Option<u64>,
    /// The interval used.
    pub interval_ns: u64,
    /// Why that interval.
    pub interval_reason: String,
    /// One call's cost, measured before the job started.
    pub call_latency: Percentiles,
    /// What the process-list sampler achieved while the job ran.
    pub stats: SamplerStats,
    /// Readings whose `job_used_bytes` differed from the reading before.
    pub changes: u64,
    /// The shortest time between two such changes.
    pub shortest_change_interval_ns: Option<u64>,
    /// Set when `job_used_bytes` has a coarser resolution than `device_used_bytes`.
    pub resolution_note: Option<String>,
    /// The share of the watch spent inside process-list calls (each holds NVML's global
    /// lock): their summed time over the time watched.
    #[serde(default)]
    pub lock_share: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextCost {
    /// NVML's whole-device used before and after headroom created its context.
    pub nvml_used_before_bytes: u64,
    pub nvml_used_after_bytes: u64,
    /// after − before: device memory headroom's own context holds while it watches.
    pub cost_bytes: i64,
    pub create_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobProcess {
    pub pid: u32,
    /// The most NVML listed for it (context included).
    pub peak_used_bytes: u64,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Marks {
    /// The FIFO passed to the job in `HEADROOM_MARK` (removed afterwards); `None` when
    /// attached.
    pub path: Option<String>,
    /// Lines read (each starts a phase; an empty line ends the current one).
    pub lines: u64,
    /// Marks past the phase limit, counted in the last phase instead of starting one.
    pub beyond_limit: u64,
}

/// The most phases a job can mark; later marks stay in the last phase.
pub const MAX_PHASES: usize = 512;

/// An out-of-memory message in the job's stderr, with headroom's own readings at that instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WatchOom {
    /// When the message's first line reached headroom.
    pub t_ns: u64,
    pub utc: String,
    pub phase: Option<String>,
    /// 1-based line of the job's stderr where the message starts.
    pub stderr_line: usize,
    /// The explain format name (`pytorch-caching`, …).
    pub format: String,
    pub raised_as: Option<String>,
    pub text: String,
    pub at: ViewsAt,
    pub cause: Option<Cause>,
    pub secondary_causes: Vec<Cause>,
    pub summary: String,
    pub ruled_out: Vec<String>,
    /// Questions the message's precision cannot settle.
    pub undecided: Vec<String>,
    pub findings: Vec<String>,
    /// The message's figures next to headroom's readings at that instant.
    pub measured: Vec<String>,
    pub next_checks: Vec<NextCheck>,
    /// The message's figures (byte intervals) and the arithmetic, as `headroom explain --json`.
    pub explanation: serde_json::Value,
}

/// headroom's latest readings when a message arrived.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ViewsAt {
    pub device_reading_t_ns: Option<u64>,
    pub device_free_bytes: Option<u64>,
    pub device_used_bytes: Option<u64>,
    /// The highest device used in the second before the message: a failed step may have
    /// released memory before its message was printed.
    pub device_used_max_last_second_bytes: Option<u64>,
    pub job_reading_t_ns: Option<u64>,
    pub job_used_bytes: Option<u64>,
    pub processes: Option<Vec<ProcessUsage>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NextCheck {
    /// `shell`, or `python` (a line for the failing program).
    pub kind: String,
    pub command: String,
    pub why: String,
}

/// The `watch` section of a folder's `summary.json`, when it is a watch.
pub fn load(dir: &Path) -> anyhow::Result<Option<WatchSection>> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let s: Summary = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a readable summary", path.display()))?;
    Ok(s.watch)
}
