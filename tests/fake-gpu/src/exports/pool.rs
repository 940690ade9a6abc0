//! Stream-ordered allocation and memory pools: `cuMemAllocAsync`, `cuMemFreeAsync`,
//! `cuMemAllocFromPoolAsync` and the `cuMemPool*` calls. On a capturing stream, allocations
//! and frees become graph nodes instead.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out};
use crate::pool::Pool;
use crate::state::{Driver, Tag, cu, handle, id_of};

fn alloc_async(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: Option<Handle>,
    stream: Handle,
) -> Result<(), CUresult> {
    let ptr = cu(|d| {
        let dev = d.current()?;
        let sid = d.stream_id(dev, stream)?;
        if bytes == 0 || dptr.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if d.streams[&sid].capture.is_some() {
            return d.capture_alloc(sid, bytes as u64);
        }
        let pool = match pool {
            Some(h) => id_of(Tag::Pool, h)?,
            None => d.devices[dev as usize].current_pool,
        };
        match d.devices[dev as usize].pools.get(&pool) {
            Some(p) if !p.destroyed => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        d.pool_alloc(dev, pool, bytes as u64, sid)
    })?;
    // SAFETY: checked non-null; the caller passes a valid out-pointer.
    unsafe { out(dptr, ptr) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    cuda("cuMemAllocAsync", || alloc_async(dptr, bytes, None, stream))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: Handle,
    stream: Handle,
) -> CUresult {
    cuda("cuMemAllocFromPoolAsync", || {
        alloc_async(dptr, bytes, Some(pool), stream)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: Handle) -> CUresult {
    cuda("cuMemFreeAsync", || {
        cu(|d| {
            let dev = d.current()?;
            let sid = d.stream_id(dev, stream)?;
            if d.streams[&sid].capture.is_some() {
                return d.capture_free(dev, sid, dptr);
            }
            if let Some(pool) = d.pool_of(dev, dptr) {
                return d.pool_free(dev, pool, dptr, sid);
            }
            if d.devices[dev as usize].graph.live.contains_key(&dptr) {
                return d.graph_free(dev, dptr, sid);
            }
            Err(CUDA_ERROR_INVALID_VALUE)
        })
    })
}

/// The device and id of a pool handle.
fn find_pool(d: &Driver, h: Handle) -> Result<(u32, u64), CUresult> {
    d.require_init()?;
    let id = id_of(Tag::Pool, h)?;
    d.devices
        .iter()
        .find(|dev| dev.pools.contains_key(&id))
        .map(|dev| (dev.index, id))
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut Handle,
    props: *const CUmemPoolProps,
) -> CUresult {
    cuda("cuMemPoolCreate", || {
        if pool.is_null() || props.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: checked non-null; the caller passes a valid CUmemPoolProps.
        let p = unsafe { props.read_unaligned() };
        if p.allocType != CU_MEM_ALLOCATION_TYPE_PINNED
            || p.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let id = cu(|d| {
            let dev = d.device(p.location.id)?;
            let id = d.next_id();
            let gran = d.cfg.profile.memory.pool_granularity_bytes.0;
            d.dev(dev)
                .pools
                .insert(id, Pool::new(id, dev, gran, p.maxSize as u64));
            Ok(id)
        })?;
        // SAFETY: checked non-null above.
        unsafe { out(pool, handle(Tag::Pool, id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: Handle) -> CUresult {
    cuda("cuMemPoolDestroy", || {
        cu(|d| {
            let (dev, id) = find_pool(d, pool)?;
            let device = d.dev(dev);
            if id == device.default_pool {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if device.current_pool == id {
                device.current_pool = device.default_pool;
            }
            // Outstanding allocations keep their memory until freed; the rest goes now.
            let p = device.pools.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            p.trim_to(0, true);
            p.destroyed = true;
            if !p.has_outstanding() && p.reserved() == 0 {
                device.pools.remove(&id);
            }
            d.publish(dev);
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: Handle,
    attr: u32,
    value: *mut c_void,
) -> CUresult {
    cuda("cuMemPoolGetAttribute", || {
        let v = cu(|d| {
            let (dev, id) = find_pool(d, pool)?;
            d.pool_mut(dev, id)?.get_attr(attr)
        })?;
        if Pool::attr_is_u64(attr) {
            // SAFETY: the attribute is documented as cuuint64_t; the caller passes one.
            unsafe { out(value.cast::<u64>(), v) }
        } else {
            // SAFETY: the attribute is documented as int; the caller passes one.
            unsafe { out(value.cast::<c_int>(), v as c_int) }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: Handle,
    attr: u32,
    value: *mut c_void,
) -> CUresult {
    cuda("cuMemPoolSetAttribute", || {
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let v = if Pool::attr_is_u64(attr) {
            // SAFETY: checked non-null; the attribute is documented as cuuint64_t.
            unsafe { value.cast::<u64>().read_unaligned() }
        } else {
            // SAFETY: checked non-null; the attribute is documented as int.
            unsafe { value.cast::<c_int>().read_unaligned() as u64 }
        };
        cu(|d| {
            let (dev, id) = find_pool(d, pool)?;
            d.pool_mut(dev, id)?.set_attr(attr, v)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: Handle, min_bytes_to_keep: usize) -> CUresult {
    cuda("cuMemPoolTrimTo", || {
        cu(|d| {
            let (dev, id) = find_pool(d, pool)?;
            d.pool_mut(dev, id)?.trim_to(min_bytes_to_keep as u64, true);
            d.publish(dev);
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut Handle, dev: CUdevice) -> CUresult {
    cuda("cuDeviceGetDefaultMemPool", || {
        let id = cu(|d| d.device(dev).map(|i| d.devices[i as usize].default_pool))?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(pool, handle(Tag::Pool, id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut Handle, dev: CUdevice) -> CUresult {
    cuda("cuDeviceGetMemPool", || {
        let id = cu(|d| d.device(dev).map(|i| d.devices[i as usize].current_pool))?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(pool, handle(Tag::Pool, id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: Handle) -> CUresult {
    cuda("cuDeviceSetMemPool", || {
        cu(|d| {
            let index = d.device(dev)?;
            let (pdev, id) = find_pool(d, pool)?;
            if pdev != index {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            d.dev(index).current_pool = id;
            Ok(())
        })
    })
}
