//! CUDA graphs on the real GPU: stream capture, instantiation, upload, launch, destruction,
//! and the driver's graph memory (`cuDeviceGraphMemTrim`, `cuDeviceGetGraphMemAttribute`).
//!
//! Captures run in relaxed mode, so the sampler thread's `cuMemGetInfo` and the run's own
//! readings stay legal while a stream captures. Allocations inside a capture are
//! `cuMemAllocAsync` on the capturing stream (the driver turns them into allocation nodes);
//! their addresses are tracked here so that captured kernels pass the range check, and the
//! ones a launch leaves live are tracked until freed, so that `release_all` gives everything
//! back: captures still open are ended, every graph is destroyed, live graph allocations are
//! freed, and graph memory is trimmed. The context must be current for every method.

use std::collections::{HashMap, HashSet};

use cudarc::driver::result;
use cudarc::driver::sys;

use super::CudaDevice;
use super::driver_err;
use crate::prelude::*;
use crate::{DevPtr, DevResult, DeviceError, GraphId, GraphMemUsage, GraphShape, StreamId};

/// A captured graph that may move between threads with the device that owns it.
#[derive(Debug, Clone, Copy)]
struct Graph(sys::CUgraph);
// SAFETY: a CUgraph is an opaque driver handle; the device uses it from one thread at a time.
unsafe impl Send for Graph {}

/// An executable graph that may move between threads with the device that owns it.
#[derive(Debug, Clone, Copy)]
struct Exec(sys::CUgraphExec);
// SAFETY: a CUgraphExec is an opaque driver handle; the device uses it from one thread at a time.
unsafe impl Send for Exec {}

/// What a capture in progress has recorded, as far as this harness asked for it.
#[derive(Debug, Default)]
struct Capture {
    stream: usize,
    shape: GraphShape,
    /// Allocation nodes not yet freed in the capture: address → requested bytes.
    open: HashMap<DevPtr, u64>,
    /// Every allocation node: address → requested bytes.
    allocs: HashMap<DevPtr, u64>,
    /// Graph allocations of earlier launches this capture frees.
    frees_live: HashSet<DevPtr>,
}

#[derive(Debug)]
struct Entry {
    graph: Graph,
    exec: Option<Exec>,
    auto_free: bool,
    /// Allocation nodes the graph does not free: address → requested bytes.
    unfreed: HashMap<DevPtr, u64>,
    /// Every allocation node (valid addresses for the graph's own kernels).
    allocs: HashMap<DevPtr, u64>,
    frees_live: HashSet<DevPtr>,
}

#[derive(Debug, Default)]
pub struct CudaGraphs {
    /// Captures in progress, by the harness's stream index.
    captures: HashMap<usize, Capture>,
    graphs: HashMap<u32, Entry>,
    next_id: u32,
    /// Graph allocations a launch left live: address → requested bytes.
    live: HashMap<DevPtr, u64>,
}

fn invalid(msg: String) -> DeviceError {
    DeviceError::Invalid(msg)
}

fn check(call: &'static str, bytes: u64, r: sys::CUresult) -> DevResult<()> {
    r.result().map_err(|e| driver_err(call, bytes, e))
}

impl CudaGraphs {
    pub fn is_capturing(&self, stream: usize) -> bool {
        self.captures.contains_key(&stream)
    }

    /// Whether `[ptr, ptr + bytes)` lies in a graph allocation a kernel may use now: an
    /// allocation node of a capture in progress, or an allocation a launch left live.
    pub fn covers(&self, ptr: DevPtr, bytes: u64) -> bool {
        let inside = |(base, size): (&DevPtr, &u64)| {
            *base <= ptr && ptr.saturating_add(bytes) <= base + size
        };
        self.live.iter().any(inside) || self.captures.values().any(|c| c.open.iter().any(inside))
    }

    fn entry(&self, graph: GraphId) -> DevResult<&Entry> {
        self.graphs
            .get(&graph.0)
            .ok_or_else(|| invalid(format!("graph {} does not exist (destroyed?)", graph.0)))
    }

    fn exec(&self, graph: GraphId, call: &str) -> DevResult<sys::CUgraphExec> {
        self.entry(graph)?.exec.map(|e| e.0).ok_or_else(|| {
            invalid(format!(
                "{call} of graph {}, which is not instantiated",
                graph.0
            ))
        })
    }

    pub fn begin_capture(&mut self, index: usize, stream: sys::CUstream) -> DevResult<()> {
        if self.is_capturing(index) {
            return Err(invalid(format!(
                "cuStreamBeginCapture: stream {index} is already capturing"
            )));
        }
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `stream` is a live, non-blocking stream of the current context.
        unsafe { result::stream::begin_capture(stream, mode) }
            .map_err(|e| driver_err("cuStreamBeginCapture", 0, e))?;
        self.captures.insert(
            index,
            Capture {
                stream: index,
                ..Capture::default()
            },
        );
        Ok(())
    }

    pub fn end_capture(
        &mut self,
        index: usize,
        stream: sys::CUstream,
    ) -> DevResult<(GraphId, GraphShape)> {
        let c = self.captures.remove(&index).ok_or_else(|| {
            invalid(format!(
                "cuStreamEndCapture: stream {index} is not capturing"
            ))
        })?;
        // SAFETY: `stream` is the live stream this capture began on.
        let graph = unsafe { result::stream::end_capture(stream) }
            .map_err(|e| driver_err("cuStreamEndCapture", 0, e))?;
        if graph.is_null() {
            return Err(DeviceError::Driver {
                call: "cuStreamEndCapture",
                detail: "the driver returned no graph (the capture was invalidated)".into(),
            });
        }
        let unfreed: HashMap<DevPtr, u64> = c
            .allocs
            .iter()
            .filter(|(p, _)| c.open.contains_key(p))
            .map(|(p, b)| (*p, *b))
            .collect();
        let mut shape = c.shape;
        shape.unfreed_bytes = unfreed.values().sum();
        let id = self.next_id;
        self.next_id += 1;
        self.graphs.insert(
            id,
            Entry {
                graph: Graph(graph),
                exec: None,
                auto_free: false,
                unfreed,
                allocs: c.allocs,
                frees_live: c.frees_live,
            },
        );
        Ok((GraphId(id), shape))
    }

    /// A kernel (or driver operation) was queued on a capturing stream.
    pub fn note_kernel(&mut self, index: usize) {
        if let Some(c) = self.captures.get_mut(&index) {
            c.shape.kernel_nodes += 1;
        }
    }

    pub fn malloc(&mut self, index: usize, stream: sys::CUstream, bytes: u64) -> DevResult<DevPtr> {
        if bytes == 0 {
            return Err(invalid("cuMemAllocAsync of 0 bytes".into()));
        }
        let Some(c) = self.captures.get_mut(&index) else {
            return Err(invalid(format!(
                "a graph allocation needs a capturing stream; stream {index} is not capturing"
            )));
        };
        // The address is only used by work ordered after the node (captured, or after a launch).
        // SAFETY: `stream` is a live capturing stream, so this records an allocation node.
        let ptr = unsafe { result::malloc_async(stream, bytes as usize) }
            .map_err(|e| driver_err("cuMemAllocAsync", bytes, e))?;
        c.shape.alloc_nodes += 1;
        c.shape.alloc_node_bytes += bytes;
        c.open.insert(ptr, bytes);
        c.allocs.insert(ptr, bytes);
        Ok(ptr)
    }

    pub fn free(&mut self, index: usize, stream: sys::CUstream, ptr: DevPtr) -> DevResult<()> {
        if let Some(c) = self.captures.get_mut(&index) {
            let own = c.open.contains_key(&ptr);
            if !own && !self.live.contains_key(&ptr) {
                return Err(invalid(format!(
                    "cuMemFreeAsync of {ptr:#x} during a capture: a free node can only free a graph allocation (of this capture, or one a launch left live)"
                )));
            }
            // SAFETY: `ptr` is a graph allocation (checked above); this records a free node.
            unsafe { result::free_async(ptr, stream) }
                .map_err(|e| driver_err("cuMemFreeAsync", 0, e))?;
            c.shape.free_nodes += 1;
            if own {
                c.open.remove(&ptr);
            } else {
                c.frees_live.insert(ptr);
            }
            return Ok(());
        }
        if !self.live.contains_key(&ptr) {
            return Err(invalid(format!(
                "cuMemFreeAsync of {ptr:#x}, which is not a live graph allocation"
            )));
        }
        // SAFETY: `ptr` is a graph allocation a launch left live, freed once here.
        unsafe { result::free_async(ptr, stream) }
            .map_err(|e| driver_err("cuMemFreeAsync", 0, e))?;
        self.live.remove(&ptr);
        Ok(())
    }

    pub fn instantiate(&mut self, graph: GraphId, auto_free: bool) -> DevResult<()> {
        let e = self.entry(graph)?;
        if e.exec.is_some() {
            return Err(invalid(format!(
                "cuGraphInstantiate: graph {} already has an executable; a graph with memory nodes may be instantiated once at a time",
                graph.0
            )));
        }
        let flags = if auto_free {
            sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
        } else {
            sys::CUgraphInstantiate_flags(0)
        };
        // SAFETY: the graph is live (looked up above) and has no executable yet.
        let exec = unsafe { result::graph::instantiate(e.graph.0, flags) }
            .map_err(|err| driver_err("cuGraphInstantiateWithFlags", 0, err))?;
        let e = self.graphs.get_mut(&graph.0).expect("looked up above");
        e.exec = Some(Exec(exec));
        e.auto_free = auto_free;
        Ok(())
    }

    /// `footprint_bytes` is what an out-of-memory reports as requested.
    pub fn upload(&mut self, graph: GraphId, stream: sys::CUstream) -> DevResult<()> {
        let exec = self.exec(graph, "cuGraphUpload")?;
        let bytes = self.footprint_bytes(graph);
        // SAFETY: `exec` is a live executable graph and `stream` a live stream of this context.
        unsafe { result::graph::upload(exec, stream) }
            .map_err(|e| driver_err("cuGraphUpload", bytes, e))
    }

    /// The graph's allocation-node bytes: what a launch may have to map.
    fn footprint_bytes(&self, graph: GraphId) -> u64 {
        self.graphs
            .get(&graph.0)
            .map_or(0, |e| e.allocs.values().sum())
    }

    pub fn launch(&mut self, graph: GraphId, stream: sys::CUstream) -> DevResult<()> {
        let exec = self.exec(graph, "cuGraphLaunch")?;
        let bytes = self.footprint_bytes(graph);
        // The driver, not this harness, refuses a relaunch while the last launch's
        // allocations are live: that refusal is part of what a GPU run checks.
        // SAFETY: `exec` is a live executable graph and `stream` a live stream of this context.
        unsafe { result::graph::launch(exec, stream) }
            .map_err(|e| driver_err("cuGraphLaunch", bytes, e))?;
        let e = self.entry(graph)?;
        let unfreed: Vec<(DevPtr, u64)> = e.unfreed.iter().map(|(p, b)| (*p, *b)).collect();
        let frees: Vec<DevPtr> = e.frees_live.iter().copied().collect();
        for p in frees {
            self.live.remove(&p);
        }
        self.live.extend(unfreed);
        Ok(())
    }

    /// Destroys the executable and the graph. Live allocations it left stay live.
    pub fn destroy(&mut self, graph: GraphId) -> DevResult<()> {
        let e = self
            .graphs
            .remove(&graph.0)
            .ok_or_else(|| invalid(format!("graph {} does not exist (destroyed?)", graph.0)))?;
        Self::destroy_entry(e)
    }

    fn destroy_entry(e: Entry) -> DevResult<()> {
        let mut first = None;
        if let Some(Exec(exec)) = e.exec {
            // SAFETY: the executable was created by this set and is destroyed once here.
            if let Err(err) = unsafe { result::graph::exec_destroy(exec) } {
                first.get_or_insert(driver_err("cuGraphExecDestroy", 0, err));
            }
        }
        // SAFETY: the graph was returned by cuStreamEndCapture and is destroyed once here.
        if let Err(err) = unsafe { result::graph::destroy(e.graph.0) } {
            first.get_or_insert(driver_err("cuGraphDestroy", 0, err));
        }
        first.map_or(Ok(()), Err)
    }

    pub fn trim(ordinal: i32) -> DevResult<()> {
        let dev = result::device::get(ordinal).map_err(|e| driver_err("cuDeviceGet", 0, e))?;
        // SAFETY: `dev` is a valid device handle; the context is current.
        check("cuDeviceGraphMemTrim", 0, unsafe {
            sys::cuDeviceGraphMemTrim(dev)
        })
    }

    pub fn usage(ordinal: i32) -> DevResult<GraphMemUsage> {
        use sys::CUgraphMem_attribute as A;
        let dev = result::device::get(ordinal).map_err(|e| driver_err("cuDeviceGet", 0, e))?;
        let attr = |a: A| -> DevResult<u64> {
            let mut v: u64 = 0;
            // SAFETY: the four attributes are documented as cuuint64_t; `v` is a valid u64.
            check("cuDeviceGetGraphMemAttribute", 0, unsafe {
                sys::cuDeviceGetGraphMemAttribute(dev, a, (&mut v as *mut u64).cast())
            })?;
            Ok(v)
        };
        Ok(GraphMemUsage {
            used_current_bytes: attr(A::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)?,
            used_high_bytes: attr(A::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)?,
            reserved_current_bytes: attr(A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high_bytes: attr(A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)?,
        })
    }

    /// Ends captures still open, destroys every graph, frees live graph allocations on
    /// `main`, waits, and trims graph memory. Returns the first error; forgets everything.
    pub fn release_all(
        &mut self,
        streams: &[sys::CUstream],
        main: sys::CUstream,
        ordinal: i32,
    ) -> DevResult<()> {
        let mut first = None;
        let mut note = |r: DevResult<()>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        let open: Vec<usize> = self.captures.values().map(|c| c.stream).collect();
        for index in open {
            if let Some(&s) = streams.get(index) {
                note(self.end_capture(index, s).map(|_| ()));
            }
            self.captures.remove(&index);
        }
        for (_, e) in self.graphs.drain() {
            note(Self::destroy_entry(e));
        }
        for (ptr, _) in self.live.drain() {
            // SAFETY: `ptr` is a graph allocation left live by a launch, freed once here.
            note(
                unsafe { result::free_async(ptr, main) }
                    .map_err(|e| driver_err("cuMemFreeAsync", 0, e)),
            );
        }
        note(result::ctx::synchronize().map_err(|e| driver_err("cuCtxSynchronize", 0, e)));
        note(Self::trim(ordinal));
        first.map_or(Ok(()), Err)
    }
}

impl Graphs for CudaDevice {
    fn graph_begin_capture(&mut self, stream: StreamId) -> DevResult<()> {
        let s = self.stream(stream)?;
        self.bind()?;
        // Module loading is not captured: a run loads its kernels before its idle reading.
        self.graphs.begin_capture(stream.0 as usize, s)
    }

    fn graph_end_capture(&mut self, stream: StreamId) -> DevResult<(GraphId, GraphShape)> {
        let s = self.stream(stream)?;
        self.bind()?;
        self.graphs.end_capture(stream.0 as usize, s)
    }

    fn graph_malloc(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr> {
        let s = self.stream(stream)?;
        self.bind()?;
        self.graphs.malloc(stream.0 as usize, s, bytes)
    }

    fn graph_free(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()> {
        let s = self.stream(stream)?;
        self.bind()?;
        self.graphs.free(stream.0 as usize, s, ptr)
    }

    fn graph_instantiate(&mut self, graph: GraphId, auto_free_on_launch: bool) -> DevResult<()> {
        self.bind()?;
        self.graphs.instantiate(graph, auto_free_on_launch)
    }

    fn graph_upload(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()> {
        let s = self.stream(stream)?;
        self.bind()?;
        self.graphs.upload(graph, s)
    }

    fn graph_launch(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()> {
        let s = self.stream(stream)?;
        self.bind()?;
        self.graphs.launch(graph, s)
    }

    fn graph_destroy(&mut self, graph: GraphId) -> DevResult<()> {
        self.bind()?;
        self.graphs.destroy(graph)
    }

    fn graph_mem_trim(&mut self) -> DevResult<()> {
        self.bind()?;
        CudaGraphs::trim(self.info.index as i32)
    }

    fn graph_mem_usage(&mut self) -> DevResult<GraphMemUsage> {
        self.bind()?;
        CudaGraphs::usage(self.info.index as i32)
    }
}
