//! The names of every function the library exports, each with the CUDA release that
//! introduced it: what `HEADROOM_FAKE_FAULTS` may name, what the export test checks in the built
//! `.so`, and what a driver branch keeps (`HEADROOM_FAKE_DRIVER`; `scripts/fake-gpu` reads these
//! tables to build the branch's filter library, so each entry stays on one line).
//!
//! Versions are written as `cuDriverGetVersion` writes them (`11020` is CUDA 11.2), from the
//! CUDA driver API reference and the CUDA and NVML change logs; NVML's versions follow CUDA's
//! (NVML 11.6 shipped with R510). The oldest branch modeled is R450 (CUDA 11.0): for a function
//! older than that only "present in every branch" matters, and its number is the release that
//! already had it.

/// CUDA driver API entry points (the exact symbols cudarc resolves), with their release.
pub const CUDA: &[(&str, i32)] = &[
    ("cuInit", 2000),
    ("cuDriverGetVersion", 2020),
    ("cuDeviceGetCount", 2000),
    ("cuDeviceGet", 2000),
    ("cuDeviceGetName", 2000),
    ("cuDeviceGetUuid", 9020),
    ("cuDeviceGetUuid_v2", 11040),
    ("cuDeviceGetAttribute", 2000),
    ("cuDeviceTotalMem_v2", 3020),
    ("cuGetErrorName", 6000),
    ("cuGetErrorString", 6000),
    ("cuDevicePrimaryCtxRetain", 7000),
    ("cuDevicePrimaryCtxRelease_v2", 11000),
    ("cuCtxGetCurrent", 4000),
    ("cuCtxSetCurrent", 4000),
    ("cuCtxPushCurrent_v2", 4000),
    ("cuCtxPopCurrent_v2", 4000),
    ("cuCtxGetDevice", 2000),
    ("cuCtxSynchronize", 2000),
    ("cuCtxGetLimit", 3010),
    ("cuCtxSetLimit", 3010),
    ("cuMemGetInfo_v2", 3020),
    ("cuMemAlloc_v2", 3020),
    ("cuMemFree_v2", 3020),
    ("cuMemAllocAsync", 11020),
    ("cuMemFreeAsync", 11020),
    ("cuMemAllocFromPoolAsync", 11020),
    ("cuMemPoolCreate", 11020),
    ("cuMemPoolDestroy", 11020),
    ("cuMemPoolGetAttribute", 11020),
    ("cuMemPoolSetAttribute", 11020),
    ("cuMemPoolTrimTo", 11020),
    ("cuDeviceGetDefaultMemPool", 11020),
    ("cuDeviceGetMemPool", 11020),
    ("cuDeviceSetMemPool", 11020),
    ("cuStreamCreate", 2000),
    ("cuStreamCreateWithPriority", 5050),
    ("cuStreamDestroy_v2", 4000),
    ("cuStreamSynchronize", 2000),
    ("cuStreamQuery", 2000),
    ("cuStreamWaitEvent", 3020),
    ("cuEventCreate", 2000),
    ("cuEventDestroy_v2", 4000),
    ("cuEventRecord", 2000),
    ("cuEventQuery", 2000),
    ("cuEventSynchronize", 2000),
    ("cuEventElapsedTime", 2000),
    ("cuEventElapsedTime_v2", 12080),
    ("cuModuleLoadData", 2000),
    ("cuModuleLoadDataEx", 2010),
    ("cuModuleUnload", 2000),
    ("cuModuleGetFunction", 2000),
    ("cuFuncGetAttribute", 2020),
    ("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050),
    ("cuLaunchKernel", 4000),
    ("cuMemsetD8Async", 3020),
    ("cuMemsetD32Async", 3020),
    ("cuMemsetD8_v2", 3020),
    ("cuMemsetD32_v2", 3020),
    ("cuMemcpyHtoD_v2", 3020),
    ("cuMemcpyHtoDAsync_v2", 3020),
    ("cuMemcpyDtoH_v2", 3020),
    ("cuMemcpyDtoHAsync_v2", 3020),
    ("cuMemcpyDtoD_v2", 3020),
    ("cuMemcpyDtoDAsync_v2", 3020),
    ("cuStreamBeginCapture_v2", 10010),
    ("cuStreamEndCapture", 10000),
    ("cuStreamIsCapturing", 10000),
    ("cuGraphInstantiateWithFlags", 11040),
    ("cuGraphUpload", 11010),
    ("cuGraphLaunch", 10000),
    ("cuGraphExecDestroy", 10000),
    ("cuGraphDestroy", 10000),
    ("cuDeviceGraphMemTrim", 11040),
    ("cuDeviceGetGraphMemAttribute", 11040),
    ("cuDeviceSetGraphMemAttribute", 11040),
    ("cuMemGetAllocationGranularity", 10020),
    ("cuMemAddressReserve", 10020),
    ("cuMemAddressFree", 10020),
    ("cuMemCreate", 10020),
    ("cuMemRelease", 10020),
    ("cuMemMap", 10020),
    ("cuMemUnmap", 10020),
    ("cuMemSetAccess", 10020),
];

/// NVML entry points (those headroom's NVML module and earlier NVML wrappers resolve), with their release.
pub const NVML: &[(&str, i32)] = &[
    ("nvmlInit_v2", 5050),
    ("nvmlInitWithFlags", 10010),
    ("nvmlShutdown", 4000),
    ("nvmlErrorString", 4000),
    ("nvmlSystemGetDriverVersion", 4000),
    ("nvmlSystemGetCudaDriverVersion", 10000),
    ("nvmlSystemGetCudaDriverVersion_v2", 10010),
    ("nvmlDeviceGetCount_v2", 9000),
    ("nvmlDeviceGetHandleByIndex_v2", 5050),
    ("nvmlDeviceGetHandleByUUID", 4000),
    ("nvmlDeviceGetUUID", 4000),
    ("nvmlDeviceGetName", 4000),
    ("nvmlDeviceGetIndex", 5050),
    ("nvmlDeviceGetMemoryInfo", 4000),
    ("nvmlDeviceGetMemoryInfo_v2", 11060),
    ("nvmlDeviceGetComputeRunningProcesses_v2", 11000),
    ("nvmlDeviceGetComputeRunningProcesses_v3", 11060),
    ("nvmlDeviceGetComputeMode", 4000),
    ("nvmlDeviceGetMigMode", 11000),
    ("nvmlDeviceGetMaxMigDeviceCount", 11000),
    ("nvmlDeviceGetMigDeviceHandleByIndex", 11000),
    ("nvmlDeviceIsMigDeviceHandle", 11000),
    ("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", 11000),
    ("nvmlDeviceGetGpuInstanceId", 11000),
    ("nvmlDeviceGetComputeInstanceId", 11000),
];

/// The release that introduced `name`; `None` for a name the library does not export.
pub fn since(name: &str) -> Option<i32> {
    CUDA.iter()
        .chain(NVML)
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
}

pub fn is_cuda(name: &str) -> bool {
    CUDA.iter().any(|(n, _)| *n == name)
}

pub fn is_nvml(name: &str) -> bool {
    NVML.iter().any(|(n, _)| *n == name)
}

/// Whether a driver of CUDA release `cuda_version` has `name`.
pub fn present(name: &str, cuda_version: i32) -> bool {
    since(name).is_some_and(|v| v <= cuda_version)
}

/// Every exported name, CUDA's first.
pub fn all() -> impl Iterator<Item = &'static str> {
    CUDA.iter().chain(NVML).map(|(n, _)| *n)
}
