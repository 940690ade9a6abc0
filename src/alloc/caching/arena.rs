//! Block storage for the caching allocator, built so the hot path allocates nothing.
//!
//! Blocks live in one arena (a `Vec`, slots reused) and link to their neighbours in the
//! segment by index (`prev`/`next`, PyTorch's `Block::prev/next`). Free blocks are indexed per
//! stream and pool by `(size, address)` in a size-class index (`free_index.rs`) whose lists
//! are linked through the blocks (`fprev`/`fnext`), so best fit is a bitmap search and a short
//! walk (PyTorch's `BlockPool::blocks` with `BlockComparatorSize`); unmapped pieces of
//! expandable segments are indexed by address (`BlockPool::unmapped`,
//! `BlockComparatorAddress`). The streams that used a block (`record_stream`) are kept beside
//! the arena, so a block is a small fixed record that reuse overwrites.

use std::collections::BTreeMap;

use crate::device::{DevPtr, StreamId};

use super::free_index::SizeIndex;
use super::sizes::PoolKind;

/// "No block": the end of a segment's chain, or a block outside any expandable segment.
pub(crate) const NIL: u32 = u32::MAX;

/// Where a block is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// Mapped and cached for reuse (in its pool's `by_size` index, except while being handed
    /// out).
    Free,
    /// Handed out to a caller.
    Allocated,
    /// Freed by the caller while other streams may still use it: waits for their events.
    Pending,
    /// Address space of an expandable segment with no physical memory behind it.
    Unmapped,
}

/// One block: 64 bytes, aligned to a cache line, so reading a block's fields or its links
/// touches one line.
#[derive(Debug, Clone)]
#[repr(align(64))]
pub(crate) struct Node {
    pub ptr: DevPtr,
    pub size: u64,
    /// What the caller asked for (0 when not allocated).
    pub requested: u64,
    /// The pool's free-block search count when the block was last cached (for garbage
    /// collection ages, PyTorch's `gc_count_base`).
    pub gc_base: u64,
    /// Its stream's slot in `StreamSlots` (where its pools are, and its `StreamId`).
    pub slot: u32,
    pub prev: u32,
    pub next: u32,
    /// Index of the expandable segment it belongs to, or `NIL` for a `cudaMalloc` segment.
    pub expandable: u32,
    /// Events still to complete before a pending free becomes a free block.
    pub event_count: u32,
    pub pool: PoolKind,
    pub state: NodeState,
    /// Whether other streams used the block (`record_stream`); they are in `Arena::uses`.
    pub has_uses: bool,
    /// Neighbours in its free-index class list (`free_index.rs`); the head of a list keeps the
    /// list's last block in `fprev`.
    pub fprev: u32,
    pub fnext: u32,
}

impl Node {
    pub fn new(ptr: DevPtr, size: u64, slot: u32, pool: PoolKind, state: NodeState) -> Node {
        Node {
            ptr,
            size,
            requested: 0,
            gc_base: 0,
            slot,
            prev: NIL,
            next: NIL,
            expandable: NIL,
            event_count: 0,
            pool,
            state,
            has_uses: false,
            fprev: NIL,
            fnext: NIL,
        }
    }

    /// Part of a segment with other blocks (PyTorch's `is_split`).
    pub fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }

    pub fn is_expandable(&self) -> bool {
        self.expandable != NIL
    }

    pub fn end(&self) -> DevPtr {
        self.ptr + self.size
    }
}

/// All blocks, by index; freed slots are reused.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    nodes: Vec<Node>,
    /// Per slot, the other streams that used its block (`record_stream`); as long as `nodes`,
    /// and kept (emptied) when a slot is reused so reuse allocates nothing.
    uses: Vec<Vec<StreamId>>,
    vacant: Vec<u32>,
}

impl Arena {
    #[inline]
    pub fn insert(&mut self, node: Node) -> u32 {
        debug_assert!(!node.has_uses);
        match self.vacant.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.uses.push(Vec::new());
                (self.nodes.len() - 1) as u32
            }
        }
    }

    #[inline]
    pub fn remove(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        n.prev = NIL;
        n.next = NIL;
        n.size = 0;
        if n.has_uses {
            n.has_uses = false;
            self.uses[i as usize].clear();
        }
        self.vacant.push(i);
    }

    /// The other streams that used block `i`.
    pub fn uses(&self, i: u32) -> &[StreamId] {
        &self.uses[i as usize]
    }

    /// Notes that `stream` used block `i` (once per stream).
    pub fn add_use(&mut self, i: u32, stream: StreamId) {
        let uses = &mut self.uses[i as usize];
        if !uses.contains(&stream) {
            uses.push(stream);
            self.nodes[i as usize].has_uses = true;
        }
    }

    /// Forgets the streams that used block `i`.
    pub fn clear_uses(&mut self, i: u32) {
        self.uses[i as usize].clear();
        self.nodes[i as usize].has_uses = false;
    }

    /// Takes block `i`'s use list out (to record events on it); give the buffer back with
    /// `restore_uses`.
    pub fn take_uses(&mut self, i: u32) -> Vec<StreamId> {
        self.nodes[i as usize].has_uses = false;
        std::mem::take(&mut self.uses[i as usize])
    }

    /// Puts an emptied use list buffer back (so reuse allocates nothing).
    pub fn restore_uses(&mut self, i: u32, mut buf: Vec<StreamId>) {
        buf.clear();
        self.uses[i as usize] = buf;
    }

    /// Indices of blocks in use (not vacant), in slot order.
    pub fn live_indices(&self) -> Vec<u32> {
        let mut vacant = vec![false; self.nodes.len()];
        for &v in &self.vacant {
            vacant[v as usize] = true;
        }
        (0..self.nodes.len() as u32)
            .filter(|&i| !vacant[i as usize])
            .collect()
    }

    pub fn clear(&mut self) {
        self.nodes.clear();
        self.uses.clear();
        self.vacant.clear();
    }
}

const _: () = assert!(
    std::mem::size_of::<Node>() == 64,
    "a block fills one cache line"
);

impl std::ops::Index<u32> for Arena {
    type Output = Node;
    #[inline]
    fn index(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }
}

impl std::ops::IndexMut<u32> for Arena {
    #[inline]
    fn index_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }
}

/// The free blocks of one pool on one stream.
#[derive(Debug, Default)]
pub(crate) struct FreeIndex {
    /// Cached (mapped, free) blocks by `(size, address)`: best fit is the first key ≥ the size.
    pub by_size: SizeIndex,
    /// Unmapped pieces of expandable segments by address.
    pub unmapped: BTreeMap<DevPtr, u32>,
}

/// Both pools of one stream. Blocks are reused only on the stream they were allocated on.
#[derive(Debug)]
pub(crate) struct StreamPools {
    pub stream: StreamId,
    pub pools: [FreeIndex; 2],
}

/// Per-stream pools, found by a short linear search (programs use a handful of streams).
#[derive(Debug, Default)]
pub(crate) struct StreamSlots {
    pub slots: Vec<StreamPools>,
}

impl StreamSlots {
    #[inline]
    pub fn find(&self, stream: StreamId) -> Option<usize> {
        self.slots.iter().position(|s| s.stream == stream)
    }

    /// The slot of `stream`, created empty on first use.
    #[inline]
    pub fn slot(&mut self, stream: StreamId) -> usize {
        match self.find(stream) {
            Some(i) => i,
            None => {
                self.slots.push(StreamPools {
                    stream,
                    pools: Default::default(),
                });
                self.slots.len() - 1
            }
        }
    }

    #[inline]
    pub fn at(&mut self, slot: u32, pool: PoolKind) -> &mut FreeIndex {
        &mut self.slots[slot as usize].pools[pool.index()]
    }

    /// The stream of slot `slot`.
    #[inline]
    pub fn stream(&self, slot: u32) -> StreamId {
        self.slots[slot as usize].stream
    }

    /// Slot numbers ordered by stream id (the order PyTorch's size comparator visits streams).
    pub fn ordered(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.slots.len()).collect();
        v.sort_by_key(|&i| self.slots[i].stream);
        v
    }
}
