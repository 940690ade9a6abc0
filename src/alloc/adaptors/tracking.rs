//! `tracking`: every live allocation through an upstream, by address, id and name.
//!
//! Ids count up from 1 in allocation order; a name is optional and need not be unique (a
//! workload may reuse one). Freeing an address it does not know is an error here, before the
//! upstream is asked: a double free or a foreign pointer is caught with a clear message.

use serde::Serialize;

use crate::alloc::ptr_map::PtrMap;
use crate::alloc::{AllocError, AllocStats, Allocator, Block};
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};

use super::forward_to_upstream;

/// One live allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrackedAllocation {
    pub id: u64,
    pub name: Option<String>,
    pub ptr: DevPtr,
    pub requested_bytes: u64,
    pub size_bytes: u64,
    pub stream: StreamId,
    /// Device time of the allocation.
    pub allocated_at_ns: u64,
}

pub struct TrackingAdaptor {
    upstream: Box<dyn Allocator>,
    live: PtrMap<TrackedAllocation>,
    next_id: u64,
}

impl TrackingAdaptor {
    pub fn new(upstream: Box<dyn Allocator>) -> TrackingAdaptor {
        TrackingAdaptor {
            upstream,
            live: PtrMap::default(),
            next_id: 1,
        }
    }

    /// Allocates and names the allocation.
    pub fn allocate_named(
        &mut self,
        dev: &mut dyn Device,
        bytes: u64,
        stream: StreamId,
        name: &str,
    ) -> Result<Block, AllocError> {
        let b = self.allocate(dev, bytes, stream)?;
        self.set_name(b.ptr, name)?;
        Ok(b)
    }

    /// Names (or renames) a live allocation.
    pub fn set_name(&mut self, ptr: DevPtr, name: &str) -> Result<(), AllocError> {
        let t = self.live.get_mut(&ptr).ok_or_else(|| {
            AllocError::Invalid(format!("cannot name {ptr:#x}: it is not a live allocation"))
        })?;
        t.name = Some(name.to_string());
        Ok(())
    }

    pub fn get(&self, ptr: DevPtr) -> Option<&TrackedAllocation> {
        self.live.get(&ptr)
    }

    /// The oldest live allocation with this name.
    pub fn find(&self, name: &str) -> Option<&TrackedAllocation> {
        self.live
            .values()
            .filter(|t| t.name.as_deref() == Some(name))
            .min_by_key(|t| t.id)
    }

    /// Live allocations, oldest first.
    pub fn live(&self) -> Vec<&TrackedAllocation> {
        let mut v: Vec<_> = self.live.values().collect();
        v.sort_by_key(|t| t.id);
        v
    }

    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// Sum of live allocations as the upstream accounts them.
    pub fn live_bytes(&self) -> u64 {
        self.live.values().map(|t| t.size_bytes).sum()
    }

    pub fn upstream(&self) -> &dyn Allocator {
        self.upstream.as_ref()
    }

    pub fn upstream_mut(&mut self) -> &mut dyn Allocator {
        self.upstream.as_mut()
    }

    pub fn into_upstream(self) -> Box<dyn Allocator> {
        self.upstream
    }
}

impl Allocator for TrackingAdaptor {
    forward_to_upstream!();

    fn allocate(
        &mut self,
        dev: &mut dyn Device,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        let b = self.upstream.allocate(dev, bytes, stream)?;
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(
            b.ptr,
            TrackedAllocation {
                id,
                name: None,
                ptr: b.ptr,
                requested_bytes: b.requested_bytes,
                size_bytes: b.size_bytes,
                stream: b.stream,
                allocated_at_ns: dev.now_ns(),
            },
        );
        Ok(b)
    }

    fn free(&mut self, dev: &mut dyn Device, ptr: DevPtr) -> Result<(), AllocError> {
        if !self.live.contains_key(&ptr) {
            return Err(AllocError::Invalid(format!(
                "free of {ptr:#x}, which is not a live allocation (freed twice, or never allocated here)"
            )));
        }
        self.upstream.free(dev, ptr)?;
        self.live.remove(&ptr);
        Ok(())
    }

    fn empty_cache(&mut self, dev: &mut dyn Device) -> Result<u64, AllocError> {
        self.upstream.empty_cache(dev)
    }

    fn stats(&self) -> AllocStats {
        self.upstream.stats()
    }

    fn release_all(&mut self, dev: &mut dyn Device) -> Result<(), AllocError> {
        let live: Vec<DevPtr> = self.live.keys().copied().collect();
        let mut errors = super::release_through(self, dev, live);
        self.live.clear();
        if let Err(e) = self.upstream.release_all(dev) {
            errors.push(e);
        }
        errors.into_iter().next().map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::direct::DirectAllocator;
    use crate::device::profile::SimProfile;
    use crate::device::sim::SimDevice;

    #[test]
    fn names_ids_and_double_frees() {
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let mut a = TrackingAdaptor::new(Box::new(DirectAllocator::default()));
        let s = StreamId::MAIN;
        let w = a.allocate_named(&mut d, 4096, s, "weights").unwrap();
        let x = a.allocate(&mut d, 100, s).unwrap();
        assert_eq!(a.find("weights").map(|t| (t.id, t.ptr)), Some((1, w.ptr)));
        assert_eq!(
            a.live().iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(a.live_bytes(), 4196);
        a.free(&mut d, x.ptr).unwrap();
        let e = a.free(&mut d, x.ptr).unwrap_err();
        assert!(e.to_string().contains("freed twice"), "{e}");
        assert!(a.set_name(x.ptr, "gone").is_err());
        a.release_all(&mut d).unwrap();
        assert_eq!(a.live_count(), 0);
    }
}
