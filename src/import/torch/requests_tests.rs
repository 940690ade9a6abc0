//! How trace entries become requests: plain and deferred frees, completions inside the retry
//! chain, `empty_cache()`, OOMs, and segments held before the trace began.

use crate::alloc::replay::{Request, RequestSource, SegmentOp, SegmentOpKind};

use super::TorchRequests;
use crate::import::torch::model::{Action, DeviceTrace, Encoding, Entry, Snapshot};

const MIB: u64 = 1 << 20;

fn entry(action: Action, addr: u64, size: u64) -> Entry {
    Entry {
        action,
        addr,
        size,
        stream: 0,
        pool: 0,
        time_us: None,
        stack: 0,
        meta: 0,
    }
}

fn snapshot(entries: &[Entry]) -> Snapshot {
    let mut s = Snapshot::empty("trace", Encoding::Json);
    for e in entries {
        s.entries.push(*e);
    }
    s.traces.push(DeviceTrace {
        device: 0,
        start: 0,
        end: entries.len(),
    });
    s
}

/// A request's trace position, the request and the segment decisions it made.
type Got = Vec<(u64, Request, Vec<SegmentOp>)>;

/// Every request with its position, setup ones apart, and its decisions.
fn requests(s: &Snapshot) -> (Vec<Request>, Got) {
    let mut src = TorchRequests::new(s, s.traces[0]);
    let (mut setup, mut out) = (Vec::new(), Vec::new());
    let mut d = Vec::new();
    while let Some(r) = src.next_request(&mut d) {
        if r.setup {
            setup.push(r.request);
        } else {
            out.push((r.at, r.request, d.clone()));
        }
    }
    (setup, out)
}

fn op(kind: SegmentOpKind, ptr: u64, bytes: u64) -> SegmentOp {
    SegmentOp { kind, ptr, bytes }
}

#[test]
fn entries_become_requests_with_pytorchs_decisions() {
    use Action::*;
    let (a, b, c) = (0x1000, 0x1000 + 3 * MIB, 0x1000 + 6 * MIB);
    let s = snapshot(&[
        entry(SegmentAlloc, 0x1000, 20 * MIB),
        entry(Alloc, a, 3 * MIB),
        entry(FreeRequested, a, 3 * MIB),
        entry(Alloc, b, 3 * MIB),
        // At the start of the next malloc (`process_events`): completes before it.
        entry(FreeCompleted, a, 3 * MIB),
        entry(Alloc, c, 5 * MIB),
        entry(FreeRequested, b, 3 * MIB),
        entry(FreeCompleted, b, 3 * MIB),
        entry(FreeRequested, c, 5 * MIB),
        entry(Snapshot, 0, 0),
        // Completed by a synchronize that released segments: the replay's own does it.
        entry(FreeCompleted, c, 5 * MIB),
        entry(SegmentFree, 0x1000, 20 * MIB),
        entry(Snapshot, 0, 0),
        entry(Oom, GIB_FREE, 1 << 30),
    ]);
    let (setup, got) = requests(&s);
    assert!(setup.is_empty());
    // A free completed at once is a plain free: the `free_requested` then `free_completed`
    // pair at 6 and 7.
    let want: Vec<(u64, Request, Vec<SegmentOp>)> = vec![
        (
            1,
            Request::Allocate {
                ptr: a,
                bytes: 3 * MIB,
                stream: 0,
            },
            vec![op(SegmentOpKind::SegmentAlloc, 0x1000, 20 * MIB)],
        ),
        (2, Request::FreeDeferred { ptr: a }, vec![]),
        (
            3,
            Request::Allocate {
                ptr: b,
                bytes: 3 * MIB,
                stream: 0,
            },
            vec![],
        ),
        (4, Request::CompleteDeferred { ptr: a }, vec![]),
        (
            5,
            Request::Allocate {
                ptr: c,
                bytes: 5 * MIB,
                stream: 0,
            },
            vec![],
        ),
        (6, Request::Free { ptr: b }, vec![]),
        (8, Request::FreeDeferred { ptr: c }, vec![]),
        (
            11,
            Request::EmptyCache,
            vec![op(SegmentOpKind::SegmentFree, 0x1000, 20 * MIB)],
        ),
        (
            13,
            Request::Refused {
                bytes: 1 << 30,
                stream: 0,
            },
            vec![],
        ),
    ];
    assert_eq!(got, want);
}

const GIB_FREE: u64 = 1 << 30;

#[test]
fn a_release_before_an_oom_is_the_retry_chain() {
    use Action::*;
    let s = snapshot(&[
        entry(SegmentAlloc, 0x1000, 20 * MIB),
        entry(Alloc, 0x1000, 3 * MIB),
        entry(FreeRequested, 0x1000, 3 * MIB),
        entry(FreeCompleted, 0x1000, 3 * MIB),
        entry(SegmentFree, 0x1000, 20 * MIB),
        entry(Oom, GIB_FREE, 1 << 30),
    ]);
    let (_, got) = requests(&s);
    assert_eq!(
        got.last().unwrap(),
        &(
            5,
            Request::Refused {
                bytes: 1 << 30,
                stream: 0
            },
            vec![op(SegmentOpKind::SegmentFree, 0x1000, 20 * MIB)]
        )
    );
}

#[test]
fn segments_held_before_the_trace_are_recreated_first() {
    use Action::*;
    // The trace never allocated this 20 MiB segment: it releases it, so it was held before.
    let s = snapshot(&[
        entry(Alloc, 0x9000_0000, 3 * MIB),
        entry(FreeRequested, 0x9000_0000, 3 * MIB),
        entry(FreeCompleted, 0x9000_0000, 3 * MIB),
        entry(SegmentFree, 0x5000_0000, 20 * MIB),
    ]);
    let (setup, got) = requests(&s);
    // The whole segment, then freed (cached), then nothing live in it to place.
    assert_eq!(setup.len(), 4, "{setup:?}");
    assert!(matches!(setup[0], Request::Allocate { bytes, .. } if bytes == 20 * MIB));
    assert!(matches!(setup[1], Request::Free { .. }));
    assert_eq!(
        got.last().unwrap(),
        &(
            3,
            Request::EmptyCache,
            vec![op(SegmentOpKind::SegmentFree, 0x5000_0000, 20 * MIB)]
        )
    );
}
