//! Returning memory: a freed block back into the cache (merging with free neighbours), and
//! cached segments back to the driver (`release_block`, `release_available_cached_blocks`,
//! `release_cached_blocks`, `garbage_collect_cached_blocks`), as in PyTorch.

use crate::alloc::{AllocError, RetryStep};
use crate::device::prelude::*;

use super::CachingAllocator;
use super::arena::{NIL, NodeState};
use super::malloc::Request;
use super::sizes::PoolKind;

impl CachingAllocator {
    /// `free_block`: a block no stream uses any more rejoins the cache, merged with free
    /// neighbours in its segment.
    #[inline]
    pub(super) fn free_block(&mut self, i: u32) {
        let n = &self.arena[i];
        debug_assert!(n.event_count == 0 && !n.has_uses);
        let (pool, size, requested, prev, next) = (n.pool, n.size, n.requested, n.prev, n.next);
        let expandable = n.is_expandable();
        self.arena[i].state = NodeState::Free;
        self.arena[i].requested = 0;
        let mut net_count: i64 = 0;
        let mut net_bytes: i64 = 0;
        for candidate in [prev, next] {
            let subsumed = self.try_merge(i, candidate);
            if subsumed > 0 {
                net_count -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        self.cache(i);
        if self.arena[i].is_split() {
            net_count += 1;
            net_bytes += self.arena[i].size as i64;
        }
        let s = &mut self.stats;
        // Expandable segments stay out of inactive_split, as in PyTorch: their free pages can
        // always be given back.
        if !expandable {
            apply(&mut s.inactive_split, pool, net_count);
            apply(&mut s.inactive_split_bytes, pool, net_bytes);
        }
        s.active.decrease(pool, 1);
        s.active_bytes.decrease(pool, size);
        s.requested_bytes.decrease(pool, requested);
    }

    /// `try_merge_blocks`: `src` (a neighbour of `dst`) is absorbed if it is in the same state
    /// (both free, or both unmapped). Returns the bytes absorbed (0: no merge).
    #[inline]
    pub(super) fn try_merge(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        let want = match self.arena[dst].state {
            NodeState::Unmapped => NodeState::Unmapped,
            _ => NodeState::Free,
        };
        let s = &self.arena[src];
        if s.state != want || s.has_uses || s.event_count > 0 {
            return 0;
        }
        let (s_ptr, s_size, s_prev, s_next) = (s.ptr, s.size, s.prev, s.next);
        if want == NodeState::Unmapped {
            let (slot, pool) = (s.slot, s.pool);
            self.streams.at(slot, pool).unmapped.remove(&s_ptr);
        } else {
            self.uncache(src);
        }
        if self.arena[dst].prev == src {
            self.arena[dst].ptr = s_ptr;
            self.arena[dst].prev = s_prev;
            if s_prev != NIL {
                self.arena[s_prev].next = dst;
            }
        } else {
            self.arena[dst].next = s_next;
            if s_next != NIL {
                self.arena[s_next].prev = dst;
            }
        }
        self.arena[dst].size += s_size;
        self.arena.remove(src);
        s_size
    }

    /// `release_block`: a whole cached `cudaMalloc` segment goes back to the driver
    /// (`cudaFree`). If the driver refuses, the segment stays cached.
    pub(super) fn release_block(
        &mut self,
        dev: &mut dyn CachingDevice,
        i: u32,
    ) -> Result<u64, AllocError> {
        let n = &self.arena[i];
        debug_assert!(!n.is_expandable() && !n.is_split() && n.state == NodeState::Free);
        let (ptr, size, pool) = (n.ptr, n.size, n.pool);
        dev.free(ptr).map_err(AllocError::Device)?;
        self.uncache(i);
        self.arena.remove(i);
        self.held_bytes -= size;
        let s = &mut self.stats;
        s.segment.decrease(pool, 1);
        s.reserved_bytes.decrease(pool, size);
        if size >= self.max_split_bytes {
            s.oversize_segments.decrease(1);
        }
        s.num_device_free += 1;
        Ok(size)
    }

    /// Whether a cached block is a whole `cudaMalloc` segment that `cudaFree` can return.
    fn releasable(&self, i: u32) -> bool {
        let n = &self.arena[i];
        !n.is_expandable() && !n.is_split()
    }

    /// `release_available_cached_blocks`, first step of the retry chain (only with
    /// `max_split_size_mb`): free the smallest oversize cached segment that is large enough,
    /// or else the largest oversize ones until enough is freed. True if enough was freed.
    ///
    /// Only whole `cudaMalloc` segments are released. Without expandable segments every
    /// oversize cached block is one (oversize blocks are never split); PyTorch asserts so.
    pub(super) fn release_available_cached_blocks(
        &mut self,
        dev: &mut dyn CachingDevice,
        req: &mut Request,
    ) -> Result<bool, AllocError> {
        const NAME: &str = "release_available_cached_blocks";
        if self.max_split_bytes == u64::MAX {
            req.steps.push(RetryStep::said(format!(
                "{NAME}: skipped (max_split_size_mb not set)"
            )));
            return Ok(false);
        }
        let key = req.size.max(self.max_split_bytes);
        let by_size = &self.streams.slots[req.slot].pools[req.pool.index()].by_size;
        let one = by_size
            .at_least(&self.arena, key)
            .find(|&i| self.releasable(i));
        if let Some(i) = one {
            let size = self.release_block(dev, i)?;
            req.steps.push(RetryStep::said(format!(
                "{NAME}: released one oversize cached segment of {size} bytes"
            )));
            return Ok(true);
        }
        let by_size = &self.streams.slots[req.slot].pools[req.pool.index()].by_size;
        let mut largest_first: Vec<u32> = by_size
            .at_least(&self.arena, self.max_split_bytes)
            .filter(|&i| self.releasable(i))
            .collect();
        largest_first.reverse();
        let (mut count, mut total) = (0u64, 0u64);
        for i in largest_first {
            if total >= key {
                break;
            }
            total += self.release_block(dev, i)?;
            count += 1;
        }
        if count == 0 {
            req.steps.push(RetryStep::said(format!(
                "{NAME}: no oversize cached segment on this stream"
            )));
        } else {
            req.steps.push(RetryStep::said(format!(
                "{NAME}: released {count} oversize cached segments ({total} bytes)"
            )));
        }
        Ok(total >= key)
    }

    /// `release_cached_blocks` (what `empty_cache` does, and the last step of the retry chain):
    /// wait for every pending free, then give back every fully free segment and every free
    /// page of expandable segments. Returns the bytes given back.
    pub(super) fn release_cached_blocks(
        &mut self,
        dev: &mut dyn CachingDevice,
        steps: &mut Vec<RetryStep>,
    ) -> Result<u64, AllocError> {
        let waited = self.synchronize_and_free_events(dev)?;
        let mut totals = ReleaseTotals::default();
        for pool in [PoolKind::Large, PoolKind::Small] {
            self.release_blocks(dev, pool, &mut totals)?;
        }
        steps.push(RetryStep::said(format!(
            "release_cached_blocks: waited for {waited} pending frees, released {} segments ({} bytes), unmapped {} bytes of expandable segments",
            totals.segments, totals.segment_bytes, totals.unmapped_bytes
        )));
        Ok(totals.segment_bytes + totals.unmapped_bytes)
    }

    /// `release_blocks`: every unsplit cached segment of `pool`; the free pages of expandable
    /// segments, and an expandable segment itself once nothing in it is mapped.
    fn release_blocks(
        &mut self,
        dev: &mut dyn CachingDevice,
        pool: PoolKind,
        totals: &mut ReleaseTotals,
    ) -> Result<(), AllocError> {
        let mut whole = Vec::new();
        let mut to_unmap = Vec::new();
        for slot in self.streams.ordered() {
            for i in self.streams.slots[slot].pools[pool.index()]
                .by_size
                .iter(&self.arena)
            {
                if self.arena[i].is_expandable() {
                    to_unmap.push(i);
                } else if !self.arena[i].is_split() {
                    whole.push(i);
                }
            }
        }
        for i in whole {
            totals.segment_bytes += self.release_block(dev, i)?;
            totals.segments += 1;
        }
        for i in to_unmap {
            totals.unmapped_bytes += self.unmap_block(dev, i)?;
            let n = &self.arena[i];
            if n.state == NodeState::Unmapped && !n.is_split() {
                self.release_expandable_segment(dev, i)?;
            }
        }
        Ok(())
    }

    /// `garbage_collect_cached_blocks`: with a memory fraction and a threshold, once held
    /// memory passes `threshold × allowed`, release unsplit large cached segments that have
    /// gone unused for at least the average age (in free-block searches), oldest rounds
    /// first, until enough is released. No synchronization, unlike `release_cached_blocks`.
    pub(super) fn garbage_collect_cached_blocks(
        &mut self,
        dev: &mut dyn CachingDevice,
        req: &mut Request,
    ) -> Result<(), AllocError> {
        let (Some(threshold), Some(allowed)) =
            (self.config.garbage_collection_threshold, self.allowed_bytes)
        else {
            return Ok(());
        };
        let gc_threshold = (threshold * allowed as f64) as u64;
        if self.held_bytes <= gc_threshold {
            return Ok(());
        }
        let target = self.held_bytes - gc_threshold;
        let searches = self.gc_searches[PoolKind::Large.index()];
        let mut freeable: Vec<(u32, u64)> = Vec::new();
        for slot in self.streams.ordered() {
            for i in self.streams.slots[slot].pools[PoolKind::Large.index()]
                .by_size
                .iter(&self.arena)
            {
                if self.releasable(i) {
                    freeable.push((i, searches - self.arena[i].gc_base));
                }
            }
        }
        let mut total_age: u64 = freeable.iter().map(|(_, a)| a).sum();
        let mut count = freeable.len() as u64;
        let (mut reclaimed, mut released) = (0u64, 0u64);
        let mut freed_any = true;
        while reclaimed < target && freed_any && count > 0 {
            let age_threshold = total_age as f64 / count as f64;
            freed_any = false;
            for entry in freeable.iter_mut() {
                let (i, age) = *entry;
                if i == NIL || (age as f64) < age_threshold {
                    continue;
                }
                reclaimed += self.release_block(dev, i)?;
                released += 1;
                total_age -= age;
                count -= 1;
                freed_any = true;
                entry.0 = NIL;
            }
        }
        if released > 0 {
            req.steps.push(RetryStep::said(format!(
                "garbage_collect_cached_blocks: released {released} aged segments ({reclaimed} bytes) above {gc_threshold} bytes"
            )));
        }
        Ok(())
    }

    /// Frees every live block and returns everything to the driver (end of a run).
    pub(super) fn release_everything(
        &mut self,
        dev: &mut dyn CachingDevice,
    ) -> Result<(), AllocError> {
        let mut first: Option<AllocError> = None;
        let mut note = |r: Result<(), AllocError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        note(dev.synchronize().map_err(AllocError::Device));
        let mut live: Vec<_> = self.allocated.keys().collect();
        live.sort_unstable();
        for ptr in live {
            // Every stream has finished (synchronized above): uses on other streams are over.
            if let Some(i) = self.allocated.get(ptr) {
                self.arena.clear_uses(i);
            }
            note(self.free_ptr(dev, ptr));
        }
        note(self.release_cached_blocks(dev, &mut Vec::new()).map(|_| ()));
        // Expandable ranges with nothing mapped (left by a refused mapping) are still reserved.
        for seg in 0..self.segments.len() {
            if let Some(s) = self.segments[seg].take() {
                note(dev.vmm_free(s.base).map_err(AllocError::Device));
            }
        }
        if first.is_none() {
            debug_assert_eq!(self.held_bytes, 0);
            self.arena.clear();
            self.streams.slots.clear();
            self.segments.clear();
        }
        first.map_or(Ok(()), Err)
    }
}

/// What one `release_cached_blocks` gave back.
#[derive(Debug, Default)]
struct ReleaseTotals {
    segments: u64,
    segment_bytes: u64,
    unmapped_bytes: u64,
}

/// Applies a signed change to a counter.
fn apply(stat: &mut super::stats::StatArray, pool: PoolKind, delta: i64) {
    if delta > 0 {
        stat.increase(pool, delta as u64);
    } else if delta < 0 {
        stat.decrease(pool, delta.unsigned_abs());
    }
}
