//! `caching`: a model of PyTorch's native CUDA caching allocator
//! (c10/cuda/CUDACachingAllocator.cpp, `DeviceCachingAllocator`), run against any `Device`.
//!
//! Memory comes from the driver in segments (`cudaMalloc`, or pages of an expandable segment)
//! and is cut into blocks that stay cached after a free: a later request on the same stream
//! reuses the best-fitting cached block, splitting it when the rules allow. When nothing
//! fits, the allocator asks the driver, and when the driver refuses it releases cached
//! segments and retries before reporting out of memory. That is why `alloc_reserved` can sit
//! far above `alloc_allocated`, and why a request can fail while the device looks free.
//!
//! The files follow PyTorch's functions: `malloc.rs` (`malloc`, `get_free_block`,
//! `alloc_found_block`, the retry chain), `release.rs` (`free_block`, the release functions,
//! garbage collection), `events.rs` (frees pending on other streams), `expandable.rs`
//! (expandable segments), `snapshot.rs` (`snapshot` and a consistency check), `sizes.rs`
//! and `config.rs` (rounding and settings), `stats.rs` (`memory_stats`).

mod arena;
mod config;
mod events;
mod expandable;
mod free_index;
mod live;
mod malloc;
mod release;
mod sizes;
mod snapshot;
mod stats;
#[cfg(test)]
mod tests;

pub use config::{CachingConfig, ConfigError};
pub use sizes::{
    LARGE_BUFFER_BYTES, MIN_BLOCK_BYTES, MIN_LARGE_ALLOC_BYTES, PoolKind, SMALL_BUFFER_BYTES,
    SMALL_SIZE_BYTES, allocation_size,
};
pub use snapshot::{BlockSnapshot, BlockState, SegmentSnapshot};
pub use stats::{MemoryStats, Stat, StatArray};

use crate::alloc::{AllocError, AllocStats, Allocator, Block};
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};

use arena::{Arena, StreamSlots};
use events::PendingFrees;
use expandable::ExpandableSegment;
use live::LiveTable;

/// The caching allocator. Build it with `CachingAllocator::new` (or `AllocatorSpec::Caching`).
pub struct CachingAllocator {
    config: CachingConfig,
    /// `max_split_size` in bytes (`u64::MAX`: unlimited).
    max_split_bytes: u64,
    max_non_split_rounding_bytes: u64,
    /// `allowed_memory_maximum` when a memory fraction is set.
    allowed_bytes: Option<u64>,
    arena: Arena,
    streams: StreamSlots,
    /// Live allocations by address (PyTorch's `allocated_blocks`).
    allocated: LiveTable,
    pending: PendingFrees,
    /// Expandable segments by index; `None` once released.
    segments: Vec<Option<ExpandableSegment>>,
    stats: MemoryStats,
    /// Bytes held from the driver (PyTorch's `total_allocated_memory`).
    held_bytes: u64,
    /// Free-block searches per pool while garbage collection is on (`get_free_blocks_call_count`).
    gc_searches: [u64; 2],
    device_total_bytes: u64,
}

impl CachingAllocator {
    /// A caching allocator with `config` for `dev`. Checks the settings, and for expandable
    /// segments that the device's VMM granularity divides the 2 MiB and 20 MiB pages.
    pub fn new(
        config: CachingConfig,
        dev: &mut dyn CachingDevice,
    ) -> Result<CachingAllocator, AllocError> {
        config
            .validate()
            .map_err(|e| AllocError::Invalid(e.to_string()))?;
        let device_total_bytes = dev.info().total_bytes;
        if config.expandable_segments {
            let g = dev.vmm_granularity().map_err(AllocError::Device)?;
            if g == 0 || SMALL_BUFFER_BYTES % g != 0 || LARGE_BUFFER_BYTES % g != 0 {
                return Err(AllocError::Invalid(format!(
                    "expandable_segments:True needs a VMM granularity that divides 2 MiB; the device reports {g} bytes"
                )));
            }
        }
        let allowed_bytes = config
            .per_process_memory_fraction
            .map(|f| (f * device_total_bytes as f64) as u64);
        Ok(CachingAllocator {
            max_split_bytes: config.max_split_size_bytes(),
            max_non_split_rounding_bytes: config.max_non_split_rounding_bytes(),
            allowed_bytes,
            config,
            arena: Arena::default(),
            streams: StreamSlots::default(),
            allocated: LiveTable::default(),
            pending: PendingFrees::default(),
            segments: Vec::new(),
            stats: MemoryStats::default(),
            held_bytes: 0,
            gc_searches: [0; 2],
            device_total_bytes,
        })
    }

    pub fn config(&self) -> &CachingConfig {
        &self.config
    }

    /// PyTorch's `memory_stats()` counters.
    pub fn memory_stats(&self) -> &MemoryStats {
        &self.stats
    }

    /// Resets every peak to its current value (`reset_peak_memory_stats`).
    pub fn reset_peak_stats(&mut self) {
        let s = &mut self.stats;
        for a in [
            &mut s.allocation,
            &mut s.segment,
            &mut s.active,
            &mut s.inactive_split,
            &mut s.allocated_bytes,
            &mut s.reserved_bytes,
            &mut s.active_bytes,
            &mut s.inactive_split_bytes,
            &mut s.requested_bytes,
        ] {
            for st in [&mut a.all, &mut a.small_pool, &mut a.large_pool] {
                st.peak = st.current;
            }
        }
        s.oversize_allocations.peak = s.oversize_allocations.current;
        s.oversize_segments.peak = s.oversize_segments.current;
    }

    /// Frees waiting on other streams' events.
    pub fn pending_free_count(&self) -> usize {
        self.pending.len()
    }

    /// The largest cached block of `pool`, over all streams (PyTorch's `cacheInfo`, per pool).
    fn largest_free_in(&self, pool: PoolKind) -> u64 {
        self.streams
            .slots
            .iter()
            .filter_map(|s| s.pools[pool.index()].by_size.last_size(&self.arena))
            .max()
            .unwrap_or(0)
    }

    /// Expandable segments with at least one page mapped.
    fn mapped_expandable_segments(&self) -> u64 {
        self.segments
            .iter()
            .flatten()
            .filter(|s| s.mapped_bytes > 0)
            .count() as u64
    }
}

impl Allocator for CachingAllocator {
    fn kind(&self) -> crate::alloc::AllocatorKind {
        crate::alloc::AllocatorKind::Caching
    }

    fn allocate(
        &mut self,
        dev: &mut dyn AllocDevice,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        self.malloc(dev, bytes, stream)
    }

    fn free(&mut self, dev: &mut dyn AllocDevice, ptr: DevPtr) -> Result<(), AllocError> {
        self.free_ptr(dev, ptr)
    }

    /// `recordStream`: uses on the allocation stream need nothing; others delay reuse after
    /// the free until an event recorded then on each of them has completed.
    fn record_stream(
        &mut self,
        _dev: &mut dyn AllocDevice,
        ptr: DevPtr,
        stream: StreamId,
    ) -> Result<(), AllocError> {
        let idx = self.allocated.get(ptr).ok_or_else(|| {
            AllocError::Invalid(format!(
                "record_stream on {ptr:#x}, which is not live in the caching allocator"
            ))
        })?;
        if stream != self.streams.stream(self.arena[idx].slot) {
            self.arena.add_use(idx, stream);
        }
        Ok(())
    }

    /// `emptyCache`: completes pending frees, then releases every fully free segment (and the
    /// free pages of expandable segments). Live blocks are never touched.
    fn empty_cache(&mut self, dev: &mut dyn AllocDevice) -> Result<u64, AllocError> {
        let before = self.held_bytes;
        self.release_cached_blocks(dev, &mut Vec::new())?;
        Ok(before - self.held_bytes)
    }

    /// Nothing to bring up to date: a synchronize changes nothing the allocator holds. A free
    /// left pending by `record_stream` stays active, even after its streams have finished,
    /// until the allocator itself looks at its events. In c10/cuda/CUDACachingAllocator.cpp
    /// (`DeviceCachingAllocator`, read at commit 001074d) `process_events` is called only at
    /// the top of `malloc` (skipped while a capture is under way) and, through
    /// `release_cached_blocks` → `synchronize_and_free_events`, from `emptyCache` and the last
    /// step of malloc's retry chain; `free`, `recordStream` and a device or stream
    /// synchronize never call it. So `memory_stats()` keeps such a block in `active_bytes`
    /// until the next allocation or `empty_cache`, and so does this model.
    fn refresh(&mut self, _dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        Ok(())
    }

    fn complete_pending_frees(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        if !self.pending.is_empty() {
            self.process_events(dev)?;
        }
        Ok(())
    }

    fn stats(&self) -> AllocStats {
        let s = &self.stats;
        AllocStats {
            allocated_bytes: s.allocated_bytes.all.current,
            reserved_bytes: s.reserved_bytes.all.current,
            active_bytes: s.active_bytes.all.current,
            inactive_split_bytes: s.inactive_split_bytes.all.current,
            inactive_split_count: s.inactive_split.all.current,
            largest_free_bytes: self
                .largest_free_in(PoolKind::Small)
                .max(self.largest_free_in(PoolKind::Large)),
            requested_bytes: s.requested_bytes.all.current,
            segment_count: s.segment.all.current + self.mapped_expandable_segments(),
            num_alloc_retries: s.num_alloc_retries,
            num_ooms: s.num_ooms,
        }
    }

    fn byte_counters(&self) -> (u64, u64, u64) {
        let s = &self.stats;
        (
            s.allocated_bytes.all.current,
            s.reserved_bytes.all.current,
            s.requested_bytes.all.current,
        )
    }

    fn rounded_size(&self, bytes: u64) -> u64 {
        if bytes >= sizes::ONE_EXA_BYTES {
            bytes
        } else {
            self.config.round_size(bytes)
        }
    }

    /// A whole segment (`get_allocation_size`), or for expandable segments the pages needed.
    fn driver_bytes_for(&self, bytes: u64) -> u64 {
        let rounded = self.rounded_size(bytes);
        if self.config.expandable_segments {
            let page = PoolKind::for_rounded(rounded).expandable_page_bytes();
            rounded.div_ceil(page).saturating_mul(page)
        } else if rounded >= sizes::ONE_EXA_BYTES {
            rounded
        } else {
            allocation_size(rounded)
        }
    }

    /// The largest cached block in the pool a request of `bytes` would use.
    fn largest_free_for(&self, bytes: u64) -> u64 {
        self.largest_free_in(PoolKind::for_rounded(self.rounded_size(bytes)))
    }

    fn release_all(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        self.release_everything(dev)
    }
}
