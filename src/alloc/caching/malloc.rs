//! The allocation path (`DeviceCachingAllocator::malloc` and what it calls): best fit from
//! the cache, splitting, asking the driver, and the retry chain when the driver refuses.

use crate::alloc::{AllocError, Block, FractionCapRefusal, OomRequest, RetryStep};
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};

use super::CachingAllocator;
use super::arena::{NIL, Node, NodeState};
use super::sizes::{MIN_BLOCK_BYTES, ONE_EXA_BYTES, PoolKind, SMALL_SIZE_BYTES, allocation_size};

/// Which driver attempt of the retry chain this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    First,
    AfterOversizeRelease,
    AfterCacheRelease,
}

/// One request on its way through the allocator (PyTorch's `AllocParams`).
pub(super) struct Request {
    pub orig_bytes: u64,
    /// After `round_size`.
    pub size: u64,
    /// `get_allocation_size(size)`: the segment a `cudaMalloc` would ask for.
    pub alloc_size: u64,
    pub pool: PoolKind,
    pub stream: StreamId,
    /// Stream slot in `StreamSlots`.
    pub slot: usize,
    /// What the last refused driver call asked for.
    pub driver_bytes: u64,
    /// What the allocator tried, in order, for the OOM report.
    pub steps: Vec<RetryStep>,
}

impl CachingAllocator {
    pub(super) fn malloc(
        &mut self,
        dev: &mut dyn CachingDevice,
        orig_bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        if orig_bytes == 0 {
            return Err(AllocError::Invalid("allocation of 0 bytes".into()));
        }
        if orig_bytes >= ONE_EXA_BYTES {
            // `allocate`: "Tried to allocate more than 1EB memory", an OOM without a driver call.
            self.stats.num_ooms += 1;
            return Err(AllocError::OutOfMemory(Box::new(OomRequest {
                requested_bytes: orig_bytes,
                rounded_bytes: orig_bytes,
                driver_request_bytes: 0,
                pool: PoolKind::Large.name().into(),
                stream,
                retries: vec![RetryStep::said(
                    "refused without asking the driver: 1 EiB or more",
                )],
            })));
        }
        // `process_events`: frees whose streams have finished become reusable first.
        if !self.pending.is_empty() {
            self.process_events(dev)?;
        }
        let size = self.config.round_size(orig_bytes);
        let pool = PoolKind::for_rounded(size);
        let slot = match self.streams.find(stream) {
            Some(s) => s,
            None => {
                check_stream(dev, stream)?;
                self.streams.slot(stream)
            }
        };
        let idx = match self.get_free_block(slot, pool, size) {
            Some(i) => i,
            None => {
                let mut req = Request {
                    orig_bytes,
                    size,
                    alloc_size: allocation_size(size),
                    pool,
                    stream,
                    slot,
                    driver_bytes: 0,
                    steps: Vec::new(),
                };
                self.obtain_block(dev, &mut req)?
            }
        };
        let split = self.should_split(idx, size);
        Ok(self.alloc_found_block(idx, size, orig_bytes, split))
    }

    /// What an expandable block could grow to: itself plus the unmapped space after it.
    fn expandable_size(&self, i: u32) -> u64 {
        let n = &self.arena[i];
        let next_unmapped = n.next != NIL && self.arena[n.next].state == NodeState::Unmapped;
        n.size
            + if next_unmapped {
                self.arena[n.next].size
            } else {
                0
            }
    }

    /// `get_free_block`: the smallest cached block of this pool and stream that fits, subject
    /// to the oversize rules; taken out of the cache.
    fn get_free_block(&mut self, slot: usize, pool: PoolKind, size: u64) -> Option<u32> {
        if self.config.gc_enabled() {
            self.gc_searches[pool.index()] += 1;
        }
        let index = &self.streams.slots[slot].pools[pool.index()].by_size;
        let mut range = index.at_least(&self.arena, size);
        let mut best = range.next()?;
        if self.arena[best].is_expandable() {
            if self.config.expandable_segments {
                // Best fit by the size a block can expand to, so the growing end of a segment
                // is used last.
                let mut best_expandable = self.expandable_size(best);
                for next in range {
                    if !self.arena[best].is_expandable() {
                        break;
                    }
                    let e = self.expandable_size(next);
                    if e >= best_expandable {
                        break;
                    }
                    best = next;
                    best_expandable = e;
                }
            } else {
                // Expandable segments were turned off: only plain blocks qualify.
                best = std::iter::once(best)
                    .chain(range)
                    .find(|&i| !self.arena[i].is_expandable())?;
            }
        }
        let block_size = self.arena[best].size;
        // Do not return an oversized block for a smaller request.
        if size < self.max_split_bytes && block_size >= self.max_split_bytes {
            return None;
        }
        // An oversized block serves a large request only if little is wasted.
        if size >= self.max_split_bytes
            && block_size >= size.saturating_add(self.max_non_split_rounding_bytes)
        {
            return None;
        }
        self.uncache(best);
        Some(best)
    }

    /// `should_split`: small pool (or expandable segments) when at least 512 B remain; large
    /// pool when the request is below `max_split_size` and more than 1 MiB remains.
    fn should_split(&self, i: u32, size: u64) -> bool {
        let n = &self.arena[i];
        let remaining = n.size - size;
        if n.pool == PoolKind::Small || self.config.expandable_segments {
            remaining >= MIN_BLOCK_BYTES
        } else {
            size < self.max_split_bytes && remaining > SMALL_SIZE_BYTES
        }
    }

    /// `alloc_found_block`: splits off the front `size` bytes when asked, hands the block out
    /// and counts it.
    fn alloc_found_block(&mut self, i: u32, size: u64, orig_bytes: u64, split: bool) -> Block {
        let already_split = self.arena[i].is_split();
        let expandable = self.arena[i].is_expandable();
        let pool = self.arena[i].pool;
        let block = if split {
            let rest = &self.arena[i];
            let mut front = Node::new(rest.ptr, size, rest.slot, pool, NodeState::Free);
            front.prev = rest.prev;
            front.next = i;
            front.expandable = rest.expandable;
            let b = self.arena.insert(front);
            if self.arena[b].prev != NIL {
                let p = self.arena[b].prev;
                self.arena[p].next = b;
            }
            let rest = &mut self.arena[i];
            rest.prev = b;
            rest.ptr += size;
            rest.size -= size;
            let rest_size = rest.size;
            self.cache(i);
            if !expandable {
                if already_split {
                    // An inactive split block shrank by `size`.
                    self.stats.inactive_split_bytes.decrease(pool, size);
                } else {
                    // A whole segment became split: its remainder is a new inactive split.
                    self.stats.inactive_split_bytes.increase(pool, rest_size);
                    self.stats.inactive_split.increase(pool, 1);
                }
            }
            b
        } else {
            if already_split && !expandable {
                let s = self.arena[i].size;
                self.stats.inactive_split_bytes.decrease(pool, s);
                self.stats.inactive_split.decrease(pool, 1);
            }
            i
        };
        let n = &mut self.arena[block];
        n.state = NodeState::Allocated;
        n.requested = orig_bytes;
        let (ptr, bsize, slot) = (n.ptr, n.size, n.slot);
        let stream = self.streams.stream(slot);
        self.allocated.insert(ptr, block);
        let s = &mut self.stats;
        s.allocation.increase(pool, 1);
        s.allocated_bytes.increase(pool, bsize);
        s.active.increase(pool, 1);
        s.active_bytes.increase(pool, bsize);
        s.requested_bytes.increase(pool, orig_bytes);
        if bsize >= self.max_split_bytes {
            s.oversize_allocations.increase(1);
        }
        Block {
            ptr,
            requested_bytes: orig_bytes,
            size_bytes: bsize,
            stream,
        }
    }

    /// The driver part of `malloc`: ask; release oversize cached blocks and ask again;
    /// release every cached segment and ask a last time; then out of memory.
    fn obtain_block(
        &mut self,
        dev: &mut dyn CachingDevice,
        req: &mut Request,
    ) -> Result<u32, AllocError> {
        if self.config.gc_enabled() {
            self.garbage_collect_cached_blocks(dev, req)?;
        }
        if let Some(i) = self.alloc_block(dev, req, Attempt::First)? {
            return Ok(i);
        }
        if self.release_available_cached_blocks(dev, req)?
            && let Some(i) = self.alloc_block(dev, req, Attempt::AfterOversizeRelease)?
        {
            return Ok(i);
        }
        self.release_cached_blocks(dev, &mut req.steps)?;
        if let Some(i) = self.alloc_block(dev, req, Attempt::AfterCacheRelease)? {
            return Ok(i);
        }
        self.stats.num_ooms += 1;
        Err(AllocError::OutOfMemory(Box::new(OomRequest {
            requested_bytes: req.orig_bytes,
            rounded_bytes: req.size,
            driver_request_bytes: req.driver_bytes,
            pool: req.pool.name().into(),
            stream: req.stream,
            retries: std::mem::take(&mut req.steps),
        })))
    }

    /// `alloc_block`: a new segment from the driver (or pages of an expandable segment).
    /// `Ok(None)` when refused for lack of memory; other driver errors are errors.
    fn alloc_block(
        &mut self,
        dev: &mut dyn CachingDevice,
        req: &mut Request,
        attempt: Attempt,
    ) -> Result<Option<u32>, AllocError> {
        let attempt = match attempt {
            Attempt::First => "first attempt",
            Attempt::AfterOversizeRelease => "retry after releasing oversize blocks",
            Attempt::AfterCacheRelease => {
                // Only this last attempt counts as a retry (`alloc_block(params, true, ...)`).
                self.stats.num_alloc_retries += 1;
                "retry after releasing the cache (num_alloc_retries)"
            }
        };
        if let Some(allowed) = self.allowed_bytes
            && self.held_bytes + req.alloc_size > allowed
        {
            // `alloc_block`: over `allowed_memory_maximum`, refused without a cudaMalloc.
            req.driver_bytes = 0;
            req.steps.push(RetryStep {
                text: format!(
                    "{attempt}: {} more bytes would pass the per-process memory fraction ({allowed} bytes allowed, {} held); the driver was not asked",
                    req.alloc_size, self.held_bytes
                ),
                fraction_cap: Some(FractionCapRefusal {
                    allowed_bytes: allowed,
                    held_bytes: self.held_bytes,
                    more_bytes: req.alloc_size,
                }),
            });
            return Ok(None);
        }
        if self.config.expandable_segments {
            let found = self.try_allocate_expandable_block(dev, req)?;
            if found.is_none() {
                let why = format!(
                    "{attempt}: mapping {} bytes of expandable segment pages refused",
                    req.driver_bytes
                );
                req.steps.push(RetryStep::said(why));
            }
            return Ok(found);
        }
        req.driver_bytes = req.alloc_size;
        let ptr = match dev.malloc(req.alloc_size) {
            Ok(p) => p,
            Err(e) if e.is_oom() => {
                req.steps.push(RetryStep::said(format!(
                    "{attempt}: cudaMalloc({}) refused",
                    req.alloc_size
                )));
                return Ok(None);
            }
            Err(e) => return Err(AllocError::Device(e)),
        };
        let size = req.alloc_size;
        self.held_bytes += size;
        let i = self.arena.insert(Node::new(
            ptr,
            size,
            req.slot as u32,
            req.pool,
            NodeState::Free,
        ));
        self.stats.segment.increase(req.pool, 1);
        self.stats.reserved_bytes.increase(req.pool, size);
        if size >= self.max_split_bytes {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        Ok(Some(i))
    }

    /// `free`: the block returns to the cache now, or once the other streams that used it are
    /// done (`record_stream`).
    pub(super) fn free_ptr(
        &mut self,
        dev: &mut dyn CachingDevice,
        ptr: DevPtr,
    ) -> Result<(), AllocError> {
        let i = self.allocated.remove(ptr).ok_or_else(|| {
            AllocError::Invalid(format!(
                "free of {ptr:#x}, which is not live in the caching allocator"
            ))
        })?;
        let n = &self.arena[i];
        let (pool, size) = (n.pool, n.size);
        self.stats.allocation.decrease(pool, 1);
        self.stats.allocated_bytes.decrease(pool, size);
        if size >= self.max_split_bytes {
            self.stats.oversize_allocations.decrease(1);
        }
        if !self.arena[i].has_uses {
            self.free_block(i);
            Ok(())
        } else {
            self.insert_events(dev, i)
        }
    }

    /// Puts a free block into its pool's index.
    #[inline]
    pub(super) fn cache(&mut self, i: u32) {
        let n = &mut self.arena[i];
        n.gc_base = self.gc_searches[n.pool.index()];
        let (slot, pool) = (n.slot, n.pool);
        self.streams
            .at(slot, pool)
            .by_size
            .insert(&mut self.arena, i);
    }

    /// Takes a free block out of its pool's index.
    #[inline]
    pub(super) fn uncache(&mut self, i: u32) {
        let n = &self.arena[i];
        let (slot, pool) = (n.slot, n.pool);
        self.streams
            .at(slot, pool)
            .by_size
            .remove(&mut self.arena, i);
    }
}

/// A stream's first use: the device must know it (an event recorded on it says so), since
/// blocks are cached per stream and a typo would otherwise go unnoticed until a free.
fn check_stream(dev: &mut dyn CachingDevice, stream: StreamId) -> Result<(), AllocError> {
    let e = dev
        .record_event(stream)
        .map_err(|e| AllocError::Invalid(format!("allocation on stream {}: {e}", stream.0)))?;
    dev.event_destroy(e).map_err(AllocError::Device)
}
