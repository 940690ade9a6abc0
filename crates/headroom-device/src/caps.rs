//! What a device can do, one trait per concern: the core (identity, clock, free memory, the
//! host waiting), what a run observes around its calls (NVML, processes, background readings,
//! releasing everything), what only the simulator can do, plain memory, streams and events, kernels, the
//! stream-ordered pool, virtual memory management and CUDA graphs. `Device` is all of them.
//!
//! Consumers ask for bundles of them: `PoolDevice` (the stream-ordered pool and streams, what
//! the `pool` allocator calls), `CachingDevice` (the core, memory, streams and virtual memory,
//! what the caching allocator model calls) and `AllocDevice` (what any allocator is driven
//! through: `CachingDevice`, with the pool lent where the device has one). A `&mut dyn Device`
//! is a `&mut dyn AllocDevice` by upcasting.
//!
//! Time is the device's own: virtual and deterministic on `sim`, a monotonic clock on `cuda`.
//! Both count nanoseconds since the device was opened.

use super::{
    DevPtr, DevResult, DeviceInfo, EventId, GraphId, GraphMemUsage, GraphShape, Kernel,
    KernelOutcome, MemInfo, NvmlMemory, PoolConfig, PoolUsage, ProcessUsage, StreamId,
};
use crate::reading::Readings;

/// Identity, the clock, the device's free memory, the host waiting, and what only the simulator
/// can do.
pub trait DeviceCore: Send {
    fn info(&self) -> &DeviceInfo;
    fn now_ns(&self) -> u64;

    /// `cuMemGetInfo` (an event-synchronous reading: costs the query's latency).
    fn mem_info(&mut self) -> DevResult<MemInfo>;

    /// The host thread waits (a `sleep`/`hold` step). Virtual on sim.
    fn sleep(&mut self, duration_ns: u64);

    /// Writes this device's memory as it stands to what its modeled readings are read from
    /// (`Readings::Modeled`); called at each of the harness's reading points. A measured device
    /// is read from the driver and has nothing to publish.
    fn publish_memory(&self) {}

    /// How this device rounds its allocations: the one rule every size check asks.
    fn alloc_rounding(&self) -> crate::rounding::AllocRounding {
        crate::rounding::AllocRounding::DRIVER
    }

    /// What only the simulator can do, where this device is the simulator.
    fn simulated(&self) -> Option<&dyn Simulated> {
        None
    }

    /// As `simulated`, to change the simulation (add a modeled other process).
    fn simulated_mut(&mut self) -> Option<&mut dyn Simulated> {
        None
    }
}

/// What a run, `watch` and `hold` ask of the device around their own calls: NVML's figures,
/// the processes the driver lists, readings between the harness's calls, and the release of
/// everything at the end.
pub trait Observe {
    /// NVML's device memory, where NVML is present.
    fn nvml_memory(&mut self) -> Option<NvmlMemory>;
    /// The processes the driver lists on this device, where NVML is present.
    fn processes(&mut self) -> Option<Vec<ProcessUsage>>;
    /// As `processes`, or why there is no list (no NVML; NVML refused it, as on a MIG
    /// instance without privileges).
    fn processes_or_why(&mut self) -> Result<Vec<ProcessUsage>, String> {
        self.processes()
            .ok_or_else(|| "NVML is not available: no process list".to_string())
    }

    /// How this device's memory is read between the harness's own calls (the sampler's and
    /// `watch`'s source of raw readings).
    fn readings(&mut self) -> DevResult<Readings>;

    /// Frees every allocation and pool block this device still holds for the harness.
    /// Called at the end of every run, also after an OOM or an interrupt.
    fn release_all(&mut self) -> DevResult<()>;
}

/// What only the simulated device can do: model another process.
pub trait Simulated {
    /// The simulator's stand-in for another process: `pid` holds `bytes` (and a context of
    /// its own) for `duration_ns` from now. A real GPU gets a real process instead (`headroom
    /// hold`).
    fn add_simulated_tenant(&mut self, pid: u32, bytes: u64, duration_ns: u64) -> DevResult<()>;
}

/// Plain device memory, outside any pool.
pub trait Memory {
    /// `cuMemAlloc`.
    fn malloc(&mut self, bytes: u64) -> DevResult<DevPtr>;
    /// `cuMemFree`.
    fn free(&mut self, ptr: DevPtr) -> DevResult<()>;
}

/// Streams, and the events that order work across them.
pub trait Streams {
    fn create_stream(&mut self) -> DevResult<StreamId>;
    fn stream_synchronize(&mut self, stream: StreamId) -> DevResult<()>;
    /// `cuCtxSynchronize`: waits for every stream; the pool then trims to its release threshold.
    fn synchronize(&mut self) -> DevResult<()>;

    /// `cuEventRecord` on a fresh event: completes when `stream` finishes the work queued so far.
    fn record_event(&mut self, stream: StreamId) -> DevResult<EventId>;
    /// `cuEventQuery`: whether the event has completed (never blocks).
    fn event_query(&mut self, event: EventId) -> DevResult<bool>;
    /// `cuEventSynchronize`: the host waits until the event has completed.
    fn event_synchronize(&mut self, event: EventId) -> DevResult<()>;
    /// `cuEventDestroy`: the id is no longer valid (the backend may reuse the event).
    fn event_destroy(&mut self, event: EventId) -> DevResult<()>;
}

/// headroom's kernels (`kernels/`) and the driver operations they are measured against.
pub trait Kernels {
    /// Loads these modules of headroom's kernels (`verify`'s with its 16-byte result buffer),
    /// so that the memory they take is taken before a run's idle reading instead of inside its
    /// first kernel step. Returns how many modules this call loaded (0 when they already
    /// were). Driver operations (memset, memcpy) need none.
    fn load_kernels(&mut self, modules: &[crate::kernels::Module]) -> DevResult<u32>;

    /// Launches a kernel on a stream (asynchronous unless the kernel reports a result).
    fn launch(&mut self, kernel: Kernel, stream: StreamId) -> DevResult<KernelOutcome>;

    /// Launches `kernel` `repeats` times back to back and returns the GPU time they took
    /// (device events on cuda, the model on sim).
    fn timed_launch(&mut self, kernel: Kernel, stream: StreamId, repeats: u32) -> DevResult<u64>;

    /// Writes one 4-byte word through the driver (used to plant a corruption for `verify`),
    /// ordered on `stream` after the work queued there, and waits until it has landed.
    fn write_word(&mut self, addr: DevPtr, value: u32, stream: StreamId) -> DevResult<()>;
}

/// The harness's stream-ordered pool (`cuMemAllocFromPoolAsync`).
pub trait StreamOrderedPool {
    /// Configures the pool.
    fn pool_configure(&mut self, config: PoolConfig) -> DevResult<()>;
    /// `cuMemAllocFromPoolAsync` on the harness's pool.
    fn malloc_async(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr>;
    /// `cuMemFreeAsync`: the block returns to the pool when `stream` reaches the free.
    fn free_async(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()>;
    /// `cuMemPoolTrimTo`.
    fn pool_trim(&mut self, keep_bytes: u64) -> DevResult<()>;
    fn pool_usage(&mut self) -> DevResult<PoolUsage>;
}

/// Virtual memory management: reserved ranges with physical memory mapped in pieces.
pub trait VirtualMemory {
    /// `cuMemGetAllocationGranularity` (minimum) for device memory: virtual ranges and
    /// physical pages are sized in multiples of it.
    fn vmm_granularity(&mut self) -> DevResult<u64>;
    /// `cuMemAddressReserve`: a virtual range of `bytes` (a granularity multiple) with no
    /// physical memory behind it.
    fn vmm_reserve(&mut self, bytes: u64) -> DevResult<DevPtr>;
    /// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`: `bytes` of new physical memory (one
    /// handle) mapped read-write at `ptr`, inside a reserved range. Out of memory is
    /// `DeviceError::OutOfMemory` and leaves nothing mapped.
    fn vmm_map(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()>;
    /// `cuMemUnmap` + `cuMemRelease` of every mapping inside `[ptr, ptr + bytes)`; the range
    /// must cover whole mappings.
    fn vmm_unmap(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()>;
    /// `cuMemAddressFree` of a range from `vmm_reserve`, unmapping what is still mapped in it.
    fn vmm_free(&mut self, ptr: DevPtr) -> DevResult<()>;
}

/// CUDA graphs: stream capture, executable graphs, and the graph allocator's memory.
pub trait Graphs {
    /// `cuStreamBeginCapture` (relaxed mode): work queued on `stream` from now on is recorded
    /// into a graph instead of running. Kernels launched on it become kernel nodes.
    fn graph_begin_capture(&mut self, stream: StreamId) -> DevResult<()>;
    /// `cuStreamEndCapture`: the recorded graph and its shape.
    fn graph_end_capture(&mut self, stream: StreamId) -> DevResult<(GraphId, GraphShape)>;
    /// `cuMemAllocAsync` on a capturing stream: an allocation node. The address is fixed at
    /// once; physical memory comes from the graph allocator when the graph is uploaded or
    /// launched.
    fn graph_malloc(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr>;
    /// `cuMemFreeAsync` of a graph allocation: a free node on a capturing stream, otherwise
    /// the free of an allocation a launch left live (its memory returns to the graph pool).
    fn graph_free(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()>;
    /// `cuGraphInstantiateWithFlags`, with `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`
    /// when `auto_free_on_launch`. A graph has at most one executable at a time.
    fn graph_instantiate(&mut self, graph: GraphId, auto_free_on_launch: bool) -> DevResult<()>;
    /// `cuGraphUpload`: maps the graph's memory from `stream`'s cache without running it.
    fn graph_upload(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()>;
    /// `cuGraphLaunch`. Fails (not out of memory) when allocations of the previous launch are
    /// still live and the graph was instantiated without auto-free.
    fn graph_launch(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()>;
    /// `cuGraphExecDestroy` + `cuGraphDestroy`. Live graph allocations stay live, and the
    /// graph's memory stays reserved by the graph allocator until trimmed.
    fn graph_destroy(&mut self, graph: GraphId) -> DevResult<()>;
    /// `cuDeviceGraphMemTrim`: returns graph memory not in use to the device.
    fn graph_mem_trim(&mut self) -> DevResult<()>;
    /// `cuDeviceGetGraphMemAttribute` for the four attributes.
    fn graph_mem_usage(&mut self) -> DevResult<GraphMemUsage>;
}

/// What the `pool` allocator calls: the stream-ordered pool, and streams (a synchronize
/// before the final trim).
pub trait PoolDevice: Streams + StreamOrderedPool {}

impl<T: Streams + StreamOrderedPool + ?Sized> PoolDevice for T {}

/// What the caching allocator model calls: memory, streams and events, virtual memory (for
/// expandable segments), and the core (`info`: the device total behind
/// `per_process_memory_fraction`; replay's engine also reads the clock and free memory and
/// waits).
pub trait CachingDevice: DeviceCore + Memory + Streams + VirtualMemory {}

impl<T: DeviceCore + Memory + Streams + VirtualMemory + ?Sized> CachingDevice for T {}

/// What an allocator is driven through: everything the caching model calls, and the
/// stream-ordered pool where this device lends one (a device that only wraps another, such as
/// replay's trace device, lends the pool of the device underneath).
pub trait AllocDevice: CachingDevice {
    /// The device's stream-ordered pool, with its streams; `None` where it has none.
    fn pool_device(&mut self) -> Option<&mut dyn PoolDevice>;
}

impl<T: CachingDevice + PoolDevice> AllocDevice for T {
    fn pool_device(&mut self) -> Option<&mut dyn PoolDevice> {
        Some(self)
    }
}
