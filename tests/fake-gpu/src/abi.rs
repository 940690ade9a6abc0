//! The C types and constants of the CUDA driver API (12.4) and NVML that the fake exports.
//!
//! Layouts are copied from cudarc 0.19.10's generated bindings (the `cuda-12040` variants) and
//! NVIDIA's nvml.h. Enumerations cross the boundary as plain `u32`, never as Rust enums:
//! a caller may pass any number, and an unknown one must be an error, not undefined behavior.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

/// `CUresult`: cudarc reads it as a `#[repr(u32)]` enum, so only listed codes may be returned.
pub type CUresult = u32;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
/// Every opaque handle (`CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`,
/// `CUmemoryPool`, `CUgraph`, `CUgraphExec`): the fake stores a tagged number in it, never an
/// address, so a stale or forged handle is an error instead of a crash.
pub type Handle = *mut c_void;
pub type CUmemGenericAllocationHandle = u64;
pub type nvmlReturn_t = u32;
/// `nvmlDevice_t`: a tagged number, like `Handle`.
pub type nvmlDevice_t = *mut c_void;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemLocation {
    pub type_: u32,
    pub id: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemAllocationPropFlags {
    pub compressionType: u8,
    pub gpuDirectRDMACapable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemAllocationProp {
    pub type_: u32,
    pub requestedHandleTypes: u32,
    pub location: CUmemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: CUmemAllocationPropFlags,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemPoolProps {
    pub allocType: u32,
    pub handleTypes: u32,
    pub location: CUmemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub reserved: [u8; 56],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlMemory_t {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlMemory_v2_t {
    pub version: u32,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`.
pub const NVML_MEMORY_V2: u32 = (std::mem::size_of::<nvmlMemory_v2_t>() as u32) | (2 << 24);

/// `nvmlProcessInfo_v2_t` (24 bytes); 535.43.02–535.86's `_v3` wrote a 32-byte record, the
/// same fields and `usedGpuCcProtectedMemory` (nvml.h of those releases).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlProcessInfo_t {
    pub pid: u32,
    pub usedGpuMemory: u64,
    pub gpuInstanceId: u32,
    pub computeInstanceId: u32,
}

/// The 32-byte record of 535.43.02–535.86's `_v3`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlProcessInfoCc_t {
    pub pid: u32,
    pub usedGpuMemory: u64,
    pub gpuInstanceId: u32,
    pub computeInstanceId: u32,
    pub usedGpuCcProtectedMemory: u64,
}

// CUdevice_attribute (the values the fake answers specially).
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: u32 = 1;
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: u32 = 16;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: u32 = 20;
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: u32 = 39;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: u32 = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: u32 = 76;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: u32 = 106;
pub const CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: u32 = 102;
pub const CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: u32 = 115;
pub const CU_DEVICE_ATTRIBUTE_MEMPOOL_HANDLE_TYPES: u32 = 119;
/// One past the last attribute of CUDA 12.4.
pub const CU_DEVICE_ATTRIBUTE_MAX: u32 = 135;

// CUcomputemode / nvmlComputeMode_t (same numbers).
pub const CU_COMPUTEMODE_DEFAULT: u32 = 0;
pub const CU_COMPUTEMODE_EXCLUSIVE_PROCESS: u32 = 3;

// CUfunction_attribute.
pub const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: u32 = 0;
pub const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: u32 = 1;
pub const CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: u32 = 2;
pub const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: u32 = 3;
pub const CU_FUNC_ATTRIBUTE_NUM_REGS: u32 = 4;
pub const CU_FUNC_ATTRIBUTE_PTX_VERSION: u32 = 5;
pub const CU_FUNC_ATTRIBUTE_BINARY_VERSION: u32 = 6;
pub const CU_FUNC_ATTRIBUTE_MAX: u32 = 16;

// CUlimit.
pub const CU_LIMIT_STACK_SIZE: u32 = 0;
pub const CU_LIMIT_PRINTF_FIFO_SIZE: u32 = 1;
pub const CU_LIMIT_MALLOC_HEAP_SIZE: u32 = 2;
pub const CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: u32 = 3;
pub const CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: u32 = 4;
pub const CU_LIMIT_MAX_L2_FETCH_GRANULARITY: u32 = 5;
pub const CU_LIMIT_PERSISTING_L2_CACHE_SIZE: u32 = 6;

// CUjit_option (the ones with an effect).
pub const CU_JIT_WALL_TIME: u32 = 2;
pub const CU_JIT_INFO_LOG_BUFFER: u32 = 3;
pub const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: u32 = 4;
pub const CU_JIT_ERROR_LOG_BUFFER: u32 = 5;
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: u32 = 6;
pub const CU_JIT_NUM_OPTIONS: u32 = 34;

// CUmemPool_attribute.
pub const CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: u32 = 1;
pub const CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: u32 = 2;
pub const CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: u32 = 3;
pub const CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: u32 = 4;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: u32 = 5;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: u32 = 6;
pub const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: u32 = 7;
pub const CU_MEMPOOL_ATTR_USED_MEM_HIGH: u32 = 8;

// CUgraphMem_attribute.
pub const CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: u32 = 0;
pub const CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: u32 = 1;
pub const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: u32 = 2;
pub const CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: u32 = 3;

// CUgraphInstantiate_flags.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: u64 = 1;
pub const CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: u64 = 2;
pub const CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH: u64 = 4;
pub const CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: u64 = 8;

// CUevent_flags, CUstream_flags.
pub const CU_EVENT_BLOCKING_SYNC: u32 = 1;
pub const CU_EVENT_DISABLE_TIMING: u32 = 2;
pub const CU_EVENT_INTERPROCESS: u32 = 4;
pub const CU_STREAM_NON_BLOCKING: u32 = 1;

// CUstreamCaptureMode, CUstreamCaptureStatus.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: u32 = 2;
pub const CU_STREAM_CAPTURE_STATUS_NONE: u32 = 0;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: u32 = 1;
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: u32 = 2;

// Memory locations, allocation types, access flags, granularity options.
pub const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;
pub const CU_MEM_ALLOCATION_TYPE_PINNED: u32 = 1;
pub const CU_MEM_ACCESS_FLAGS_PROT_NONE: u32 = 0;
pub const CU_MEM_ACCESS_FLAGS_PROT_READ: u32 = 1;
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: u32 = 3;
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: u32 = 1;

// The stream handles with a fixed meaning.
pub const CU_STREAM_LEGACY: usize = 0x1;
pub const CU_STREAM_PER_THREAD: usize = 0x2;

/// `cuDriverGetVersion` without `HEADROOM_FAKE_DRIVER` (`branch::Release::default`): CUDA 12.4,
/// matching the PTX ISA 8.4 the fake then accepts.
pub const DRIVER_VERSION: i32 = 12040;
