//! The command line, as clap definitions only; `commands` turns it into work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use crate::device_args::DeviceArgs;
use crate::units::{duration_arg, size_arg};

#[derive(Debug, Parser)]
#[command(
    name = "headroom",
    version,
    about = "Put a GPU under defined memory pressure and report the truth about it",
    long_about = "Put a GPU under defined memory pressure and report the truth about it: the idle \
reading next to the true peak of every memory view, OOMs reproduced on purpose with their \
evidence, and planning margins checked on the device. Runs on the simulated device when no \
NVIDIA driver is present.\n\nExit codes: 0 ran and every expectation held; 1 an expectation \
failed (an unexpected OOM is one); 2 could not run (bad input, device error); 130 interrupted."
)]
pub struct Cli {
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the GPUs (or, without a driver, the simulated device profiles).
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a workload file and record every memory view.
    Run(RunArgs),
    /// Measure what the simulator needs from this device and write it as a profile TOML
    /// (load it with --profile FILE).
    Calibrate(CalibrateArgs),
    /// Compare runs of the same workloads on the real GPU and on the simulator: per workload
    /// and view, real vs simulated peak, and whether OOM outcomes agree (exit 1 if not).
    Crosscheck(CrosscheckArgs),
    /// Hold device memory for a while, as another tenant would (used by workloads' `tenant`
    /// step; also usable on its own). Prints one line once the memory is held.
    Hold(HoldArgs),
    /// Fill, verify and copy bandwidth of the harness's kernels next to the driver's
    /// device-to-device copy and cuMemsetD32, measured in one run, as ratios.
    Bandwidth(BandwidthArgs),
    /// Replay an allocation log (headroom's own, RMM's CSV) or a PyTorch memory snapshot
    /// against an allocator on the device: whether it fits, its peak per view, the first
    /// failing request; for a snapshot, how many of PyTorch's segment decisions the model made
    /// again, the smallest device it fits on (--find-capacity) and other settings
    /// (--try-settings).
    Replay(ReplayArgs),
    /// Import another tool's evidence as run folders: `import torch SNAPSHOT` reads a
    /// PyTorch memory snapshot and writes one run folder per device.
    Import(ImportArgs),
    /// The KV budget arithmetic, step by step: capacity − weights − other peak − margin.
    Plan(crate::plan::args::PlanArgs),
    /// Run a capacity plan on the device: measured peaks, unnamed memory, the real admission limit.
    Validate(crate::plan::args::ValidateArgs),
    /// Write a finished run's plots, trace, report.md and junit.xml again from its files.
    Report(ReportArgs),
    /// Two result folders side by side: idle and peak per view, deltas, OOM outcomes.
    Compare(CompareArgs),
    /// Two PyTorch snapshots (or imports, watches, runs): each peak and the difference, by
    /// category and by source line, settings and segments, the largest new allocation.
    #[command(
        long_about = "Diff two PyTorch memory snapshots (pickle or JSON), two `import torch` \
folders, two `watch` folders or two runs: PyTorch's allocated and reserved peaks (and the \
device's and the job's, from a folder) on each side with B − A; at each side's allocated peak, \
the bytes held by category (parameters, activations, gradients, optimizer state, as the stacks \
tell; otherwise unknown) and by source line, the lines that grew or shrank most first; the \
allocator settings and segment counts that differ; the largest allocation live at B's peak \
that A's does not hold at the same line and size. Byte differences are exact.\n\nExit codes: \
0 compared; 2 a side could not be read."
    )]
    Diff(DiffArgs),
    /// Many result folders (a fleet run) into one CSV and a Markdown table per GPU and driver.
    Merge(MergeArgs),
    /// Explain an out-of-memory error message (PyTorch, vLLM, JAX/XLA, TensorFlow, NCCL,
    /// cuBLAS, CUDA): its figures in bytes, the arithmetic, the cause, and what to check next.
    #[command(
        long_about = "Explain out-of-memory error messages: paste one, or give a whole log. For \
each message found: its figures as printed and in bytes (as intervals: a figure printed with two \
decimals is a range), the arithmetic that decides the case, the cause and any secondary ones, \
what the numbers rule out or leave undecided, and the next checks as commands.\n\nExit codes: \
0 at least one message explained; 1 no out-of-memory message recognized (the known formats are \
listed); 2 the input could not be read."
    )]
    Explain(ExplainArgs),
    /// Run a command (or attach to a process) and record the device's and the job's own
    /// memory until it ends: idle vs true vs polled peaks, phases it marks, out-of-memory
    /// messages in its stderr with a diagnosis. Exits with the job's status.
    #[command(
        override_usage = "headroom watch [OPTIONS] -- CMD [ARGS]...\n       headroom watch [OPTIONS] --pid PID",
        long_about = "Run a command (after --) and sample the GPU until it exits: device used \
through NVML at --interval (no CUDA context: watching takes no device memory) and the job's own \
memory from NVML's process list, summed over its process tree, at a slower interval chosen from \
the list's measured cost. The job can mark phases by writing a line to the file named in \
HEADROOM_MARK (docs/headroom_mark.py). Its stderr passes through unchanged; every CUDA \
out-of-memory message in it is recorded with headroom's readings at that instant and a \
diagnosis. Ctrl-C and SIGTERM reach the job. The result folder is a run's: timeline.csv, \
events.csv, summary.json, report.md, plots, junit.xml, trace.json.\n\nExit codes: the job's \
status (128 + the signal that killed it); with --pid, 0 once the watch ends; 2 when the watch \
could not start (bad input, no NVML)."
    )]
    Watch(WatchArgs),
    /// Serve every GPU's true peak since each scraper's previous scrape, per process and pod,
    /// as OpenMetrics at /metrics, for Prometheus (a daemon; docs/fleet.md).
    #[command(
        long_about = "Serve OpenMetrics at http://ADDR/metrics (and /healthz) until SIGTERM: for \
every GPU and MIG instance, device used, reserved and free read through NVML at --interval (no \
CUDA context: it takes no device memory), and for each scraper the peak since its previous \
scrape (a scraper is the `scraper` query parameter, else the client's address and User-Agent), \
the current values, a histogram of the readings, readings taken, missed and the rate achieved; \
DCGM-named twins in MiB (DCGM_FI_DEV_FB_USED, ..._USED_PEAK); per process (NVML's process list \
at --process-interval) its memory and peak with its container and pod from /proc/PID/cgroup. \
An NVML call that does not return is reported as headroom_nvml_call_stuck while the endpoint \
keeps answering.\n\nExit codes: 0 after SIGTERM or Ctrl-C; 2 when it could not start (bad \
input, no NVML, the address in use)."
    )]
    Exporter(ExporterArgs),
    /// List the workloads and capacity plans built into headroom, one line each (`run NAME`,
    /// `validate NAME` take the name from any folder); `workloads show NAME` prints one to
    /// start your own from.
    Workloads(WorkloadsArgs),
    /// Print a shell completion script: `headroom completions bash > /etc/bash_completion.d/headroom`
    /// (zsh: into a directory on $fpath as `_headroom`; fish: `~/.config/fish/completions/headroom.fish`;
    /// PowerShell: add it to $PROFILE).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of headroom or of one command: `headroom man run | man -l -`
    /// (docs/man/ holds them all).
    Man {
        /// The command whose page to print [default: the main page].
        command: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct ExporterArgs {
    /// The address to serve on (loopback by default; 0.0.0.0:PORT for a DaemonSet).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9477")]
    pub listen: String,
    /// How often each device's memory is read; 0ns reads back to back.
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = duration_arg)]
    pub interval: u64,
    /// How often each device's process list is read (a global driver lock: keep it slow).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration_arg)]
    pub process_interval: u64,
    /// How long a process that left the list keeps its series.
    #[arg(long, value_name = "DURATION", default_value = "5min", value_parser = duration_arg)]
    pub process_ttl: u64,
    /// How long a scraper that stopped scraping keeps its window.
    #[arg(long, value_name = "DURATION", default_value = "10min", value_parser = duration_arg)]
    pub scraper_ttl: u64,
    /// An NVML call in progress this long is reported stuck (headroom_nvml_call_stuck).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = duration_arg)]
    pub stuck_after: u64,
    /// The kubelet's pod-resources socket: which pod and container each GPU was allocated to
    /// (headroom_device_allocation), asked at --process-interval.
    #[arg(
        long,
        value_name = "SOCKET",
        default_value = "/var/lib/kubelet/pod-resources/kubelet.sock"
    )]
    pub pod_resources: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct WorkloadsArgs {
    #[command(subcommand)]
    pub action: Option<WorkloadsAction>,
}

#[derive(Debug, Subcommand)]
pub enum WorkloadsAction {
    /// Print a built-in workload or plan as its TOML file: `headroom workloads show quickstart >
    /// mine.toml`.
    Show {
        /// Its name, as `headroom workloads` lists it (`quickstart`, `oom/fragmentation`,
        /// `card`).
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The command to run and watch, after `--` (e.g. `-- python train.py`).
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "pid",
        conflicts_with = "pid"
    )]
    pub command: Vec<std::ffi::OsString>,
    /// Attach to a running process instead (watched until it exits, --duration or Ctrl-C;
    /// it is never signalled).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// How often device used is read; 0ns reads back to back.
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = duration_arg)]
    pub interval: u64,
    /// How often the process list is read [default: 20× its measured cost, at least 10 ms
    /// and at least --interval].
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub process_interval: Option<u64>,
    /// Stop watching after this long (a launched job is then sent SIGTERM, and SIGKILL 10 s
    /// later).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub duration: Option<u64>,
    /// Write results into this folder (new or empty) instead of results/<UTC stamp>-<name>/.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where result folders are created.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub results: PathBuf,
    /// Also read cuMemGetInfo from a CUDA context of headroom's own (which costs device
    /// memory; the cost is measured and reported).
    #[arg(long)]
    pub cuda_info: bool,
    /// Without a driver: replay this usage script (what the job holds over time) on the
    /// simulated device.
    #[arg(long, value_name = "FILE")]
    pub sim_script: Option<PathBuf>,
    /// A PyTorch job: put headroom's bootstrap on its PYTHONPATH, so every process that
    /// imports torch and uses CUDA records its memory history and dumps a snapshot at an OOM,
    /// at exit, on a phase mark and on SIGUSR2 (one per rank and PID, into the folder's
    /// torch/); at the end each is imported and lined up with the device's readings. The
    /// job's outcome is never changed.
    #[arg(long, conflicts_with = "pid")]
    pub torch: bool,
    /// With --torch: the trace entries each process keeps (PyTorch's `max_entries`).
    #[arg(long, value_name = "N", default_value_t = 100_000, requires = "torch")]
    pub torch_max_entries: u64,
    /// End the watch when the job's own process exits and leave the processes it started
    /// running (named on stderr). By default they are the job's: watched until they end, and
    /// sent the signal that ended the job, if one did.
    #[arg(long)]
    pub keep_orphans: bool,
    /// Print summary.json to stdout when the job has ended, and nothing else: the job's own
    /// stdout goes to headroom's stderr instead (`2>job.log` keeps it), so `| jq` reads one
    /// document.
    #[arg(long)]
    pub json: bool,
    /// Print nothing of headroom's own but errors (the job's output still passes through).
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The message (quote it, or give its words; they are joined with spaces); `-` reads
    /// stdin, and a lone argument naming an existing file reads that file.
    #[arg(value_name = "MESSAGE|FILE|-", conflicts_with = "file")]
    pub message: Vec<String>,
    /// Read the text from a file (a whole log is fine), or `-` for stdin [default: stdin when
    /// no MESSAGE is given].
    #[arg(long, value_name = "PATH|-")]
    pub file: Option<PathBuf>,
    /// Print JSON (raw bytes, intervals as {low, high}) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result folders of finished runs (timeline.csv, events.csv, summary.json are never
    /// changed).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The first result folder (A).
    pub a: PathBuf,
    /// The second result folder (B); deltas are B − A.
    pub b: PathBuf,
    /// Print JSON (raw bytes) instead of the text table.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print Markdown tables instead of the text table.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first (older) side: a snapshot file or a result folder.
    pub a: PathBuf,
    /// The second (newer) side.
    pub b: PathBuf,
    /// Print JSON instead of text (docs/schema/diff.schema.json).
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print Markdown tables, for a pull-request comment.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Result folders, node folders (--device all), or folders holding them (e.g. results/).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Write the merged CSV (one row per run) to this file.
    #[arg(long, value_name = "FILE.csv")]
    pub out: Option<PathBuf>,
    /// Replace --out if it already exists.
    #[arg(long, requires = "out")]
    pub force: bool,
    /// Print the CSV to stdout instead of the Markdown table.
    #[arg(long)]
    pub csv: bool,
    /// Leave out incomplete folders (a killed run: summary.json missing or still "running",
    /// CSVs ending mid-row) and list them, instead of failing (exit 2) at the first.
    #[arg(long)]
    pub skip_incomplete: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// What wrote the file: `torch`, a PyTorch memory snapshot.
    #[arg(value_parser = ["torch"])]
    pub tool: String,
    /// The snapshot: the pickle `torch.cuda.memory._dump_snapshot()` writes, or the same
    /// dict as JSON.
    pub snapshot: PathBuf,
    /// Write into this folder (new or empty; one sub-folder per device when there are
    /// several) instead of results/<UTC stamp>-torch-<name>-device<N>/.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where result folders are created.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub results: PathBuf,
    /// Replay with these caching-allocator settings instead of the snapshot's own.
    #[arg(long, value_name = "SETTINGS")]
    pub settings: Option<String>,
    /// Print one JSON array to stdout, an entry per device with its summary.json, instead of
    /// one line per device.
    #[arg(long)]
    pub json: bool,
    /// The device's total memory in bytes (a snapshot does not record it): figures derived
    /// from it (memory outside PyTorch at an OOM) are labeled so.
    #[arg(long, value_name = "BYTES")]
    pub device_total: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The log: headroom's allocator log (`t_ns,action,ptr,bytes,stream,detail`), RMM's
    /// `Thread,Time,Action,Pointer,Size,Stream` CSV, or a PyTorch memory snapshot (pickle or
    /// JSON), told apart by content.
    pub log: PathBuf,
    /// The allocator to replay against.
    #[arg(long, value_enum, default_value_t = crate::alloc::AllocatorKind::Caching)]
    pub allocator: crate::alloc::AllocatorKind,
    /// Caching-allocator settings as PyTorch spells them, e.g.
    /// "max_split_size_mb:128,expandable_segments:True".
    #[arg(long, value_name = "SETTINGS")]
    pub settings: Option<String>,
    /// Skip malformed lines (listing them) instead of stopping at the first.
    #[arg(long)]
    pub keep_going: bool,
    /// Follow the log's timestamps on the device clock (frees pending on busy streams then
    /// complete as they did).
    #[arg(long)]
    pub pace: bool,
    /// Snapshot only: the smallest device memory the trace runs on without running out, for
    /// the given settings (a bisection over simulated devices like --profile's).
    #[arg(long)]
    pub find_capacity: bool,
    /// Snapshot only: the trace under expandable segments, two max_split_size_mb values and
    /// garbage collection too — fits or not, reserved peak, fragmentation at the peak.
    #[arg(long)]
    pub try_settings: bool,
    /// Snapshot only: replay this device's trace (default: every device with a trace).
    #[arg(long, value_name = "N")]
    pub snapshot_device: Option<u32>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Where to write the profile (must not exist) [default: calibrated-profile.toml]; with
    /// --device all or a list, the node folder (new or empty), one profile.toml per GPU.
    #[arg(long, value_name = "FILE|DIR")]
    pub out: Option<PathBuf>,
    /// The profile's name.
    #[arg(long, default_value = "calibrated")]
    pub name: String,
    /// With --device all or a list: also calibrate GPUs other processes are using.
    #[arg(long)]
    pub shared_ok: bool,
}

#[derive(Debug, Args)]
pub struct CrosscheckArgs {
    /// A folder of run folders from the real GPU (e.g. `--results DIR` of `headroom run`).
    pub real: PathBuf,
    /// A folder of run folders of the same workloads on the simulator.
    pub sim: PathBuf,
    /// Also write the table as CSV (raw bytes) to this file (which must not exist).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// How much to hold: a size (8GiB) or, as in workloads, a share of the device's
    /// CUDA-visible total ("50% of total", rounded down to a whole 2 MiB page).
    #[arg(value_parser = size_spec_arg, value_name = "SIZE|N% of total")]
    pub size: crate::units::SizeSpec,
    /// How long to hold it, e.g. 30s (ends early on Ctrl-C, SIGTERM or when the parent exits).
    #[arg(long = "for", value_name = "DURATION", value_parser = duration_arg)]
    pub duration: u64,
}

/// `SIZE` or `N% of total`, as a workload's sizes are written.
fn size_spec_arg(s: &str) -> Result<crate::units::SizeSpec, String> {
    if s.contains('%') {
        crate::units::parse_percent_of_total(s)
            .map(crate::units::SizeSpec::PercentOfTotal)
            .map_err(|e| e.to_string())
    } else {
        size_arg(s).map(crate::units::SizeSpec::Bytes)
    }
}

#[derive(Debug, Args)]
pub struct BandwidthArgs {
    /// Size of each of the three buffers.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = size_arg)]
    pub size: u64,
    /// Timed launches per operation (after one warm-up).
    #[arg(long, default_value_t = 20)]
    pub repeats: u32,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file (which must not exist); with --device all or
    /// a list, the node folder (new or empty), one bandwidth.json per GPU.
    #[arg(long, value_name = "FILE|DIR")]
    pub out: Option<PathBuf>,
    /// With --device all or a list: also measure GPUs other processes are using.
    #[arg(long)]
    pub shared_ok: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workload file (TOML), e.g. workloads/quickstart.toml, or the name of a built-in one
    /// (`quickstart`, `oom/fragmentation`: `headroom workloads` lists them); a file wins.
    pub workload: PathBuf,
    /// Write results into this folder (new or empty) instead of results/<UTC stamp>-<name>/
    /// (with --device all or a list: the node folder, results/<UTC stamp>-node-<name>/).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where result folders are created.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub results: PathBuf,
    /// Let steps go past free memory and into OOM.
    #[arg(long)]
    pub allow_oom: bool,
    /// The run is expected to end in an OOM: exit 0 if it does, 1 if it does not.
    #[arg(long)]
    pub expect_oom: bool,
    /// Free memory a step may not go below unless OOM is allowed (default: 1 GiB, or 1/16 of a
    /// small device).
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub keep_free: Option<u64>,
    /// Background sampler interval, e.g. 1ms, 100us; 0ns reads as fast as the query allows.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub sample_interval: Option<u64>,
    /// How long a step may wait for the driver, beyond its own sleeps and spins, before the
    /// run is declared wedged and ends with exit 2 (default 120s on a GPU; 0s turns it off).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub watchdog: Option<u64>,
    /// Exit 1 if any verify step finds a wrong word.
    #[arg(long)]
    pub fail_on_mismatch: bool,
    /// Run even though other processes hold memory on the GPU (their usage is recorded); with
    /// --device all or a list, run on such GPUs instead of skipping them.
    #[arg(long)]
    pub shared_ok: bool,
    /// A workload that does not fit the device (below its `[workload] min_total_bytes`, or
    /// needing a capability the device lacks) is recorded as skipped, with the reason, and
    /// exits 0 instead of 2.
    #[arg(long)]
    pub skip_unfit: bool,

    /// Print summary.json to stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
