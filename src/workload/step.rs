//! Steps as written in a workload file: primitives and the shorthand patterns.
//!
//! Each step is a table with an `op` key, e.g. `{ op = "allocate", name = "w", size = "1GiB" }`.
//! Unknown keys are refused, so a typo never silently changes what runs.

use serde::{Deserialize, Serialize};

use crate::units::{DurationNs, Size, SizeSpec};

fn one() -> u32 {
    1
}
fn main_stream() -> String {
    "main".into()
}
fn default_seed() -> u32 {
    1
}
fn default_stride() -> Size {
    Size(64 << 10)
}
fn ms(n: u64) -> DurationNs {
    DurationNs(n * 1_000_000)
}
fn default_tick() -> DurationNs {
    ms(10)
}
fn default_hold() -> DurationNs {
    ms(1)
}
fn weights_name() -> String {
    "weights".into()
}
fn act_name() -> String {
    "act".into()
}
fn ws_name() -> String {
    "ws".into()
}
fn comm_name() -> String {
    "comm".into()
}
fn kv_name() -> String {
    "kv".into()
}
fn default_scalar() -> f32 {
    3.0
}
fn yes() -> bool {
    true
}
fn default_layers() -> u32 {
    4
}
fn default_replays() -> u32 {
    3
}

/// The order a `graphs` pattern captures its batch sizes in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphOrder {
    /// Largest first, as serving engines capture (smaller graphs then reuse its memory).
    #[default]
    Descending,
    Ascending,
}

/// How an allocation is obtained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViaSpec {
    /// Through the workload's allocator (its views count it).
    #[default]
    Allocator,
    /// Straight from the driver (`cuMemAlloc`), as NCCL or cuBLAS workspaces are: the
    /// allocator's views never see it.
    Driver,
}

/// How many allocations an `allocate` step makes: a number, or `"fill"` (until refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Count {
    N(u32),
    Fill,
}

impl Default for Count {
    fn default() -> Self {
        Count::N(1)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(n) if (0..=u32::MAX as i64).contains(&n) => Ok(Count::N(n as u32)),
            toml::Value::String(s) if s == "fill" => Ok(Count::Fill),
            other => Err(serde::de::Error::custom(format!(
                "count = {other} is not understood; give a number of allocations or \"fill\""
            ))),
        }
    }
}

/// What an out-of-memory at a step does to the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOom {
    #[default]
    Stop,
    Continue,
}

/// Which peers a rank of a `comm` pattern keeps buffers for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommTopology {
    /// A ring: a send buffer to the next rank and a receive buffer from the previous one, per
    /// channel (as NCCL's ring all-reduce keeps).
    #[default]
    Ring,
    /// Every other rank: a send and a receive buffer per peer and channel (all-to-all).
    AllToAll,
}

/// The order a training-like activation chain frees in.

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationMode {
    /// Forward keeps every layer's output for the backward pass, which frees them in reverse:
    /// the live set peaks at the turn from forward to backward.
    #[default]
    Train,
    /// Each layer frees its input once its output exists: at most two layers live.
    Inference,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// `count` allocations of `size` named `name` (or `name[0]`…`name[count-1]`);
    /// `count = "fill"` allocates until the device or allocator refuses.
    Allocate {
        name: String,
        size: SizeSpec,
        #[serde(default)]
        count: Count,
        #[serde(default)]
        via: ViaSpec,
        #[serde(default = "main_stream")]
        stream: String,
        /// What an OOM at this step does: `stop` the run (default) or `continue` after
        /// recording it (to show what happens next, e.g. the same request after a synchronize).
        #[serde(default)]
        on_oom: OnOom,
    },
    /// Frees an allocation by name, or every live member of a group (`w` frees `w[0]`…);
    /// with `keep_every = k`, every member whose index is a multiple of k stays live.
    Free {
        name: String,
        #[serde(default)]
        keep_every: Option<u32>,
    },
    /// Makes the pages of an allocation resident: one write per `stride`.
    Touch {
        name: String,
        #[serde(default = "default_stride")]
        stride: Size,
        #[serde(default = "main_stream")]
        stream: String,
    },
    /// Writes the address-and-seed pattern over the whole allocation.
    Fill {
        name: String,
        #[serde(default = "default_seed")]
        seed: u32,
        #[serde(default = "main_stream")]
        stream: String,
    },
    /// Reads the pattern back and counts mismatches.
    Verify {
        name: String,
        #[serde(default = "default_seed")]
        seed: u32,
        #[serde(default = "main_stream")]
        stream: String,
    },
    /// Copies `src` into `dst` with the `copy` kernel (equal sizes).
    Copy {
        src: String,
        dst: String,
        #[serde(default = "main_stream")]
        stream: String,
    },
    /// `a = b + scalar × c` over f32 words with the `triad` kernel (equal sizes).
    Triad {
        a: String,
        b: String,
        c: String,
        #[serde(default = "default_scalar")]
        scalar: f32,
        #[serde(default = "main_stream")]
        stream: String,
    },
    /// Writes one 4-byte word at `offset` (to plant a corruption that `verify` must find).
    Corrupt {
        name: String,
        offset: Size,
        value: u32,
        /// The write is ordered after the work queued on this stream.
        #[serde(default = "main_stream")]
        stream: String,
    },
    /// Keeps a stream busy on the GPU for a while (frees queued behind it stay pending).
    Spin {
        #[serde(rename = "for")]
        duration: DurationNs,
        #[serde(default = "main_stream")]
        stream: String,
    },
    /// The host waits; memory stays as it is.
    Sleep {
        #[serde(rename = "for")]
        duration: DurationNs,
    },
    /// Waits for one stream, or for the whole device when no stream is named.
    Synchronize {
        #[serde(default)]
        stream: Option<String>,
    },
    /// Releases the stream-ordered pool's unused memory down to `keep`.
    Trim {
        #[serde(default)]
        keep: Size,
    },
    /// Returns the caching allocator's fully free segments to the driver.
    EmptyCache {},
    /// Marks an allocation as used on another stream (PyTorch's `record_stream`).
    RecordStream { name: String, stream: String },
    /// Launches a kernel needing `frame` bytes of stack per thread.
    Stack { frame: Size },
    /// Another process takes `size` for a while (`headroom hold` on a real GPU; a simulated
    /// tenant on the simulator), as a second tenant would.
    Tenant {
        size: SizeSpec,
        #[serde(rename = "for")]
        duration: DurationNs,
    },
    /// Repeats the inner steps.
    Repeat { times: u32, steps: Vec<toml::Value> },
    /// Records the inner steps on `stream` into the graph `graph` (`cuStreamBeginCapture` …
    /// `cuStreamEndCapture`): kernels become kernel nodes, `allocate` and `free` become
    /// allocation and free nodes. Nothing runs and no memory is taken until a launch.
    Capture {
        graph: String,
        stream: String,
        steps: Vec<toml::Value>,
    },
    /// `cuGraphInstantiateWithFlags`; `auto_free` adds AUTO_FREE_ON_LAUNCH.
    Instantiate {
        graph: String,
        #[serde(default)]
        auto_free: bool,
    },
    /// `cuGraphUpload`: maps the graph's memory without running it (default: its capture stream).
    Upload {
        graph: String,
        #[serde(default)]
        stream: Option<String>,
    },
    /// `cuGraphLaunch`, `times` times (default stream: the graph's capture stream).
    Replay {
        graph: String,
        #[serde(default = "one")]
        times: u32,
        #[serde(default)]
        stream: Option<String>,
    },
    /// Destroys a graph and its executable (a group: `g` destroys `g[1]`, `g[2]`…). Live
    /// graph allocations stay live; graph memory stays reserved until trimmed.
    DestroyGraph { graph: String },
    /// `cuDeviceGraphMemTrim`: returns graph memory no graph or live allocation uses.
    TrimGraphMemory {},

    /// Pattern: model weights, held until the end of the run.
    Weights {
        #[serde(default = "weights_name")]
        name: String,
        total: SizeSpec,
        #[serde(default = "one")]
        tensors: u32,
        #[serde(default = "yes")]
        touch: bool,
    },
    /// Pattern: a layer-by-layer chain of activations.
    Activations {
        #[serde(default = "act_name")]
        name: String,
        layers: u32,
        /// Bytes each layer's output takes.
        size: SizeSpec,
        /// A temporary allocated and freed inside each layer (e.g. an attention workspace).
        #[serde(default)]
        scratch: Option<SizeSpec>,
        #[serde(default)]
        mode: ActivationMode,
        /// Host time each layer takes.
        #[serde(default)]
        layer_time: DurationNs,
    },
    /// Pattern: short-lived large temporaries.
    Workspace {
        #[serde(default = "ws_name")]
        name: String,
        size: SizeSpec,
        #[serde(default = "one")]
        repeats: u32,
        /// How long each temporary is held.
        #[serde(default = "default_hold")]
        hold: DurationNs,
        /// Time between temporaries.
        #[serde(default = "default_hold")]
        gap: DurationNs,
        #[serde(default)]
        via: ViaSpec,
    },
    /// Pattern: one CUDA graph per batch size, as serving engines capture them, and what a
    /// linear extrapolation from two sample captures would have budgeted for them all.
    ///
    /// The graph for batch size `b` holds an output buffer of `b × output_per_batch` (left
    /// live after each launch, as a static output is) and `layers` layers, each a workspace of
    /// `b × workspace_per_batch` allocated, touched, filled and freed inside the graph: kernel
    /// work and allocation sizes grow with `b`, the kernel count does not. Graphs are named
    /// `NAME[b]`, outputs `NAME.out[b]`.
    Graphs {
        name: String,
        stream: String,
        batch_sizes: Vec<u32>,
        #[serde(default = "default_layers")]
        layers: u32,
        workspace_per_batch: Size,
        #[serde(default)]
        output_per_batch: Size,
        #[serde(default)]
        order: GraphOrder,
        /// The two batch sizes captured alone first (default: the smallest and the largest).
        #[serde(default)]
        samples: Option<Vec<u32>>,
        /// Launches of each graph: the first launch, then steady replays.
        #[serde(default = "default_replays")]
        replays: u32,
        #[serde(default = "yes")]
        auto_free: bool,
    },
    /// Pattern: a communicator's buffers, held outside any allocator (`cuMemAlloc`, as NCCL's
    /// are) until the end of the run, sized for this rank: `base` once, then per channel a
    /// send and a receive buffer for each peer the topology gives (a ring: two per channel; all
    /// to all: two per other rank and channel). Named `NAME[0]`, `NAME[1]`, … (`base` first),
    /// so `free NAME` destroys the communicator.
    Comm {
        #[serde(default = "comm_name")]
        name: String,
        #[serde(default)]
        topology: CommTopology,
        /// Bytes of one buffer (one peer, one direction, one channel).
        buffer: Size,
        #[serde(default = "one")]
        channels: u32,
        /// Ranks in the communicator (default: the run's rank count, `HEADROOM_RANK_COUNT`).
        #[serde(default)]
        rank_count: Option<u32>,
        /// Memory the communicator takes besides its buffers (its own structures).
        #[serde(default)]
        base: Option<SizeSpec>,
    },
    /// Pattern: a KV cache growing as requests arrive and shrinking as they finish.
    Kv {
        #[serde(default = "kv_name")]
        name: String,
        /// Requests that arrive, one every `arrive_every` ticks.
        requests: u32,
        /// Bytes of one KV block.
        block: Size,
        /// Blocks a request holds when it finishes (it grows by one block per tick).
        blocks_per_request: u32,
        /// Blocks a request takes on arrival (its prompt).
        #[serde(default = "one")]
        prefill_blocks: u32,
        #[serde(default = "one")]
        arrive_every: u32,
        /// Length of one decoding tick.
        #[serde(default = "default_tick")]
        tick: DurationNs,
    },
}

impl Step {
    /// The `op` name, for messages.
    pub fn op(&self) -> &'static str {
        match self {
            Step::Allocate { .. } => "allocate",
            Step::Free { .. } => "free",
            Step::Touch { .. } => "touch",
            Step::Fill { .. } => "fill",
            Step::Verify { .. } => "verify",
            Step::Corrupt { .. } => "corrupt",
            Step::Copy { .. } => "copy",
            Step::Triad { .. } => "triad",
            Step::Spin { .. } => "spin",
            Step::Sleep { .. } => "sleep",
            Step::Synchronize { .. } => "synchronize",
            Step::Trim { .. } => "trim",
            Step::EmptyCache {} => "empty_cache",
            Step::RecordStream { .. } => "record_stream",
            Step::Stack { .. } => "stack",
            Step::Repeat { .. } => "repeat",
            Step::Tenant { .. } => "tenant",
            Step::Capture { .. } => "capture",
            Step::Instantiate { .. } => "instantiate",
            Step::Upload { .. } => "upload",
            Step::Replay { .. } => "replay",
            Step::DestroyGraph { .. } => "destroy_graph",
            Step::TrimGraphMemory {} => "trim_graph_memory",
            Step::Graphs { .. } => "graphs",

            Step::Weights { .. } => "weights",
            Step::Activations { .. } => "activations",
            Step::Workspace { .. } => "workspace",
            Step::Kv { .. } => "kv",
            Step::Comm { .. } => "comm",
        }
    }
}
