//! What the caching allocator holds, segment by segment (`torch.cuda.memory_snapshot()`),
//! and a full consistency check of its bookkeeping against that picture.

use serde::Serialize;

use crate::device::{DevPtr, StreamId};

use super::CachingAllocator;
use super::arena::{NIL, NodeState};
use super::sizes::PoolKind;

/// A block inside a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Handed out and not freed.
    Allocated,
    /// Freed, but waiting for other streams that used it ("active_pending_free").
    PendingFree,
    /// Cached for reuse ("inactive").
    Free,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockSnapshot {
    pub address: DevPtr,
    pub size_bytes: u64,
    /// What the caller asked for (0 for a free block).
    pub requested_bytes: u64,
    pub state: BlockState,
}

/// A `cudaMalloc` segment, or one contiguous mapped range of an expandable segment (as
/// PyTorch's snapshot reports them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentSnapshot {
    pub address: DevPtr,
    pub total_size_bytes: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    pub expandable: bool,
    pub blocks: Vec<BlockSnapshot>,
}

impl SegmentSnapshot {
    pub fn allocated_bytes(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| b.state == BlockState::Allocated)
            .map(|b| b.size_bytes)
            .sum()
    }

    /// Nothing in it is allocated or pending: `empty_cache` gives it back.
    pub fn is_fully_free(&self) -> bool {
        self.blocks.iter().all(|b| b.state == BlockState::Free)
    }
}

fn state_of(s: NodeState) -> Option<BlockState> {
    match s {
        NodeState::Allocated => Some(BlockState::Allocated),
        NodeState::Pending => Some(BlockState::PendingFree),
        NodeState::Free => Some(BlockState::Free),
        NodeState::Unmapped => None,
    }
}

impl CachingAllocator {
    /// Every segment with its blocks, by address.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        let mut out = Vec::new();
        for i in self.arena.live_indices() {
            let n = &self.arena[i];
            let head = n.state != NodeState::Unmapped
                && (n.prev == NIL || self.arena[n.prev].state == NodeState::Unmapped);
            if !head {
                continue;
            }
            let mut seg = SegmentSnapshot {
                address: n.ptr,
                total_size_bytes: 0,
                stream: self.streams.stream(n.slot),
                pool: n.pool,
                expandable: n.is_expandable(),
                blocks: Vec::new(),
            };
            let mut b = i;
            while b != NIL {
                let node = &self.arena[b];
                let Some(state) = state_of(node.state) else {
                    break;
                };
                seg.total_size_bytes += node.size;
                seg.blocks.push(BlockSnapshot {
                    address: node.ptr,
                    size_bytes: node.size,
                    requested_bytes: node.requested,
                    state,
                });
                b = node.next;
            }
            out.push(seg);
        }
        out.sort_by_key(|s| s.address);
        out
    }

    /// Checks every invariant of the bookkeeping from scratch (slow; for tests): linked
    /// segments are contiguous, free neighbours are merged, the indexes match the blocks,
    /// and every counter equals what the blocks add up to.
    pub fn check_consistency(&self) -> Result<(), String> {
        let live = self.arena.live_indices();
        let (mut allocated, mut active, mut requested, mut reserved) = (0u64, 0u64, 0u64, 0u64);
        let (mut split_count, mut split_bytes, mut segments, mut events) = (0u64, 0u64, 0u64, 0u64);
        let mut mapped_per_segment = vec![0u64; self.segments.len()];
        let mut spanned_per_segment = vec![0u64; self.segments.len()];
        let mut indexed = 0usize;
        for &i in &live {
            let n = &self.arena[i];
            let here = format!("block {i} at {:#x}+{}", n.ptr, n.size);
            if n.size == 0 {
                return Err(format!("{here}: empty block"));
            }
            if n.prev != NIL {
                let p = &self.arena[n.prev];
                if p.next != i || p.end() != n.ptr {
                    return Err(format!("{here}: broken link to its predecessor"));
                }
                if p.state == n.state && matches!(n.state, NodeState::Free | NodeState::Unmapped) {
                    return Err(format!(
                        "{here}: not merged with its {:?} predecessor",
                        n.state
                    ));
                }
            }
            if n.next != NIL && self.arena[n.next].prev != i {
                return Err(format!("{here}: broken link to its successor"));
            }
            let index = self
                .streams
                .slots
                .get(n.slot as usize)
                .map(|s| &s.pools[n.pool.index()])
                .ok_or_else(|| format!("{here}: its stream slot has no pools"))?;
            if n.has_uses == self.arena.uses(i).is_empty() {
                return Err(format!("{here}: its use flag disagrees with its use list"));
            }
            match n.state {
                NodeState::Free => {
                    if !index.by_size.contains(&self.arena, i) {
                        return Err(format!("{here}: free but not in its pool's index"));
                    }
                    indexed += 1;
                    if !n.is_expandable() && n.is_split() {
                        split_count += 1;
                        split_bytes += n.size;
                    }
                }
                NodeState::Unmapped => {
                    if index.unmapped.get(&n.ptr) != Some(&i) {
                        return Err(format!("{here}: unmapped but not in its pool's index"));
                    }
                    indexed += 1;
                }
                NodeState::Allocated => {
                    if self.allocated.get(n.ptr) != Some(i) {
                        return Err(format!("{here}: allocated but not in the live table"));
                    }
                    allocated += n.size;
                    active += n.size;
                    requested += n.requested;
                }
                NodeState::Pending => {
                    if n.event_count == 0 {
                        return Err(format!("{here}: pending without events"));
                    }
                    active += n.size;
                    requested += n.requested;
                    events += n.event_count as u64;
                }
            }
            if n.is_expandable() {
                let seg = self.segments[n.expandable as usize]
                    .as_ref()
                    .ok_or_else(|| format!("{here}: its expandable segment was released"))?;
                if seg.stream != self.streams.stream(n.slot)
                    || seg.pool != n.pool
                    || n.ptr < seg.base
                    || n.end() > seg.base + seg.size
                {
                    return Err(format!("{here}: outside its expandable segment"));
                }
                spanned_per_segment[n.expandable as usize] += n.size;
            }
            if n.state != NodeState::Unmapped {
                if n.is_expandable() {
                    mapped_per_segment[n.expandable as usize] += n.size;
                }
                reserved += n.size;
            }
            if !n.is_expandable() && n.prev == NIL {
                segments += 1;
            }
        }
        let in_indexes: usize = self
            .streams
            .slots
            .iter()
            .flat_map(|s| s.pools.iter())
            .map(|p| p.by_size.len() + p.unmapped.len())
            .sum();
        if in_indexes != indexed {
            return Err(format!(
                "the pool indexes hold {in_indexes} blocks, {indexed} expected"
            ));
        }
        if self.allocated.len() as u64 != self.stats.allocation.all.current {
            return Err("the live table disagrees with the allocation count".into());
        }
        for (k, seg) in self.segments.iter().enumerate() {
            if let Some(s) = seg {
                if spanned_per_segment[k] != s.size {
                    return Err(format!(
                        "expandable segment {k}: its blocks span {} of {} bytes",
                        spanned_per_segment[k], s.size
                    ));
                }
                if s.mapped_bytes != mapped_per_segment[k] || s.mapped_bytes % s.page != 0 {
                    return Err(format!(
                        "expandable segment {k}: {} bytes mapped, blocks say {}",
                        s.mapped_bytes, mapped_per_segment[k]
                    ));
                }
            }
        }
        let s = &self.stats;
        let checks = [
            ("allocated_bytes", s.allocated_bytes.all.current, allocated),
            ("active_bytes", s.active_bytes.all.current, active),
            ("requested_bytes", s.requested_bytes.all.current, requested),
            ("reserved_bytes", s.reserved_bytes.all.current, reserved),
            ("bytes held from the driver", self.held_bytes, reserved),
            ("inactive_split", s.inactive_split.all.current, split_count),
            (
                "inactive_split_bytes",
                s.inactive_split_bytes.all.current,
                split_bytes,
            ),
            ("segment", s.segment.all.current, segments),
            ("pending events", self.pending.len() as u64, events),
        ];
        for (name, counted, actual) in checks {
            if counted != actual {
                return Err(format!(
                    "{name} is {counted}, the blocks add up to {actual}"
                ));
            }
        }
        Ok(())
    }
}
