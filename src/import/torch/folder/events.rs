//! `events.csv` of an imported trace: one row per trace entry, as PyTorch named it. Past
//! `EVENTS_MAX` entries, allocations and frees are thinned evenly; segment decisions, OOMs
//! and snapshots are always kept (alloc-log.csv keeps every request).

use std::collections::HashMap;

use crate::folder::Record;
use crate::record::timeline::{EventResult, EventRow};

use super::super::frames::{short, user_frame};
use super::super::model::{Action, DeviceTrace, Snapshot};
use super::observer::{TRACE_T0_NS, stream_name};

/// Most rows an import's events.csv holds.
pub const EVENTS_MAX: usize = 200_000;

/// Writes the rows; returns how many.
pub(super) fn write(log: &mut Record, snap: &Snapshot, trace: DeviceTrace) -> std::io::Result<u64> {
    let e = &snap.entries;
    let common = |a: Action| {
        matches!(
            a,
            Action::Alloc | Action::FreeRequested | Action::FreeCompleted
        )
    };
    let n_common = (trace.start..trace.end)
        .filter(|&i| common(e.action(i)))
        .count();
    let others = trace.len() - n_common;
    let room = EVENTS_MAX.saturating_sub(others).max(1);
    let stride = n_common.div_ceil(room).max(1);
    let t0 = (trace.start..trace.end).find_map(|i| e.get(i).time_us);
    let mut origins: HashMap<u32, String> = HashMap::new();
    let mut seen_common = 0usize;
    let mut written = 0;
    for i in trace.start..trace.end {
        let x = e.get(i);
        if common(x.action) {
            seen_common += 1;
            if (seen_common - 1) % stride != 0 {
                continue;
            }
        }
        let at = (i - trace.start) as u64;
        let t_ns = match (x.time_us, t0) {
            (Some(t), Some(t0)) => (t.saturating_sub(t0).max(0) as u64).saturating_mul(1000),
            _ => at * 1000,
        };
        let origin = if x.stack == 0 {
            ""
        } else {
            origins
                .entry(x.stack)
                .or_insert_with(|| short(user_frame(snap, x.stack)))
                .as_str()
        };
        let step = format!("entry {at}");
        let stream = stream_name(snap, x.stream);
        let oom = x.action == Action::Oom;
        let detail = if oom {
            String::new()
        } else {
            format!("addr {:#x}", x.addr)
        };
        log.event(&EventRow {
            t_ns: TRACE_T0_NS + t_ns,
            phase: "trace",
            step: &step,
            op: x.action.name(),
            name: origin,
            stream: &stream,
            requested_bytes: Some(x.size),
            size_bytes: None,
            latency_ns: 0,
            result: if oom {
                EventResult::Oom
            } else {
                EventResult::Ok
            },
            device_free_bytes: oom.then_some(x.addr),
            detail: &detail,
        })?;
        written += 1;
    }
    Ok(written)
}
