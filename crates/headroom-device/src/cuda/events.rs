//! CUDA events for stream-ordered bookkeeping (`cuEventRecord` / `cuEventQuery`).
//!
//! Events are created without timing (cheaper, as PyTorch's allocator does) and pooled:
//! a destroyed id returns its event to an idle list instead of `cuEventDestroy`, because
//! creating events is expensive on some drivers. Every event is destroyed on drop.

use std::collections::HashMap;

use cudarc::driver::result;
use cudarc::driver::sys;

use super::driver_err;
use crate::{DevResult, DeviceError, EventId};

/// A raw event handle that may move between threads with the device that owns it.
#[derive(Debug, Clone, Copy)]
struct Event(sys::CUevent);
// SAFETY: a CUevent is an opaque driver handle usable from any thread with the context current.
unsafe impl Send for Event {}

#[derive(Debug, Default)]
pub struct CudaEvents {
    live: HashMap<u64, Event>,
    idle: Vec<Event>,
    next_id: u64,
}

impl CudaEvents {
    fn get(&self, event: EventId) -> DevResult<sys::CUevent> {
        self.live
            .get(&event.0)
            .map(|e| e.0)
            .ok_or_else(|| DeviceError::Invalid(format!("unknown event {}", event.0)))
    }

    /// Records a (pooled) event on `stream`. The context must be current.
    pub fn record(&mut self, stream: sys::CUstream) -> DevResult<EventId> {
        let ev = match self.idle.pop() {
            Some(e) => e,
            None => Event(
                result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                    .map_err(|e| driver_err("cuEventCreate", 0, e))?,
            ),
        };
        // SAFETY: `ev` is a live event and `stream` a live stream of the current context.
        if let Err(e) = unsafe { result::event::record(ev.0, stream) } {
            self.idle.push(ev);
            return Err(driver_err("cuEventRecord", 0, e));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(id, ev);
        Ok(EventId(id))
    }

    pub fn query(&self, event: EventId) -> DevResult<bool> {
        let ev = self.get(event)?;
        // SAFETY: `ev` is a live event of this device (looked up above).
        match unsafe { result::event::query(ev) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(driver_err("cuEventQuery", 0, e)),
        }
    }

    pub fn synchronize(&self, event: EventId) -> DevResult<()> {
        let ev = self.get(event)?;
        // SAFETY: `ev` is a live event of this device (looked up above).
        unsafe { result::event::synchronize(ev) }
            .map_err(|e| driver_err("cuEventSynchronize", 0, e))
    }

    pub fn destroy(&mut self, event: EventId) -> DevResult<()> {
        let ev = self
            .live
            .remove(&event.0)
            .ok_or_else(|| DeviceError::Invalid(format!("unknown event {}", event.0)))?;
        self.idle.push(ev);
        Ok(())
    }

    /// Destroys every event (the context must be current); returns the first error.
    pub fn destroy_all(&mut self) -> DevResult<()> {
        let mut first = None;
        for Event(ev) in self.live.drain().map(|(_, e)| e).chain(self.idle.drain(..)) {
            // SAFETY: each event was created by this pool and is destroyed exactly once here.
            if let Err(e) = unsafe { result::event::destroy(ev) } {
                first.get_or_insert(driver_err("cuEventDestroy", 0, e));
            }
        }
        first.map_or(Ok(()), Err)
    }
}
