//! Initialization, devices and their attributes, error names and texts.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out, write_cstr};
use crate::state::{cu, try_with_driver};

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

/// The 16 bytes of device `index`'s UUID (the same in CUDA and NVML).
pub fn uuid_bytes(index: u32) -> [u8; 16] {
    let i = index.to_be_bytes();
    [
        0xfa, 0x4e, 0x67, 0x70, 0, 0, 0x40, 0, 0x80, 0, 0, 0, i[0], i[1], i[2], i[3],
    ]
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML and `nvidia-smi` write it.
pub fn uuid_string(index: u32) -> String {
    let b = uuid_bytes(index);
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
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
        match try_with_driver(|d| d.initialized = true) {
            Ok(()) => Ok(()),
            Err(e) => {
                report_setup_error("cuInit", &e);
                Err(CUDA_ERROR_INVALID_VALUE)
            }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    cuda("cuDriverGetVersion", || unsafe {
        out(version, DRIVER_VERSION)
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
        let text = cu(|d| d.device(dev).map(|_| d.cfg.profile.device_name()))?;
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

fn get_uuid(uuid: *mut CUuuid, dev: CUdevice) -> Result<(), CUresult> {
    let index = cu(|d| d.device(dev))?;
    let bytes = uuid_bytes(index).map(|b| b as c_char);
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    unsafe { out(uuid, CUuuid { bytes }) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuda("cuDeviceGetUuid", || get_uuid(uuid, dev))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuda("cuDeviceGetUuid_v2", || get_uuid(uuid, dev))
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
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => p.multiprocessors as c_int,
        CU_DEVICE_ATTRIBUTE_COMPUTE_MODE if d.cfg.exclusive_process => {
            CU_COMPUTEMODE_EXCLUSIVE_PROCESS as c_int
        }
        CU_DEVICE_ATTRIBUTE_COMPUTE_MODE => CU_COMPUTEMODE_DEFAULT as c_int,
        36 => 2_619_000, // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,      // GLOBAL_MEMORY_BUS_WIDTH
        38 => 50 << 20,  // L2_CACHE_SIZE
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => {
            p.stack.threads_per_multiprocessor as c_int
        }
        40 => 3, // ASYNC_ENGINE_COUNT
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => major,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => minor,
        81 => 228 << 10, // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        97 => 227 << 10, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => 32,
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => 1,
        119 => 1, // MEMPOOL_SUPPORTED_HANDLE_TYPES: POSIX fd
        // Capabilities a data-center GPU has (overlap, concurrent kernels, ECC, UVA, stream
        // priorities, managed memory, preemption, cooperative launch, VMM, ...).
        15 | 31 | 32 | 41 | 78 | 79 | 80 | 83 | 89 | 90 | 95 | 102 | 120 => 1,
        33 => index as c_int + 1, // PCI_BUS_ID
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
