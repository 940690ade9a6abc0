//! Primary contexts, the calling thread's current context, context-wide synchronization and
//! limits, and `cuMemGetInfo`.

use std::ffi::c_uint;

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out};
use crate::state::{Tag, cu, handle, id_of, thread_stack};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, dev: CUdevice) -> CUresult {
    cuda("cuDevicePrimaryCtxRetain", || {
        if pctx.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let index = cu(|d| {
            let i = d.device(dev)?;
            d.retain(i)?;
            Ok(i)
        })?;
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(pctx, handle(Tag::Context, index as u64)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    cuda("cuDevicePrimaryCtxRelease_v2", || {
        cu(|d| {
            let i = d.device(dev)?;
            d.release(i)
        })
    })
}

/// The device a context handle names, if its context exists.
fn ctx_device(h: Handle) -> Result<u32, CUresult> {
    let id = id_of(Tag::Context, h).map_err(|_| CUDA_ERROR_INVALID_CONTEXT)?;
    cu(|d| {
        d.require_init()?;
        match d.devices.get(id as usize) {
            Some(dev) if dev.ctx.is_some() => Ok(id as u32),
            _ => Err(CUDA_ERROR_INVALID_CONTEXT),
        }
    })
}

fn generation() -> Result<u64, CUresult> {
    cu(|d| d.require_init().map(|_| d.generation))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut Handle) -> CUresult {
    cuda("cuCtxGetCurrent", || {
        let g = generation()?;
        let top = thread_stack(g, |s| s.last().copied());
        let live = top.filter(|d| cu(|x| Ok(x.devices[*d as usize].ctx.is_some())) == Ok(true));
        let h = live.map_or(std::ptr::null_mut(), |d| handle(Tag::Context, d as u64));
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(pctx, h) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    cuda("cuCtxSetCurrent", || {
        let g = generation()?;
        if ctx.is_null() {
            thread_stack(g, |s| s.pop());
            return Ok(());
        }
        let d = ctx_device(ctx)?;
        thread_stack(g, |s| match s.last_mut() {
            Some(top) => *top = d,
            None => s.push(d),
        });
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: Handle) -> CUresult {
    cuda("cuCtxPushCurrent_v2", || {
        let g = generation()?;
        let d = ctx_device(ctx)?;
        thread_stack(g, |s| s.push(d));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut Handle) -> CUresult {
    cuda("cuCtxPopCurrent_v2", || {
        let g = generation()?;
        let d = thread_stack(g, |s| s.pop()).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if !pctx.is_null() {
            // SAFETY: non-null out-pointer from the caller.
            unsafe { out(pctx, handle(Tag::Context, d as u64))? };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    cuda("cuCtxGetDevice", || {
        let d = cu(|d| d.current_any())?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(device, d as CUdevice) }
    })
}

/// Waits for every stream of the current context, then lets pools release memory.
pub fn synchronize_context() -> Result<(), CUresult> {
    let (device, points) = cu(|d| {
        let dev = d.current()?;
        let mut capturing = false;
        for s in d.streams.values_mut().filter(|s| s.device == dev) {
            if let Some(c) = s.capture.as_mut() {
                c.invalidated = true;
                capturing = true;
            }
        }
        if capturing {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        Ok((dev, d.device_streams(dev)))
    })?;
    for s in &points {
        s.drain();
    }
    cu(|d| {
        d.pools_synchronized(device, |_, _| true);
        match d.sticky(device) {
            0 => Ok(()),
            e => Err(e),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    cuda("cuCtxSynchronize", synchronize_context)
}

fn default_limit(limit: u32) -> Result<u64, CUresult> {
    Ok(match limit {
        CU_LIMIT_PRINTF_FIFO_SIZE => 1 << 20,
        CU_LIMIT_MALLOC_HEAP_SIZE => 8 << 20,
        CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH => 2,
        CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT => 2048,
        CU_LIMIT_MAX_L2_FETCH_GRANULARITY => 32,
        CU_LIMIT_PERSISTING_L2_CACHE_SIZE => 0,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetLimit(pvalue: *mut usize, limit: u32) -> CUresult {
    cuda("cuCtxGetLimit", || {
        let v = cu(|d| {
            let dev = d.current()?;
            let c = d.devices[dev as usize]
                .ctx
                .as_ref()
                .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
            if limit == CU_LIMIT_STACK_SIZE {
                return Ok(c.stack_limit);
            }
            match c.limits.get(&limit) {
                Some(v) => Ok(*v),
                None => default_limit(limit),
            }
        })?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(pvalue, v as usize) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetLimit(limit: u32, value: usize) -> CUresult {
    cuda("cuCtxSetLimit", || {
        cu(|d| {
            let dev = d.current()?;
            if limit == CU_LIMIT_STACK_SIZE {
                return d.set_stack_limit(dev, value as u64);
            }
            default_limit(limit)?;
            if let Some(c) = d.dev(dev).ctx.as_mut() {
                c.limits.insert(limit, value as u64);
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    cuda("cuMemGetInfo_v2", || {
        let start = std::time::Instant::now();
        let (f, t, cost) = cu(|d| {
            let dev = d.current()?;
            let p = &d.cfg.profile;
            Ok((
                d.free_bytes(dev),
                d.cfg.total_bytes(dev),
                p.latency.mem_get_info.0,
            ))
        })?;
        crate::ffi::take_at_least(start, cost);
        // SAFETY: the caller passes valid out-pointers (null is refused).
        unsafe {
            out(free, f as usize)?;
            out(total, t as usize)
        }
    })
}

/// `c_uint` flags that must be zero.
pub fn no_flags(flags: c_uint) -> Result<(), CUresult> {
    if flags == 0 {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}
