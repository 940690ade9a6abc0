//! `statistics`: counts bytes and allocations through an upstream, with nested scopes.
//!
//! Each counter has a value, a peak and a total (RMM's `statistics_resource_adaptor`).
//! `push_scope` starts a fresh set of counters (a phase); `pop_scope` folds it into its parent
//! by RMM's rule `parent.peak = max(parent.peak, parent.value + child.peak)`, so each scope has
//! its own peak and the outer peak stays exact. A scope's value can go negative when it frees
//! what an outer scope allocated.

use serde::Serialize;

use crate::alloc::ptr_map::PtrMap;
use crate::alloc::{AllocError, AllocStats, Allocator, Block};
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};

use super::forward_to_upstream;

/// Value, peak and total of one quantity within one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counter {
    /// Allocated minus freed within the scope.
    pub value: i64,
    /// Highest value within the scope (inner scopes folded in when they end).
    pub peak: i64,
    /// Sum of everything allocated within the scope.
    pub total: u64,
}

impl Counter {
    fn add(&mut self, n: u64) {
        self.value += n as i64;
        self.peak = self.peak.max(self.value);
        self.total += n;
    }

    fn sub(&mut self, n: u64) {
        self.value -= n as i64;
    }

    /// RMM's `counter::operator+=`: a finished inner scope folded into this one.
    fn fold(&mut self, child: &Counter) {
        self.peak = self.peak.max(self.value + child.peak);
        self.value += child.value;
        self.total += child.total;
    }
}

/// The counters of one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Bytes as the upstream accounts them (`Block::size_bytes`, after its rounding).
    pub bytes: Counter,
    /// Bytes the callers asked for.
    pub requested_bytes: Counter,
    pub allocations: Counter,
}

impl Counters {
    fn fold(&mut self, child: &Counters) {
        self.bytes.fold(&child.bytes);
        self.requested_bytes.fold(&child.requested_bytes);
        self.allocations.fold(&child.allocations);
    }
}

pub struct StatisticsAdaptor {
    upstream: Box<dyn Allocator>,
    /// Outermost scope first; never empty.
    scopes: Vec<Counters>,
    /// Live blocks: address → (size, requested).
    live: PtrMap<(u64, u64)>,
}

impl StatisticsAdaptor {
    pub fn new(upstream: Box<dyn Allocator>) -> StatisticsAdaptor {
        StatisticsAdaptor {
            upstream,
            scopes: vec![Counters::default()],
            live: PtrMap::default(),
        }
    }

    /// The counters of the innermost scope.
    pub fn counters(&self) -> Counters {
        *self
            .scopes
            .last()
            .expect("the outermost scope is never popped")
    }

    /// Starts an inner scope with zeroed counters (RMM's `push_counters`).
    pub fn push_scope(&mut self) {
        self.scopes.push(Counters::default());
    }

    /// Ends the innermost scope, folds it into its parent and returns it (RMM's
    /// `pop_counters`). `None` if only the outermost scope is left, which cannot end.
    pub fn pop_scope(&mut self) -> Option<Counters> {
        if self.scopes.len() == 1 {
            return None;
        }
        let child = self.scopes.pop()?;
        self.scopes.last_mut()?.fold(&child);
        Some(child)
    }

    /// Scopes open, the outermost included.
    pub fn depth(&self) -> usize {
        self.scopes.len()
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

    fn top(&mut self) -> &mut Counters {
        self.scopes
            .last_mut()
            .expect("the outermost scope is never popped")
    }
}

impl Allocator for StatisticsAdaptor {
    forward_to_upstream!();

    fn allocate(
        &mut self,
        dev: &mut dyn Device,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        let b = self.upstream.allocate(dev, bytes, stream)?;
        self.live.insert(b.ptr, (b.size_bytes, b.requested_bytes));
        let top = self.top();
        top.bytes.add(b.size_bytes);
        top.requested_bytes.add(b.requested_bytes);
        top.allocations.add(1);
        Ok(b)
    }

    fn free(&mut self, dev: &mut dyn Device, ptr: DevPtr) -> Result<(), AllocError> {
        self.upstream.free(dev, ptr)?;
        if let Some((size, requested)) = self.live.remove(&ptr) {
            let top = self.top();
            top.bytes.sub(size);
            top.requested_bytes.sub(requested);
            top.allocations.sub(1);
        }
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

    const MIB: u64 = 1 << 20;

    #[test]
    fn nested_scopes_keep_their_own_peaks() {
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let mut a = StatisticsAdaptor::new(Box::new(DirectAllocator::default()));
        let s = StreamId::MAIN;
        let base = a.allocate(&mut d, 10 * MIB, s).unwrap();
        a.push_scope();
        let x = a.allocate(&mut d, 30 * MIB, s).unwrap();
        a.free(&mut d, x.ptr).unwrap();
        a.free(&mut d, base.ptr).unwrap();
        a.allocate(&mut d, 5 * MIB, s).unwrap();
        let phase = a.counters();
        assert_eq!(
            (phase.bytes.value, phase.bytes.peak, phase.bytes.total),
            (-5 * MIB as i64, 30 * MIB as i64, 35 * MIB)
        );
        let popped = a.pop_scope().unwrap();
        assert_eq!(popped, phase);
        let outer = a.counters();
        // Outer peak: max(10, 10 + 30) = 40 MiB; value 10 − 5 = 5 MiB.
        assert_eq!(
            (outer.bytes.value, outer.bytes.peak, outer.bytes.total),
            (5 * MIB as i64, 40 * MIB as i64, 45 * MIB)
        );
        assert_eq!((outer.allocations.value, outer.allocations.total), (1, 3));
        assert!(a.pop_scope().is_none(), "the outermost scope stays");
        assert_eq!(a.kind(), crate::alloc::AllocatorKind::Direct);
    }
}
