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

use crate::device::{
    DevPtr, DevResult, DeviceError, GraphId, GraphMemUsage, GraphShape, Kernel, StreamId,
};
use crate::units::round_up;

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
    granularity: u64,
    exec_bytes_per_node: u64,
    captures: HashMap<StreamId, Capture>,
    graphs: BTreeMap<u32, Graph>,
    next_id: u32,
    /// What the graph allocator holds from the device.
    reserved: u64,
    reserved_high: u64,
    used_high: u64,
    live: HashMap<DevPtr, LiveAlloc>,
}

fn invalid(msg: String) -> DeviceError {
    DeviceError::Invalid(msg)
}

impl SimGraphs {
    pub fn new(granularity: u64, exec_bytes_per_node: u64) -> Self {
        SimGraphs {
            granularity,
            exec_bytes_per_node,
            captures: HashMap::new(),
            graphs: BTreeMap::new(),
            next_id: 0,
            reserved: 0,
            reserved_high: 0,
            used_high: 0,
            live: HashMap::new(),
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

    fn exec_bytes(&self) -> u64 {
        self.graphs
            .values()
            .filter_map(|g| g.exec.as_ref())
            .map(|e| e.exec_bytes)
            .sum()
    }

    /// Memory mapped by at least one graph or backing a live graph allocation: each stream's
    /// cache (the largest transient peak of the graphs mapped on it) plus live allocations.
    fn used_with(&self, mapped: impl Fn(u32, &Graph) -> Option<StreamId>, live: u64) -> u64 {
        let mut caches: BTreeMap<StreamId, u64> = BTreeMap::new();
        for (id, g) in &self.graphs {
            if let Some(s) = mapped(*id, g) {
                let c = caches.entry(s).or_default();
                *c = (*c).max(g.transient_bytes);
            }
        }
        caches.values().sum::<u64>() + live
    }

    fn live_bytes(&self) -> u64 {
        self.live.values().map(|l| l.rounded_bytes).sum()
    }

    fn used(&self) -> u64 {
        self.used_with(
            |_, g| g.exec.as_ref().and_then(|e| e.mapped_on),
            self.live_bytes(),
        )
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
        self.reserved = 0;
    }
}

/// Shape, transient peak and unfreed allocations of a finished capture.
fn summarize(nodes: &[Node], granularity: u64) -> (GraphShape, u64, Vec<(DevPtr, u64)>) {
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
                shape.alloc_node_bytes += bytes;
                let rounded = round_up(bytes, granularity);
                if freed.contains(&ptr) {
                    now += rounded;
                    peak = peak.max(now);
                } else {
                    shape.unfreed_bytes += bytes;
                    unfreed.push((ptr, rounded));
                }
            }
            Node::Free { ptr } => {
                shape.free_nodes += 1;
                if freed.contains(&ptr) {
                    now -= round_up(own[&ptr], granularity);
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
        self.host_ns += self.profile.latency.launch.0;
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
        self.host_ns += self.profile.latency.launch.0;
        let (shape, transient_bytes, unfreed) = summarize(&capture.nodes, self.graphs.granularity);
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
        self.host_ns += self.profile.latency.launch.0;
        if let Some(c) = self.graphs.captures.get_mut(&stream) {
            c.nodes.push(Node::Kernel(kernel));
        }
        Ok(())
    }

    pub(super) fn sim_graph_malloc(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr> {
        if bytes == 0 {
            return Err(invalid("cuMemAllocAsync of 0 bytes".into()));
        }
        if !self.graphs.is_capturing(stream) {
            return Err(invalid(format!(
                "a graph allocation needs a capturing stream; stream {} is not capturing",
                stream.0
            )));
        }
        self.host_ns += self.profile.latency.malloc_async.0;
        let ptr = self.take_va(round_up(bytes, self.graphs.granularity));
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
        self.host_ns += self.profile.latency.free_async.0;
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
        if self.graphs.live.remove(&ptr).is_none() {
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
        self.host_ns += self.profile.latency.malloc_base.0;
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
        let mut live_after = self.graphs.live_bytes();
        if launch {
            for p in &own_live {
                live_after -= self.graphs.live[p].rounded_bytes;
            }
            live_after += unfreed.iter().map(|(_, b)| b).sum::<u64>();
        }
        let used_after = self.graphs.used_with(
            |id, x| {
                if id == graph.0 {
                    Some(stream)
                } else {
                    x.exec.as_ref().and_then(|e| e.mapped_on)
                }
            },
            live_after,
        );
        self.host_ns += self.profile.latency.launch.0;
        let grow = used_after.saturating_sub(self.graphs.reserved);
        if grow > self.free_at(self.host_ns) {
            return Err(DeviceError::OutOfMemory {
                requested_bytes: grow,
            });
        }
        self.graphs.reserved += grow;
        let mut gpu_ns = 0;
        if launch {
            for p in own_live {
                self.graphs.live.remove(&p);
                if let Some(b) = self.sizes.remove(&p) {
                    self.content.forget(p, b);
                }
            }
            for (p, rounded) in unfreed {
                self.graphs.live.insert(
                    p,
                    LiveAlloc {
                        rounded_bytes: rounded,
                    },
                );
            }
            // Run the nodes in order: allocations exist from their node until their free.
            for n in &nodes {
                match *n {
                    Node::Alloc { ptr, bytes } => {
                        self.sizes.insert(ptr, bytes);
                    }
                    Node::Kernel(k) => {
                        self.apply_kernel(&k)?;
                        gpu_ns += self.kernel_ns(&k);
                    }
                    Node::Free { ptr } => {
                        if let Some(b) = self.sizes.remove(&ptr) {
                            self.content.forget(ptr, b);
                        }
                        if !own.contains(&ptr) {
                            self.graphs.live.remove(&ptr);
                        }
                    }
                }
            }
        }
        let start = self.streams[si].max(self.host_ns);
        self.streams[si] = start + gpu_ns;
        let done = self.streams[si];
        if let Some(exec) = self
            .graphs
            .graphs
            .get_mut(&graph.0)
            .and_then(|g| g.exec.as_mut())
        {
            exec.mapped_on = Some(stream);
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
        self.host_ns += self.profile.latency.free.0;
        // Live allocations it left stay live; its mapping returns to the graph pool.
        self.graphs.graphs.remove(&graph.0);
        Ok(())
    }

    pub(super) fn sim_graph_mem_trim(&mut self) -> DevResult<()> {
        self.host_ns += self.profile.latency.synchronize.0;
        let now = self.host_ns;
        for g in self.graphs.graphs.values_mut() {
            if let Some(e) = g.exec.as_mut()
                && e.busy_until_ns <= now
            {
                e.mapped_on = None;
            }
        }
        self.graphs.reserved = self.graphs.used();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::device::profile::SimProfile;
    use crate::device::{Device, DeviceError, Kernel, StreamId};

    use super::super::SimDevice;

    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;

    fn tiny() -> (SimDevice, StreamId) {
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let s = d.create_stream().unwrap();
        (d, s)
    }

    fn free(d: &mut SimDevice) -> u64 {
        d.mem_info().unwrap().free_bytes
    }

    /// Captures: allocate `ws` (freed inside), touch it, allocate `out` (left live), touch it.
    fn capture(d: &mut SimDevice, s: StreamId, ws: u64, out: u64) -> crate::device::GraphId {
        d.graph_begin_capture(s).unwrap();
        let w = d.graph_malloc(ws, s).unwrap();
        d.launch(
            Kernel::Touch {
                ptr: w,
                bytes: ws,
                stride_bytes: 4096,
            },
            s,
        )
        .unwrap();
        d.graph_free(w, s).unwrap();
        if out > 0 {
            let o = d.graph_malloc(out, s).unwrap();
            d.launch(
                Kernel::Fill {
                    ptr: o,
                    bytes: out,
                    seed: 7,
                },
                s,
            )
            .unwrap();
        }
        d.graph_end_capture(s).unwrap().0
    }

    #[test]
    fn memory_becomes_physical_at_the_first_launch_and_stays_reserved_until_trim() {
        let (mut d, s) = tiny();
        let idle = free(&mut d);
        let g = capture(&mut d, s, 100 * MIB, 0);
        assert_eq!(free(&mut d), idle, "a capture takes no device memory");
        d.graph_instantiate(g, false).unwrap();
        assert_eq!(free(&mut d), idle - 10 * KIB, "one kernel node");
        d.graph_launch(g, s).unwrap();
        assert_eq!(free(&mut d), idle - 10 * KIB - 100 * MIB);
        let u = d.graph_mem_usage().unwrap();
        assert_eq!(
            (u.used_current_bytes, u.reserved_current_bytes),
            (100 * MIB, 100 * MIB)
        );
        // Steady replays take nothing more.
        d.graph_launch(g, s).unwrap();
        d.graph_launch(g, s).unwrap();
        assert_eq!(free(&mut d), idle - 10 * KIB - 100 * MIB);
        d.synchronize().unwrap();
        d.graph_destroy(g).unwrap();
        assert_eq!(
            free(&mut d),
            idle - 100 * MIB,
            "destroy keeps the memory reserved"
        );
        let u = d.graph_mem_usage().unwrap();
        assert_eq!(
            (u.used_current_bytes, u.reserved_current_bytes),
            (0, 100 * MIB)
        );
        d.graph_mem_trim().unwrap();
        assert_eq!(free(&mut d), idle);
        let u = d.graph_mem_usage().unwrap();
        assert_eq!(
            (
                u.used_high_bytes,
                u.reserved_high_bytes,
                u.reserved_current_bytes
            ),
            (100 * MIB, 100 * MIB, 0)
        );
    }

    #[test]
    fn relaunch_without_auto_free_fails_while_the_last_launch_allocation_is_live() {
        let (mut d, s) = tiny();
        let g = capture(&mut d, s, 2 * MIB, 3 * MIB);
        d.graph_instantiate(g, false).unwrap();
        d.graph_launch(g, s).unwrap();
        let before = free(&mut d);
        let e = d.graph_launch(g, s).unwrap_err();
        assert!(
            matches!(&e, DeviceError::Driver { call: "cuGraphLaunch", detail } if detail.contains("CUDA_ERROR_INVALID_VALUE")),
            "{e}"
        );
        assert_eq!(free(&mut d), before, "a refused launch changes nothing");
        // Free the output (cuMemFreeAsync): the relaunch works, and takes no new memory.
        let out = *d.graphs.live.keys().next().unwrap();
        d.graph_free(out, s).unwrap();
        d.graph_launch(g, s).unwrap();
        assert_eq!(free(&mut d), before);
    }

    #[test]
    fn auto_free_relaunches_reuse_the_output_and_destroy_leaves_it_live() {
        let (mut d, s) = tiny();
        let idle = free(&mut d);
        let g = capture(&mut d, s, 2 * MIB, 3 * MIB);
        d.graph_instantiate(g, true).unwrap();
        for _ in 0..3 {
            d.graph_launch(g, s).unwrap();
        }
        // Two kernel nodes; 2 MiB cache + a 4 MiB output (3 MiB rounded to the granularity).
        assert_eq!(free(&mut d), idle - 20 * KIB - 6 * MIB);
        d.graph_destroy(g).unwrap();
        d.graph_mem_trim().unwrap();
        assert_eq!(
            free(&mut d),
            idle - 4 * MIB,
            "the live output is never trimmed"
        );
        let u = d.graph_mem_usage().unwrap();
        assert_eq!(
            (u.used_current_bytes, u.reserved_current_bytes),
            (4 * MIB, 4 * MIB)
        );
        let out = *d.graphs.live.keys().next().unwrap();
        d.launch(
            Kernel::Verify {
                ptr: out,
                bytes: 3 * MIB,
                seed: 7,
            },
            StreamId::MAIN,
        )
        .map(|o| assert_eq!(o.mismatch, None, "the graph's fill is in the output"))
        .unwrap();
        d.graph_free(out, s).unwrap();
        d.graph_mem_trim().unwrap();
        assert_eq!(free(&mut d), idle);
    }

    #[test]
    fn graphs_on_one_stream_share_its_cache() {
        let (mut d, s) = tiny();
        let idle = free(&mut d);
        let big = capture(&mut d, s, 64 * MIB, 0);
        let small = capture(&mut d, s, 8 * MIB, 0);
        d.graph_instantiate(big, false).unwrap();
        d.graph_instantiate(small, false).unwrap();
        d.graph_launch(big, s).unwrap();
        d.graph_launch(small, s).unwrap();
        assert_eq!(free(&mut d), idle - 20 * KIB - 64 * MIB);
        // Another stream has its own cache.
        let t = d.create_stream().unwrap();
        d.graph_launch(small, t).unwrap();
        assert_eq!(free(&mut d), idle - 20 * KIB - 72 * MIB);
    }

    #[test]
    fn a_launch_that_cannot_map_its_memory_is_out_of_memory_and_changes_nothing() {
        let (mut d, s) = tiny();
        let g = capture(&mut d, s, 3 << 30, 0);
        d.graph_instantiate(g, false).unwrap();
        let p = d.malloc(1 << 30).unwrap();
        let before = free(&mut d);
        let e = d.graph_launch(g, s).unwrap_err();
        assert!(e.is_oom(), "{e}");
        assert_eq!(free(&mut d), before);
        d.free(p).unwrap();
        d.graph_launch(g, s).unwrap();
    }

    #[test]
    fn upload_maps_early_trim_unmaps_idle_graphs_and_a_relaunch_remaps() {
        let (mut d, s) = tiny();
        let idle = free(&mut d);
        let g = capture(&mut d, s, 32 * MIB, 0);
        d.graph_instantiate(g, false).unwrap();
        d.graph_upload(g, s).unwrap();
        assert_eq!(
            free(&mut d),
            idle - 10 * KIB - 32 * MIB,
            "mapped without running"
        );
        d.graph_launch(g, s).unwrap();
        assert_eq!(free(&mut d), idle - 10 * KIB - 32 * MIB);
        // Still running: a trim leaves it mapped.
        d.graph_mem_trim().unwrap();
        assert_eq!(free(&mut d), idle - 10 * KIB - 32 * MIB);
        d.synchronize().unwrap();
        d.graph_mem_trim().unwrap();
        assert_eq!(free(&mut d), idle - 10 * KIB, "an idle graph is unmapped");
        d.graph_launch(g, s).unwrap();
        assert_eq!(
            free(&mut d),
            idle - 10 * KIB - 32 * MIB,
            "and remapped at its launch"
        );
    }

    #[test]
    fn release_all_ends_an_open_capture() {
        let (mut d, s) = tiny();
        let idle = free(&mut d);
        let g = capture(&mut d, s, 8 * MIB, 2 * MIB);
        d.graph_instantiate(g, true).unwrap();
        d.graph_launch(g, s).unwrap();
        d.graph_begin_capture(s).unwrap();
        d.graph_malloc(MIB, s).unwrap();
        d.release_all().unwrap();
        d.synchronize().unwrap();
        assert_eq!(free(&mut d), idle);
        assert_eq!(d.graph_mem_usage().unwrap().reserved_current_bytes, 0);
    }

    #[test]
    fn capture_rules() {
        let (mut d, s) = tiny();
        let plain = d.malloc(4 * MIB).unwrap();
        assert!(d.graph_malloc(MIB, s).is_err(), "not capturing");
        d.graph_begin_capture(s).unwrap();
        assert!(d.graph_begin_capture(s).is_err(), "already capturing");
        assert!(d.graph_free(plain, s).is_err(), "not a graph allocation");
        assert!(d.stream_synchronize(s).is_err());
        assert!(d.synchronize().is_err());
        assert!(
            d.launch(
                Kernel::Verify {
                    ptr: plain,
                    bytes: MIB,
                    seed: 1
                },
                s
            )
            .is_err()
        );
        d.launch(
            Kernel::Touch {
                ptr: plain,
                bytes: 4 * MIB,
                stride_bytes: 4096,
            },
            s,
        )
        .expect("memory allocated outside may be used by a captured kernel");
        let (g, shape) = d.graph_end_capture(s).unwrap();
        assert_eq!((shape.kernel_nodes, shape.alloc_nodes), (1, 0));
        assert!(d.graph_launch(g, s).is_err(), "not instantiated");
        d.graph_instantiate(g, false).unwrap();
        assert!(
            d.graph_instantiate(g, false).is_err(),
            "one executable at a time"
        );
        d.graph_destroy(g).unwrap();
        assert!(d.graph_launch(g, s).is_err(), "destroyed");
    }
}
