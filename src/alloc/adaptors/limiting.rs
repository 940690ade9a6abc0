//! `limiting`: a cap on the bytes allocated through an upstream (a per-process budget such as
//! a memory fraction). A request that would pass the cap is refused before the upstream is
//! asked, as an out-of-memory whose evidence names the limit and what was in use.
//!
//! The cap counts allocated bytes as the upstream accounts them (after its rounding), as
//! RMM's `limiting_resource_adaptor` does. PyTorch's `set_per_process_memory_fraction` caps
//! the caching allocator's reserved memory instead: that is the caching allocator's own
//! `per_process_memory_fraction` setting.

use crate::alloc::ptr_map::PtrMap;
use crate::alloc::{AllocError, AllocStats, Allocator, Block, OomRequest, RetryStep};
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};

use super::forward_to_upstream;

pub struct LimitingAdaptor {
    upstream: Box<dyn Allocator>,
    limit_bytes: u64,
    used_bytes: u64,
    live: PtrMap<u64>,
    refusals: u64,
}

impl LimitingAdaptor {
    pub fn new(upstream: Box<dyn Allocator>, limit_bytes: u64) -> LimitingAdaptor {
        LimitingAdaptor {
            upstream,
            limit_bytes,
            used_bytes: 0,
            live: PtrMap::default(),
            refusals: 0,
        }
    }

    /// A cap of `fraction` of the device's total memory; `fraction` in (0, 1].
    pub fn with_fraction(
        upstream: Box<dyn Allocator>,
        fraction: f64,
        dev: &dyn Device,
    ) -> Result<LimitingAdaptor, AllocError> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(AllocError::Invalid(format!(
                "memory fraction {fraction} must lie in (0, 1]"
            )));
        }
        let limit = (fraction * dev.info().total_bytes as f64) as u64;
        Ok(LimitingAdaptor::new(upstream, limit))
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Bytes allocated through the adaptor and not yet freed.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Requests refused by the cap.
    pub fn refusals(&self) -> u64 {
        self.refusals
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

impl Allocator for LimitingAdaptor {
    forward_to_upstream!();

    fn allocate(
        &mut self,
        dev: &mut dyn Device,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        let rounded = self.upstream.rounded_size(bytes);
        if self.used_bytes.saturating_add(rounded) > self.limit_bytes {
            self.refusals += 1;
            return Err(AllocError::OutOfMemory(Box::new(OomRequest {
                requested_bytes: bytes,
                rounded_bytes: rounded,
                driver_request_bytes: 0,
                pool: "limit".into(),
                stream,
                retries: vec![RetryStep::said(format!(
                    "refused by the limiting adaptor: {} bytes in use + {rounded} would pass the limit of {} bytes",
                    self.used_bytes, self.limit_bytes
                ))],
            })));
        }
        let b = self.upstream.allocate(dev, bytes, stream)?;
        self.used_bytes += b.size_bytes;
        self.live.insert(b.ptr, b.size_bytes);
        Ok(b)
    }

    fn free(&mut self, dev: &mut dyn Device, ptr: DevPtr) -> Result<(), AllocError> {
        self.upstream.free(dev, ptr)?;
        if let Some(size) = self.live.remove(&ptr) {
            self.used_bytes -= size;
        }
        Ok(())
    }

    fn empty_cache(&mut self, dev: &mut dyn Device) -> Result<u64, AllocError> {
        self.upstream.empty_cache(dev)
    }

    /// The upstream's counters, with the cap's refusals added to `num_ooms`.
    fn stats(&self) -> AllocStats {
        let mut s = self.upstream.stats();
        s.num_ooms += self.refusals;
        s
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
    use crate::alloc::caching::{CachingAllocator, CachingConfig};
    use crate::device::profile::SimProfile;
    use crate::device::sim::SimDevice;

    const MIB: u64 = 1 << 20;

    #[test]
    fn refuses_past_the_cap_with_evidence() {
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let inner = CachingAllocator::new(CachingConfig::default(), &mut d).unwrap();
        let mut a = LimitingAdaptor::with_fraction(Box::new(inner), 0.25, &d).unwrap();
        assert_eq!(a.limit_bytes(), 1024 * MIB);
        let s = StreamId::MAIN;
        let x = a.allocate(&mut d, 1000 * MIB, s).unwrap();
        let e = a.allocate(&mut d, 30 * MIB, s).unwrap_err();
        let AllocError::OutOfMemory(oom) = e else {
            panic!("expected an OOM")
        };
        assert_eq!(
            (oom.requested_bytes, oom.rounded_bytes, oom.pool.as_str()),
            (30 * MIB, 30 * MIB, "limit")
        );
        assert!(
            oom.retries[0].text.contains("1048576000 bytes in use"),
            "{:?}",
            oom.retries
        );
        assert_eq!((a.stats().num_ooms, a.refusals()), (1, 1));
        a.free(&mut d, x.ptr).unwrap();
        a.allocate(&mut d, 30 * MIB, s).unwrap();
        assert_eq!(a.used_bytes(), 30 * MIB);
        assert!(LimitingAdaptor::with_fraction(a.into_upstream(), 1.5, &d).is_err());
    }
}
