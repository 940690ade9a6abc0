//! Plain allocations (`cuMemAlloc`, `cuMemFree`), memsets and copies.
//!
//! The synchronous forms follow the driver's documented host behavior: memsets and
//! device-to-device copies are queued on the legacy NULL stream and return at once; a pageable
//! host-to-device copy returns once the source is staged, its device write queued on the NULL
//! stream (so it is not ordered with non-blocking streams); a device-to-host copy waits.
//! `cuMemFree` waits for the device first, as the real one may.

use std::ffi::{c_uchar, c_uint, c_void};
use std::sync::Arc;

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out};
use crate::memory::Need;
use crate::state::{Driver, cu};
use crate::stream::{HostPtr, StreamShared, Work};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    cuda("cuMemAlloc_v2", || {
        let ptr = cu(|d| {
            let dev = d.current()?;
            if bytesize == 0 || dptr.is_null() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let bytes = bytesize as u64;
            if let Need::Bytes(n) = d.devices[dev as usize].plain.need(bytes) {
                d.reserve(dev, n)?;
            }
            let id = d.next_id();
            let va = &mut d.va;
            let device = &mut d.devices[dev as usize];
            let ptr = device.plain.alloc(bytes, |b| va.take(b, 0));
            device.regions.add(ptr, bytes, id);
            device.plain_live.insert(ptr, (bytes, id));
            d.publish(dev);
            Ok(ptr)
        })?;
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(dptr, ptr) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    cuda("cuMemFree_v2", || {
        let streams = cu(|d| {
            let dev = d.current()?;
            if !d.devices[dev as usize].plain_live.contains_key(&dptr) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            Ok(d.device_streams(dev))
        })?;
        for s in &streams {
            s.drain();
        }
        cu(|d| {
            let dev = d.current()?;
            let device = d.dev(dev);
            let (bytes, id) = device
                .plain_live
                .remove(&dptr)
                .ok_or(CUDA_ERROR_INVALID_VALUE)?;
            device.plain.free(dptr);
            device.regions.remove(dptr, id);
            device
                .content
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .forget(dptr, bytes);
            d.publish(dev);
            Ok(())
        })
    })
}

/// Queues `work` on the stream `h` names, after checking (outside a capture) that the
/// device ranges are live. Returns where it was queued (`None`: recorded as a graph node).
pub fn queue(
    h: Handle,
    work: Work,
    seconds: f64,
    ranges: &[(u64, u64)],
) -> Result<Option<(Arc<StreamShared>, u64)>, CUresult> {
    cu(|d: &mut Driver| {
        let dev = d.current()?;
        let sid = d.stream_id(dev, h)?;
        if d.streams[&sid].capture.is_none() {
            let regions = &d.devices[dev as usize].regions;
            if ranges
                .iter()
                .any(|(p, n)| *n > 0 && !regions.covers(*p, *n))
            {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
        let duration = d.cfg.scaled(seconds);
        d.submit(sid, work, duration)
    })
}

fn rate(f: impl Fn(&crate::profile::Bandwidth) -> f64) -> f64 {
    crate::state::with_driver(|d| f(&d.cfg.profile.bandwidth)).unwrap_or(f64::INFINITY)
}

fn memset(api: &'static str, ptr: u64, word: u32, bytes: u64, stream: Handle) -> CUresult {
    cuda(api, || {
        let seconds = bytes as f64 / rate(|b| b.memset_bytes_per_s);
        queue(
            stream,
            Work::Memset { ptr, bytes, word },
            seconds,
            &[(ptr, bytes)],
        )
        .map(|_| ())
    })
}

fn d32(ptr: u64, n: usize) -> Result<u64, CUresult> {
    if ptr % 4 != 0 {
        Err(CUDA_ERROR_INVALID_VALUE)
    } else {
        Ok(n as u64 * 4)
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    uc: c_uchar,
    n: usize,
    stream: Handle,
) -> CUresult {
    memset(
        "cuMemsetD8Async",
        dst,
        u32::from_ne_bytes([uc; 4]),
        n as u64,
        stream,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, uc: c_uchar, n: usize) -> CUresult {
    memset(
        "cuMemsetD8_v2",
        dst,
        u32::from_ne_bytes([uc; 4]),
        n as u64,
        std::ptr::null_mut(),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    ui: c_uint,
    n: usize,
    stream: Handle,
) -> CUresult {
    match d32(dst, n) {
        Ok(bytes) => memset("cuMemsetD32Async", dst, ui, bytes, stream),
        Err(e) => cuda("cuMemsetD32Async", || Err(e)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, ui: c_uint, n: usize) -> CUresult {
    match d32(dst, n) {
        Ok(bytes) => memset("cuMemsetD32_v2", dst, ui, bytes, std::ptr::null_mut()),
        Err(e) => cuda("cuMemsetD32_v2", || Err(e)),
    }
}

/// Stages `n` host bytes at `src`.
///
/// # Safety
/// `src` must be valid for reading `n` bytes.
unsafe fn stage(src: *const c_void, n: usize) -> Result<Arc<Vec<u8>>, CUresult> {
    if src.is_null() && n > 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut v = vec![0u8; n];
    if n > 0 {
        // SAFETY: the caller guarantees `n` readable bytes at `src`.
        unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), v.as_mut_ptr(), n) };
    }
    Ok(Arc::new(v))
}

fn htod(
    api: &'static str,
    dst: u64,
    data: Result<Arc<Vec<u8>>, CUresult>,
    stream: Handle,
) -> CUresult {
    cuda(api, || {
        let data = data?;
        let n = data.len() as u64;
        let seconds = n as f64 / rate(|b| b.copy_bytes_per_s);
        queue(stream, Work::CopyHtoD { dst, data }, seconds, &[(dst, n)]).map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    // SAFETY: the caller passes `n` readable bytes at `src`.
    htod(
        "cuMemcpyHtoD_v2",
        dst,
        unsafe { stage(src, n) },
        std::ptr::null_mut(),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: Handle,
) -> CUresult {
    // SAFETY: the caller passes `n` readable bytes at `src`.
    htod(
        "cuMemcpyHtoDAsync_v2",
        dst,
        unsafe { stage(src, n) },
        stream,
    )
}

fn dtoh(
    api: &'static str,
    dst: *mut c_void,
    src: u64,
    n: usize,
    stream: Handle,
    wait: bool,
) -> CUresult {
    cuda(api, || {
        if dst.is_null() && n > 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let bytes = n as u64;
        let work = Work::CopyDtoH {
            dst: HostPtr(dst.cast()),
            src,
            bytes,
        };
        let seconds = bytes as f64 / rate(|b| b.copy_bytes_per_s);
        let queued = queue(stream, work, seconds, &[(src, bytes)])?;
        if wait {
            let (s, seq) = queued.ok_or(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)?;
            s.wait(seq);
            return cu(|d| match d.current_any().map(|dev| d.sticky(dev))? {
                0 => Ok(()),
                e => Err(e),
            });
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    dtoh("cuMemcpyDtoH_v2", dst, src, n, std::ptr::null_mut(), true)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    stream: Handle,
) -> CUresult {
    dtoh("cuMemcpyDtoHAsync_v2", dst, src, n, stream, false)
}

fn dtod(api: &'static str, dst: u64, src: u64, n: usize, stream: Handle) -> CUresult {
    cuda(api, || {
        let bytes = n as u64;
        let seconds = 2.0 * bytes as f64 / rate(|b| b.copy_bytes_per_s);
        let work = Work::CopyDtoD { dst, src, bytes };
        queue(stream, work, seconds, &[(dst, bytes), (src, bytes)]).map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    dtod("cuMemcpyDtoD_v2", dst, src, n, std::ptr::null_mut())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: Handle,
) -> CUresult {
    dtod("cuMemcpyDtoDAsync_v2", dst, src, n, stream)
}
