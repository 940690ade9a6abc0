//! Streams and events: creation, ordering between streams, queries, synchronization and
//! timing. A synchronize (stream, event) lets stream-ordered pools give back memory above
//! their release threshold, as the driver does.

use std::ffi::{c_int, c_uint};
use std::sync::Arc;
use std::time::Duration;

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out};
use crate::state::{EventRec, Tag, cu, handle, id_of};
use crate::stream::{Dep, EventTimes, Work};

fn create_stream(ph: *mut Handle, flags: c_uint) -> Result<(), CUresult> {
    if flags & !CU_STREAM_NON_BLOCKING != 0 || ph.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let id = cu(|d| {
        let dev = d.current()?;
        d.make_stream(dev, false, flags & CU_STREAM_NON_BLOCKING == 0)
    })?;
    // SAFETY: checked non-null; the caller passes a valid out-pointer.
    unsafe { out(ph, handle(Tag::Stream, id)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    cuda("cuStreamCreate", || create_stream(ph, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut Handle,
    flags: c_uint,
    _priority: c_int,
) -> CUresult {
    cuda("cuStreamCreateWithPriority", || create_stream(ph, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamDestroy_v2(h: Handle) -> CUresult {
    cuda("cuStreamDestroy_v2", || {
        cu(|d| {
            let dev = d.current()?;
            let id = d.stream_id(dev, h)?;
            if d.streams[&id].legacy {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            // Work still queued runs to the end; then the worker ends.
            if let Some(s) = d.streams.remove(&id) {
                s.shared.close();
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamSynchronize(h: Handle) -> CUresult {
    cuda("cuStreamSynchronize", || {
        let (dev, id, (s, seq)) = cu(|d| {
            let dev = d.current()?;
            let id = d.stream_id(dev, h)?;
            Ok((dev, id, d.sync_point(id)?))
        })?;
        s.wait(seq);
        cu(|d| {
            d.pools_synchronized(dev, |fs, _| fs.id == id);
            match d.sticky(dev) {
                0 => Ok(()),
                e => Err(e),
            }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamQuery(h: Handle) -> CUresult {
    cuda("cuStreamQuery", || {
        cu(|d| {
            let dev = d.current()?;
            let s = &d.streams[&d.stream_id(dev, h)?];
            if s.capture.is_some() {
                return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
            }
            if s.shared.idle() {
                Ok(())
            } else {
                Err(CUDA_ERROR_NOT_READY)
            }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamWaitEvent(h: Handle, ev: Handle, flags: c_uint) -> CUresult {
    cuda("cuStreamWaitEvent", || {
        if flags & !1 != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        cu(|d| {
            let dev = d.current()?;
            let id = d.stream_id(dev, h)?;
            let e = d
                .events
                .get(&id_of(Tag::Event, ev)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            let Some((s, seq, _)) = e.recorded.clone() else {
                return Ok(());
            };
            let (other, seq) = (s.id, seq);
            d.submit_after(
                id,
                vec![Dep { stream: s, seq }],
                Work::Nothing,
                Duration::ZERO,
            )?;
            if let Some(rec) = d.streams.get_mut(&id) {
                let w = rec.waited.entry(other).or_default();
                *w = (*w).max(seq);
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    cuda("cuEventCreate", || {
        let valid = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
        let ipc_without_timing_off =
            flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0;
        if flags & !valid != 0 || ipc_without_timing_off || ph.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let id = cu(|d| {
            let device = d.current()?;
            let id = d.next_id();
            let rec = EventRec {
                device,
                flags,
                times: Arc::new(EventTimes::default()),
                recorded: None,
                records: 0,
            };
            d.events.insert(id, rec);
            Ok(id)
        })?;
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(ph, handle(Tag::Event, id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventDestroy_v2(ev: Handle) -> CUresult {
    cuda("cuEventDestroy_v2", || {
        cu(|d| {
            d.current_any()?;
            d.events
                .remove(&id_of(Tag::Event, ev)?)
                .map(|_| ())
                .ok_or(CUDA_ERROR_INVALID_HANDLE)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventRecord(ev: Handle, h: Handle) -> CUresult {
    cuda("cuEventRecord", || {
        cu(|d| {
            let dev = d.current()?;
            let sid = d.stream_id(dev, h)?;
            let eid = id_of(Tag::Event, ev)?;
            let e = d.events.get_mut(&eid).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if e.device != dev {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            e.records += 1;
            let (number, times) = (e.records, e.times.clone());
            let queued = d.submit(
                sid,
                Work::Record {
                    event: times,
                    number,
                },
                Duration::ZERO,
            )?;
            if let (Some((s, seq)), Some(e)) = (queued, d.events.get_mut(&eid)) {
                e.recorded = Some((s, seq, number));
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventQuery(ev: Handle) -> CUresult {
    cuda("cuEventQuery", || {
        cu(|d| {
            d.current()?;
            let e = d
                .events
                .get(&id_of(Tag::Event, ev)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            match &e.recorded {
                Some((s, seq, _)) if s.completed() < *seq => Err(CUDA_ERROR_NOT_READY),
                _ => Ok(()),
            }
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventSynchronize(ev: Handle) -> CUresult {
    cuda("cuEventSynchronize", || {
        let (dev, point) = cu(|d| {
            let dev = d.current()?;
            let e = d
                .events
                .get(&id_of(Tag::Event, ev)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            Ok((dev, e.recorded.clone()))
        })?;
        let Some((s, seq, _)) = point else {
            return Ok(());
        };
        s.wait(seq);
        cu(|d| {
            d.pools_synchronized(dev, |fs, fseq| fs.id == s.id && fseq <= seq);
            match d.sticky(dev) {
                0 => Ok(()),
                e => Err(e),
            }
        })
    })
}

fn elapsed(ms: *mut f32, start: Handle, end: Handle) -> Result<(), CUresult> {
    let v = cu(|d| {
        d.current()?;
        let mut at = [None; 2];
        for (i, h) in [start, end].into_iter().enumerate() {
            let e = d
                .events
                .get(&id_of(Tag::Event, h)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if e.flags & CU_EVENT_DISABLE_TIMING != 0 {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            let (s, seq, number) = e.recorded.clone().ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if s.completed() < seq {
                return Err(CUDA_ERROR_NOT_READY);
            }
            let t = e.times.0.lock().unwrap_or_else(|p| p.into_inner());
            at[i] = (t.0 == number).then_some(t.1).flatten();
        }
        let (Some(a), Some(b)) = (at[0], at[1]) else {
            return Err(CUDA_ERROR_NOT_READY);
        };
        let ms = if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        };
        Ok(ms as f32)
    })?;
    // SAFETY: the caller passes a valid out-pointer (null is refused).
    unsafe { out(ms, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) -> CUresult {
    cuda("cuEventElapsedTime", || elapsed(ms, start, end))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    start: Handle,
    end: Handle,
) -> CUresult {
    cuda("cuEventElapsedTime_v2", || elapsed(ms, start, end))
}
