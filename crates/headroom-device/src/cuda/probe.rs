//! Finding the driver and the devices without creating a context: whether libcuda loads at all
//! (cudarc panics if it does not and is asked anyway), whether it has every function headroom
//! calls (cudarc resolves each at its first call and panics on a missing one, so a driver too
//! old for one is refused here, by name), how many GPUs it sees, and their facts.

use std::fmt;
use std::sync::OnceLock;

use cudarc::driver::result;
use cudarc::driver::sys;

use super::driver_err;
use crate::DevResult;
use crate::floor;
use crate::mig::{self, MigIdentity};
use crate::nvml::NvmlDevice;

/// Why there is no usable CUDA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoGpu {
    /// No driver library, or a driver that says there is no device (`CUDA_ERROR_NO_DEVICE`, or
    /// none counted): a machine without a GPU, where `--backend auto` may use the simulator.
    Absent(String),
    /// A driver is there but cannot be used (a mismatch with the kernel module, a stub library,
    /// a missing function, a branch below the floor, any other error): never replaced by the
    /// simulator without being asked, or a broken GPU runner would pass its checks.
    Broken(String),
}

impl NoGpu {
    pub fn reason(&self) -> &str {
        match self {
            NoGpu::Absent(r) | NoGpu::Broken(r) => r,
        }
    }
}

impl fmt::Display for NoGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// How many CUDA devices the driver sees, or why none can be used. Decided once per process:
/// every later call returns the first answer.
pub fn probe() -> Result<u32, NoGpu> {
    static PROBED: OnceLock<Result<u32, NoGpu>> = OnceLock::new();
    PROBED.get_or_init(probe_driver).clone()
}

/// A driver call's failure as `NoGpu`: `CUDA_ERROR_NO_DEVICE` is a machine without a GPU.
fn classify(why: String, e: cudarc::driver::DriverError) -> NoGpu {
    if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE {
        NoGpu::Absent(why)
    } else {
        NoGpu::Broken(why)
    }
}

fn probe_driver() -> Result<u32, NoGpu> {
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    if !unsafe { sys::is_culib_present() } {
        return Err(NoGpu::Absent(
            "no NVIDIA driver found (libcuda.so could not be loaded)".into(),
        ));
    }
    // cuDriverGetVersion needs no cuInit, and every driver has it: an old branch is named by its
    // version before the functions it lacks are listed.
    if let Some(why) = driver_cuda_version().and_then(floor::below_floor) {
        return Err(NoGpu::Broken(why));
    }
    let missing = missing_symbols();
    if !missing.is_empty() {
        return Err(NoGpu::Broken(format!(
            "the NVIDIA driver lacks {} function(s) headroom calls: {} (every driver from R{} on \
             has them; a stub or partial libcuda.so earlier on the library path is another cause)",
            missing.len(),
            missing.join(", "),
            floor::floor_branch()
        )));
    }
    let watched = crate::watch::call("cuInit");
    let init = result::init();
    drop(watched);
    init.map_err(|e| {
        let why = format!(
            "the NVIDIA driver did not initialize: {}",
            driver_err("cuInit", 0, e)
        );
        if e.0 == sys::CUresult::CUDA_ERROR_STUB_LIBRARY {
            return NoGpu::Broken(format!("{why}; {}", stub_library_hint()));
        }
        // No device, and NVML says the driver is not loaded: the libraries are installed but
        // the kernel module is not (a GPU runner whose driver failed to load), never a
        // machine without a GPU.
        match (classify(why, e), crate::nvml::driver_not_loaded()) {
            (NoGpu::Absent(why), Some(nvml)) => NoGpu::Broken(format!(
                "{why}, and {nvml}: the driver libraries are present but the kernel module is \
                 not loaded (check `lsmod | grep nvidia` and dmesg)"
            )),
            (other, _) => other,
        }
    })?;
    let n = result::device::get_count().map_err(|e| {
        let why = format!(
            "cannot count CUDA devices: {}",
            driver_err("cuDeviceGetCount", 0, e)
        );
        classify(why, e)
    })?;
    if n <= 0 {
        return Err(NoGpu::Absent(
            "the NVIDIA driver is present but sees no CUDA device".into(),
        ));
    }
    Ok(n as u32)
}

/// Which `libcuda.so` the process loaded (from `/proc/self/maps`), and the folder to take off the
/// library path: the CUDA toolkit's stub (`…/lib64/stubs/libcuda.so`) is for linking only.
fn stub_library_hint() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let loaded = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            let file = p.rsplit('/').next().unwrap_or(p);
            file == "libcuda.so" || file.starts_with("libcuda.so.")
        });
    let path_var = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    match loaded {
        Some(path) => {
            let dir = std::path::Path::new(path)
                .parent()
                .map_or_else(|| ".".into(), |d| d.display().to_string());
            let on_path = path_var.split(':').any(|p| p.trim_end_matches('/') == dir);
            let how = if on_path {
                format!("remove {dir} from LD_LIBRARY_PATH")
            } else {
                format!("take {dir} off the library search path")
            };
            format!(
                "the libcuda.so loaded is {path}, the CUDA toolkit's stub for linking, not the \
                 driver: {how} so that the driver's own libcuda.so.1 loads"
            )
        }
        None => format!(
            "a stub libcuda.so (the CUDA toolkit's lib64/stubs, for linking only) was loaded \
             instead of the driver's; LD_LIBRARY_PATH={path_var:?}"
        ),
    }
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

/// The driver library as cudarc's loader finds it: the first candidate name that loads.
fn driver_library() -> Option<libloading::Library> {
    ["cuda", "nvcuda"]
        .iter()
        .flat_map(|n| cudarc::get_lib_name_candidates(n))
        // SAFETY: loading the driver library runs its initializers, as cudarc's own loader does.
        .find_map(|name| unsafe { libloading::Library::new(name) }.ok())
}

/// The names of `names` that the library cudarc loads does not export.
fn absent_symbols(names: &[&'static str]) -> Vec<&'static str> {
    let Some(lib) = driver_library() else {
        return Vec::new();
    };
    names
        .iter()
        .copied()
        // SAFETY: the symbol is only looked up, never called through this pointer.
        .filter(|name| unsafe { lib.get::<*const ()>(name.as_bytes()) }.is_err())
        .collect()
}

/// The names in `REQUIRED_SYMBOLS` that the library cudarc loads does not export.
fn missing_symbols() -> Vec<&'static str> {
    absent_symbols(REQUIRED_SYMBOLS)
}

/// Whether the driver still has `cuDeviceGetUuid` (v1): CUDA 13's header dropped it, and it
/// is only a fallback for naming a MIG instance's parent where NVML cannot.
fn has_uuid_v1() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| absent_symbols(&["cuDeviceGetUuid"]).is_empty())
}

/// `cuDriverGetVersion` (e.g. 12040), `None` when the call fails. Needs only the library.
pub fn driver_cuda_version() -> Option<i32> {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: writes one int through a valid pointer; callers checked the library loads.
    let ok = unsafe { sys::cuDriverGetVersion(&mut v) } == sys::CUresult::CUDA_SUCCESS;
    ok.then_some(v)
}

/// The driver's version as `major.minor` (e.g. `12.4`).
pub fn cuda_driver_version() -> String {
    driver_cuda_version().map_or_else(|| "unknown".into(), floor::cuda_version_text)
}

/// The device's UUID and, on a MIG instance, its parent GPU's: `cuDeviceGetUuid_v2` names the
/// MIG instance a process sees, and NVML says whether those bytes are a GPU's or an instance's
/// (`mig::identify`); `cuDeviceGetUuid` (v1) is asked only where the library has it.
fn device_uuids(dev: sys::CUdevice, name: &str) -> DevResult<(String, Option<String>)> {
    let v1 = if has_uuid_v1() {
        Some(result::device::get_uuid(dev).map_err(|e| driver_err("cuDeviceGetUuid", 0, e))?)
    } else {
        None
    };
    let mut v2 = std::mem::MaybeUninit::<sys::CUuuid>::uninit();
    // SAFETY: writes one CUuuid through a valid pointer; `dev` is a handle from cuDeviceGet.
    unsafe { sys::cuDeviceGetUuid_v2(v2.as_mut_ptr(), dev) }
        .result()
        .map_err(|e| driver_err("cuDeviceGetUuid_v2", 0, e))?;
    // SAFETY: initialized by the successful call above.
    let v2 = unsafe { v2.assume_init() };
    let bytes = |u: &sys::CUuuid| -> [u8; 16] { std::array::from_fn(|i| u.bytes[i] as u8) };
    let v1 = v1.as_ref().map(bytes);
    Ok(mig::identify(
        &bytes(&v2),
        v1.as_ref(),
        name,
        crate::nvml::uuid_kind,
    ))
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
    let (uuid, parent_uuid) = device_uuids(dev, &name)?;
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
