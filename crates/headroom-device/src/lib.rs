//! headroom's device edge: the `Device` capabilities every backend implements, and the types
//! that cross them; the cuda backend (the only code that calls cudarc and NVML), the
//! simulator, its profiles, MIG, the kernels' embedding and launch, and the units they count in.
//!
//! Everything above this crate (allocators, the runner, reports) talks to a `dyn Device` and
//! never to cudarc: the simulated device and the real one are interchangeable. A device call
//! returns driver-level facts only (pointers, bytes, the driver's free/total); accounting by
//! scope happens above.

// Nothing here prints on its own: what the device has to say goes through `notice`.
#![deny(clippy::print_stdout)]
#![deny(clippy::print_stderr)]

pub mod caps;
/// The real GPU: reached through `select`, never named above this crate.
pub(crate) mod cuda;
pub mod driver_detail;
pub mod floor;
pub mod kernels;
pub mod mig;
pub mod node_profile;
pub mod notice;
pub mod nvml;
pub mod profile;
pub mod reading;
pub mod rounding;
pub mod select;
pub mod sim;
pub mod units;
pub mod watch;

use serde::{Deserialize, Serialize};

pub use caps::{
    AllocDevice, CachingDevice, DeviceCore, Graphs, Kernels, Memory, Observe, PoolDevice,
    Simulated, StreamOrderedPool, Streams, VirtualMemory,
};

/// Every device capability trait, for `use headroom::device::prelude::*` where a `dyn Device` is
/// called.
pub mod prelude {
    pub use super::Device;
    pub use super::caps::{
        AllocDevice, CachingDevice, DeviceCore, Graphs, Kernels, Memory, Observe, PoolDevice,
        Simulated, StreamOrderedPool, Streams, VirtualMemory,
    };
}

/// A device virtual address, as `CUdeviceptr`.
pub type DevPtr = u64;

/// A stream created by the harness. `StreamId(0)` is the harness's main stream, created at open.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvmlMemory {
    pub total_bytes: u64,
    /// Null where only memory info v1 answered (before R510, or a v2 that fails): v1 counts
    /// the driver's reserve in `used` and does not say how much it is.
    pub reserved_bytes: Option<u64>,
    pub used_bytes: u64,
    pub free_bytes: u64,
}

/// One process the driver sees on the device, with its memory (context included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    if !processes.iter().any(|p| p.is_self) {
        return Some(format!(
            "this process (pid {}) is not in the driver's process list, as inside a PID \
             namespace, so the other PIDs in it cannot be told apart from this one",
            std::process::id()
        ));
    }
    process_sum_doubt(processes, nvml_used_bytes)
}

/// The half of `process_list_doubt` that needs no process of ours on the device: the list is
/// doubted when the memory of the processes it names is more than 64 MiB away from NVML's
/// whole-device `used` (a PID namespace may hide processes from it entirely).
pub fn process_sum_doubt(
    processes: &[ProcessUsage],
    nvml_used_bytes: Option<u64>,
) -> Option<String> {
    const TOLERANCE_BYTES: u64 = 64 << 20;
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
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
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

/// Which backend an opened device runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// The NVIDIA driver (or a library that stands in for it).
    Cuda,
    /// The simulated device.
    Sim,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cuda => "cuda",
            BackendKind::Sim => "sim",
        }
    }
}

impl DeviceInfo {
    /// Whether the device is the simulator (virtual time, modeled figures).
    pub fn is_sim(&self) -> bool {
        self.backend == BackendKind::Sim
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a device is, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceInfo {
    pub backend: BackendKind,
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
    /// What the device supports of the driver features workloads may use, read at open.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// The MIG instance this device is, with its profile and parent GPU (`None` on a whole GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<mig::MigIdentity>,
}

/// Driver features a workload may need that not every device has (vGPU and some virtualized
/// cards lack them), read when the device is opened: on `cuda` the device attributes, on
/// `sim` the profile's `[capabilities]` table (each `true` unless it says otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Capabilities {
    /// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`: stream-ordered allocation
    /// (`cuMemPoolCreate`, `cuMemAllocAsync`) and graph memory nodes.
    pub memory_pools_supported: bool,
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`: `cuMemAddressReserve`,
    /// `cuMemCreate`, `cuMemMap`.
    pub virtual_memory_management_supported: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            memory_pools_supported: true,
            virtual_memory_management_supported: true,
        }
    }
}

/// One entry of `Capabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    MemoryPools,
    VirtualMemoryManagement,
}

impl Capability {
    /// The device attribute that says whether the device has it.
    pub fn attribute(self) -> &'static str {
        match self {
            Capability::MemoryPools => "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED",
            Capability::VirtualMemoryManagement => {
                "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"
            }
        }
    }
}

impl Capabilities {
    pub fn has(&self, c: Capability) -> bool {
        match c {
            Capability::MemoryPools => self.memory_pools_supported,
            Capability::VirtualMemoryManagement => self.virtual_memory_management_supported,
        }
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
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
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct GraphMemUsage {
    pub used_current_bytes: u64,
    pub used_high_bytes: u64,
    pub reserved_current_bytes: u64,
    pub reserved_high_bytes: u64,
}

/// One GPU seen through one backend: every capability of `caps` together.
///
/// Each capability is its own trait (`DeviceCore`, `Memory`, `Streams`, `Kernels`,
/// `StreamOrderedPool`, `VirtualMemory`, `Graphs`); a backend implements each, and is a
/// `Device` by that alone. Consumers ask for the bundle they call (`caps::AllocDevice`,
/// `caps::CachingDevice`, `caps::PoolDevice`), which a `dyn Device` upcasts to; the rest use
/// `dyn Device` and `use headroom::device::prelude::*` for the methods. What only the
/// simulator can do is `Simulated`, reached through `DeviceCore::simulated`.
pub trait Device: AllocDevice + PoolDevice + Kernels + Graphs + Observe {}

impl<T> Device for T where T: AllocDevice + PoolDevice + Kernels + Graphs + Observe + ?Sized {}

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
