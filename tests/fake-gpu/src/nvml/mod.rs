//! NVML: init and shutdown, driver versions, devices by index and UUID, memory info with the
//! reserved share, compute mode, and the running compute processes; MIG handles in `mig`.
//!
//! NVML needs neither `cuInit` nor a context: it reads the shared table, so it sees every
//! process using the fake. Its memory total is the CUDA-visible total plus the profile's
//! `nvml_reserved_bytes`; used is every process's usage, context included, and free is what
//! `cuMemGetInfo` reports. The process list holds every live process with a context on the
//! device, this one included unless `HEADROOM_FAKE_NVML_HIDE_SELF=1` (as in a PID namespace).
//!
//! NVML ignores `CUDA_VISIBLE_DEVICES` and counts physical GPUs. In MIG mode a MIG handle's
//! memory is its instance's (no reserved share; used is the instance's processes), the parent's
//! is the whole GPU's, and process lists on either are `NVML_ERROR_NO_PERMISSION` unless
//! `HEADROOM_FAKE_PRIVILEGED=1`, as for an unprivileged user on a real MIG GPU.

// Each entry point's safety contract is the NVML reference's for the symbol of the same name.
#![allow(clippy::missing_safety_doc)]

pub mod mig;

use std::ffi::{CStr, c_char, c_int, c_uint};

use crate::abi::*;
use crate::errors::*;
use crate::exports::device::{device_name, pin_self, report_setup_error};
use crate::ffi::{nvml, write_cstr};
use crate::state::{Driver, Tag, handle, id_of, try_with_driver};
use crate::topology::{gpu_uuid, memory_key, mig_uuid};

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

/// What an NVML handle names: a physical GPU, or MIG instance `k` of GPU `g`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Gpu(u32),
    Mig(u32, u32),
}

/// MIG handles carry this bit above the GPU and instance numbers.
const MIG_HANDLE: u64 = 1 << 40;

pub fn handle_of(t: Target) -> nvmlDevice_t {
    match t {
        Target::Gpu(g) => handle(Tag::Nvml, g as u64),
        Target::Mig(g, k) => handle(Tag::Nvml, MIG_HANDLE | (g as u64) << 8 | k as u64),
    }
}

/// The GPU or instance a handle names, checked against the configuration.
pub fn target_of(d: &Driver, dev: nvmlDevice_t) -> Result<Target, nvmlReturn_t> {
    let id = id_of(Tag::Nvml, dev).map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
    let gpus = d.cfg.devices as u64;
    let instances = d.cfg.mig.as_ref().map_or(0, Vec::len) as u64;
    if id & MIG_HANDLE == 0 {
        return if id < gpus {
            Ok(Target::Gpu(id as u32))
        } else {
            Err(NVML_ERROR_INVALID_ARGUMENT)
        };
    }
    let (g, k) = ((id & !MIG_HANDLE) >> 8, id & 0xff);
    if g < gpus && k < instances {
        Ok(Target::Mig(g as u32, k as u32))
    } else {
        Err(NVML_ERROR_INVALID_ARGUMENT)
    }
}

impl Target {
    pub fn gpu(self) -> u32 {
        match self {
            Target::Gpu(g) | Target::Mig(g, _) => g,
        }
    }

    pub fn uuid(self) -> String {
        match self {
            Target::Gpu(g) => gpu_uuid(g),
            Target::Mig(g, k) => mig_uuid(g, k),
        }
    }

    /// The shared-table keys whose memory and processes this handle sees, with each one's
    /// (GPU instance, compute instance) ids for the process list.
    fn keys(self, d: &Driver) -> Vec<(u32, u32, u32)> {
        const NONE: u32 = u32::MAX;
        match (self, d.cfg.mig.as_ref()) {
            (Target::Gpu(g), None) => vec![(memory_key(g, None), NONE, NONE)],
            (Target::Gpu(g), Some(m)) => (0..m.len() as u32)
                .map(|k| (memory_key(g, Some(k)), mig::gpu_instance_id(k), 0))
                .collect(),
            (Target::Mig(g, k), _) => vec![(memory_key(g, Some(k)), mig::gpu_instance_id(k), 0)],
        }
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
        session(|d| put_str(version, length, &d.cfg.release.nvml_version))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> nvmlReturn_t {
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    nvml("nvmlSystemGetCudaDriverVersion", || {
        session(|d| unsafe { put(v, d.cfg.release.cuda_version) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> nvmlReturn_t {
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    nvml("nvmlSystemGetCudaDriverVersion_v2", || {
        session(|d| unsafe { put(v, d.cfg.release.cuda_version) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    nvml("nvmlDeviceGetCount_v2", || {
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        session(|d| unsafe { put(count, d.cfg.devices as c_uint) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetHandleByIndex_v2", || {
        session(|d| {
            if index >= d.cfg.devices {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(device, handle_of(Target::Gpu(index))) }
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
            let instances = d.cfg.mig.as_ref().map_or(0, Vec::len) as u32;
            let t = (0..d.cfg.devices)
                .flat_map(|g| {
                    std::iter::once(Target::Gpu(g))
                        .chain((0..instances).map(move |k| Target::Mig(g, k)))
                })
                .find(|t| t.uuid() == wanted)
                .ok_or(NVML_ERROR_NOT_FOUND)?;
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(device, handle_of(t)) }
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
        session(|d| put_str(uuid, length, &target_of(d, device)?.uuid()))
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
            let instance = match target_of(d, device)? {
                Target::Gpu(_) => None,
                Target::Mig(_, k) => Some(k),
            };
            put_str(name, length, &device_name(&d.cfg, instance))
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
        session(|d| unsafe { put(index, target_of(d, device)?.gpu()) })
    })
}

/// (total, reserved, used, free) as NVML v2 reports them: a GPU's with its reserved share, a
/// MIG instance's without one.
fn memory(d: &Driver, t: Target) -> (u64, u64, u64, u64) {
    let (visible, reserved) = match t {
        Target::Gpu(g) => (
            d.cfg.gpu_total_bytes(g),
            d.cfg.profile.memory.nvml_reserved_bytes.0,
        ),
        Target::Mig(_, k) => (d.cfg.mig_profile(k).map_or(0, |m| m.total_bytes.0), 0),
    };
    let used: u64 = t
        .keys(d)
        .iter()
        .map(|(key, _, _)| d.shared.device_used(*key))
        .sum();
    let used = used.min(visible);
    (visible + reserved, reserved, used, visible - used)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetMemoryInfo", || {
        session(|d| {
            let (total, reserved, used, free) = memory(d, target_of(d, device)?);
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
            // As reported under WSL2 (516.59): the symbol is there, the call fails.
            if d.cfg.wsl2 {
                return Err(NVML_ERROR_UNKNOWN);
            }
            let (total, reserved, used, free) = memory(d, target_of(d, device)?);
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

/// The running compute processes, in records of `record_bytes` (24, or 32 for `_v3` on
/// 535.43.02–535.86: `Release::process_record_v3_bytes`).
///
/// # Safety
/// `count` must be null or valid for reads and writes, `infos` null or valid for `*count`
/// records of `record_bytes`.
unsafe fn running_processes(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut u8,
    record_bytes: impl FnOnce(&Driver) -> usize,
) -> Result<(), nvmlReturn_t> {
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let (list, size) = session(|d| {
        let t = target_of(d, device)?;
        if d.cfg.wsl2 {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        if d.cfg.mig.is_some() && !d.cfg.privileged {
            return Err(NVML_ERROR_NO_PERMISSION);
        }
        let me = std::process::id();
        let hide = d.cfg.nvml_hide_self;
        let mut list = Vec::new();
        for (key, gi, ci) in t.keys(d) {
            list.extend(
                d.shared
                    .entries(key)
                    .into_iter()
                    .filter(|e| e.context && !e.dead && !(hide && e.pid == me))
                    .map(|e| (e, gi, ci)),
            );
        }
        Ok((list, record_bytes(d)))
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
    for (i, (e, gi, ci)) in list.iter().enumerate() {
        let info = nvmlProcessInfoCc_t {
            pid: e.pid,
            usedGpuMemory: e.used,
            gpuInstanceId: *gi,
            computeInstanceId: *ci,
            usedGpuCcProtectedMemory: 0,
        };
        // SAFETY: `i` < capacity, the caller's array length in records of `size` bytes; the
        // first `size` bytes of the 32-byte record are the smaller layout's.
        unsafe {
            std::ptr::copy_nonoverlapping((&raw const info).cast::<u8>(), infos.add(i * size), size)
        };
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: the caller's pointers, as NVML documents them.
    nvml("nvmlDeviceGetComputeRunningProcesses_v2", || unsafe {
        running_processes(device, count, infos.cast(), |_| 24)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: the caller's pointers, as NVML documents them for the release's record.
    nvml("nvmlDeviceGetComputeRunningProcesses_v3", || unsafe {
        running_processes(device, count, infos.cast(), |d| {
            d.cfg.release.process_record_v3_bytes()
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: nvmlDevice_t,
    mode: *mut u32,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetComputeMode", || {
        session(|d| {
            target_of(d, device)?;
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
