//! Frees that wait for other streams (`record_stream`): PyTorch's `insert_events`,
//! `process_events` and `synchronize_and_free_events`.
//!
//! When a block used on other streams is freed, an event is recorded on each of them; the
//! block stays active (it counts in `active_bytes`, and no request can reuse it) until all of
//! its events have completed. Events are checked in order per stream, so one slow stream does
//! not hold up the others.

use std::collections::VecDeque;

use crate::alloc::AllocError;
use crate::device::prelude::*;
use crate::device::{EventId, StreamId};

use super::CachingAllocator;
use super::arena::NodeState;

/// Outstanding events per stream, each with the block it holds back.
#[derive(Debug, Default)]
pub(super) struct PendingFrees {
    queues: Vec<(StreamId, VecDeque<(EventId, u32)>)>,
    len: usize,
}

impl PendingFrees {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Outstanding events.
    pub fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, stream: StreamId, event: EventId, block: u32) {
        let q = match self.queues.iter().position(|(s, _)| *s == stream) {
            Some(q) => q,
            None => {
                self.queues.push((stream, VecDeque::new()));
                self.queues.len() - 1
            }
        };
        self.queues[q].1.push_back((event, block));
        self.len += 1;
    }

    fn front(&self, q: usize) -> Option<(EventId, u32)> {
        self.queues[q].1.front().copied()
    }

    fn pop(&mut self, q: usize) {
        if self.queues[q].1.pop_front().is_some() {
            self.len -= 1;
        }
    }

    /// Removes every event of `block`, returning them.
    fn take_block(&mut self, block: u32) -> Vec<EventId> {
        let mut out = Vec::new();
        for (_, q) in &mut self.queues {
            q.retain(|&(e, b)| {
                if b == block {
                    out.push(e);
                }
                b != block
            });
        }
        self.len -= out.len();
        out
    }
}

impl CachingAllocator {
    /// `insert_events`: the block was freed while `stream_uses` is not empty; record an
    /// event on each of those streams and keep the block until they complete.
    ///
    /// If the device cannot record an event (an unknown stream), the device is synchronized,
    /// which makes the block safe to reuse, the block is freed, and the error is returned.
    pub(super) fn insert_events(
        &mut self,
        dev: &mut dyn CachingDevice,
        i: u32,
    ) -> Result<(), AllocError> {
        let uses = self.arena.take_uses(i);
        self.arena[i].state = NodeState::Pending;
        let mut failure = None;
        for &s in &uses {
            match dev.record_event(s) {
                Ok(e) => {
                    self.arena[i].event_count += 1;
                    self.pending.push(s, e, i);
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        self.arena.restore_uses(i, uses);
        let Some(e) = failure else { return Ok(()) };
        let _ = dev.synchronize();
        for ev in self.pending.take_block(i) {
            let _ = dev.event_destroy(ev);
        }
        self.arena[i].event_count = 0;
        self.free_block(i);
        Err(AllocError::Device(e))
    }

    /// One of a pending block's events completed.
    fn event_done(&mut self, i: u32) {
        let n = &mut self.arena[i];
        n.event_count -= 1;
        if n.event_count == 0 {
            self.free_block(i);
        }
    }

    /// `process_events`: frees whose events have completed rejoin the cache.
    pub(super) fn process_events(&mut self, dev: &mut dyn CachingDevice) -> Result<(), AllocError> {
        for q in 0..self.pending.queues.len() {
            while let Some((ev, i)) = self.pending.front(q) {
                if !dev.event_query(ev).map_err(AllocError::Device)? {
                    break;
                }
                self.pending.pop(q);
                dev.event_destroy(ev).map_err(AllocError::Device)?;
                self.event_done(i);
            }
        }
        Ok(())
    }

    /// `synchronize_and_free_events`: wait for every outstanding event and complete every
    /// pending free. Returns how many events there were.
    pub(super) fn synchronize_and_free_events(
        &mut self,
        dev: &mut dyn CachingDevice,
    ) -> Result<u64, AllocError> {
        self.stats.num_sync_all_streams += 1;
        let mut waited = 0;
        for q in 0..self.pending.queues.len() {
            while let Some((ev, i)) = self.pending.front(q) {
                dev.event_synchronize(ev).map_err(AllocError::Device)?;
                self.pending.pop(q);
                dev.event_destroy(ev).map_err(AllocError::Device)?;
                self.event_done(i);
                waited += 1;
            }
        }
        Ok(waited)
    }
}

#[cfg(test)]
mod tests {
    use crate::alloc::AllocatorSpec;
    use crate::alloc::caching::CachingConfig;
    use crate::device::prelude::*;
    use crate::device::profile::SimProfile;
    use crate::device::sim::SimDevice;
    use crate::device::{Kernel, StreamId};

    const MIB: u64 = 1 << 20;

    /// After `record_stream` and a free, a synchronize (the streams done) changes nothing the
    /// allocator reports: the block stays active until the next allocation or `empty_cache`
    /// processes its events, as in PyTorch.
    #[test]
    fn a_pending_free_stays_active_through_a_synchronize_until_malloc_or_empty_cache() {
        for completes_in in ["malloc", "empty_cache"] {
            let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
            let spec = AllocatorSpec::Caching(CachingConfig::default());
            let mut a = spec.build(&mut d).unwrap();
            let s1 = d.create_stream().unwrap();
            let x = a.allocate(&mut d, 12 * MIB, StreamId::MAIN).unwrap();
            a.record_stream(&mut d, x.ptr, s1).unwrap();
            d.launch(
                Kernel::Spin {
                    duration_ns: 1_000_000,
                },
                s1,
            )
            .unwrap();
            a.free(&mut d, x.ptr).unwrap();
            d.synchronize().unwrap();
            a.refresh(&mut d).unwrap();
            let s = a.stats();
            assert_eq!(
                (s.allocated_bytes, s.active_bytes, s.reserved_bytes),
                (0, 12 * MIB, 12 * MIB),
                "still active after the synchronize"
            );
            match completes_in {
                "malloc" => {
                    let y = a.allocate(&mut d, 12 * MIB, StreamId::MAIN).unwrap();
                    assert_eq!(y.ptr, x.ptr, "the completed free is reused");
                    assert_eq!(a.stats().active_bytes, 12 * MIB);
                }
                _ => {
                    assert_eq!(a.empty_cache(&mut d).unwrap(), 12 * MIB);
                    assert_eq!(a.stats().active_bytes, 0);
                }
            }
        }
    }
}
