//! CUDA graphs: stream capture, instantiation, upload, launch, destruction, and the graph
//! memory pool (`cuDeviceGraphMemTrim`, `cuDeviceGet/SetGraphMemAttribute`).
//!
//! During capture, work on the stream becomes nodes; `cuMemAllocAsync` becomes an allocation
//! node whose address is fixed at once, `cuMemFreeAsync` a free node. Instantiating takes
//! `exec_bytes_per_node` per kernel, memset or copy node. Where the documentation leaves room
//! this follows headroom's simulator (docs/guide.md, "CUDA graphs"): upload and launch map a graph's
//! memory from the launching stream's share of the graph pool, which graphs on one stream
//! share (it is as large as the largest peak of the allocations they free themselves);
//! allocations a launch leaves live are memory of their own until freed. A relaunch while the
//! previous launch's allocations are live fails unless instantiated with auto-free-on-launch.
//! Destroying a graph frees no live allocation and the pool keeps its memory until
//! `cuDeviceGraphMemTrim`, which unmaps idle graphs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::abi::CUresult;
use crate::errors::*;
use crate::memory::round_up;
use crate::state::Driver;
use crate::stream::{StreamShared, Work};

#[derive(Debug, Clone)]
pub enum Node {
    /// A kernel, memset or copy (or, as `Work::Nothing`, an event record).
    Work {
        work: Work,
        duration: Duration,
    },
    Alloc {
        ptr: u64,
        bytes: u64,
    },
    Free {
        ptr: u64,
    },
}

impl Node {
    /// Whether the node costs executable-graph memory (kernel, memset and copy nodes).
    fn is_op(&self) -> bool {
        matches!(self, Node::Work { work, .. } if !matches!(work, Work::Nothing | Work::Record { .. }))
    }
}

#[derive(Debug, Default)]
pub struct Capture {
    pub nodes: Vec<Node>,
    pub invalidated: bool,
    /// Allocation nodes not freed in the capture so far: address → bytes.
    pub open: HashMap<u64, u64>,
}

#[derive(Debug)]
pub struct GraphRec {
    pub device: u32,
    pub nodes: Vec<Node>,
    /// Executables made from it and not destroyed (a graph with memory nodes allows one).
    pub execs: u32,
}

#[derive(Debug)]
pub struct ExecRec {
    pub device: u32,
    pub graph: u64,
    nodes: Vec<Node>,
    auto_free: bool,
    exec_bytes: u64,
    /// Peak of the allocations the graph frees itself, each rounded to the granularity.
    transient: u64,
    /// Allocation nodes the graph does not free: (address, rounded bytes, bytes).
    unfreed: Vec<(u64, u64, u64)>,
    own: HashSet<u64>,
    /// The stream whose share of the pool backs the graph now.
    mapped_on: Option<u64>,
    last_launch: Option<(Arc<StreamShared>, u64)>,
}

#[derive(Debug, Clone, Copy)]
pub struct LiveAlloc {
    pub rounded: u64,
    pub region: u64,
}

/// The graph memory pool of one device.
#[derive(Debug, Default)]
pub struct GraphMem {
    pub reserved: u64,
    pub reserved_high: u64,
    pub used_high: u64,
    pub exec_bytes: u64,
    /// Graph allocations live outside their graph (left by a launch).
    pub live: HashMap<u64, LiveAlloc>,
}

impl GraphMem {
    pub fn device_bytes(&self) -> u64 {
        self.reserved + self.exec_bytes
    }

    fn live_bytes(&self) -> u64 {
        self.live.values().map(|l| l.rounded).sum()
    }
}

/// Transient peak, unfreed allocations and own allocations of a node list.
pub fn summarize(nodes: &[Node], gran: u64) -> (u64, Vec<(u64, u64, u64)>, HashSet<u64>) {
    let own: HashMap<u64, u64> = nodes
        .iter()
        .filter_map(|n| match n {
            Node::Alloc { ptr, bytes } => Some((*ptr, *bytes)),
            _ => None,
        })
        .collect();
    let freed: HashSet<u64> = nodes
        .iter()
        .filter_map(|n| match n {
            Node::Free { ptr } if own.contains_key(ptr) => Some(*ptr),
            _ => None,
        })
        .collect();
    let (mut now, mut peak, mut unfreed) = (0u64, 0u64, Vec::new());
    for n in nodes {
        match n {
            Node::Alloc { ptr, bytes } if freed.contains(ptr) => {
                now += round_up(*bytes, gran);
                peak = peak.max(now);
            }
            Node::Alloc { ptr, bytes } => unfreed.push((*ptr, round_up(*bytes, gran), *bytes)),
            Node::Free { ptr } if freed.contains(ptr) => now -= round_up(own[ptr], gran),
            _ => {}
        }
    }
    (peak, unfreed, own.into_keys().collect())
}

impl Driver {
    fn gran(&self) -> u64 {
        self.cfg.profile.graphs.alloc_granularity_bytes.0
    }

    /// Graph memory in use: each stream's share (the largest transient peak of the graphs
    /// mapped on it) plus live allocations. `mapped` overrides one executable's mapping.
    fn graph_used(&self, device: u32, mapped: Option<(u64, u64)>, live: u64) -> u64 {
        let mut shares: BTreeMap<u64, u64> = BTreeMap::new();
        for (id, e) in self.execs.iter().filter(|(_, e)| e.device == device) {
            let on = match mapped {
                Some((x, s)) if x == *id => Some(s),
                _ => e.mapped_on,
            };
            if let Some(s) = on {
                let c = shares.entry(s).or_default();
                *c = (*c).max(e.transient);
            }
        }
        shares.values().sum::<u64>() + live
    }

    /// (used current, used high, reserved current, reserved high).
    pub fn graph_usage(&self, device: u32) -> [u64; 4] {
        let g = &self.devices[device as usize].graph;
        let used = self.graph_used(device, None, g.live_bytes());
        [used, g.used_high, g.reserved, g.reserved_high]
    }

    fn note_highs(&mut self, device: u32) {
        let used = self.graph_usage(device)[0];
        let g = &mut self.dev(device).graph;
        g.used_high = g.used_high.max(used);
        g.reserved_high = g.reserved_high.max(g.reserved);
    }

    /// An allocation node: a fixed address now, memory only when a launch reaches it.
    pub fn capture_alloc(&mut self, stream: u64, bytes: u64) -> Result<u64, CUresult> {
        let ptr = self.va.take(round_up(bytes, self.gran()), self.gran());
        let c = self
            .streams
            .get_mut(&stream)
            .and_then(|s| s.capture.as_mut())
            .ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        if c.invalidated {
            return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        c.open.insert(ptr, bytes);
        c.nodes.push(Node::Alloc { ptr, bytes });
        Ok(ptr)
    }

    /// A free node: of an allocation node of this capture, or of a live graph allocation.
    pub fn capture_free(&mut self, device: u32, stream: u64, ptr: u64) -> Result<(), CUresult> {
        let live = self.devices[device as usize].graph.live.contains_key(&ptr);
        let c = self
            .streams
            .get_mut(&stream)
            .and_then(|s| s.capture.as_mut())
            .ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        if c.invalidated {
            return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        if c.open.remove(&ptr).is_none() && !live {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        c.nodes.push(Node::Free { ptr });
        Ok(())
    }

    /// `cuMemFreeAsync` of a live graph allocation outside a capture: in stream order.
    pub fn graph_free(&mut self, device: u32, ptr: u64, stream: u64) -> Result<(), CUresult> {
        let l = *self
            .dev(device)
            .graph
            .live
            .get(&ptr)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        self.submit(
            stream,
            Work::UnmapRange {
                ptr,
                bytes: l.rounded,
                id: l.region,
            },
            Duration::ZERO,
        )?;
        self.dev(device).graph.live.remove(&ptr);
        self.publish(device);
        Ok(())
    }

    pub fn instantiate(&mut self, graph: u64, auto_free: bool) -> Result<u64, CUresult> {
        let gran = self.gran();
        let per_node = self.cfg.profile.graphs.exec_bytes_per_node.0;
        let g = self.graphs.get(&graph).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let has_memory = g.nodes.iter().any(|n| !matches!(n, Node::Work { .. }));
        if has_memory && g.execs > 0 {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let device = g.device;
        let exec_bytes = g.nodes.iter().filter(|n| n.is_op()).count() as u64 * per_node;
        let (transient, unfreed, own) = summarize(&g.nodes, gran);
        let nodes = g.nodes.clone();
        self.reserve(device, exec_bytes)?;
        let id = self.next_id();
        self.execs.insert(
            id,
            ExecRec {
                device,
                graph,
                nodes,
                auto_free,
                exec_bytes,
                transient,
                unfreed,
                own,
                mapped_on: None,
                last_launch: None,
            },
        );
        if let Some(g) = self.graphs.get_mut(&graph) {
            g.execs += 1;
        }
        self.dev(device).graph.exec_bytes += exec_bytes;
        self.publish(device);
        Ok(id)
    }

    /// Maps `exec` on `stream` (and, for a launch, runs it). Everything is checked first, so a
    /// refusal changes nothing.
    pub fn graph_map(&mut self, exec: u64, stream: u64, launch: bool) -> Result<(), CUresult> {
        let e = self.execs.get(&exec).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let device = e.device;
        let g = &self.devices[device as usize].graph;
        let own_live: Vec<(u64, LiveAlloc)> = e
            .unfreed
            .iter()
            .filter_map(|(p, _, _)| g.live.get(p).map(|l| (*p, *l)))
            .collect();
        let mut live_after = g.live_bytes();
        if launch {
            if !own_live.is_empty() && !e.auto_free {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let frees_unknown = e.nodes.iter().any(
                |n| matches!(n, Node::Free { ptr } if !e.own.contains(ptr) && !g.live.contains_key(ptr)),
            );
            if frees_unknown {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            live_after -= own_live.iter().map(|(_, l)| l.rounded).sum::<u64>();
            live_after += e.unfreed.iter().map(|(_, r, _)| r).sum::<u64>();
        }
        let used_after = self.graph_used(device, Some((exec, stream)), live_after);
        let grow = used_after.saturating_sub(self.devices[device as usize].graph.reserved);
        self.reserve(device, grow)?;
        self.dev(device).graph.reserved += grow;
        if launch {
            self.run_graph(exec, stream, own_live)?;
        }
        if let Some(e) = self.execs.get_mut(&exec) {
            e.mapped_on = Some(stream);
        }
        self.note_highs(device);
        self.publish(device);
        Ok(())
    }

    /// Queues a launch's nodes on `stream`, after freeing what auto-free frees.
    fn run_graph(
        &mut self,
        exec: u64,
        stream: u64,
        own_live: Vec<(u64, LiveAlloc)>,
    ) -> Result<(), CUresult> {
        let e = &self.execs[&exec];
        let (device, nodes, unfreed) = (e.device, e.nodes.clone(), e.unfreed.clone());
        let mut ops = Vec::new();
        for (p, l) in own_live {
            self.dev(device).graph.live.remove(&p);
            ops.push((
                Work::UnmapRange {
                    ptr: p,
                    bytes: l.rounded,
                    id: l.region,
                },
                Duration::ZERO,
            ));
        }
        let mut regions: HashMap<u64, (u64, u64)> = HashMap::new();
        for n in &nodes {
            match n {
                Node::Alloc { ptr, bytes } => {
                    let id = self.next_id();
                    regions.insert(*ptr, (*bytes, id));
                    ops.push((
                        Work::MapRange {
                            ptr: *ptr,
                            bytes: *bytes,
                            id,
                        },
                        Duration::ZERO,
                    ));
                }
                Node::Work { work, duration } => ops.push((work.clone(), *duration)),
                Node::Free { ptr } => {
                    let (bytes, id) = match regions.get(ptr) {
                        Some(r) => *r,
                        None => match self.dev(device).graph.live.remove(ptr) {
                            Some(l) => (l.rounded, l.region),
                            None => continue,
                        },
                    };
                    ops.push((
                        Work::UnmapRange {
                            ptr: *ptr,
                            bytes,
                            id,
                        },
                        Duration::ZERO,
                    ));
                }
            }
        }
        for (p, rounded, _) in unfreed {
            let region = regions.get(&p).map_or(0, |r| r.1);
            self.dev(device)
                .graph
                .live
                .insert(p, LiveAlloc { rounded, region });
        }
        let mut last = None;
        for (work, d) in ops {
            last = self.submit(stream, work, d)?.or(last);
        }
        if let Some(e) = self.execs.get_mut(&exec) {
            e.last_launch = last;
        }
        Ok(())
    }

    pub fn exec_destroy(&mut self, exec: u64) -> Result<(), CUresult> {
        let e = self.execs.remove(&exec).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(g) = self.graphs.get_mut(&e.graph) {
            g.execs = g.execs.saturating_sub(1);
        }
        self.dev(e.device).graph.exec_bytes -= e.exec_bytes;
        self.publish(e.device);
        Ok(())
    }

    /// `cuDeviceGraphMemTrim`: idle graphs are unmapped; what nothing uses goes back.
    pub fn graph_trim(&mut self, device: u32) {
        for e in self.execs.values_mut().filter(|e| e.device == device) {
            let busy = e
                .last_launch
                .as_ref()
                .is_some_and(|(s, seq)| s.completed() < *seq);
            if !busy {
                e.mapped_on = None;
            }
        }
        let used = self.graph_usage(device)[0];
        self.dev(device).graph.reserved = used;
        self.publish(device);
    }
}
