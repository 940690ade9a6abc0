//! Replaying a trace recorded by another allocator — a PyTorch snapshot's, once the importer
//! has turned it into requests — through the same engine as a log, and measuring how closely
//! the replay follows the recording allocator's own segment decisions.
//!
//! A source hands out requests in order, each with the segment decisions the recording
//! allocator made while serving it. Frees that waited on other streams are split in two: the
//! program's free (`FreeDeferred`) and the moment the block became reusable
//! (`CompleteDeferred`); the device wrapper (`trace_device`) holds the block back until then.

use crate::alloc::{AllocStats, Allocator, OomRequest};
use crate::device::{AllocDevice, DeviceCore};

use super::engine::{Replay, Step};
use super::fidelity::{Fidelity, SegmentOp};
use super::placement::{self, PlacementDifference, PlacementReport};
use super::trace_device::{TraceDevice, lock};
use super::{BadRowPolicy, LogFormat, ReplayError, ReplayOptions, ReplayReport};

/// Stream labels of the deferred-free lanes: `u64::MAX - n` is lane stream `u32::MAX - n`.
fn lane_label(lane: crate::device::StreamId) -> u64 {
    u64::MAX - (u32::MAX - lane.0) as u64
}

/// One request of a recorded trace. Addresses and streams are the recording's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Allocate {
        ptr: u64,
        bytes: u64,
        stream: u64,
    },
    /// A free that made the block reusable at once.
    Free {
        ptr: u64,
    },
    /// A free of a block other streams still used: reusable only at `CompleteDeferred`
    /// (or a synchronize).
    FreeDeferred {
        ptr: u64,
    },
    /// The deferred free of `ptr` completed.
    CompleteDeferred {
        ptr: u64,
    },
    /// `empty_cache()`.
    EmptyCache,
    /// The recording allocator refused this request (`bytes` as it was rounded).
    Refused {
        bytes: u64,
        stream: u64,
    },
}

/// A request with where and when it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub request: Request,
    /// Position in the source (a snapshot's trace entry index).
    pub at: u64,
    /// Time since the trace's first entry.
    pub t_ns: u64,
    /// Recreates the state the allocator was in when recording began (a trace that starts
    /// mid-run): applied, but neither compared nor counted.
    pub setup: bool,
}

/// Where requests come from.
pub trait RequestSource {
    /// How the source is named in messages.
    fn name(&self) -> &str;
    fn format(&self) -> LogFormat;
    /// Whether the source carries the recording allocator's segment decisions.
    fn has_decisions(&self) -> bool;
    /// The next request; `decisions` is cleared and filled with the segment decisions the
    /// recording allocator made for it.
    fn next_request(&mut self, decisions: &mut Vec<SegmentOp>) -> Option<Recorded>;
    /// Where the program made the request at `at` (a stack frame), if known.
    fn origin(&self, _at: u64) -> Option<String> {
        None
    }
    /// How the source names a stream label (the recording's stream id).
    fn stream_name(&self, label: u64) -> String {
        label.to_string()
    }
    /// The request in words, for a divergence.
    fn describe(&self, r: &Recorded) -> String {
        match r.request {
            Request::Allocate { bytes, stream, .. } => format!(
                "alloc of {bytes} bytes on stream {}",
                self.stream_name(stream)
            ),
            Request::Refused { bytes, stream } => format!(
                "request of {bytes} bytes (refused when recorded) on stream {}",
                self.stream_name(stream)
            ),
            Request::Free { ptr } => format!("free of {ptr:#x}"),
            Request::FreeDeferred { ptr } => format!("deferred free of {ptr:#x}"),
            Request::CompleteDeferred { ptr } => format!("completion of the free of {ptr:#x}"),
            Request::EmptyCache => "empty_cache".into(),
        }
    }
}

/// What a request came to in the replay.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Served; the allocator accounts this many bytes for the block.
    Served {
        size_bytes: u64,
    },
    Refused(Box<OomRequest>),
    /// A free, completion or empty_cache applied.
    Done,
    /// Could not be applied (a free of a block the trace never allocated, say).
    Skipped,
}

impl Outcome {
    pub fn served(&self) -> bool {
        !matches!(self, Outcome::Refused(_))
    }
}

/// Sees each request after it was applied, with the allocator and device as they are then.
pub trait Observer {
    fn seen(
        &mut self,
        r: &Recorded,
        outcome: &Outcome,
        alloc: &dyn Allocator,
        dev: &mut dyn DeviceCore,
    ) -> Result<(), ReplayError>;
}

/// An observer that looks at nothing.
pub struct Unobserved;

impl Observer for Unobserved {
    fn seen(
        &mut self,
        _: &Recorded,
        _: &Outcome,
        _: &dyn Allocator,
        _: &mut dyn DeviceCore,
    ) -> Result<(), ReplayError> {
        Ok(())
    }
}

/// The allocator's counters at the moment its reserved memory peaked.
#[derive(Debug, Default, Clone, Copy)]
pub struct AtReservedPeak {
    pub stats: AllocStats,
    pub at: u64,
}

impl Observer for AtReservedPeak {
    fn seen(
        &mut self,
        r: &Recorded,
        _: &Outcome,
        alloc: &dyn Allocator,
        _: &mut dyn DeviceCore,
    ) -> Result<(), ReplayError> {
        let s = alloc.stats();
        if s.reserved_bytes > self.stats.reserved_bytes {
            self.stats = s;
            self.at = r.at;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedOptions {
    /// Go on past a refused request (an import records every OOM); otherwise the first
    /// refusal ends the replay, as for a log.
    pub keep_going: bool,
    /// Compare segment decisions with the recording's (meaningful for the caching allocator).
    pub compare: bool,
}

/// Replays a recorded trace against `alloc` (owned by the caller: nothing is released; frees
/// still deferred at the end of the trace are completed).
pub fn replay_recorded(
    source: &mut dyn RequestSource,
    alloc: &mut dyn Allocator,
    allocator_name: &str,
    dev: &mut dyn AllocDevice,
    opts: RecordedOptions,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, ReplayError> {
    let (mut tdev, state) = TraceDevice::new(dev);
    // A trace with the recording's decisions puts its segments where the recording did.
    let placed = source.has_decisions();
    lock(&state).placement.on = placed;
    let mut place = PlacementReport::default();
    let ropts = ReplayOptions {
        on_bad_row: BadRowPolicy::Collect,
        pace: false,
    };
    let name = source.name().to_string();
    let mut replay = Replay::with_format(
        &name,
        source.format(),
        alloc,
        allocator_name,
        &mut tdev,
        &ropts,
    )?;
    let mut bound_lanes = std::collections::HashSet::new();
    let compare = opts.compare && source.has_decisions();
    let mut fidelity = Fidelity::default();
    let (mut recorded, mut replayed) = (Vec::new(), Vec::new());
    while let Some(r) = source.next_request(&mut recorded) {
        {
            let mut s = lock(&state);
            s.take_ops(&mut replayed);
            s.placement.plan(&recorded);
        }
        let counts = {
            let rep = replay.report_mut();
            (rep.events, rep.allocations, rep.frees)
        };
        let step = match r.request {
            Request::Allocate { ptr, bytes, stream } => {
                replay.allocate(r.at, ptr, bytes, stream.into())?
            }
            Request::Free { ptr } => replay.free(r.at, ptr, None)?,
            Request::FreeDeferred { ptr } => {
                let lane = lock(&state).arm(ptr);
                let label = lane_label(lane);
                if bound_lanes.insert(label) {
                    replay.bind_stream(label, lane);
                }
                let step = match replay.record_stream(r.at, ptr, label.into())? {
                    Step::Skipped => Step::Skipped,
                    _ => {
                        // One request, not two.
                        replay.report_mut().events -= 1;
                        replay.free(r.at, ptr, None)?
                    }
                };
                lock(&state).disarm(lane);
                step
            }
            Request::CompleteDeferred { ptr } => {
                lock(&state).complete(ptr);
                Step::Done
            }
            Request::EmptyCache => replay.empty_cache(r.at)?,
            Request::Refused { bytes, stream } => {
                replay.retry_refused(r.at, bytes, stream.into(), true)?
            }
        };
        let fallback = {
            let mut s = lock(&state);
            s.take_ops(&mut replayed);
            s.placement.fallback.take()
        };
        if placed {
            if let Some(why) = fallback
                && place.modeled_from_entry.is_none()
            {
                place.modeled_from_entry = Some(r.at);
                place.modeled_because = Some(if r.setup {
                    format!("the trace starts late, and a segment held before it {why}")
                } else {
                    why
                });
            }
            if let (Request::Allocate { ptr, .. }, Step::Served(_), false) =
                (r.request, &step, r.setup)
                && place.modeled_from_entry.is_none()
                && let Some(ours) = replay.ours(ptr)
            {
                place.allocations_compared += 1;
                if ours != ptr {
                    place.allocations_elsewhere += 1;
                    if place.differences.len() < placement::LISTED {
                        place.differences.push(PlacementDifference {
                            at: r.at,
                            request: source.describe(&r),
                            recorded_address: ptr,
                            replayed_address: ours,
                            rule: placement::rule(&recorded, &replayed),
                        });
                    }
                }
            }
        }
        let outcome = match step {
            Step::Served(size_bytes) => Outcome::Served { size_bytes },
            Step::Refused(o) => Outcome::Refused(o),
            Step::Done => Outcome::Done,
            Step::Skipped => Outcome::Skipped,
        };
        if r.setup {
            let rep = replay.report_mut();
            (rep.events, rep.allocations, rep.frees) = counts;
        }
        if compare && !r.setup {
            let recorded_served = !matches!(r.request, Request::Refused { .. });
            fidelity.add(
                r.at,
                &recorded,
                &replayed,
                recorded_served,
                outcome.served(),
                || (source.describe(&r), source.origin(r.at)),
            );
        }
        replay.with_state(|alloc, dev| observer.seen(&r, &outcome, alloc, dev))?;
        if !outcome.served() && !opts.keep_going {
            break;
        }
    }
    let mut report = replay.finish();
    // Deferred frees still waiting complete now, through this wrapper, so the allocator
    // holds no event of it when the caller releases everything on its own device.
    lock(&state).complete_all();
    alloc
        .complete_pending_frees(&mut tdev)
        .map_err(|error| ReplayError::Allocator {
            source_name: name.clone(),
            line: 0,
            error,
        })?;
    if let Some(f) = &mut report.first_failure {
        f.origin = source.origin(f.line);
        if let Ok(label) = f.log_stream.parse::<u64>() {
            f.log_stream = source.stream_name(label);
        }
    }
    if compare {
        report.fidelity = Some(fidelity);
    }
    report.stats_at_end = alloc.stats();
    if placed {
        // The allocator knows the recorded addresses: its memory goes back through them.
        alloc
            .release_all(&mut tdev)
            .map_err(|error| ReplayError::Allocator {
                source_name: name.clone(),
                line: 0,
                error,
            })?;
        let s = lock(&state);
        place.segments_at_recorded_address = s.placement.at_recorded;
        place.segments_at_own_address = s.placement.at_own;
        place.placement = match place.modeled_from_entry {
            None => "recorded".into(),
            Some(n) => format!("modeled from entry {n}"),
        };
        report.placement = Some(place);
    }
    Ok(report)
}
