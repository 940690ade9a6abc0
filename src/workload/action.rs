//! Primitive actions: what a workload's steps and patterns become once every name is
//! resolved to single allocations, ready for the runner.

use serde::Serialize;

use crate::workload::step::GraphOrder;
pub use crate::workload::step::ViaSpec as Via;

/// A primitive action, with names resolved to single allocations.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Action {
    Allocate {
        name: String,
        bytes: u64,
        via: Via,
        stream: String,
    },
    Free {
        name: String,
    },
    Touch {
        name: String,
        stride_bytes: u64,
        stream: String,
    },
    Fill {
        name: String,
        seed: u32,
        stream: String,
    },
    Verify {
        name: String,
        seed: u32,
        stream: String,
    },
    Corrupt {
        name: String,
        offset_bytes: u64,
        value: u32,
        stream: String,
    },
    Copy {
        src: String,
        dst: String,
        stream: String,
    },
    Triad {
        a: String,
        b: String,
        c: String,
        scalar: f32,
        stream: String,
    },
    Spin {
        duration_ns: u64,
        stream: String,
    },
    Sleep {
        duration_ns: u64,
    },
    Synchronize {
        stream: Option<String>,
    },
    Trim {
        keep_bytes: u64,
    },
    EmptyCache,
    RecordStream {
        name: String,
        stream: String,
    },
    Stack {
        frame_bytes: u64,
    },
    Tenant {
        bytes: u64,
        duration_ns: u64,
    },
    /// Allocates `name[0]`, `name[1]`, … until the allocator or device refuses.
    FillDevice {
        name: String,
        bytes: u64,
        via: Via,
        stream: String,
    },
    /// Frees the live members of a group filled at run time, keeping every `keep_every`-th.
    FreeGroup {
        name: String,
        keep_every: Option<u32>,
    },
    /// `cuStreamBeginCapture` on `stream` for the graph `graph`.
    BeginCapture {
        graph: String,
        stream: String,
        /// Set for the graphs a `graphs` pattern captures.
        #[serde(skip_serializing_if = "Option::is_none")]
        tag: Option<GraphTag>,
    },
    /// `cuStreamEndCapture`.
    EndCapture {
        graph: String,
        stream: String,
    },
    /// An allocation node (`cuMemAllocAsync` while `stream` captures `graph`).
    GraphAllocate {
        name: String,
        bytes: u64,
        graph: String,
        stream: String,
    },
    /// `cuMemFreeAsync` of a graph allocation: a free node inside a capture, otherwise the
    /// free of an allocation a launch left live.
    GraphFree {
        name: String,
        stream: String,
    },
    Instantiate {
        graph: String,
        auto_free: bool,
    },
    Upload {
        graph: String,
        stream: String,
    },
    /// `times` launches; `first` when this is the first launch since instantiation.
    Replay {
        graph: String,
        stream: String,
        times: u32,
        first: bool,
    },
    DestroyGraph {
        graph: String,
    },
    TrimGraphMemory,
    /// The end of a `graphs` pattern: its report is computed from the readings.
    GraphsReport(Box<GraphsSpec>),
}

impl Action {
    pub fn op(&self) -> &'static str {
        match self {
            Action::Allocate { .. } => "allocate",
            Action::Free { .. } => "free",
            Action::Touch { .. } => "touch",
            Action::Fill { .. } => "fill",
            Action::Verify { .. } => "verify",
            Action::Corrupt { .. } => "corrupt",
            Action::Copy { .. } => "copy",
            Action::Triad { .. } => "triad",
            Action::Spin { .. } => "spin",
            Action::Sleep { .. } => "sleep",
            Action::Synchronize { .. } => "synchronize",
            Action::Trim { .. } => "trim",
            Action::EmptyCache => "empty_cache",
            Action::RecordStream { .. } => "record_stream",
            Action::Stack { .. } => "stack",
            Action::Tenant { .. } => "tenant",
            Action::FillDevice { .. } => "allocate",
            Action::FreeGroup { .. } => "free",
            Action::BeginCapture { .. } => "capture",
            Action::EndCapture { .. } => "end_capture",
            Action::GraphAllocate { .. } => "allocate",
            Action::GraphFree { .. } => "free",
            Action::Instantiate { .. } => "instantiate",
            Action::Upload { .. } => "upload",
            Action::Replay { .. } => "replay",
            Action::DestroyGraph { .. } => "destroy_graph",
            Action::TrimGraphMemory => "trim_graph_memory",
            Action::GraphsReport(_) => "graphs_report",
        }
    }

    /// Whether this is a CUDA graph action (the run then reads the graph memory views).
    /// The module of headroom's kernels the action launches, if it launches one.
    pub fn kernel_module(&self) -> Option<crate::kernels::Module> {
        use crate::kernels::Module;
        match self {
            Action::Touch { .. } => Some(Module::Touch),
            Action::Fill { .. } => Some(Module::Fill),
            Action::Verify { .. } => Some(Module::Verify),
            Action::Copy { .. } | Action::Triad { .. } => Some(Module::Stream),
            Action::Spin { .. } => Some(Module::Spin),
            Action::Stack { .. } => Some(Module::Stack),
            _ => None,
        }
    }

    pub fn is_graph(&self) -> bool {
        matches!(
            self,
            Action::BeginCapture { .. }
                | Action::EndCapture { .. }
                | Action::GraphAllocate { .. }
                | Action::GraphFree { .. }
                | Action::Instantiate { .. }
                | Action::Upload { .. }
                | Action::Replay { .. }
                | Action::DestroyGraph { .. }
                | Action::TrimGraphMemory
                | Action::GraphsReport(_)
        )
    }

    /// The allocation this action names, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            Action::Allocate { name, .. }
            | Action::Free { name }
            | Action::Touch { name, .. }
            | Action::Fill { name, .. }
            | Action::Verify { name, .. }
            | Action::Corrupt { name, .. }
            | Action::RecordStream { name, .. }
            | Action::GraphAllocate { name, .. }
            | Action::GraphFree { name, .. } => Some(name),
            Action::BeginCapture { graph, .. }
            | Action::EndCapture { graph, .. }
            | Action::Instantiate { graph, .. }
            | Action::Upload { graph, .. }
            | Action::Replay { graph, .. }
            | Action::DestroyGraph { graph } => Some(graph),
            Action::GraphsReport(spec) => Some(&spec.name),
            Action::Copy { dst, .. } => Some(dst),
            Action::FillDevice { name, .. } | Action::FreeGroup { name, .. } => Some(name),
            Action::Triad { a, .. } => Some(a),
            _ => None,
        }
    }

    /// The stream this action runs on, if it names one.
    pub fn stream(&self) -> Option<&str> {
        match self {
            Action::Allocate { stream, .. }
            | Action::FillDevice { stream, .. }
            | Action::Touch { stream, .. }
            | Action::Fill { stream, .. }
            | Action::Verify { stream, .. }
            | Action::Corrupt { stream, .. }
            | Action::Spin { stream, .. }
            | Action::Copy { stream, .. }
            | Action::Triad { stream, .. }
            | Action::RecordStream { stream, .. }
            | Action::BeginCapture { stream, .. }
            | Action::EndCapture { stream, .. }
            | Action::GraphAllocate { stream, .. }
            | Action::GraphFree { stream, .. }
            | Action::Upload { stream, .. }
            | Action::Replay { stream, .. } => Some(stream),
            Action::Synchronize { stream } => stream.as_deref(),
            _ => None,
        }
    }
}

/// An action with the step it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planned {
    /// `3` for the third step of its phase, `3.12` for the twelfth action a pattern or repeat
    /// in step 3 produced.
    pub label: String,
    /// The `op` of the step as written (`kv`, `repeat`, `allocate`, …).
    pub origin: &'static str,
    pub action: Action,
    /// An OOM at this action is recorded and the run goes on (`on_oom = "continue"`).
    pub continue_on_oom: bool,
}

/// Marks a graph captured by a `graphs` pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphTag {
    pub pattern: String,
    pub batch_size: u32,
    /// Captured alone (then destroyed and trimmed) as one of the extrapolation's two samples.
    pub sample: bool,
}

/// A `graphs` pattern, as its report needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphsSpec {
    pub name: String,
    pub stream: String,
    /// In capture order.
    pub batch_sizes: Vec<u32>,
    pub samples: [u32; 2],
    pub order: GraphOrder,
    pub layers: u32,
    pub workspace_per_batch_bytes: u64,
    pub output_per_batch_bytes: u64,
    pub replays: u32,
    pub auto_free: bool,
}
