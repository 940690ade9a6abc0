//! PyTorch's `memory_stats()` counters for the caching allocator (`DeviceStats` in
//! CUDACachingAllocator.h): each with current, peak, allocated and freed, for all pools and
//! per pool.

use serde::Serialize;

use super::sizes::PoolKind;

/// One counter: `increase_stat` / `decrease_stat` in PyTorch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
    /// Sum of every increase.
    pub allocated: u64,
    /// Sum of every decrease.
    pub freed: u64,
}

impl Stat {
    #[inline]
    pub fn increase(&mut self, n: u64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
        self.allocated += n;
    }

    #[inline]
    pub fn decrease(&mut self, n: u64) {
        debug_assert!(
            self.current >= n,
            "a caching allocator counter went negative"
        );
        self.current = self.current.saturating_sub(n);
        self.freed += n;
    }
}

/// A counter for all pools together and for each pool (`StatType::{AGGREGATE, SMALL_POOL,
/// LARGE_POOL}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatArray {
    pub all: Stat,
    pub small_pool: Stat,
    pub large_pool: Stat,
}

impl StatArray {
    #[inline]
    pub fn increase(&mut self, pool: PoolKind, n: u64) {
        self.all.increase(n);
        self.pool_mut(pool).increase(n);
    }

    #[inline]
    pub fn decrease(&mut self, pool: PoolKind, n: u64) {
        self.all.decrease(n);
        self.pool_mut(pool).decrease(n);
    }

    #[inline]
    fn pool_mut(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    pub fn pool(&self, pool: PoolKind) -> &Stat {
        match pool {
            PoolKind::Small => &self.small_pool,
            PoolKind::Large => &self.large_pool,
        }
    }
}

/// The caching allocator's counters, named as in `torch.cuda.memory_stats()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Live allocations (count).
    pub allocation: StatArray,
    /// `cudaMalloc` segments (count; expandable segments are not counted, as in PyTorch).
    pub segment: StatArray,
    /// Blocks allocated or waiting on another stream (count).
    pub active: StatArray,
    /// Free blocks that are part of a split segment (count; not for expandable segments).
    pub inactive_split: StatArray,
    pub allocated_bytes: StatArray,
    /// Segments plus mapped expandable pages.
    pub reserved_bytes: StatArray,
    pub active_bytes: StatArray,
    pub inactive_split_bytes: StatArray,
    /// What callers asked for, before rounding, of active blocks.
    pub requested_bytes: StatArray,
    /// Allocations that needed the retry after freeing every cached segment.
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    /// Times every pending free was synchronized (`synchronize_and_free_events`).
    pub num_sync_all_streams: u64,
    /// `cudaMalloc` calls and expandable page mappings that succeeded.
    pub num_device_alloc: u64,
    /// `cudaFree` calls and expandable page unmappings.
    pub num_device_free: u64,
    /// Live allocations of at least `max_split_size`.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size`.
    pub oversize_segments: Stat,
}
