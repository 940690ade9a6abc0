//! The cache as it was when recording began. `_record_memory_history` is often switched on
//! after a model is loaded, so the trace opens with segments (and live blocks) it never
//! allocated. Replaying from an empty cache would then take new segments where PyTorch
//! reused old ones. The segments are known — from the snapshot's final segments and from the
//! trace's releases of segments it never allocated — and so are the blocks inside them that
//! were live: they are recreated, in address order, before the first entry is replayed.
//!
//! Sizes of blocks freed during the trace are known only as requested; they are rounded as
//! the recorded settings round. Expandable segments are not recreated (their mapped ranges
//! are not recorded at the start).

use std::collections::{HashMap, VecDeque};

use crate::import::pickle::FastSet;

use crate::alloc::caching::{CachingConfig, SMALL_SIZE_BYTES};
use crate::alloc::replay::Request;

use super::model::{Action, BlockState, DeviceTrace, Snapshot};

/// Addresses the replay hands out for fillers (never a real device address).
const FILLER_BASE: u64 = 0xF000_0000_0000_0000;

/// A segment held before the trace began.
#[derive(Debug, Clone)]
struct PreSegment {
    address: u64,
    size: u64,
    stream: u64,
    large: bool,
    expandable: bool,
}

#[derive(Debug, Default)]
pub(super) struct Prologue {
    pub requests: VecDeque<Request>,
    /// Segments held when the trace began.
    pub segments: FastSet<u64>,
    /// Blocks live when the trace began.
    pub live: FastSet<u64>,
    pub segment_count: u64,
    pub segment_bytes: u64,
    pub notes: Vec<String>,
    /// Per recreated segment: the index of the request that allocates it, its recorded
    /// address and size (so the replay places it there).
    pub hints: VecDeque<(usize, u64, u64)>,
}

/// The stream label of a PyTorch stream value (its index in the snapshot's table).
fn label(snap: &Snapshot, stream: i64, extra: &mut Vec<i64>) -> u64 {
    if let Some(i) = snap.streams.find(&stream) {
        return i as u64;
    }
    let i = extra.iter().position(|s| *s == stream).unwrap_or_else(|| {
        extra.push(stream);
        extra.len() - 1
    });
    (snap.streams.values.len() + i) as u64
}

pub(super) fn build(snap: &Snapshot, trace: DeviceTrace, config: &CachingConfig) -> Prologue {
    let mut out = Prologue::default();
    let e = &snap.entries;
    let mut extra_streams = Vec::new();
    // First sight of each segment and block address in the trace.
    let mut seg_seen = FastSet::default();
    let mut blk_seen = FastSet::default();
    let mut pre_segments: Vec<PreSegment> = Vec::new();
    // Address → (block bytes, requested bytes, stream label).
    let mut pre_blocks: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    for i in trace.start..trace.end {
        let x = e.get(i);
        match x.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                seg_seen.insert(x.addr);
            }
            Action::SegmentFree if seg_seen.insert(x.addr) => {
                pre_segments.push(PreSegment {
                    address: x.addr,
                    size: x.size,
                    stream: x.stream as u64,
                    large: x.size != 2 << 20,
                    expandable: false,
                });
            }
            Action::Alloc => {
                blk_seen.insert(x.addr);
            }
            Action::FreeRequested | Action::FreeCompleted if blk_seen.insert(x.addr) => {
                let bytes = config.round_size(x.size.max(1));
                pre_blocks.insert(x.addr, (bytes, x.size, x.stream as u64));
            }
            _ => {}
        }
    }
    for s in snap
        .segments
        .iter()
        .filter(|s| s.device == trace.device as i64)
    {
        if seg_seen.contains(&s.address) || s.pool_id != (0, 0) {
            continue;
        }
        let stream = label(snap, s.stream, &mut extra_streams);
        pre_segments.push(PreSegment {
            address: s.address,
            size: s.total_size,
            stream,
            large: s.is_large,
            expandable: s.is_expandable == Some(true),
        });
        for b in &s.blocks {
            if b.state != BlockState::Inactive && !blk_seen.contains(&b.address) {
                pre_blocks.insert(b.address, (b.size, b.requested_size, stream));
            }
        }
    }
    if pre_segments.is_empty() {
        return out;
    }
    if pre_segments.iter().any(|s| s.expandable) {
        out.notes.push(format!(
            "the trace begins with {} segments already held, some expandable: they are not recreated, so the replay starts from an empty cache",
            pre_segments.len()
        ));
        return out;
    }
    pre_segments.sort_by_key(|s| (s.stream, s.large, s.address));
    let max_split = config.max_split_size_bytes();
    let mut fillers = Vec::new();
    let mut filler = |out: &mut Prologue, bytes: u64, stream: u64| {
        let ptr = FILLER_BASE + fillers.len() as u64;
        fillers.push(ptr);
        out.requests
            .push_back(Request::Allocate { ptr, bytes, stream });
    };
    for seg in &pre_segments {
        out.hints
            .push_back((out.requests.len(), seg.address, seg.size));
        out.segments.insert(seg.address);
        out.segment_count += 1;
        out.segment_bytes += seg.size;
        let end = seg.address + seg.size;
        let mut blocks: Vec<(u64, u64)> = pre_blocks
            .iter()
            .filter(|(a, (b, _, _))| **a >= seg.address && **a + *b <= end)
            .map(|(a, (b, _, _))| (*a, *b))
            .collect();
        blocks.sort_unstable();
        let stream = seg.stream;
        if seg.large {
            if seg.size >= max_split {
                // Oversize segments are never split: one block or none.
                match blocks.as_slice() {
                    [(a, _)] => {
                        out.live.insert(*a);
                        out.requests.push_back(Request::Allocate {
                            ptr: *a,
                            bytes: seg.size,
                            stream,
                        });
                    }
                    _ => {
                        filler(&mut out, seg.size, stream);
                    }
                }
                continue;
            }
            // The whole segment first (a segment of exactly this size), then its pieces
            // carved from the front in address order.
            let whole = FILLER_BASE - 1 - out.segment_count;
            out.requests.push_back(Request::Allocate {
                ptr: whole,
                bytes: seg.size,
                stream,
            });
            out.requests.push_back(Request::Free { ptr: whole });
        }
        let mut at = seg.address;
        for (a, b) in blocks {
            if a < at {
                continue;
            }
            gap(&mut out, &mut filler, a - at, stream, seg.large);
            out.live.insert(a);
            out.requests.push_back(Request::Allocate {
                ptr: a,
                bytes: b,
                stream,
            });
            at = a + b;
        }
        gap(&mut out, &mut filler, end - at, stream, seg.large);
    }
    for ptr in fillers {
        out.requests.push_back(Request::Free { ptr });
    }
    out
}

/// Fills `bytes` of free space inside a segment being recreated (small-pool pieces are at
/// most 1 MiB, so they stay in the small pool).
fn gap(
    out: &mut Prologue,
    filler: &mut impl FnMut(&mut Prologue, u64, u64),
    mut bytes: u64,
    stream: u64,
    large: bool,
) {
    while bytes > 0 {
        let piece = if large {
            bytes
        } else {
            bytes.min(SMALL_SIZE_BYTES)
        };
        filler(out, piece, stream);
        bytes -= piece;
    }
}
