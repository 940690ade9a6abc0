//! Finding the driver and the devices without creating a context: whether libcuda loads at all
//! (cudarc panics if it does not and is asked anyway), whether it has every function headroom
//! calls (cudarc resolves each at its first call and panics on a missing one, so a driver too
//! old for one is refused here, by name), how many GPUs it sees, and their facts.

use cudarc::driver::result;
use cudarc::driver::sys;

use super::driver_err;
use crate::device::DevResult;
use crate::device::mig::{self, MigIdentity};
use crate::device::nvml::NvmlDevice;

/// Why there is no usable CUDA device, in one line for people.
pub fn probe() -> Result<u32, String> {
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    if !unsafe { sys::is_culib_present() } {
        return Err("no NVIDIA driver found (libcuda.so could not be loaded)".into());
    }
    let missing = missing_symbols();
    if !missing.is_empty() {
        return Err(format!(
            "the NVIDIA driver lacks {} function(s) headroom calls: {} (a driver of R550 or newer \
             has them)",
            missing.len(),
            missing.join(", ")
        ));
    }
    result::init().map_err(|e| {
        format!(
            "the NVIDIA driver did not initialize: {}",
            driver_err("cuInit", 0, e)
        )
    })?;
    let n = result::device::get_count().map_err(|e| {
        format!(
            "cannot count CUDA devices: {}",
            driver_err("cuDeviceGetCount", 0, e)
        )
    })?;
    if n <= 0 {
        return Err("the NVIDIA driver is present but sees no CUDA device".into());
    }
    Ok(n as u32)
}

/// Every driver function headroom calls through cudarc, by the symbol name cudarc loads.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxGetLimit",
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
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuLaunchKernel",
    "cuMemsetD8Async",
    "cuMemsetD32Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphUpload",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
    "cuDeviceGraphMemTrim",
    "cuDeviceGetGraphMemAttribute",
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
];

/// The names in `REQUIRED_SYMBOLS` that the library cudarc loads does not export.
fn missing_symbols() -> Vec<&'static str> {
    // The same search cudarc's loader makes: the first candidate name that loads is the driver.
    let lib = ["cuda", "nvcuda"]
        .iter()
        .flat_map(|n| cudarc::get_lib_name_candidates(n))
        // SAFETY: loading the driver library runs its initializers, as cudarc's own loader does.
        .find_map(|name| unsafe { libloading::Library::new(name) }.ok());
    let Some(lib) = lib else {
        return Vec::new();
    };
    REQUIRED_SYMBOLS
        .iter()
        .copied()
        // SAFETY: the symbol is only looked up, never called through this pointer.
        .filter(|name| unsafe { lib.get::<*const ()>(name.as_bytes()) }.is_err())
        .collect()
}

/// The driver's version as `major.minor` (e.g. `12.4`).
pub fn cuda_driver_version() -> String {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: writes one int through a valid pointer; the library is loaded (probe ran).
    let ok = unsafe { sys::cuDriverGetVersion(&mut v) } == sys::CUresult::CUDA_SUCCESS;
    if ok {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    } else {
        "unknown".into()
    }
}

/// The device's UUID and, on a MIG instance, its parent GPU's: `cuDeviceGetUuid_v2` names the
/// MIG instance a process sees, `cuDeviceGetUuid` (v1) the GPU that holds it (`mig.rs`).
fn device_uuids(dev: sys::CUdevice) -> DevResult<(String, Option<String>)> {
    let v1 = result::device::get_uuid(dev).map_err(|e| driver_err("cuDeviceGetUuid", 0, e))?;
    let mut v2 = std::mem::MaybeUninit::<sys::CUuuid>::uninit();
    // SAFETY: writes one CUuuid through a valid pointer; `dev` is a handle from cuDeviceGet.
    unsafe { sys::cuDeviceGetUuid_v2(v2.as_mut_ptr(), dev) }
        .result()
        .map_err(|e| driver_err("cuDeviceGetUuid_v2", 0, e))?;
    // SAFETY: initialized by the successful call above.
    let v2 = unsafe { v2.assume_init() };
    let bytes = |u: &sys::CUuuid| -> [u8; 16] { std::array::from_fn(|i| u.bytes[i] as u8) };
    Ok(mig::uuid_strings(&bytes(&v2), &bytes(&v1)))
}

/// Static facts about a device, read without creating a context.
pub struct DeviceFacts {
    pub name: String,
    /// `GPU-…`, or `MIG-…` on a MIG instance.
    pub uuid: String,
    /// The GPU that holds the MIG instance (`GPU-…`); `None` on a whole GPU.
    pub parent_uuid: Option<String>,
    pub total_bytes: u64,
    pub compute_capability: String,
    pub multiprocessors: u32,
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_MODE`: `default`, `prohibited` or `exclusive_process`
    /// (one context at a time on the device: a second process cannot open one).
    pub compute_mode: String,
}

impl DeviceFacts {
    /// The MIG instance this device is: NVML's account where it has one, else what the
    /// driver says (the parent's UUID, the profile in the device name).
    pub fn mig(&self, nvml: Option<&NvmlDevice>) -> Option<MigIdentity> {
        let parent_uuid = self.parent_uuid.as_ref()?;
        nvml.and_then(NvmlDevice::mig_identity).or_else(|| {
            Some(MigIdentity {
                profile: mig::profile_from_device_name(&self.name),
                parent_index: None,
                parent_uuid: parent_uuid.clone(),
                parent_name: None,
                gpu_instance_id: None,
                compute_instance_id: None,
            })
        })
    }
}

pub fn device_facts(index: u32) -> DevResult<DeviceFacts> {
    let dev = result::device::get(index as i32).map_err(|e| driver_err("cuDeviceGet", 0, e))?;
    let name = result::device::get_name(dev).map_err(|e| driver_err("cuDeviceGetName", 0, e))?;
    let (uuid, parent_uuid) = device_uuids(dev)?;
    use sys::CUdevice_attribute as A;
    let attr = |a: A| {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }
            .map_err(|e| driver_err("cuDeviceGetAttribute", 0, e))
    };
    let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let compute_mode = match attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)? {
        0 => "default".to_string(),
        2 => "prohibited".to_string(),
        3 => "exclusive_process".to_string(),
        other => format!("unknown ({other})"),
    };
    // SAFETY: `dev` is a valid device handle from cuDeviceGet.
    let total = unsafe { result::device::total_mem(dev) }
        .map_err(|e| driver_err("cuDeviceTotalMem", 0, e))?;
    Ok(DeviceFacts {
        name,
        uuid,
        parent_uuid,
        total_bytes: total as u64,
        compute_capability: format!("{major}.{minor}"),
        multiprocessors: sms.max(0) as u32,
        compute_mode,
    })
}
