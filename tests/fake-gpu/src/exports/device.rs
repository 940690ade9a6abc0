//! Initialization, devices and their attributes, error names and texts.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out, write_cstr};
use crate::state::{cu, try_with_driver};
use crate::topology::{gpu_uuid_bytes, mig_uuid_bytes};

/// Keeps this library loaded for the life of the process: NVML users `dlclose` it, and stream
/// workers run its code.
pub fn pin_self() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: dladdr reads the loader's tables for an address in this library; dlopen of
        // the file it names only raises that file's reference count (RTLD_NODELETE pins it).
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(pin_self as *const c_void, &mut info) != 0 && !info.dli_fname.is_null()
            {
                libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NODELETE);
            }
        }
    });
}

/// The name CUDA and NVML give a GPU (`instance` `None`) or one of its MIG instances: the
/// profile's, and the instance's MIG profile after it (`NVIDIA H200 (fake driver) MIG 1g.18gb`).
pub fn device_name(cfg: &crate::config::Config, instance: Option<u32>) -> String {
    let gpu = cfg.profile.device_name();
    match instance.and_then(|k| cfg.mig_profile(k)) {
        Some(m) => format!("{gpu} MIG {}", m.profile),
        None => gpu,
    }
}

/// Reports a bad `HEADROOM_FAKE_*` setting loudly, once per call that needs it.
pub fn report_setup_error(api: &str, e: &str) {
    eprintln!("headroom-fake-gpu: {api} fails: {e}");
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    cuda("cuInit", || {
        pin_self();
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match try_with_driver(|d| {
            d.initialized = !d.devices.is_empty();
            d.devices.len()
        }) {
            // As on a real driver, no visible device is an error of cuInit itself, and the
            // driver stays uninitialized.
            Ok(0) => Err(CUDA_ERROR_NO_DEVICE),
            Ok(_) => Ok(()),
            Err(e) => {
                report_setup_error("cuInit", &e);
                Err(CUDA_ERROR_INVALID_VALUE)
            }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    cuda("cuDriverGetVersion", || {
        // Answered without cuInit, as on a real driver, and even with a bad setting.
        let v = crate::config::loaded()
            .config
            .as_ref()
            .map_or(DRIVER_VERSION, |c| c.release.cuda_version);
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(version, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    cuda("cuDeviceGetCount", || {
        let n = cu(|d| d.require_init().map(|_| d.devices.len() as c_int))?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(count, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    cuda("cuDeviceGet", || {
        let d = cu(|d| d.device(ordinal))?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(device, d as CUdevice) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    cuda("cuDeviceGetName", || {
        let text = cu(|d| {
            let i = d.device(dev)?;
            Ok(device_name(&d.cfg, d.cfg.cuda_device(i).instance))
        })?;
        if len <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller passes a buffer of `len` bytes.
        if !unsafe { write_cstr(name, len as usize, &text) } && name.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    })
}

/// Device `dev`'s UUID: a MIG instance's own (`v2`), or its GPU's (`cuDeviceGetUuid`, unless
/// `HEADROOM_FAKE_MIG_UUID_V1=instance` makes v1 answer as v2).
fn get_uuid(uuid: *mut CUuuid, dev: CUdevice, v2: bool) -> Result<(), CUresult> {
    let (cd, v1_instance) = cu(|d| {
        d.device(dev)
            .map(|i| (d.cfg.cuda_device(i), d.cfg.mig_uuid_v1_instance))
    })?;
    let raw = match cd.instance {
        Some(k) if v2 || v1_instance => mig_uuid_bytes(cd.physical, k),
        _ => gpu_uuid_bytes(cd.physical),
    };
    let bytes = raw.map(|b| b as c_char);
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    unsafe { out(uuid, CUuuid { bytes }) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuda("cuDeviceGetUuid", || get_uuid(uuid, dev, false))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuda("cuDeviceGetUuid_v2", || get_uuid(uuid, dev, true))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    cuda("cuDeviceTotalMem_v2", || {
        let total = cu(|d| d.device(dev).map(|i| d.cfg.total_bytes(i)))?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(bytes, total as usize) }
    })
}

/// An attribute's value for the profile's device.
fn attribute(d: &crate::state::Driver, attr: u32, index: u32) -> Result<c_int, CUresult> {
    let p = &d.cfg.profile;
    let (major, minor) = p.capability();
    Ok(match attr {
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        2 | 3 => 1024,    // MAX_BLOCK_DIM_X, _Y
        4 => 64,          // MAX_BLOCK_DIM_Z
        5 => i32::MAX,    // MAX_GRID_DIM_X
        6 | 7 => 65535,   // MAX_GRID_DIM_Y, _Z
        8 => 48 << 10,    // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 << 10,    // TOTAL_CONSTANT_MEMORY
        10 => 32,         // WARP_SIZE
        11 => i32::MAX,   // MAX_PITCH
        12 | 82 => 65536, // MAX_REGISTERS_PER_BLOCK, _PER_MULTIPROCESSOR
        13 => 1_980_000,  // CLOCK_RATE (kHz)
        14 => 512,        // TEXTURE_ALIGNMENT
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => d.cfg.multiprocessors(index) as c_int,
        CU_DEVICE_ATTRIBUTE_COMPUTE_MODE if d.cfg.exclusive_process => {
            CU_COMPUTEMODE_EXCLUSIVE_PROCESS as c_int
        }
        CU_DEVICE_ATTRIBUTE_COMPUTE_MODE => CU_COMPUTEMODE_DEFAULT as c_int,
        17 => d.cfg.kernel_exec_timeout.is_some() as c_int, // KERNEL_EXEC_TIMEOUT
        36 => 2_619_000,                                    // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,                                         // GLOBAL_MEMORY_BUS_WIDTH
        38 => 50 << 20,                                     // L2_CACHE_SIZE
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => {
            p.stack.threads_per_multiprocessor as c_int
        }
        40 => 3, // ASYNC_ENGINE_COUNT
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => major,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => minor,
        81 => 228 << 10, // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        97 => 227 << 10, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => 32,
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED | CU_DEVICE_ATTRIBUTE_MEMPOOL_HANDLE_TYPES => {
            // POSIX fd handles (119) with pools; nothing without.
            !d.cfg.disabled.memory_pools as c_int
        }
        CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => !d.cfg.disabled.vmm as c_int,
        // Capabilities a data-center GPU has (overlap, concurrent kernels, ECC, UVA, stream
        // priorities, managed memory, preemption, cooperative launch, VMM, ...).
        15 | 31 | 32 | 41 | 78 | 79 | 80 | 83 | 89 | 90 | 95 | 120 => 1,
        33 => d.cfg.cuda_device(index).physical as c_int + 1, // PCI_BUS_ID
        a if a < CU_DEVICE_ATTRIBUTE_MAX => 0,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: u32,
    dev: CUdevice,
) -> CUresult {
    cuda("cuDeviceGetAttribute", || {
        let v = cu(|d| {
            let index = d.device(dev)?;
            attribute(d, attrib, index)
        })?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(pi, v) }
    })
}

fn error_text(code: u32, name: bool, p: *mut *const c_char) -> Result<(), CUresult> {
    match crate::errors::cuda(code) {
        Some(e) => {
            let s = if name { e.1 } else { e.2 };
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { out(p, s.as_ptr()) }
        }
        None => {
            if !p.is_null() {
                // SAFETY: non-null out-pointer from the caller.
                unsafe { p.write(std::ptr::null()) };
            }
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: u32, p: *mut *const c_char) -> CUresult {
    cuda("cuGetErrorName", || error_text(error, true, p))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: u32, p: *mut *const c_char) -> CUresult {
    cuda("cuGetErrorString", || error_text(error, false, p))
}
