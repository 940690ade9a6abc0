//! NVML: init and shutdown, driver versions, devices by index and UUID, memory info with the
//! reserved share, compute mode, and the running compute processes.
//!
//! NVML needs neither `cuInit` nor a context: it reads the shared table, so it sees every
//! process using the fake. Its memory total is the CUDA-visible total plus the profile's
//! `nvml_reserved_bytes`; used is every process's usage, context included, and free is what
//! `cuMemGetInfo` reports. The process list holds every live process with a context on the
//! device, this one included unless `HEADROOM_FAKE_NVML_HIDE_SELF=1` (as in a PID namespace).

// Each entry point's safety contract is the NVML reference's for the symbol of the same name.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, c_char, c_int, c_uint};

use crate::abi::*;
use crate::errors::*;
use crate::exports::device::{pin_self, report_setup_error, uuid_string};
use crate::ffi::{nvml, write_cstr};
use crate::state::{Driver, Tag, handle, id_of, try_with_driver};

/// Runs `f` on the driver within an NVML session.
fn session<R>(f: impl FnOnce(&mut Driver) -> Result<R, nvmlReturn_t>) -> Result<R, nvmlReturn_t> {
    try_with_driver(|d| {
        if d.nvml_sessions == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        f(d)
    })
    .unwrap_or(Err(NVML_ERROR_UNINITIALIZED))
}

fn device_of(d: &Driver, dev: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
    let i = id_of(Tag::Nvml, dev).map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
    if (i as usize) < d.devices.len() {
        Ok(i as u32)
    } else {
        Err(NVML_ERROR_INVALID_ARGUMENT)
    }
}

/// Writes through an out-pointer; null is an invalid argument.
///
/// # Safety
/// `p` must be null or valid for writing a `T`.
unsafe fn put<T>(p: *mut T, v: T) -> Result<(), nvmlReturn_t> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and valid for writes (the caller's guarantee).
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Copies a string into a caller's buffer or says it is too small.
fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), nvmlReturn_t> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (len as usize) < s.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller's buffer holds `len` bytes, enough for `s` and its NUL.
    unsafe { write_cstr(buf, len as usize, s) };
    Ok(())
}

fn init() -> Result<(), nvmlReturn_t> {
    pin_self();
    match try_with_driver(|d| d.nvml_sessions += 1) {
        Ok(()) => Ok(()),
        Err(e) => {
            report_setup_error("nvmlInit", &e);
            Err(NVML_ERROR_UNKNOWN)
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    nvml("nvmlInit_v2", init)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    nvml("nvmlInitWithFlags", init)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    nvml("nvmlShutdown", || {
        session(|d| {
            d.nvml_sessions -= 1;
            Ok(())
        })
    })
}

/// The text of a return code (not counted for fault injection: it returns no code).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    crate::errors::nvml(result)
        .map_or(c"Unknown Error", |e| e.2)
        .as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    nvml("nvmlSystemGetDriverVersion", || {
        session(|_| put_str(version, length, NVML_DRIVER_VERSION))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> nvmlReturn_t {
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    nvml("nvmlSystemGetCudaDriverVersion", || {
        session(|_| unsafe { put(v, DRIVER_VERSION) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> nvmlReturn_t {
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    nvml("nvmlSystemGetCudaDriverVersion_v2", || {
        session(|_| unsafe { put(v, DRIVER_VERSION) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    nvml("nvmlDeviceGetCount_v2", || {
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        session(|d| unsafe { put(count, d.devices.len() as c_uint) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetHandleByIndex_v2", || {
        session(|d| {
            if index as usize >= d.devices.len() {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(device, handle(Tag::Nvml, index as u64)) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetHandleByUUID", || {
        if uuid.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: checked non-null; the caller passes a NUL-terminated string.
        let wanted = unsafe { CStr::from_ptr(uuid) }
            .to_string_lossy()
            .into_owned();
        session(|d| {
            let i = (0..d.devices.len() as u32)
                .find(|i| uuid_string(*i) == wanted)
                .ok_or(NVML_ERROR_NOT_FOUND)?;
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(device, handle(Tag::Nvml, i as u64)) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetUUID", || {
        session(|d| put_str(uuid, length, &uuid_string(device_of(d, device)?)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetName", || {
        session(|d| {
            device_of(d, device)?;
            put_str(name, length, &d.cfg.profile.device_name())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    nvml("nvmlDeviceGetIndex", || {
        session(|d| unsafe { put(index, device_of(d, device)?) })
    })
}

/// (total, reserved, used, free) as NVML v2 reports them.
fn memory(d: &Driver, device: u32) -> (u64, u64, u64, u64) {
    let m = &d.cfg.profile.memory;
    let visible = d.cfg.total_bytes(device);
    let used = d.shared.device_used(device).min(visible);
    (
        visible + m.nvml_reserved_bytes.0,
        m.nvml_reserved_bytes.0,
        used,
        visible - used,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetMemoryInfo", || {
        session(|d| {
            let (total, reserved, used, free) = memory(d, device_of(d, device)?);
            // Version 1 counts the reserved share as used.
            let v = nvmlMemory_t {
                total,
                free,
                used: used + reserved,
            };
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(mem, v) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetMemoryInfo_v2", || {
        if mem.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: checked non-null; the caller passes an nvmlMemory_v2_t with its version set.
        let version = unsafe { (*mem).version };
        if version != NVML_MEMORY_V2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        session(|d| {
            let (total, reserved, used, free) = memory(d, device_of(d, device)?);
            let v = nvmlMemory_v2_t {
                version,
                total,
                reserved,
                free,
                used,
            };
            // SAFETY: checked non-null above.
            unsafe { put(mem, v) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetComputeRunningProcesses_v3", || {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let list = session(|d| {
            let dev = device_of(d, device)?;
            let me = std::process::id();
            let hide = d.cfg.nvml_hide_self;
            Ok(d.shared
                .entries(dev)
                .into_iter()
                .filter(|e| e.context && !e.dead && !(hide && e.pid == me))
                .collect::<Vec<_>>())
        })?;
        // SAFETY: checked non-null; the caller passes the capacity of `infos`.
        let capacity = unsafe { *count } as usize;
        // SAFETY: as above.
        unsafe { *count = list.len() as c_uint };
        if list.is_empty() {
            return Ok(());
        }
        if infos.is_null() || capacity < list.len() {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (i, e) in list.iter().enumerate() {
            let info = nvmlProcessInfo_t {
                pid: e.pid,
                usedGpuMemory: e.used,
                gpuInstanceId: u32::MAX,
                computeInstanceId: u32::MAX,
            };
            // SAFETY: `i` < capacity, the caller's array length.
            unsafe { infos.add(i).write_unaligned(info) };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: nvmlDevice_t,
    mode: *mut u32,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetComputeMode", || {
        session(|d| {
            device_of(d, device)?;
            let m = if d.cfg.exclusive_process {
                CU_COMPUTEMODE_EXCLUSIVE_PROCESS
            } else {
                CU_COMPUTEMODE_DEFAULT
            };
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(mode, m) }
        })
    })
}
