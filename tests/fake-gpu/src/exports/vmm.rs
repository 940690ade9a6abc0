//! Virtual memory management: granularity, address reservations, physical handles, mapping
//! and access.

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out};
use crate::state::{Driver, cu};

/// The device a pinned-device-memory property names.
fn prop_device(d: &Driver, prop: *const CUmemAllocationProp) -> Result<u32, CUresult> {
    d.require_init()?;
    if prop.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: checked non-null; the caller passes a valid CUmemAllocationProp.
    let p = unsafe { prop.read_unaligned() };
    if p.type_ != CU_MEM_ALLOCATION_TYPE_PINNED || p.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.device(p.location.id)
        .map_err(|_| CUDA_ERROR_INVALID_DEVICE)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    option: u32,
) -> CUresult {
    cuda("cuMemGetAllocationGranularity", || {
        if option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let g = cu(|d| prop_device(d, prop).map(|_| d.granularity()))?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(granularity, g as usize) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    cuda("cuMemAddressReserve", || {
        if ptr.is_null() || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // `addr` is only a hint; the driver may place the range elsewhere.
        let _ = addr;
        let base = cu(|d| {
            d.require_init()?;
            d.vmm_reserve(size as u64, alignment as u64)
        })?;
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(ptr, base) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    cuda("cuMemAddressFree", || {
        cu(|d| {
            d.require_init()?;
            d.vmm_address_free(ptr, size as u64)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    cuda("cuMemCreate", || {
        if handle.is_null() || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = cu(|d| {
            let dev = prop_device(d, prop)?;
            d.vmm_create(dev, size as u64)
        })?;
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(handle, h) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    cuda("cuMemRelease", || {
        cu(|d| {
            d.require_init()?;
            d.vmm_release(handle)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    cuda("cuMemMap", || {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        cu(|d| {
            d.require_init()?;
            d.vmm_map(ptr, size as u64, offset as u64, handle)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    cuda("cuMemUnmap", || {
        cu(|d| {
            d.require_init()?;
            d.vmm_unmap(ptr, size as u64)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    cuda("cuMemSetAccess", || {
        if desc.is_null() || count == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        cu(|d| {
            d.require_init()?;
            let mut allow = None;
            for i in 0..count {
                // SAFETY: the caller passes `count` descriptors.
                let x = unsafe { desc.add(i).read_unaligned() };
                if x.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                d.device(x.location.id)?;
                allow = Some(match x.flags {
                    CU_MEM_ACCESS_FLAGS_PROT_NONE => false,
                    CU_MEM_ACCESS_FLAGS_PROT_READ | CU_MEM_ACCESS_FLAGS_PROT_READWRITE => true,
                    _ => return Err(CUDA_ERROR_INVALID_VALUE),
                });
            }
            d.vmm_set_access(ptr, size as u64, allow.unwrap_or(false))
        })
    })
}
