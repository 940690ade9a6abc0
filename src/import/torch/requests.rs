//! A device's trace as allocator requests, with PyTorch's own segment decisions for each.
//!
//! Entries map to requests as `c10/cuda/CUDACachingAllocator.cpp` records them:
//! - `alloc` (`alloc_found_block`, with the size the program asked for) is an allocation; the
//!   `segment_alloc`/`segment_map` entries before it, and `segment_free`/`segment_unmap` of
//!   its retry chain, are the decisions PyTorch made for it.
//! - `free_requested` followed at once by `free_completed` of the same block (`free` then
//!   `free_block`) is a plain free. A `free_requested` alone is a free held back by other
//!   streams (`insert_events`); its `free_completed` comes later, from `process_events` at
//!   the start of a later `malloc` — or from `synchronize_and_free_events` inside
//!   `release_cached_blocks`, in which case it is followed by that call's `segment_free`s or
//!   by an `oom`, and the replayed allocator's own synchronize completes it.
//! - A run of `segment_free`/`segment_unmap` not followed by an allocation is `empty_cache()`.
//!   One followed by an allocation is either `empty_cache()` or `malloc`'s retry chain
//!   (`release_cached_blocks` after `cudaMalloc` failed): PyTorch records both alike, and
//!   both release every fully free segment, so with PyTorch's defaults it is replayed as
//!   `empty_cache()` before the allocation (`releases_before_alloc` counts them). With
//!   `max_split_size_mb` or garbage collection a release may be partial, and it stays part
//!   of the allocation. Before an `oom` it is the retry chain.
//! - `oom` (with the rounded size) is a request PyTorch refused.
//! - A trace that starts mid-run opens with the segments and live blocks it never allocated
//!   recreated (`prologue`); frees of anything else the trace never allocated are counted and
//!   left out.

use std::collections::VecDeque;

use crate::import::pickle::{FastMap, FastSet};

use crate::alloc::replay::{LogFormat, Recorded, Request, RequestSource, SegmentOp, SegmentOpKind};

use super::frames::{short, user_frame};
use super::model::{Action, DeviceTrace, Snapshot};
use super::prologue;

/// What the trace held that the replay leaves out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// `segment_free`/`segment_unmap` of segments allocated before the trace began.
    pub pre_trace_segment_frees: u64,
    /// Frees of blocks allocated before the trace began.
    pub pre_trace_block_frees: u64,
    /// Entries in a private pool (CUDA graphs, `torch.cuda.MemPool`), replayed in the
    /// default pool.
    pub private_pool_entries: u64,
    /// Releases of cached segments just before an allocation, replayed as `empty_cache()`.
    pub releases_before_alloc: u64,
}

/// What follows a run of segment releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterRelease {
    /// Anything but an allocation: the run is `empty_cache()`.
    Nothing,
    Allocation,
    Oom,
}

pub struct TorchRequests<'a> {
    snap: &'a Snapshot,
    trace: DeviceTrace,
    name: String,
    next: usize,
    /// Blocks allocated in the trace and not freed.
    live: FastSet<u64>,
    /// Blocks freed by the program whose free has not completed.
    pending: FastSet<u64>,
    /// Segments (and mapped ranges' starts) the trace allocated and has not freed.
    segments: FastSet<u64>,
    /// Garbage collection was on: a `segment_free` inside `malloc` may come from it, which
    /// makes a completed free before it ambiguous; it is then taken as `process_events`'.
    gc_active: bool,
    /// Releases can be partial (`max_split_size_mb` or garbage collection).
    partial_releases: bool,
    t0_us: Option<i64>,
    /// Requests that recreate the cache as it was when recording began.
    setup: VecDeque<Request>,
    /// Where the recreated segments were (`Prologue::hints`), and the setup requests given.
    setup_hints: VecDeque<(usize, u64, u64)>,
    setup_given: usize,
    pub skipped: Skipped,
    /// Segments held when the trace began (recreated), and their bytes.
    pub pre_trace_segments: u64,
    pub pre_trace_segment_bytes: u64,
    pub notes: Vec<String>,
    /// Sizes of the blocks the trace allocated and has not freed, to check each free against.
    sizes: FastMap<u64, u64>,
    /// Entries that contradict the trace before them (a free whose size is not its
    /// allocation's, time running backwards), counted, the first `ANOMALIES_LISTED` listed.
    pub anomalies: u64,
    pub anomaly_list: Vec<String>,
}

/// How many anomalies are listed one by one (all are counted).
pub const ANOMALIES_LISTED: usize = 20;

impl<'a> TorchRequests<'a> {
    pub fn new(snap: &'a Snapshot, trace: DeviceTrace) -> TorchRequests<'a> {
        let t0_us = (trace.start..trace.end).find_map(|i| snap.entries.time_us(i));
        let gc_active = snap
            .settings
            .as_ref()
            .is_some_and(|s| s.garbage_collection_threshold > 0.0);
        let config = super::settings::recorded(snap).config;
        let pro = prologue::build(snap, trace, &config);
        let partial_releases = gc_active || config.max_split_size_mb.is_some();
        TorchRequests {
            snap,
            trace,
            name: format!("{}, device {}", snap.source, trace.device),
            next: trace.start,
            live: pro.live,
            pending: FastSet::default(),
            segments: pro.segments,
            gc_active,
            partial_releases,
            t0_us,
            setup: pro.requests,
            setup_hints: pro.hints,
            setup_given: 0,
            skipped: Skipped::default(),
            pre_trace_segments: pro.segment_count,
            pre_trace_segment_bytes: pro.segment_bytes,
            notes: pro.notes,
            sizes: FastMap::default(),
            anomalies: 0,
            anomaly_list: Vec::new(),
        }
        .with_times_checked()
    }

    /// Times that run backwards, each an anomaly.
    fn with_times_checked(mut self) -> Self {
        let mut last = None;
        for i in self.trace.start..self.trace.end {
            let Some(t) = self.snap.entries.time_us(i) else {
                continue;
            };
            if let Some(l) = last
                && t < l
            {
                let at = self.at(i);
                self.anomaly(format!(
                    "entry {at}: time runs backwards ({t} µs, after {l} µs)"
                ));
            }
            last = Some(t);
        }
        self
    }

    /// The trace entry index (0-based within the device's trace) of absolute index `i`.
    fn at(&self, i: usize) -> u64 {
        (i - self.trace.start) as u64
    }

    fn t_ns(&self, i: usize) -> u64 {
        match (self.snap.entries.time_us(i), self.t0_us) {
            (Some(t), Some(t0)) => (t.saturating_sub(t0).max(0) as u64).saturating_mul(1000),
            // No times recorded: one microsecond per entry, in order.
            _ => self.at(i) * 1000,
        }
    }

    /// A completed free at `i` belongs to a synchronize inside the retry chain when what
    /// follows the completions is a segment release or an OOM.
    fn completion_in_retry_chain(&self, mut i: usize) -> bool {
        let e = &self.snap.entries;
        while i < self.trace.end && e.action(i) == Action::FreeCompleted {
            i += 1;
        }
        if i >= self.trace.end {
            return false;
        }
        match e.action(i) {
            Action::Oom => true,
            Action::SegmentFree | Action::SegmentUnmap => !self.gc_active,
            _ => false,
        }
    }

    /// What follows the run of segment releases starting at `i` (frees completed in between
    /// are the retry chain's synchronize, between its two kinds of release).
    fn after_release(&self, mut i: usize) -> AfterRelease {
        let e = &self.snap.entries;
        while i < self.trace.end
            && matches!(
                e.action(i),
                Action::SegmentFree | Action::SegmentUnmap | Action::FreeCompleted
            )
        {
            i += 1;
        }
        if i >= self.trace.end {
            return AfterRelease::Nothing;
        }
        match e.action(i) {
            Action::Alloc | Action::SegmentAlloc | Action::SegmentMap => AfterRelease::Allocation,
            Action::Oom => AfterRelease::Oom,
            _ => AfterRelease::Nothing,
        }
    }

    fn anomaly(&mut self, what: String) {
        self.anomalies += 1;
        if self.anomaly_list.len() < ANOMALIES_LISTED {
            self.anomaly_list.push(what);
        }
    }

    /// The anomalies in one note, if any.
    pub fn anomaly_note(&self) -> Option<String> {
        (self.anomalies > 0).then(|| {
            format!(
                "{} entries contradict the trace before them and were replayed as they are: {}{}",
                self.anomalies,
                self.anomaly_list.join("; "),
                if self.anomalies > self.anomaly_list.len() as u64 {
                    "; …"
                } else {
                    ""
                }
            )
        })
    }

    fn op(&mut self, i: usize, decisions: &mut Vec<SegmentOp>) {
        let e = self.snap.entries.get(i);
        let kind = match e.action {
            Action::SegmentAlloc => SegmentOpKind::SegmentAlloc,
            Action::SegmentFree => SegmentOpKind::SegmentFree,
            Action::SegmentMap => SegmentOpKind::Map,
            _ => SegmentOpKind::Unmap,
        };
        match kind {
            SegmentOpKind::SegmentAlloc | SegmentOpKind::Map => {
                self.segments.insert(e.addr);
            }
            _ => {
                // Unmaps may cover part of a mapped range: only a release of a segment the
                // trace never allocated is left out.
                let known = self.segments.remove(&e.addr)
                    || (kind == SegmentOpKind::Unmap && !self.segments.is_empty());
                if !known {
                    self.skipped.pre_trace_segment_frees += 1;
                    return;
                }
            }
        }
        decisions.push(SegmentOp {
            kind,
            ptr: e.addr,
            bytes: e.size,
        });
    }
}

impl RequestSource for TorchRequests<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn format(&self) -> LogFormat {
        LogFormat::TorchSnapshot
    }

    fn has_decisions(&self) -> bool {
        true
    }

    fn next_request(&mut self, decisions: &mut Vec<SegmentOp>) -> Option<Recorded> {
        decisions.clear();
        if let Some(request) = self.setup.pop_front() {
            let i = self.setup_given;
            self.setup_given += 1;
            if self.setup_hints.front().is_some_and(|h| h.0 == i)
                && let Some((_, ptr, bytes)) = self.setup_hints.pop_front()
            {
                decisions.push(SegmentOp {
                    kind: SegmentOpKind::SegmentAlloc,
                    ptr,
                    bytes,
                });
            }
            return Some(Recorded {
                request,
                at: 0,
                t_ns: 0,
                setup: true,
            });
        }
        let entries = &self.snap.entries;
        while self.next < self.trace.end {
            let i = self.next;
            self.next += 1;
            let e = entries.get(i);
            if e.pool != 0 {
                self.skipped.private_pool_entries += 1;
            }
            match e.action {
                Action::Alloc => {
                    self.sizes.insert(e.addr, e.size);
                }
                Action::FreeRequested | Action::FreeCompleted => {
                    // Checked at the first of the two (a deferred free's completion
                    // comes later, and a `free_requested` may not be recorded).
                    if let Some(size) = self.sizes.remove(&e.addr)
                        && size != e.size
                    {
                        self.anomaly(format!(
                            "entry {}: {} of {:#x} with {} bytes, allocated with {size} bytes",
                            self.at(i),
                            e.action.name(),
                            e.addr,
                            e.size
                        ));
                    }
                }
                _ => {}
            }
            let request = match e.action {
                Action::SegmentAlloc | Action::SegmentMap => {
                    self.op(i, decisions);
                    continue;
                }
                Action::SegmentFree | Action::SegmentUnmap => {
                    let after = self.after_release(i);
                    let in_malloc = match after {
                        AfterRelease::Nothing => false,
                        AfterRelease::Oom => true,
                        AfterRelease::Allocation => self.partial_releases,
                    };
                    if !decisions.is_empty() || in_malloc {
                        self.op(i, decisions);
                        continue;
                    }
                    if after == AfterRelease::Allocation {
                        self.skipped.releases_before_alloc += 1;
                    }
                    // `empty_cache()`: the whole run of releases.
                    self.op(i, decisions);
                    while self.next < self.trace.end
                        && matches!(
                            entries.action(self.next),
                            Action::SegmentFree | Action::SegmentUnmap
                        )
                    {
                        self.op(self.next, decisions);
                        self.next += 1;
                    }
                    if decisions.is_empty() {
                        // Only segments from before the trace: nothing to replay.
                        continue;
                    }
                    Request::EmptyCache
                }
                Action::Alloc => {
                    self.live.insert(e.addr);
                    Request::Allocate {
                        ptr: e.addr,
                        bytes: e.size,
                        stream: e.stream as u64,
                    }
                }
                Action::FreeRequested => {
                    if !self.live.remove(&e.addr) {
                        self.skipped.pre_trace_block_frees += 1;
                        if self.next < self.trace.end
                            && entries.action(self.next) == Action::FreeCompleted
                            && entries.addr(self.next) == e.addr
                        {
                            self.next += 1;
                        }
                        continue;
                    }
                    if self.next < self.trace.end
                        && entries.action(self.next) == Action::FreeCompleted
                        && entries.addr(self.next) == e.addr
                    {
                        self.next += 1;
                        Request::Free { ptr: e.addr }
                    } else {
                        self.pending.insert(e.addr);
                        Request::FreeDeferred { ptr: e.addr }
                    }
                }
                Action::FreeCompleted => {
                    if self.pending.remove(&e.addr) {
                        if self.completion_in_retry_chain(self.next) {
                            continue;
                        }
                        Request::CompleteDeferred { ptr: e.addr }
                    } else if self.live.remove(&e.addr) {
                        // `free_requested` was not recorded (`skip_actions`).
                        Request::Free { ptr: e.addr }
                    } else {
                        self.skipped.pre_trace_block_frees += 1;
                        continue;
                    }
                }
                Action::Oom => Request::Refused {
                    bytes: e.size,
                    stream: e.stream as u64,
                },
                Action::Snapshot | Action::Annotate | Action::Other => continue,
            };
            return Some(Recorded {
                request,
                at: self.at(i),
                t_ns: self.t_ns(i),
                setup: false,
            });
        }
        None
    }

    fn origin(&self, at: u64) -> Option<String> {
        let i = self.trace.start + at as usize;
        if i >= self.trace.end {
            return None;
        }
        let stack = self.snap.entries.get(i).stack;
        (stack != 0).then(|| short(user_frame(self.snap, stack)))
    }

    fn stream_name(&self, label: u64) -> String {
        match self.snap.streams.values.get(label as usize) {
            Some(0) => "0 (default)".into(),
            Some(s) => format!("{s:#x}"),
            None => label.to_string(),
        }
    }
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod tests;
