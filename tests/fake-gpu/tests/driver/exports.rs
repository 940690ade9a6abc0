//! The built shared library exports every symbol cudarc and headroom's NVML module resolve.

use std::ffi::c_int;
use std::path::PathBuf;

use headroom_fake_gpu::symbols;

/// The CUDA entry points headroom needs (through cudarc 0.19, `cuda-12040`).
const REQUIRED_CUDA: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuCtxGetDevice",
    "cuCtxSynchronize",
    "cuCtxGetLimit",
    "cuCtxSetLimit",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAllocFromPoolAsync",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
    "cuDeviceGetDefaultMemPool",
    "cuDeviceGetMemPool",
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuEventElapsedTime_v2",
    "cuModuleLoadData",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuLaunchKernel",
    "cuMemsetD8Async",
    "cuMemsetD32Async",
    "cuMemsetD8_v2",
    "cuMemsetD32_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuStreamIsCapturing",
    "cuGraphInstantiateWithFlags",
    "cuGraphUpload",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
    "cuDeviceGraphMemTrim",
    "cuDeviceGetGraphMemAttribute",
    "cuDeviceSetGraphMemAttribute",
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
];

/// The NVML entry points the fake exports for headroom's NVML module and earlier NVML wrappers.
const REQUIRED_NVML: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
];

/// The cdylib cargo built next to this test.
fn library() -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let name = "libheadroom_fake_gpu.so";
    [deps.join(name), deps.parent().unwrap().join(name)]
        .into_iter()
        .find(|p| p.exists())
        .expect("the cdylib is built with the tests")
}

#[test]
fn the_shared_library_exports_every_entry_point() {
    for name in REQUIRED_CUDA.iter().chain(REQUIRED_NVML) {
        assert!(
            symbols::is_cuda(name) || symbols::is_nvml(name),
            "{name} is not in the fake's symbol list"
        );
    }
    // SAFETY: loading the fake runs no initialization code; symbols are only looked up.
    let lib = unsafe { libloading::Library::new(library()) }.unwrap();
    let missing: Vec<&str> = symbols::all()
        // SAFETY: the lookup does not call the symbol.
        .filter(|n| unsafe { lib.get::<*const ()>(n.as_bytes()) }.is_err())
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // One call through the library, as cudarc makes it.
    // SAFETY: the symbol has this signature; the out-pointer is valid.
    unsafe {
        let f = lib
            .get::<unsafe extern "C" fn(*mut c_int) -> u32>(b"cuDriverGetVersion")
            .unwrap();
        let mut v = 0;
        assert_eq!(f(&mut v), 0);
        assert_eq!(v, 12040);
    }
}
