//! A device for replaying a recorded trace: every call goes to the real device underneath,
//! except two things the trace, not the device, decides.
//!
//! - **Segment decisions are written down.** Each `cuMemAlloc`, `cuMemFree`, page map and
//!   unmap the replayed allocator makes is noted, so fidelity can compare them with the ones
//!   the recording allocator made for the same request.
//! - **Pending frees complete when the trace says.** A block freed while other streams still
//!   used it (`record_stream`) waits on events. The trace records when each such free
//!   completed; the replay marks the block's events as done at that point, and a synchronize
//!   (the allocator's retry chain, `empty_cache`) completes them at once, as on a GPU.
//!   Events on other streams are the device's own.
//!
//! It is what the allocators and replay's engine are driven through (`AllocDevice`): the core,
//! memory, streams and virtual memory, and the pool of the device underneath lent as it is.
//! Kernels and graphs are not among them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::prelude::*;
use crate::device::{DevPtr, DevResult, DeviceError, DeviceInfo, EventId, MemInfo, StreamId};

use super::fidelity::{SegmentOp, SegmentOpKind};
use super::placement::Placement;

/// Deferred frees record their events on streams that exist only in this wrapper: one lane
/// per free outstanding at a time, `StreamId(u32::MAX - lane)`. PyTorch queues events per
/// stream and a stream's work completes in order, so no free ever waits behind another's;
/// one lane each keeps it so here.
const LANES: u32 = 1 << 20;

/// Whether a stream is one of the deferred-free lanes.
fn is_lane(s: StreamId) -> bool {
    s.0 > u32::MAX - LANES
}
/// Event ids this wrapper hands out start here (the device's own are small).
const OWN_EVENTS: u64 = 1 << 62;

#[derive(Debug, Default)]
pub(super) struct TraceState {
    /// Segment decisions since the last `take_ops`.
    ops: Vec<SegmentOp>,
    /// Sizes of live `cuMemAlloc` segments, for the decision a `cuMemFree` is.
    sizes: HashMap<DevPtr, u64>,
    /// The token the next event on a lane belongs to.
    armed: Option<u64>,
    /// Own event → its token and lane.
    events: HashMap<u64, (u64, u32)>,
    next_event: u64,
    /// Events outstanding per lane, and lanes free for the next deferred free.
    lane_events: HashMap<u32, u32>,
    free_lanes: Vec<u32>,
    next_lane: u32,
    /// Tokens whose frees the trace has completed.
    completed: HashSet<u64>,
    /// Segments at the trace's addresses.
    pub placement: Placement,
}

impl TraceState {
    /// The next deferred free's events belong to `token` (the trace's address of the block);
    /// returns the lane (stream) to record them on.
    pub fn arm(&mut self, token: u64) -> StreamId {
        self.completed.remove(&token);
        self.armed = Some(token);
        let lane = self.free_lanes.pop().unwrap_or_else(|| {
            self.next_lane += 1;
            self.next_lane
        });
        self.lane_events.entry(lane).or_insert(0);
        StreamId(u32::MAX - (lane - 1))
    }

    /// A lane that got no event (the allocator ignored the stream use) is free again.
    fn release_idle_lane(&mut self, lane: u32) {
        if self.lane_events.get(&lane) == Some(&0) {
            self.lane_events.remove(&lane);
            self.free_lanes.push(lane);
        }
    }

    pub fn disarm(&mut self, lane: StreamId) {
        self.armed = None;
        self.release_idle_lane(u32::MAX - lane.0 + 1);
    }

    /// The trace says the free held back under `token` has completed.
    pub fn complete(&mut self, token: u64) {
        self.completed.insert(token);
    }

    /// Every deferred free completes (the program is over).
    pub fn complete_all(&mut self) {
        let tokens: Vec<u64> = self.events.values().map(|(t, _)| *t).collect();
        self.completed.extend(tokens);
    }

    /// The decisions made since the last call.
    pub fn take_ops(&mut self, out: &mut Vec<SegmentOp>) {
        out.clear();
        out.append(&mut self.ops);
    }
}

/// Shared between the wrapper (inside the replay) and the code driving it.
pub(super) type Shared = Arc<Mutex<TraceState>>;

pub(super) fn lock(s: &Shared) -> MutexGuard<'_, TraceState> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) struct TraceDevice<'a> {
    inner: &'a mut dyn AllocDevice,
    state: Shared,
}

impl<'a> TraceDevice<'a> {
    pub fn new(inner: &'a mut dyn AllocDevice) -> (TraceDevice<'a>, Shared) {
        let state = Shared::default();
        lock(&state).next_event = OWN_EVENTS;
        (
            TraceDevice {
                inner,
                state: state.clone(),
            },
            state,
        )
    }

    fn note(&self, kind: SegmentOpKind, ptr: DevPtr, bytes: u64) {
        lock(&self.state).ops.push(SegmentOp { kind, ptr, bytes });
    }
}

impl DeviceCore for TraceDevice<'_> {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }

    fn mem_info(&mut self) -> DevResult<MemInfo> {
        self.inner.mem_info()
    }

    fn sleep(&mut self, duration_ns: u64) {
        self.inner.sleep(duration_ns)
    }
}

impl Memory for TraceDevice<'_> {
    fn malloc(&mut self, bytes: u64) -> DevResult<DevPtr> {
        let inner = self.inner.malloc(bytes)?;
        let ptr = {
            let mut s = lock(&self.state);
            let ptr = s.placement.place(SegmentOpKind::SegmentAlloc, bytes, inner);
            s.sizes.insert(ptr, bytes);
            ptr
        };
        self.note(SegmentOpKind::SegmentAlloc, ptr, bytes);
        Ok(ptr)
    }

    fn free(&mut self, ptr: DevPtr) -> DevResult<()> {
        let inner = lock(&self.state).placement.inner(ptr);
        self.inner.free(inner)?;
        let bytes = {
            let mut s = lock(&self.state);
            s.placement.remove(ptr);
            s.sizes.remove(&ptr).unwrap_or(0)
        };
        self.note(SegmentOpKind::SegmentFree, ptr, bytes);
        Ok(())
    }
}

impl Streams for TraceDevice<'_> {
    fn create_stream(&mut self) -> DevResult<StreamId> {
        self.inner.create_stream()
    }

    fn stream_synchronize(&mut self, stream: StreamId) -> DevResult<()> {
        if is_lane(stream) {
            return Ok(());
        }
        self.inner.stream_synchronize(stream)
    }

    fn synchronize(&mut self) -> DevResult<()> {
        // Every stream finishes: deferred frees included.
        {
            let mut s = lock(&self.state);
            let tokens: Vec<u64> = s.events.values().map(|(t, _)| *t).collect();
            s.completed.extend(tokens);
        }
        self.inner.synchronize()
    }

    fn record_event(&mut self, stream: StreamId) -> DevResult<EventId> {
        if !is_lane(stream) {
            return self.inner.record_event(stream);
        }
        let mut s = lock(&self.state);
        let token = s.armed.ok_or_else(|| {
            DeviceError::Invalid("an event on a deferred-free lane outside a deferred free".into())
        })?;
        let lane = u32::MAX - stream.0 + 1;
        let id = s.next_event;
        s.next_event += 1;
        s.events.insert(id, (token, lane));
        *s.lane_events.entry(lane).or_insert(0) += 1;
        Ok(EventId(id))
    }

    fn event_query(&mut self, event: EventId) -> DevResult<bool> {
        if event.0 < OWN_EVENTS {
            return self.inner.event_query(event);
        }
        let s = lock(&self.state);
        let (token, _) = s
            .events
            .get(&event.0)
            .ok_or_else(|| DeviceError::Invalid(format!("unknown event {}", event.0)))?;
        Ok(s.completed.contains(token))
    }

    fn event_synchronize(&mut self, event: EventId) -> DevResult<()> {
        if event.0 < OWN_EVENTS {
            return self.inner.event_synchronize(event);
        }
        let mut s = lock(&self.state);
        let (token, _) = *s
            .events
            .get(&event.0)
            .ok_or_else(|| DeviceError::Invalid(format!("unknown event {}", event.0)))?;
        s.completed.insert(token);
        Ok(())
    }

    fn event_destroy(&mut self, event: EventId) -> DevResult<()> {
        if event.0 < OWN_EVENTS {
            return self.inner.event_destroy(event);
        }
        let mut s = lock(&self.state);
        let (_, lane) = s
            .events
            .remove(&event.0)
            .ok_or_else(|| DeviceError::Invalid(format!("unknown event {}", event.0)))?;
        if let Some(n) = s.lane_events.get_mut(&lane) {
            *n -= 1;
        }
        s.release_idle_lane(lane);
        Ok(())
    }
}

impl VirtualMemory for TraceDevice<'_> {
    fn vmm_granularity(&mut self) -> DevResult<u64> {
        self.inner.vmm_granularity()
    }

    fn vmm_reserve(&mut self, bytes: u64) -> DevResult<DevPtr> {
        let inner = self.inner.vmm_reserve(bytes)?;
        Ok(lock(&self.state)
            .placement
            .place(SegmentOpKind::Map, bytes, inner))
    }

    fn vmm_map(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        let inner = lock(&self.state).placement.inner(ptr);
        self.inner.vmm_map(inner, bytes)?;
        self.note(SegmentOpKind::Map, ptr, bytes);
        Ok(())
    }

    fn vmm_unmap(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        let inner = lock(&self.state).placement.inner(ptr);
        self.inner.vmm_unmap(inner, bytes)?;
        self.note(SegmentOpKind::Unmap, ptr, bytes);
        Ok(())
    }

    fn vmm_free(&mut self, ptr: DevPtr) -> DevResult<()> {
        let inner = lock(&self.state).placement.remove(ptr);
        self.inner.vmm_free(inner)
    }
}

/// The pool allocator makes no segment decisions and defers no frees: it is lent the pool of
/// the device underneath, untouched.
impl AllocDevice for TraceDevice<'_> {
    fn pool_device(&mut self) -> Option<&mut dyn PoolDevice> {
        self.inner.pool_device()
    }
}
