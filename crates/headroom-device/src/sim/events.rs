//! Simulated CUDA events: each remembers when its stream's queued work finishes.
//!
//! `cuEventRecord` captures the work queued on a stream so far; the event completes when the
//! stream gets there. On the simulator that is a virtual time: the stream's queued-work time
//! at the moment of recording. A query compares it with the host clock; a synchronize moves
//! the host clock forward to it.

use crate::{DevResult, DeviceError, EventId, StreamId};

use super::SimDevice;

/// Live events by id. Ids of destroyed events are reused, as the driver reuses handles.
#[derive(Debug, Clone, Default)]
pub struct SimEvents {
    /// Completion time per slot; `None` for a free slot.
    slots: Vec<Option<u64>>,
    free_slots: Vec<usize>,
}

impl SimEvents {
    /// Records an event that completes at virtual time `completes_at_ns`.
    pub fn record(&mut self, completes_at_ns: u64) -> EventId {
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = Some(completes_at_ns);
                i
            }
            None => {
                self.slots.push(Some(completes_at_ns));
                self.slots.len() - 1
            }
        };
        EventId(slot as u64)
    }

    /// When the event completes.
    pub fn completes_at(&self, event: EventId) -> DevResult<u64> {
        usize::try_from(event.0)
            .ok()
            .and_then(|i| self.slots.get(i).copied().flatten())
            .ok_or_else(|| DeviceError::Invalid(format!("unknown event {}", event.0)))
    }

    pub fn destroy(&mut self, event: EventId) -> DevResult<()> {
        self.completes_at(event)?;
        let i = event.0 as usize;
        self.slots[i] = None;
        self.free_slots.push(i);
        Ok(())
    }

    /// Events not yet destroyed.
    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    pub fn clear(&mut self) {
        self.slots.clear();
        self.free_slots.clear();
    }
}

/// The device calls, kept here so the simulator's `mod.rs` only forwards to them.
impl SimDevice {
    pub(super) fn sim_record_event(&mut self, stream: StreamId) -> DevResult<EventId> {
        let i = self.stream_index(stream)?;
        // Recording is a host-side enqueue, like a launch.
        self.advance(self.profile.latency.launch.0);
        Ok(self.events.record(self.streams[i]))
    }

    pub(super) fn sim_event_query(&mut self, event: EventId) -> DevResult<bool> {
        Ok(self.events.completes_at(event)? <= self.host_ns)
    }

    pub(super) fn sim_event_synchronize(&mut self, event: EventId) -> DevResult<()> {
        let t = self.events.completes_at(event)?;
        self.host_ns = self
            .host_ns
            .max(t)
            .saturating_add(self.profile.latency.synchronize.0);
        Ok(())
    }

    pub(super) fn sim_event_destroy(&mut self, event: EventId) -> DevResult<()> {
        self.events.destroy(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_reused_after_destroy_and_unknown_ids_are_errors() {
        let mut e = SimEvents::default();
        let a = e.record(10);
        let b = e.record(20);
        assert_ne!(a, b);
        assert_eq!(e.completes_at(b).unwrap(), 20);
        e.destroy(a).unwrap();
        assert!(e.completes_at(a).is_err());
        assert!(e.destroy(a).is_err());
        let c = e.record(30);
        assert_eq!(c, a);
        assert_eq!(e.live(), 2);
        assert!(e.completes_at(EventId(99)).is_err());
    }

    #[test]
    fn an_event_completes_when_the_host_reaches_its_stream() {
        use crate::Kernel;
        use crate::prelude::*;
        use crate::profile::SimProfile;
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let s = d.create_stream().unwrap();
        let idle = d.record_event(s).unwrap();
        assert!(
            d.event_query(idle).unwrap(),
            "nothing queued: complete at once"
        );
        d.launch(
            Kernel::Spin {
                duration_ns: 1_000_000,
            },
            s,
        )
        .unwrap();
        let busy = d.record_event(s).unwrap();
        assert!(!d.event_query(busy).unwrap());
        d.sleep(500_000);
        assert!(!d.event_query(busy).unwrap());
        d.event_synchronize(busy).unwrap();
        assert!(d.event_query(busy).unwrap());
        d.event_destroy(busy).unwrap();
        assert!(d.event_query(busy).is_err());
        assert!(d.record_event(StreamId(9)).is_err());
    }
}
