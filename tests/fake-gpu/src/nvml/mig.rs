//! NVML's MIG calls: the mode, the instances of a GPU as device handles, their parent and
//! their GPU and compute instance ids.
//!
//! A GPU is MIG-capable when its profile has a `[[mig]]` table; the calls that need a capable
//! GPU answer `NVML_ERROR_NOT_SUPPORTED` on another, and a MIG handle where a GPU's is needed
//! (or the reverse) is `NVML_ERROR_INVALID_ARGUMENT`. Each instance is its own GPU instance
//! (ids from 1, in `HEADROOM_FAKE_MIG`'s order) with one compute instance (id 0) spanning it.

use std::ffi::c_uint;

use super::{Target, handle_of, put, session, target_of};
use crate::abi::*;
use crate::errors::*;
use crate::ffi::nvml;
use crate::state::Driver;
use crate::topology::MAX_MIG_INSTANCES;

/// The GPU instance id of instance `k`.
pub fn gpu_instance_id(k: u32) -> u32 {
    k + 1
}

/// Physical GPU `dev`, which must support MIG.
fn capable_gpu(d: &Driver, dev: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
    match target_of(d, dev)? {
        Target::Mig(..) => Err(NVML_ERROR_INVALID_ARGUMENT),
        Target::Gpu(_) if d.cfg.profile.mig.is_empty() => Err(NVML_ERROR_NOT_SUPPORTED),
        Target::Gpu(g) => Ok(g),
    }
}

/// MIG instance `dev`: (GPU, instance).
fn instance(d: &Driver, dev: nvmlDevice_t) -> Result<(u32, u32), nvmlReturn_t> {
    match target_of(d, dev)? {
        Target::Mig(g, k) => Ok((g, k)),
        Target::Gpu(_) => Err(NVML_ERROR_NOT_SUPPORTED),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetMigMode", || {
        session(|d| {
            capable_gpu(d, device)?;
            let on = d.cfg.mig.is_some() as c_uint;
            // SAFETY: the caller passes valid out-pointers (null is refused).
            unsafe {
                put(current, on)?;
                put(pending, on)
            }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetMaxMigDeviceCount", || {
        session(|d| {
            capable_gpu(d, device)?;
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(count, MAX_MIG_INSTANCES) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetMigDeviceHandleByIndex", || {
        session(|d| {
            let g = capable_gpu(d, device)?;
            if index >= MAX_MIG_INSTANCES {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            let instances = d.cfg.mig.as_ref().map_or(0, Vec::len) as u32;
            if index >= instances {
                return Err(NVML_ERROR_NOT_FOUND);
            }
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(mig, handle_of(Target::Mig(g, index))) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    nvml("nvmlDeviceIsMigDeviceHandle", || {
        session(|d| {
            let v = matches!(target_of(d, device)?, Target::Mig(..)) as c_uint;
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(is_mig, v) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", || {
        session(|d| {
            let (g, _) = instance(d, mig).map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(device, handle_of(Target::Gpu(g))) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetGpuInstanceId", || {
        session(|d| {
            let (_, k) = instance(d, device)?;
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(id, gpu_instance_id(k)) }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    nvml("nvmlDeviceGetComputeInstanceId", || {
        session(|d| {
            instance(d, device)?;
            // SAFETY: the caller passes a valid out-pointer (null is refused).
            unsafe { put(id, 0) }
        })
    })
}
