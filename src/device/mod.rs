//! The `Device` interface every backend implements, and the types that cross it.
//!
//! Everything above this module (allocators, the runner, reports) talks to a `dyn Device` and
//! never to cudarc: the simulated device and the real one are interchangeable. A device call
//! returns driver-level facts only (pointers, bytes, the driver's free/total); accounting by
//! scope happens above.

pub mod cuda;
pub mod nvml;
pub mod profile;
pub mod select;
pub mod sim;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::record::Reading;
use crate::sampler::{LiveViews, SamplerStats};

/// A device virtual address, as `CUdeviceptr`.
pub type DevPtr = u64;

/// A stream created by the harness. `StreamId(0)` is the harness's main stream, created at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId(pub u32);

impl StreamId {
    pub const MAIN: StreamId = StreamId(0);
}

/// `cuMemGetInfo`: device-wide free and total, all processes included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemInfo {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

impl MemInfo {
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.free_bytes)
    }
}

/// NVML's whole-device memory view (v2): `reserved` is what the driver and firmware keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlMemory {
    pub total_bytes: u64,
    pub reserved_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
}

/// One process the driver sees on the device, with its memory (context included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUsage {
    pub pid: u32,
    /// `None` where the driver does not report it (e.g. Windows WDDM).
    pub used_bytes: Option<u64>,
    /// True for the process running this harness.
    pub is_self: bool,
}

/// Why the driver's process list cannot be believed, if it cannot.
///
/// NVML reports processes by their PID in the host's namespace: inside a container this
/// process is listed under another PID (or not at all), so "another process holds memory" may
/// be this process itself. The list is also doubted when the memory of the processes it names
/// is far from NVML's whole-device `used` (more than 64 MiB either way). A doubted list is
/// reported, never acted on: no GPU is refused and no tenant blamed on it.
pub fn process_list_doubt(
    processes: &[ProcessUsage],
    nvml_used_bytes: Option<u64>,
) -> Option<String> {
    const TOLERANCE_BYTES: u64 = 64 << 20;
    if !processes.iter().any(|p| p.is_self) {
        return Some(format!(
            "this process (pid {}) is not in the driver's process list, as inside a PID \
             namespace, so the other PIDs in it cannot be told apart from this one",
            std::process::id()
        ));
    }
    let listed: u64 = processes.iter().filter_map(|p| p.used_bytes).sum();
    let used = nvml_used_bytes?;
    if listed.abs_diff(used) > TOLERANCE_BYTES {
        return Some(format!(
            "the listed processes hold {listed} bytes but NVML counts {used} bytes used on the \
             device"
        ));
    }
    None
}

/// The stream-ordered pool's own counters (`CU_MEMPOOL_ATTR_{USED,RESERVED}_MEM_{CURRENT,HIGH}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolUsage {
    pub used_current_bytes: u64,
    pub used_high_bytes: u64,
    pub reserved_current_bytes: u64,
    pub reserved_high_bytes: u64,
}

/// How the stream-ordered pool behaves; the workload sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolConfig {
    /// Reserved memory above this is returned to the device at the next synchronize.
    pub release_threshold_bytes: u64,
    /// `CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC`: reuse a block whose free has completed.
    pub reuse_opportunistic: bool,
    /// `CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES`: reuse a block whose free is still
    /// pending on another stream by making the allocating stream wait for it.
    pub reuse_internal_dependencies: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        // The driver's defaults for a new pool.
        PoolConfig {
            release_threshold_bytes: 0,
            reuse_opportunistic: true,
            reuse_internal_dependencies: true,
        }
    }
}

/// What a device is, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// `cuda` or `sim`.
    pub backend: String,
    /// The simulated profile's name, or `None` on a real GPU.
    pub profile: Option<String>,
    pub index: u32,
    pub name: String,
    /// e.g. `9.0`.
    pub compute_capability: String,
    /// CUDA-visible total (`cuMemGetInfo`).
    pub total_bytes: u64,
    pub driver_version: String,
    pub multiprocessors: u32,
    pub uuid: Option<String>,
}

/// A GPU kernel the harness can launch (see `kernels/` for the CUDA C sources).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    /// One 4-byte write every `stride_bytes`, to make a buffer resident.
    Touch {
        ptr: DevPtr,
        bytes: u64,
        stride_bytes: u64,
    },
    /// Writes a pattern derived from each word's address and `seed`.
    Fill { ptr: DevPtr, bytes: u64, seed: u32 },
    /// Reads the `Fill` pattern back and counts mismatches.
    Verify { ptr: DevPtr, bytes: u64, seed: u32 },
    /// `dst[i] = src[i]`.
    Copy {
        dst: DevPtr,
        src: DevPtr,
        bytes: u64,
    },
    /// `a[i] = b[i] + scalar * c[i]` on f32 words.
    Triad {
        a: DevPtr,
        b: DevPtr,
        c: DevPtr,
        bytes: u64,
        scalar: f32,
    },
    /// Keeps the stream busy for `duration_ns` of GPU time.
    Spin { duration_ns: u64 },
    /// Needs `frame_bytes` of stack per thread, so the driver raises its stack reservation.
    Stack { frame_bytes: u32 },
    /// `cuMemsetD32Async` (a driver operation, the peer `fill` is measured against).
    Memset { ptr: DevPtr, bytes: u64, value: u32 },
    /// `cuMemcpyDtoDAsync` (a driver operation, the peer `copy` is measured against).
    DriverCopy {
        dst: DevPtr,
        src: DevPtr,
        bytes: u64,
    },
}

impl Kernel {
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Touch { .. } => "touch",
            Kernel::Fill { .. } => "fill",
            Kernel::Verify { .. } => "verify",
            Kernel::Copy { .. } => "copy",
            Kernel::Triad { .. } => "triad",
            Kernel::Spin { .. } => "spin",
            Kernel::Stack { .. } => "stack",
            Kernel::Memset { .. } => "memset",
            Kernel::DriverCopy { .. } => "memcpy",
        }
    }
}

/// The 32-bit value `fill` writes to the 4-byte word at device address `addr`.
///
/// `kernels/fill.cu` and `kernels/verify.cu` compute the same function; the simulator uses
/// this one. It mixes the word's address and the seed (murmur3's finalizer), so a word written
/// to the wrong place, a stale page or a flipped bit all read back wrong.
pub fn fill_pattern(addr: DevPtr, seed: u32) -> u32 {
    let lo = (addr >> 2) as u32;
    let hi = (addr >> 34) as u32;
    let mut x = lo ^ hi.wrapping_mul(0x9E37_79B1) ^ seed;
    x ^= x >> 16;
    x = x.wrapping_mul(0x85EB_CA6B);
    x ^= x >> 13;
    x = x.wrapping_mul(0xC2B2_AE35);
    x ^= x >> 16;
    x
}

/// The first word `verify` found wrong, and how many were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    pub count: u64,
    pub first_address: DevPtr,
    pub expected: u32,
    pub actual: u32,
}

/// What a `stack_*` launch did to the context's per-thread stack, as the driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackChange {
    /// The kernel's local memory per thread (`CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`).
    pub local_bytes_per_thread: u64,
    /// `cuCtxGetLimit(CU_LIMIT_STACK_SIZE)` before the launch.
    pub limit_before_bytes: u64,
    /// The same after it: the driver raised it if the kernel needed more, and never lowers it.
    pub limit_after_bytes: u64,
}

/// What a launch reports beyond success.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelOutcome {
    /// GPU time measured by events around the launch (cuda), or the modeled time (sim).
    pub gpu_ns: Option<u64>,
    /// Only for `Verify`: `None` when every word matched.
    pub mismatch: Option<Mismatch>,
    /// Only for `Stack`.
    pub stack: Option<StackChange>,
}

/// Errors from a device call. Out-of-memory is its own variant so callers can record it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("out of memory: the driver refused {requested_bytes} bytes")]
    OutOfMemory { requested_bytes: u64 },
    #[error("{call} failed: {detail}")]
    Driver { call: &'static str, detail: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{0} is not supported by the {1} backend")]
    Unsupported(&'static str, &'static str),
}

impl DeviceError {
    pub fn is_oom(&self) -> bool {
        matches!(self, DeviceError::OutOfMemory { .. })
    }
}

pub type DevResult<T> = Result<T, DeviceError>;

/// An event recorded on a stream (`cuEventRecord`): it completes when the stream has finished
/// the work queued before it. Valid until `event_destroy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EventId(pub u64);

/// A graph captured from a stream (`CUgraph`), with at most one executable (`CUgraphExec`)
/// once instantiated. Valid until `graph_destroy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GraphId(pub u32);

/// What a capture recorded: the nodes the executable graph is built from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphShape {
    /// Kernel launches and driver operations (memset, memcpy).
    pub kernel_nodes: u32,
    /// `cuMemAllocAsync` during the capture.
    pub alloc_nodes: u32,
    /// `cuMemFreeAsync` during the capture.
    pub free_nodes: u32,
    /// Bytes the allocation nodes ask for (requested sizes).
    pub alloc_node_bytes: u64,
    /// Bytes of allocation nodes the graph does not free itself: live after each launch.
    pub unfreed_bytes: u64,
}

/// The driver's graph memory attributes (`CU_GRAPH_MEM_ATTR_{USED,RESERVED}_MEM_{CURRENT,HIGH}`):
/// device-wide, for every graph of this process. `used` is physical memory mapped by at least
/// one graph or backing a live graph allocation; `reserved` is what the graph allocator holds
/// from the device (until `cuDeviceGraphMemTrim`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphMemUsage {
    pub used_current_bytes: u64,
    pub used_high_bytes: u64,
    pub reserved_current_bytes: u64,
    pub reserved_high_bytes: u64,
}

/// One GPU seen through one backend.
///
/// Time is the device's own: virtual and deterministic on `sim`, a monotonic clock on `cuda`.
/// Both count nanoseconds since the device was opened.
pub trait Device: Send {
    fn info(&self) -> &DeviceInfo;
    fn now_ns(&self) -> u64;

    /// `cuMemGetInfo` (an event-synchronous reading: costs the query's latency).
    fn mem_info(&mut self) -> DevResult<MemInfo>;
    /// NVML's device memory, where NVML is present.
    fn nvml_memory(&mut self) -> Option<NvmlMemory>;
    /// The processes the driver lists on this device, where NVML is present.
    fn processes(&mut self) -> Option<Vec<ProcessUsage>>;

    /// `cuMemAlloc`.
    fn malloc(&mut self, bytes: u64) -> DevResult<DevPtr>;
    /// `cuMemFree`.
    fn free(&mut self, ptr: DevPtr) -> DevResult<()>;

    fn create_stream(&mut self) -> DevResult<StreamId>;
    fn stream_synchronize(&mut self, stream: StreamId) -> DevResult<()>;
    /// `cuCtxSynchronize`: waits for every stream; the pool then trims to its release threshold.
    fn synchronize(&mut self) -> DevResult<()>;

    /// Configures the harness's stream-ordered pool.
    fn pool_configure(&mut self, config: PoolConfig) -> DevResult<()>;
    /// `cuMemAllocFromPoolAsync` on the harness's pool.
    fn malloc_async(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr>;
    /// `cuMemFreeAsync`: the block returns to the pool when `stream` reaches the free.
    fn free_async(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()>;
    /// `cuMemPoolTrimTo`.
    fn pool_trim(&mut self, keep_bytes: u64) -> DevResult<()>;
    fn pool_usage(&mut self) -> DevResult<PoolUsage>;

    /// Launches a kernel on a stream (asynchronous unless the kernel reports a result).
    fn launch(&mut self, kernel: Kernel, stream: StreamId) -> DevResult<KernelOutcome>;

    /// Launches `kernel` `repeats` times back to back and returns the GPU time they took
    /// (device events on cuda, the model on sim).
    fn timed_launch(&mut self, kernel: Kernel, stream: StreamId, repeats: u32) -> DevResult<u64>;

    /// Loads these modules of headroom's kernels (`verify`'s with its 16-byte result buffer),
    /// so that the memory they take is taken before a run's idle reading instead of inside its
    /// first kernel step. Returns how many modules this call loaded (0 when they already
    /// were). Driver operations (memset, memcpy) need none.
    fn load_kernels(&mut self, modules: &[crate::kernels::Module]) -> DevResult<u32>;

    /// Writes one 4-byte word through the driver (used to plant a corruption for `verify`),
    /// ordered on `stream` after the work queued there, and waits until it has landed.
    fn write_word(&mut self, addr: DevPtr, value: u32, stream: StreamId) -> DevResult<()>;

    /// The host thread waits (a `sleep`/`hold` step). Virtual on sim.
    fn sleep(&mut self, duration_ns: u64);

    /// Starts background sampling of `cuMemGetInfo` every `interval_ns` (0: as fast as it goes).
    fn start_sampler(&mut self, interval_ns: u64, live: Arc<LiveViews>) -> DevResult<()>;
    /// Moves readings taken since the last call into `out`, in time order.
    fn drain_samples(&mut self, out: &mut Vec<Reading>);
    /// Stops sampling; returns what the sampler achieved.
    fn stop_sampler(&mut self) -> SamplerStats;

    /// The simulator's stand-in for another process: `pid` holds `bytes` for `duration_ns`
    /// from now. A real GPU gets a real process instead (`headroom hold`).
    fn add_simulated_tenant(&mut self, _pid: u32, _bytes: u64, _duration_ns: u64) -> DevResult<()> {
        Err(DeviceError::Unsupported("a simulated tenant", "cuda"))
    }

    /// `cuEventRecord` on a fresh event: completes when `stream` finishes the work queued so far.
    fn record_event(&mut self, stream: StreamId) -> DevResult<EventId>;
    /// `cuEventQuery`: whether the event has completed (never blocks).
    fn event_query(&mut self, event: EventId) -> DevResult<bool>;
    /// `cuEventSynchronize`: the host waits until the event has completed.
    fn event_synchronize(&mut self, event: EventId) -> DevResult<()>;
    /// `cuEventDestroy`: the id is no longer valid (the backend may reuse the event).
    fn event_destroy(&mut self, event: EventId) -> DevResult<()>;

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

    /// Frees every allocation and pool block this device still holds for the harness.
    /// Called at the end of every run, also after an OOM or an interrupt.
    fn release_all(&mut self) -> DevResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn process(pid: u32, mib: u64, is_self: bool) -> ProcessUsage {
        ProcessUsage {
            pid,
            used_bytes: Some(mib * MIB),
            is_self,
        }
    }

    #[test]
    fn a_process_list_is_doubted_without_this_process_or_when_it_disagrees_with_nvml() {
        let me = process(std::process::id(), 512, true);
        let other = process(7, 1024, false);
        assert_eq!(process_list_doubt(&[me.clone(), other.clone()], None), None);
        assert_eq!(
            process_list_doubt(&[me.clone(), other.clone()], Some(1536 * MIB + 64 * MIB)),
            None
        );
        let missing = process_list_doubt(std::slice::from_ref(&other), Some(1024 * MIB)).unwrap();
        assert!(
            missing.contains("not in the driver's process list"),
            "{missing}"
        );
        let more = process_list_doubt(&[me.clone(), other.clone()], Some(512 * MIB)).unwrap();
        assert!(
            more.contains("1610612736 bytes") && more.contains("536870912 bytes"),
            "{more}"
        );
        let less = process_list_doubt(&[me, other], Some(1536 * MIB + 65 * MIB));
        assert!(less.is_some());
    }
}
