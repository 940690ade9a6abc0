//! Which allocations were live at a given trace entry, and who made them: the largest ones
//! and the frames that hold the most, for "what filled memory at the peak?".
//!
//! Live means allocated and not yet freed by the program (between `alloc` and
//! `free_requested`, PyTorch's allocated memory). Blocks allocated before recording began
//! are counted from the snapshot's final segments (with their frames) and from frees the
//! trace records of blocks it never allocated.

use std::collections::BTreeMap;

use crate::import::pickle::{FastMap, FastSet};

use super::frames::{long, short, user_frame};
use super::model::{Action, BlockState, DeviceTrace, Snapshot};

/// One live allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub addr: u64,
    /// What the program asked for.
    pub bytes: u64,
    /// Trace entry that made it (`None`: before the trace).
    pub entry: Option<u64>,
    pub stack: u32,
    pub stream: u16,
}

/// Every allocation live just after trace entry `at` (device-relative index).
pub fn live_at(snap: &Snapshot, trace: DeviceTrace, at: u64) -> Vec<Live> {
    let end = (trace.start + at as usize + 1).min(trace.end);
    // A pass over every entry of a trace of millions: hashed cheaply, by address.
    let mut allocated_in_trace: FastSet<u64> = FastSet::default();
    let mut live: FastMap<u64, Live> = FastMap::default();
    // Blocks freed in the trace that it never allocated: live until their free.
    let mut freed_later: FastMap<u64, (usize, Live)> = FastMap::default();
    for i in trace.start..trace.end {
        let e = snap.entries.get(i);
        match e.action {
            Action::Alloc => {
                allocated_in_trace.insert(e.addr);
                if i < end {
                    live.insert(
                        e.addr,
                        Live {
                            addr: e.addr,
                            bytes: e.size,
                            entry: Some((i - trace.start) as u64),
                            stack: e.stack,
                            stream: e.stream,
                        },
                    );
                }
            }
            Action::FreeRequested | Action::FreeCompleted => {
                if i < end {
                    live.remove(&e.addr);
                }
                if !allocated_in_trace.contains(&e.addr) && !freed_later.contains_key(&e.addr) {
                    freed_later.insert(
                        e.addr,
                        (
                            i,
                            Live {
                                addr: e.addr,
                                bytes: e.size,
                                entry: None,
                                stack: 0,
                                stream: e.stream,
                            },
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    for (i, l) in freed_later.into_values() {
        if i >= end {
            live.entry(l.addr).or_insert(l);
        }
    }
    for s in snap
        .segments
        .iter()
        .filter(|s| s.device == trace.device as i64)
    {
        for b in &s.blocks {
            if b.state == BlockState::Inactive || allocated_in_trace.contains(&b.address) {
                continue;
            }
            live.entry(b.address).or_insert(Live {
                addr: b.address,
                bytes: b.requested_size.max(1),
                entry: None,
                stack: b.stack,
                stream: snap.streams.find(&s.stream).unwrap_or(0),
            });
        }
    }
    let mut out: Vec<Live> = live.into_values().collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.addr.cmp(&b.addr)));
    out
}

/// The line a user acts on for a stack, short and long.
pub fn origin(snap: &Snapshot, stack: u32, entry: Option<u64>) -> (String, String) {
    if stack == 0 {
        let why = if entry.is_none() {
            "(allocated before the trace began)"
        } else {
            "(no frames recorded)"
        };
        return (why.into(), String::new());
    }
    let f = user_frame(snap, stack);
    (short(f), long(f))
}

/// Live bytes summed by the user's line that made them, largest first.
pub fn by_origin(snap: &Snapshot, live: &[Live]) -> Vec<(String, u64, u64)> {
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in live {
        let (o, _) = origin(snap, l.stack, l.entry);
        let s = sums.entry(o).or_default();
        s.0 += l.bytes;
        s.1 += 1;
    }
    let mut out: Vec<(String, u64, u64)> = sums.into_iter().map(|(o, (b, n))| (o, b, n)).collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}
