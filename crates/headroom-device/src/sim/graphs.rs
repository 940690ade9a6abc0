//! Simulated CUDA graphs: stream capture, instantiation, launches and the graph allocator.
//!
//! The driver's documented rules, as the simulator keeps them:
//! - While a stream captures, its kernels become kernel nodes and `cuMemAllocAsync` /
//!   `cuMemFreeAsync` become allocation and free nodes. An allocation node's address is fixed
//!   at capture; no memory is taken until the executable graph is uploaded or launched.
//! - Instantiating takes device memory for the executable graph itself: the profile's
//!   `exec_bytes_per_node` for every kernel node, given back when the graph is destroyed.
//! - Upload and launch map the graph's memory from the *stream's* cache ("uses memory cached
//!   by stream to back the allocations owned by the graph"): graphs launched into one stream
//!   never run at once, so they share that cache, which is as large as the largest peak of the
//!   allocations its graphs free themselves. Allocations a graph leaves live after a launch
//!   are memory of their own until freed.
//! - A relaunch while the previous launch's allocations are still live fails unless the graph
//!   was instantiated with auto-free-on-launch, which frees them first.
//! - Destroying a graph frees no live allocation, and its memory stays reserved by the graph
//!   allocator; `cuDeviceGraphMemTrim` returns what no live allocation and no running graph
//!   uses (idle graphs are unmapped and remap at their next launch).
//!
//! Every reserved byte and every executable graph's byte counts against device free memory.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::rounding::AllocRounding;
use crate::{
    Capability, DevPtr, DevResult, DeviceError, GraphId, GraphMemUsage, GraphShape, Kernel,
    StreamId,
};

use super::SimDevice;

/// One recorded operation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Node {
    Kernel(Kernel),
    /// `bytes` as requested.
    Alloc {
        ptr: DevPtr,
        bytes: u64,
    },
    Free {
        ptr: DevPtr,
    },
}

/// A capture in progress on one stream.
#[derive(Debug, Clone, Default)]
struct Capture {
    nodes: Vec<Node>,
    /// Allocation nodes not freed in the capture so far: address → requested bytes.
    open: HashMap<DevPtr, u64>,
}

/// An executable graph.
#[derive(Debug, Clone)]
struct Exec {
    auto_free: bool,
    exec_bytes: u64,
    /// The stream whose cache backs the graph's memory now (`None`: not mapped).
    mapped_on: Option<StreamId>,
    /// When its last launch finishes on the GPU.
    busy_until_ns: u64,
}

#[derive(Debug, Clone)]
struct Graph {
    nodes: Vec<Node>,
    shape: GraphShape,
    /// Peak of the allocations the graph frees itself, each rounded to the granularity: what
    /// a launch needs from its stream's cache.
    transient_bytes: u64,
    /// Allocation nodes the graph does not free: (address, rounded bytes).
    unfreed: Vec<(DevPtr, u64)>,
    exec: Option<Exec>,
}

/// A graph allocation live outside its graph (left live by a launch).
#[derive(Debug, Clone, Copy)]
struct LiveAlloc {
    rounded_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct SimGraphs {
    exec_bytes_per_node: u64,
    captures: HashMap<StreamId, Capture>,
    graphs: BTreeMap<u32, Graph>,
    next_id: u32,
    /// What the graph allocator holds from the device.
    reserved: u64,
    reserved_high: u64,
    used_high: u64,
    live: HashMap<DevPtr, LiveAlloc>,
    /// Kept as graphs change, so a memory reading costs O(streams), not O(graphs).
    usage: Usage,
}

#[path = "graph_usage.rs"]
mod usage;
use usage::Usage;

fn invalid(msg: String) -> DeviceError {
    DeviceError::Invalid(msg)
}

impl SimGraphs {
    pub fn new(exec_bytes_per_node: u64) -> Self {
        SimGraphs {
            exec_bytes_per_node,
            captures: HashMap::new(),
            graphs: BTreeMap::new(),
            next_id: 0,
            reserved: 0,
            reserved_high: 0,
            used_high: 0,
            live: HashMap::new(),
            usage: Usage::default(),
        }
    }

    pub fn is_capturing(&self, stream: StreamId) -> bool {
        self.captures.contains_key(&stream)
    }

    pub fn any_capturing(&self) -> bool {
        !self.captures.is_empty()
    }

    /// Device memory graphs take: the allocator's reservation and every executable graph.
    pub fn device_bytes(&self) -> u64 {
        self.reserved + self.exec_bytes()
    }

    fn note_highs(&mut self) {
        self.used_high = self.used_high.max(self.used());
        self.reserved_high = self.reserved_high.max(self.reserved);
    }

    pub fn usage(&self) -> GraphMemUsage {
        GraphMemUsage {
            used_current_bytes: self.used(),
            used_high_bytes: self.used_high,
            reserved_current_bytes: self.reserved,
            reserved_high_bytes: self.reserved_high,
        }
    }

    /// Whether `[ptr, ptr + bytes)` lies in an allocation node still open in `stream`'s capture.
    fn in_open_alloc(&self, stream: StreamId, ptr: DevPtr, bytes: u64) -> bool {
        self.captures.get(&stream).is_some_and(|c| {
            c.open
                .iter()
                .any(|(base, size)| *base <= ptr && ptr.saturating_add(bytes) <= base + size)
        })
    }

    fn graph(&self, id: GraphId) -> DevResult<&Graph> {
        self.graphs
            .get(&id.0)
            .ok_or_else(|| invalid(format!("graph {} does not exist (destroyed?)", id.0)))
    }

    /// Forgets everything (the device released it all).
    pub fn clear(&mut self) {
        self.captures.clear();
        self.graphs.clear();
        self.live.clear();
        self.usage = Usage::default();
        self.reserved = 0;
    }
}

/// Shape, transient peak and unfreed allocations of a finished capture.
fn summarize(nodes: &[Node], rounding: AllocRounding) -> (GraphShape, u64, Vec<(DevPtr, u64)>) {
    let own: HashMap<DevPtr, u64> = nodes
        .iter()
        .filter_map(|n| match *n {
            Node::Alloc { ptr, bytes } => Some((ptr, bytes)),
            _ => None,
        })
        .collect();
    let freed: HashSet<DevPtr> = nodes
        .iter()
        .filter_map(|n| match *n {
            Node::Free { ptr } if own.contains_key(&ptr) => Some(ptr),
            _ => None,
        })
        .collect();
    let mut shape = GraphShape::default();
    let (mut now, mut peak) = (0u64, 0u64);
    let mut unfreed = Vec::new();
    for n in nodes {
        match *n {
            Node::Kernel(_) => shape.kernel_nodes += 1,
            Node::Alloc { ptr, bytes } => {
                shape.alloc_nodes += 1;
                shape.alloc_node_bytes = shape.alloc_node_bytes.saturating_add(bytes);
                let rounded = rounding.graph_bytes(bytes);
                if freed.contains(&ptr) {
                    now = now.saturating_add(rounded);
                    peak = peak.max(now);
                } else {
                    shape.unfreed_bytes = shape.unfreed_bytes.saturating_add(bytes);
                    unfreed.push((ptr, rounded));
                }
            }
            Node::Free { ptr } => {
                shape.free_nodes += 1;
                if freed.contains(&ptr) {
                    now = now.saturating_sub(rounding.graph_bytes(own[&ptr]));
                }
            }
        }
    }
    (shape, peak, unfreed)
}

/// The device calls, kept here so the simulator's `mod.rs` only forwards to them.
impl SimDevice {
    pub(super) fn sim_graph_begin_capture(&mut self, stream: StreamId) -> DevResult<()> {
        self.stream_index(stream)?;
        if self.graphs.is_capturing(stream) {
            return Err(invalid(format!(
                "cuStreamBeginCapture: stream {} is already capturing",
                stream.0
            )));
        }
        self.advance(self.profile.latency.launch.0);
        self.graphs.captures.insert(stream, Capture::default());
        Ok(())
    }

    pub(super) fn sim_graph_end_capture(
        &mut self,
        stream: StreamId,
    ) -> DevResult<(GraphId, GraphShape)> {
        let capture = self.graphs.captures.remove(&stream).ok_or_else(|| {
            invalid(format!(
                "cuStreamEndCapture: stream {} is not capturing",
                stream.0
            ))
        })?;
        self.advance(self.profile.latency.launch.0);
        let (shape, transient_bytes, unfreed) =
            summarize(&capture.nodes, AllocRounding::of_profile(&self.profile));
        let id = self.graphs.next_id;
        self.graphs.next_id += 1;
        self.graphs.graphs.insert(
            id,
            Graph {
                nodes: capture.nodes,
                shape,
                transient_bytes,
                unfreed,
                exec: None,
            },
        );
        Ok((GraphId(id), shape))
    }

    /// A kernel launched on a capturing stream becomes a node; its ranges are checked now.
    pub(super) fn sim_graph_capture_kernel(
        &mut self,
        kernel: Kernel,
        stream: StreamId,
    ) -> DevResult<()> {
        if matches!(kernel, Kernel::Verify { .. }) {
            return Err(invalid(
                "verify reads its result back to the host, which a capture cannot record".into(),
            ));
        }
        let ranges: Vec<(&'static str, DevPtr, u64)> = match kernel {
            Kernel::Touch { ptr, bytes, .. }
            | Kernel::Fill { ptr, bytes, .. }
            | Kernel::Verify { ptr, bytes, .. }
            | Kernel::Memset { ptr, bytes, .. } => vec![(kernel.name(), ptr, bytes)],
            Kernel::Copy { dst, src, bytes } | Kernel::DriverCopy { dst, src, bytes } => {
                vec![(kernel.name(), src, bytes), (kernel.name(), dst, bytes)]
            }
            Kernel::Triad { a, b, c, bytes, .. } => vec![
                (kernel.name(), a, bytes),
                (kernel.name(), b, bytes),
                (kernel.name(), c, bytes),
            ],
            Kernel::Spin { .. } | Kernel::Stack { .. } => vec![],
        };
        for (what, ptr, bytes) in ranges {
            if !self.graphs.in_open_alloc(stream, ptr, bytes) {
                self.check_range(what, ptr, bytes)?;
            }
        }
        self.advance(self.profile.latency.launch.0);
        if let Some(c) = self.graphs.captures.get_mut(&stream) {
            c.nodes.push(Node::Kernel(kernel));
        }
        Ok(())
    }

    pub(super) fn sim_graph_malloc(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr> {
        // A graph memory node is a stream-ordered allocation: it needs memory pools.
        self.require(Capability::MemoryPools, "cuMemAllocAsync (graph)")?;
        if bytes == 0 {
            return Err(invalid("cuMemAllocAsync of 0 bytes".into()));
        }
        if !self.graphs.is_capturing(stream) {
            return Err(invalid(format!(
                "a graph allocation needs a capturing stream; stream {} is not capturing",
                stream.0
            )));
        }
        self.advance(self.profile.latency.malloc_async.0);
        let ptr = self.take_va(AllocRounding::of_profile(&self.profile).graph_bytes(bytes))?;
        let c = self
            .graphs
            .captures
            .get_mut(&stream)
            .expect("checked above");
        c.open.insert(ptr, bytes);
        c.nodes.push(Node::Alloc { ptr, bytes });
        Ok(ptr)
    }

    pub(super) fn sim_graph_free(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()> {
        self.stream_index(stream)?;
        self.advance(self.profile.latency.free_async.0);
        if let Some(c) = self.graphs.captures.get_mut(&stream) {
            if c.open.remove(&ptr).is_none() && !self.graphs.live.contains_key(&ptr) {
                return Err(invalid(format!(
                    "cuMemFreeAsync of {ptr:#x} during a capture: a free node can only free a graph allocation (of this capture, or one a launch left live)"
                )));
            }
            c.nodes.push(Node::Free { ptr });
            return Ok(());
        }
        // Back to the graph pool: still reserved, no longer used. (Modeled as immediate: the
        // pool's reuse of it is not ordered behind the stream.)
        if self.graphs.remove_live(&ptr).is_none() {
            return Err(invalid(format!(
                "cuMemFreeAsync of {ptr:#x}, which is not a live graph allocation"
            )));
        }
        if let Some(bytes) = self.sizes.remove(&ptr) {
            self.content.forget(ptr, bytes);
        }
        Ok(())
    }

    pub(super) fn sim_graph_instantiate(
        &mut self,
        graph: GraphId,
        auto_free: bool,
    ) -> DevResult<()> {
        let g = self.graphs.graph(graph)?;
        if g.exec.is_some() {
            return Err(invalid(format!(
                "cuGraphInstantiate: graph {} already has an executable; a graph with memory nodes may be instantiated once at a time",
                graph.0
            )));
        }
        let exec_bytes = g.shape.kernel_nodes as u64 * self.graphs.exec_bytes_per_node;
        self.advance(self.profile.latency.malloc_base.0);
        if exec_bytes > self.free_at(self.host_ns) {
            return Err(DeviceError::OutOfMemory {
                requested_bytes: exec_bytes,
            });
        }
        let g = self.graphs.graphs.get_mut(&graph.0).expect("checked above");
        g.exec = Some(Exec {
            auto_free,
            exec_bytes,
            mapped_on: None,
            busy_until_ns: 0,
        });
        self.graphs.usage.exec_bytes += exec_bytes;
        Ok(())
    }

    /// Maps the graph on `stream` (and, for a launch, takes its unfreed allocations): checks
    /// everything first, so a refusal changes nothing.
    fn graph_map(&mut self, graph: GraphId, stream: StreamId, launch: bool) -> DevResult<()> {
        let si = self.stream_index(stream)?;
        let call = if launch {
            "cuGraphLaunch"
        } else {
            "cuGraphUpload"
        };
        let g = self.graphs.graph(graph)?;
        let auto_free = g
            .exec
            .as_ref()
            .ok_or_else(|| {
                invalid(format!(
                    "{call} of graph {}, which is not instantiated",
                    graph.0
                ))
            })?
            .auto_free;
        let nodes = g.nodes.clone();
        let unfreed = g.unfreed.clone();
        let own_live: Vec<DevPtr> = unfreed
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| self.graphs.live.contains_key(p))
            .collect();
        if launch && !own_live.is_empty() && !auto_free {
            return Err(DeviceError::Driver {
                call: "cuGraphLaunch",
                detail: format!(
                    "CUDA_ERROR_INVALID_VALUE: {} allocation(s) of the previous launch are still live and the graph was instantiated without AUTO_FREE_ON_LAUNCH",
                    own_live.len()
                ),
            });
        }
        let own: HashSet<DevPtr> = nodes
            .iter()
            .filter_map(|n| match n {
                Node::Alloc { ptr, .. } => Some(*ptr),
                _ => None,
            })
            .collect();
        if launch {
            for n in &nodes {
                if let Node::Free { ptr } = n
                    && !own.contains(ptr)
                    && !self.graphs.live.contains_key(ptr)
                {
                    return Err(invalid(format!(
                        "cuGraphLaunch: the graph frees {ptr:#x}, which is not a live graph allocation"
                    )));
                }
            }
        }
        // Memory after the call: the graph mapped on `stream`; for a launch, its unfreed
        // allocations (freed first when auto-free) live again.
        let mut live_after = self.graphs.usage.live_bytes;
        if launch {
            for p in &own_live {
                live_after -= self.graphs.live[p].rounded_bytes;
            }
            live_after += unfreed.iter().map(|(_, b)| b).sum::<u64>();
        }
        let used_after = self.graphs.used_if_mapped(graph.0, stream, live_after);
        self.advance(self.profile.latency.launch.0);
        let grow = used_after.saturating_sub(self.graphs.reserved);
        if grow > self.free_at(self.host_ns) {
            return Err(DeviceError::OutOfMemory {
                requested_bytes: grow,
            });
        }
        self.graphs.reserved += grow;
        let mut gpu_ns: u64 = 0;
        if launch {
            for p in own_live {
                self.graphs.remove_live(&p);
                if let Some(b) = self.sizes.remove(&p) {
                    self.content.forget(p, b);
                }
            }
            for (p, rounded) in unfreed {
                self.graphs.insert_live(p, rounded);
            }
            // Run the nodes in order: allocations exist from their node until their free.
            for n in &nodes {
                match *n {
                    Node::Alloc { ptr, bytes } => {
                        self.sizes.insert(ptr, bytes);
                    }
                    Node::Kernel(k) => {
                        self.apply_kernel(&k)?;
                        gpu_ns = gpu_ns.saturating_add(self.kernel_ns(&k));
                    }
                    Node::Free { ptr } => {
                        if let Some(b) = self.sizes.remove(&ptr) {
                            self.content.forget(ptr, b);
                        }
                        if !own.contains(&ptr) {
                            self.graphs.remove_live(&ptr);
                        }
                    }
                }
            }
        }
        let start = self.streams[si].max(self.host_ns);
        self.streams[si] = start.saturating_add(gpu_ns);
        let done = self.streams[si];
        self.graphs.map(graph.0, Some(stream));
        if let Some(exec) = self
            .graphs
            .graphs
            .get_mut(&graph.0)
            .and_then(|g| g.exec.as_mut())
        {
            exec.busy_until_ns = exec.busy_until_ns.max(done);
        }
        self.graphs.note_highs();
        Ok(())
    }

    pub(super) fn sim_graph_upload(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()> {
        self.graph_map(graph, stream, false)
    }

    pub(super) fn sim_graph_launch(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()> {
        self.graph_map(graph, stream, true)
    }

    pub(super) fn sim_graph_destroy(&mut self, graph: GraphId) -> DevResult<()> {
        self.graphs.graph(graph)?;
        self.advance(self.profile.latency.free.0);
        // Live allocations it left stay live; its mapping returns to the graph pool.
        self.graphs.remove_graph(graph.0);
        Ok(())
    }

    pub(super) fn sim_graph_mem_trim(&mut self) -> DevResult<()> {
        self.advance(self.profile.latency.synchronize.0);
        let now = self.host_ns;
        // Only mapped graphs can be unmapped: the walk is over them, not over every graph.
        let idle: Vec<u32> = (self.graphs.usage.mapped.values())
            .flatten()
            .map(|(_, id)| *id)
            .filter(|id| {
                self.graphs.graphs[id]
                    .exec
                    .as_ref()
                    .is_some_and(|e| e.busy_until_ns <= now)
            })
            .collect();
        for id in idle {
            self.graphs.map(id, None);
        }
        self.graphs.reserved = self.graphs.used();
        Ok(())
    }
}

#[cfg(test)]
#[path = "graphs_tests.rs"]
mod tests;
