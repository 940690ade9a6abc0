//! `node.json`: what a node run found, one row per GPU, raw bytes. Written when the workers
//! start (`status` running, their pids) and again when the last one ends.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::device::BackendKind;
use crate::node::inventory::GpuIdentity;
use crate::node::safety::Occupancy;

/// The format `node.json` is written in.
pub const NODE_FORMAT_VERSION: u32 = 1;
/// The file that makes a folder a node folder.
pub const NODE_FILE: &str = "node.json";
/// A skipped GPU's folder holds only this.
pub const SKIPPED_FILE: &str = "skipped.json";

/// Which command the node ran on each GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeCommand {
    Run,
    Validate,
    Bandwidth,
    Calibrate,
}

impl NodeCommand {
    pub fn name(self) -> &'static str {
        match self {
            NodeCommand::Run => "run",
            NodeCommand::Validate => "validate",
            NodeCommand::Bandwidth => "bandwidth",
            NodeCommand::Calibrate => "calibrate",
        }
    }
}

/// How the node run as a whole stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// Workers are running (or the node's own process was killed before it finished).
    Running,
    /// Every worker ended with a complete result (or its GPU was skipped).
    Completed,
    /// Every worker ended, and at least one failed: it died (killed, crashed), could not
    /// start, or left an incomplete result (its row's `outcome` is `failed`).
    Failed,
    /// Ctrl-C or SIGTERM was forwarded to the workers.
    Interrupted,
}

/// What became of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Its worker is running.
    Running,
    /// Its worker ended with an exit code and a complete result.
    Ran,
    /// Not started: another process uses it (no `--shared-ok`).
    Skipped,
    /// Its worker died (killed, crashed), could not start, or left an incomplete result.
    Failed,
}

/// The first out-of-memory of a GPU's run, in brief.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OomBrief {
    /// `phase/step`.
    pub at: String,
    pub requested_bytes: u64,
    pub observation: String,
}

/// One GPU of the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuRow {
    #[serde(flatten)]
    pub gpu: GpuIdentity,
    /// Its rank among the workers (`HEADROOM_RANK`), when it ran.
    pub rank: Option<u32>,
    /// Its folder, relative to the node folder.
    pub folder: String,
    /// Its worker's stdout and stderr, relative to the node folder.
    pub log: Option<String>,
    pub occupancy: Occupancy,
    pub outcome: Outcome,
    /// Why it was skipped or failed.
    pub reason: Option<String>,
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    /// The signal that ended its worker.
    pub signal: Option<i32>,
    pub elapsed_ns: Option<u64>,
    /// The run's status (`completed`, `oom`, …) or the command's own verdict.
    pub status: Option<String>,
    pub ooms: Option<u64>,
    pub first_oom: Option<OomBrief>,
    /// Figures of its result: `idle_device_used_bytes`, `peak_<view>`, `headroom_at_peak_bytes`
    /// (run); `planned_requests`, `admission_limit_requests` (validate); `<op>_bytes_per_s`
    /// (bandwidth); `context_overhead_bytes` (calibrate). Raw integers.
    pub figures: BTreeMap<String, u64>,
}

/// One figure across the GPUs that have it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Spread {
    pub figure: String,
    pub gpus: usize,
    pub min: u64,
    pub median: u64,
    pub max: u64,
    /// max − min.
    pub spread: u64,
    pub min_index: u32,
    pub max_index: u32,
}

/// A GPU that differs from the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Flag {
    pub index: u32,
    pub uuid: String,
    /// The figure or property: `total_bytes`, `processes`, `driver_version`, `skipped`, …
    pub what: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeSummary {
    pub format_version: u32,
    pub headroom_version: String,
    pub command: NodeCommand,
    /// The workload's or plan's name, or the command.
    pub label: String,
    /// The workload or plan file.
    pub input: Option<String>,
    pub backend: BackendKind,
    pub profile: Option<String>,
    /// `--device` as given.
    pub selection: String,
    pub shared_ok: bool,
    pub started_utc: String,
    pub finished_utc: Option<String>,
    pub status: NodeStatus,
    /// The worst worker's exit code (None while running).
    pub exit_code: Option<i32>,
    /// A byte figure further than this from the node's median is flagged.
    pub threshold_bytes: u64,
    pub gpus: Vec<GpuRow>,
    pub spread: Vec<Spread>,
    pub flags: Vec<Flag>,
}

impl NodeSummary {
    /// Reads a node folder's `node.json`, refusing another format version.
    pub fn load(dir: &Path) -> anyhow::Result<NodeSummary> {
        let path = dir.join(NODE_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|_| anyhow::anyhow!("{}: not whole JSON (cut short?)", path.display()))?;
        let version = v.get("format_version").and_then(|x| x.as_u64());
        if version != Some(u64::from(NODE_FORMAT_VERSION)) {
            anyhow::bail!(
                "{}: format_version {} is not the {NODE_FORMAT_VERSION} this headroom reads",
                path.display(),
                version.map_or("(none)".into(), |x| x.to_string())
            );
        }
        serde_json::from_value(v)
            .map_err(|e| anyhow::anyhow!("{}: not a node summary: {e}", path.display()))
    }

    /// Writes `node.json` whole (a reader never sees half of it).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        crate::folder::write_json(dir, NODE_FILE, self)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.join(NODE_FILE).display()))
    }
}

/// The node's exit code: the worst of its workers' (0 < 1 < 2 < 130). A worker that died
/// without an exit code, or with a code headroom does not use, counts as 2; a node where no
/// worker ran at all is 2.
pub fn worst_exit(rows: &[GpuRow]) -> i32 {
    let codes: Vec<i32> = rows
        .iter()
        .filter(|r| r.outcome != Outcome::Skipped)
        .map(|r| match (r.outcome, r.exit_code) {
            (_, Some(c @ (0 | 1 | 2 | 130))) if r.outcome == Outcome::Ran => c,
            (_, Some(130)) => 130,
            _ => 2,
        })
        .collect();
    codes.into_iter().max().unwrap_or(2)
}
