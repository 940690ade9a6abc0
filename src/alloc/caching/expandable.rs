//! Expandable segments (`expandable_segments:True`; PyTorch's Note [Expandable Segments]).
//!
//! Instead of one `cudaMalloc` per segment, each pool and stream reserves one virtual range
//! (1⅛ × device memory) and maps physical pages into it on demand: 2 MiB pages for the small
//! pool, 20 MiB for the large. Growth happens at the lowest address where the request fits
//! (filling holes left by earlier unmaps first), so freed space merges into one block again.
//! `release_cached_blocks` (empty_cache, and the retry chain's last step) unmaps every page
//! that holds no live block.

use crate::alloc::AllocError;
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};

use super::CachingAllocator;
use super::arena::{NIL, Node, NodeState};
use super::malloc::Request;
use super::sizes::PoolKind;

/// One reserved virtual range (PyTorch's `ExpandableSegment`).
#[derive(Debug, Clone)]
pub(super) struct ExpandableSegment {
    pub base: DevPtr,
    pub size: u64,
    /// Mapping unit: 2 MiB (small pool) or 20 MiB (large pool).
    pub page: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    /// Physical bytes mapped now.
    pub mapped_bytes: u64,
}

impl CachingAllocator {
    fn segment(&self, i: u32) -> &ExpandableSegment {
        let seg = self.arena[i].expandable as usize;
        self.segments[seg]
            .as_ref()
            .expect("a block of a released expandable segment")
    }

    fn segment_mut(&mut self, i: u32) -> &mut ExpandableSegment {
        let seg = self.arena[i].expandable as usize;
        self.segments[seg]
            .as_mut()
            .expect("a block of a released expandable segment")
    }

    /// Free or unmapped, and not held back by another stream.
    fn allocatable(&self, i: u32) -> bool {
        if i == NIL {
            return false;
        }
        let n = &self.arena[i];
        matches!(n.state, NodeState::Free | NodeState::Unmapped)
            && n.event_count == 0
            && !n.has_uses
    }

    /// Whether free and unmapped blocks from `i` on add up to `size` bytes.
    fn has_available_address_space(&self, mut i: u32, size: u64) -> bool {
        let mut bytes = 0;
        while bytes < size && self.allocatable(i) {
            bytes += self.arena[i].size;
            i = self.arena[i].next;
        }
        bytes >= size
    }

    /// `find_expandable_block`: the lowest address in this pool and stream where `size` bytes
    /// of free and unmapped space follow each other; otherwise a new segment.
    fn find_expandable_block(
        &mut self,
        dev: &mut dyn CachingDevice,
        req: &Request,
    ) -> Result<u32, AllocError> {
        let unmapped: Vec<u32> = self.streams.slots[req.slot].pools[req.pool.index()]
            .unmapped
            .values()
            .copied()
            .collect();
        for mut c in unmapped {
            let prev = self.arena[c].prev;
            if self.allocatable(prev) {
                c = prev;
            }
            if self.has_available_address_space(c, req.size) {
                return Ok(c);
            }
        }
        let page = req.pool.expandable_page_bytes();
        let total = self.device_total_bytes;
        let va_bytes = (total + total / 8).div_ceil(page).max(1) * page;
        let base = dev.vmm_reserve(va_bytes).map_err(AllocError::Device)?;
        let seg = self.segments.len() as u32;
        self.segments.push(Some(ExpandableSegment {
            base,
            size: va_bytes,
            page,
            stream: req.stream,
            pool: req.pool,
            mapped_bytes: 0,
        }));
        let mut node = Node::new(
            base,
            va_bytes,
            req.slot as u32,
            req.pool,
            NodeState::Unmapped,
        );
        node.expandable = seg;
        let i = self.arena.insert(node);
        self.streams.slots[req.slot].pools[req.pool.index()]
            .unmapped
            .insert(base, i);
        Ok(i)
    }

    /// `map_block`: maps the pages under the first `size` bytes of unmapped block `i`, one
    /// physical handle per page; the mapped part becomes a free block merged with free
    /// neighbours. On out-of-memory the pages mapped by this call are unmapped again and
    /// `Ok(false)` is returned.
    fn map_block(
        &mut self,
        dev: &mut dyn CachingDevice,
        i: u32,
        size: u64,
        req: &mut Request,
    ) -> Result<bool, AllocError> {
        let (ptr, block_size, slot, pool) = {
            let n = &self.arena[i];
            (n.ptr, n.size, n.slot, n.pool)
        };
        let (base, page) = {
            let s = self.segment(i);
            (s.base, s.page)
        };
        let first = (ptr - base) / page;
        let end = (ptr + size - base).div_ceil(page);
        for p in first..end {
            if let Err(e) = dev.vmm_map(base + p * page, page) {
                for q in first..p {
                    let _ = dev.vmm_unmap(base + q * page, page);
                }
                req.driver_bytes = (end - first) * page;
                return if e.is_oom() {
                    Ok(false)
                } else {
                    Err(AllocError::Device(e))
                };
            }
        }
        let mapped = (end - first) * page;
        self.streams.at(slot, pool).unmapped.remove(&ptr);
        self.arena[i].state = NodeState::Free;
        if mapped < block_size {
            let mut rest = Node::new(
                ptr + mapped,
                block_size - mapped,
                slot,
                pool,
                NodeState::Unmapped,
            );
            rest.expandable = self.arena[i].expandable;
            rest.prev = i;
            rest.next = self.arena[i].next;
            let r = self.arena.insert(rest);
            if self.arena[r].next != NIL {
                let nx = self.arena[r].next;
                self.arena[nx].prev = r;
            }
            self.arena[i].next = r;
            self.arena[i].size = mapped;
            self.streams.at(slot, pool).unmapped.insert(ptr + mapped, r);
        }
        let (prev, next) = (self.arena[i].prev, self.arena[i].next);
        self.try_merge(i, prev);
        self.try_merge(i, next);
        self.cache(i);
        self.held_bytes += mapped;
        self.segment_mut(i).mapped_bytes += mapped;
        self.stats.reserved_bytes.increase(pool, mapped);
        self.stats.num_device_alloc += 1;
        Ok(true)
    }

    /// `try_allocate_expandable_block`: find room, map what is missing, and take the block
    /// out of the cache. `Ok(None)` when the driver refused a page.
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        dev: &mut dyn CachingDevice,
        req: &mut Request,
    ) -> Result<Option<u32>, AllocError> {
        let size = req.size;
        let mut c = self.find_expandable_block(dev, req)?;
        if self.arena[c].state == NodeState::Unmapped {
            let first = self.arena[c].size.min(size);
            if !self.map_block(dev, c, first, req)? {
                return Ok(None);
            }
        }
        while self.arena[c].size < size {
            let remaining = size - self.arena[c].size;
            let next = self.arena[c].next;
            debug_assert!(next != NIL && self.arena[next].state == NodeState::Unmapped);
            let grow = remaining.min(self.arena[next].size);
            if !self.map_block(dev, next, grow, req)? {
                return Ok(None);
            }
            // `next` absorbed `c` when it merged with its free predecessor.
            c = next;
        }
        self.uncache(c);
        Ok(Some(c))
    }

    /// `unmap_block`: unmaps the whole pages inside free block `i` (after waiting for its
    /// stream, as PyTorch does, since unmapping does not synchronize). Partial pages at either
    /// end stay mapped as free blocks. Returns the bytes unmapped.
    pub(super) fn unmap_block(
        &mut self,
        dev: &mut dyn CachingDevice,
        i: u32,
    ) -> Result<u64, AllocError> {
        let (ptr, end, slot, pool) = {
            let n = &self.arena[i];
            (n.ptr, n.end(), n.slot, n.pool)
        };
        let stream = self.streams.stream(slot);
        let (base, page) = {
            let s = self.segment(i);
            (s.base, s.page)
        };
        let lo = base + (ptr - base).div_ceil(page) * page;
        let hi = base + (end - base) / page * page;
        if lo >= hi {
            return Ok(0);
        }
        dev.stream_synchronize(stream).map_err(AllocError::Device)?;
        dev.vmm_unmap(lo, hi - lo).map_err(AllocError::Device)?;
        self.uncache(i);
        let seg = self.arena[i].expandable;
        if lo > ptr {
            let mut before = Node::new(ptr, lo - ptr, slot, pool, NodeState::Free);
            before.expandable = seg;
            before.prev = self.arena[i].prev;
            before.next = i;
            let b = self.arena.insert(before);
            if self.arena[b].prev != NIL {
                let p = self.arena[b].prev;
                self.arena[p].next = b;
            }
            self.arena[i].prev = b;
            self.cache(b);
        }
        if end > hi {
            let mut after = Node::new(hi, end - hi, slot, pool, NodeState::Free);
            after.expandable = seg;
            after.prev = i;
            after.next = self.arena[i].next;
            let a = self.arena.insert(after);
            if self.arena[a].next != NIL {
                let nx = self.arena[a].next;
                self.arena[nx].prev = a;
            }
            self.arena[i].next = a;
            self.cache(a);
        }
        let n = &mut self.arena[i];
        n.ptr = lo;
        n.size = hi - lo;
        n.state = NodeState::Unmapped;
        let (prev, next) = (n.prev, n.next);
        self.try_merge(i, prev);
        self.try_merge(i, next);
        let start = self.arena[i].ptr;
        self.streams.at(slot, pool).unmapped.insert(start, i);
        let unmapped = hi - lo;
        self.held_bytes -= unmapped;
        self.segment_mut(i).mapped_bytes -= unmapped;
        self.stats.reserved_bytes.decrease(pool, unmapped);
        self.stats.num_device_free += 1;
        Ok(unmapped)
    }

    /// `release_expandable_segment`: a segment with nothing mapped gives its address range back.
    pub(super) fn release_expandable_segment(
        &mut self,
        dev: &mut dyn CachingDevice,
        i: u32,
    ) -> Result<(), AllocError> {
        let (base, slot, pool, seg) = {
            let n = &self.arena[i];
            (n.ptr, n.slot, n.pool, n.expandable as usize)
        };
        debug_assert!(self.arena[i].state == NodeState::Unmapped && !self.arena[i].is_split());
        dev.vmm_free(base).map_err(AllocError::Device)?;
        self.streams.at(slot, pool).unmapped.remove(&base);
        self.arena.remove(i);
        self.segments[seg] = None;
        Ok(())
    }
}
