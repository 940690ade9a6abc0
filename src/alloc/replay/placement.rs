//! Segments at the addresses the trace recorded. PyTorch's best fit takes the smallest cached
//! block that is large enough and breaks ties by address, so which of two equal blocks it
//! reuses depends on where the driver put their segments — lower after an `empty_cache`, say.
//! A replay that hands out its own rising addresses picks the other block and drifts from
//! there. So the replay's device gives each new segment the address PyTorch's segment got
//! for the same request (`segment_alloc`, or the first `segment_map` of a new expandable
//! segment), and keeps the real device's own address underneath for the real calls.
//!
//! Where the trace has no such address (a segment the recording did not allocate for this
//! request, one that would overlap a segment the replay still holds, or a trace that starts
//! late), the segment gets an address of the replay's own, above anything a device hands
//! out, and from that request on the placement is modeled rather than recorded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::fidelity::{SegmentOp, SegmentOpKind};

/// Addresses of the replay's own start here (far above any device's virtual addresses).
const OWN_BASE: u64 = 0xE000_0000_0000_0000;
/// Alignment of the replay's own addresses.
const OWN_ALIGN: u64 = 2 << 20;

/// How many placement differences are listed one by one (all are counted).
pub const LISTED: usize = 1000;

/// An allocation the replay served at another address than the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlacementDifference {
    /// The trace entry.
    pub at: u64,
    /// The request, in words.
    pub request: String,
    /// Where PyTorch put the block, and where the replay did.
    pub recorded_address: u64,
    pub replayed_address: u64,
    /// The rule of the caching allocator that decided the replay's choice.
    pub rule: String,
}

/// Where the replay's segments went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlacementReport {
    /// `recorded` (every segment at its recorded address) or `modeled from entry N`.
    pub placement: String,
    /// The first trace entry whose segment could not go to its recorded address (0 for a
    /// trace that starts late: the segments held before it are placed by the model).
    pub modeled_from_entry: Option<u64>,
    /// Why, in words.
    pub modeled_because: Option<String>,
    /// Segments placed at their recorded address, and at the replay's own.
    pub segments_at_recorded_address: u64,
    pub segments_at_own_address: u64,
    /// Allocations compared by address (up to `modeled_from_entry`), and how many the replay
    /// served elsewhere than PyTorch did.
    pub allocations_compared: u64,
    pub allocations_elsewhere: u64,
    /// The first `LISTED` of them.
    pub differences: Vec<PlacementDifference>,
}

/// The address space of the replay: recorded addresses where it can, its own elsewhere.
#[derive(Debug, Default)]
pub(super) struct Placement {
    pub on: bool,
    /// The recorded decisions of the request being replayed, not used yet.
    plan: Vec<SegmentOp>,
    /// Segments and reserved ranges by the address the allocator knows: (the real device's
    /// address, bytes).
    ranges: BTreeMap<u64, (u64, u64)>,
    next_own: u64,
    /// Why the current request's segment got an address of the replay's own.
    pub fallback: Option<String>,
    pub at_recorded: u64,
    pub at_own: u64,
}

impl Placement {
    /// The decisions the recording made for the next request.
    pub fn plan(&mut self, recorded: &[SegmentOp]) {
        self.plan.clear();
        self.plan.extend_from_slice(recorded);
    }

    /// Whether `[ptr, ptr + bytes)` is clear of every range held.
    fn clear(&self, ptr: u64, bytes: u64) -> bool {
        let Some(end) = ptr.checked_add(bytes) else {
            return false;
        };
        if bytes == 0 || end > OWN_BASE {
            return false;
        }
        match self.ranges.range(..end).next_back() {
            Some((&base, &(_, size))) => base + size <= ptr,
            None => true,
        }
    }

    /// The address for a new range of `bytes` (a `cudaMalloc` segment, or an expandable
    /// segment's reservation) whose real address is `inner`.
    pub fn place(&mut self, kind: SegmentOpKind, bytes: u64, inner: u64) -> u64 {
        if !self.on {
            return inner;
        }
        let wanted = |op: &SegmentOp| match kind {
            SegmentOpKind::SegmentAlloc => op.kind == kind && op.bytes == bytes,
            _ => op.kind == SegmentOpKind::Map,
        };
        let pick = self
            .plan
            .iter()
            .position(|op| wanted(op) && self.clear(op.ptr, bytes));
        let ptr = match pick {
            Some(i) => {
                self.at_recorded += 1;
                self.plan.remove(i).ptr
            }
            None => {
                let why = match self.plan.iter().find(|op| wanted(op)) {
                    Some(op) => format!(
                        "its recorded address {:#x} overlaps a segment the replay still holds",
                        op.ptr
                    ),
                    None if kind == SegmentOpKind::SegmentAlloc => format!(
                        "the replay took a segment of {bytes} bytes where the recording took none of that size"
                    ),
                    None => {
                        "the replay reserved an expandable segment where the recording mapped none"
                            .into()
                    }
                };
                self.fallback.get_or_insert(why);
                self.at_own += 1;
                if self.next_own == 0 {
                    self.next_own = OWN_BASE;
                }
                let ptr = self.next_own;
                self.next_own = self
                    .next_own
                    .saturating_add(bytes.div_ceil(OWN_ALIGN).max(1) * OWN_ALIGN);
                ptr
            }
        };
        self.ranges.insert(ptr, (inner, bytes));
        ptr
    }

    /// The real device's address of `ptr` (inside a range held), or `ptr` itself.
    pub fn inner(&self, ptr: u64) -> u64 {
        if !self.on {
            return ptr;
        }
        match self.ranges.range(..=ptr).next_back() {
            Some((&base, &(inner, size))) if ptr < base + size => inner + (ptr - base),
            _ => ptr,
        }
    }

    /// The range at `ptr` is gone; its real address.
    pub fn remove(&mut self, ptr: u64) -> u64 {
        if !self.on {
            return ptr;
        }
        self.ranges.remove(&ptr).map_or(ptr, |(inner, _)| inner)
    }
}

/// The rule that put a block elsewhere than PyTorch did, from both sides' decisions.
pub(super) fn rule(recorded: &[SegmentOp], replayed: &[SegmentOp]) -> String {
    let new = |ops: &[SegmentOp]| {
        ops.iter()
            .any(|o| matches!(o.kind, SegmentOpKind::SegmentAlloc | SegmentOpKind::Map))
    };
    match (new(recorded), new(replayed)) {
        (true, false) => "best fit: the replay found a cached block of at least the rounded size on the stream, where PyTorch took a new segment".into(),
        (false, true) => "no cached block on the stream was large enough in the replay, where PyTorch reused one".into(),
        (false, false) => "best fit: the smallest cached block of at least the rounded size on the stream, ties broken by address, was another block in the replay".into(),
        (true, true) => "both took a new segment; the block was cut from another place of it (split rule)".into(),
    }
}

impl std::fmt::Display for PlacementReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "placement: {} ({} segments at their recorded address, {} at the replay's own)",
            self.placement, self.segments_at_recorded_address, self.segments_at_own_address
        )?;
        if let Some(why) = &self.modeled_because {
            write!(f, ": {why}")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "allocations at PyTorch's address: {} of {} compared",
            self.allocations_compared - self.allocations_elsewhere,
            self.allocations_compared
        )?;
        for d in self.differences.iter().take(10) {
            writeln!(
                f,
                "  entry {}: {} at {:#x}, recorded at {:#x} — {}",
                d.at, d.request, d.replayed_address, d.recorded_address, d.rule
            )?;
        }
        if self.allocations_elsewhere > 10 {
            writeln!(
                f,
                "  … and {} more (all in --json, up to {LISTED})",
                self.allocations_elsewhere - 10
            )?;
        }
        Ok(())
    }
}
