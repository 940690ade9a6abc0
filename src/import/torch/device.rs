//! The simulated device a snapshot's trace is replayed on. A snapshot does not record the
//! card's memory, except at an out-of-memory: its `device_free` next to what PyTorch held
//! then is what the allocator could have had. Without an OOM, the trace is replayed on a
//! named profile (the default one when none is given), and the report says so.

use anyhow::Context;

use crate::device::profile::{DEFAULT_PROFILE, SimProfile};
use crate::device::rounding::AllocRounding;
use crate::units::Bytes;

use super::model::{Action, DeviceTrace, Snapshot};

/// A device for the replay and how it was chosen.
#[derive(Debug, Clone)]
pub struct ReplayDevice {
    pub profile: SimProfile,
    /// In words, for the report.
    pub note: String,
    /// Set when the capacity comes from the trace's first `oom` entry.
    pub capacity_from_oom_bytes: Option<u64>,
}

/// PyTorch's reserved memory after each entry, per its own segment entries, starting from
/// `pre_trace_bytes` (segments held when recording began).
pub fn pytorch_reserved(
    snap: &Snapshot,
    trace: DeviceTrace,
    pre_trace_bytes: u64,
    mut each: impl FnMut(usize, u64),
) {
    let mut reserved = pre_trace_bytes as i128;
    for i in trace.start..trace.end {
        let e = &snap.entries;
        match e.action(i) {
            Action::SegmentAlloc | Action::SegmentMap => reserved += e.size(i) as i128,
            Action::SegmentFree | Action::SegmentUnmap => reserved -= e.size(i) as i128,
            _ => {}
        }
        each(i, reserved.max(0) as u64);
    }
}

/// The device to replay `trace` on: `profile` if given; else one sized from the first OOM
/// entry (PyTorch's reserved memory then plus the `device_free` it recorded, and never less
/// than the reserved peak before it); else the default profile.
pub fn choose(
    snap: &Snapshot,
    trace: DeviceTrace,
    pre_trace_bytes: u64,
    profile: Option<&str>,
) -> anyhow::Result<ReplayDevice> {
    if let Some(name) = profile {
        let p = SimProfile::resolve(name).with_context(|| format!("--profile {name}"))?;
        let note = format!(
            "replayed on the simulated {} (--profile {name})",
            p.gpu_name
        );
        return Ok(ReplayDevice {
            profile: p,
            note,
            capacity_from_oom_bytes: None,
        });
    }
    let base = SimProfile::resolve(DEFAULT_PROFILE)?;
    let mut peak_before = 0u64;
    let mut estimate = None;
    pytorch_reserved(snap, trace, pre_trace_bytes, |i, reserved| {
        if estimate.is_some() {
            return;
        }
        if snap.entries.action(i) == Action::Oom {
            estimate = Some(reserved + snap.entries.addr(i));
        } else {
            peak_before = peak_before.max(reserved);
        }
    });
    let Some(estimate) = estimate else {
        let note = format!(
            "the snapshot does not record the device's memory (no OOM in the trace): replayed on the simulated {} (profile {})",
            base.gpu_name, base.name
        );
        return Ok(ReplayDevice {
            profile: base,
            note,
            capacity_from_oom_bytes: None,
        });
    };
    let capacity = AllocRounding::of_profile(&base).at_most_bytes(estimate.max(peak_before));
    let mut p = base;
    p.name = "torch-snapshot".into();
    p.gpu_name = format!("PyTorch snapshot device {} (simulated)", trace.device);
    p.memory.total_bytes.0 = capacity;
    p.memory.context_overhead_bytes.0 = 0;
    p.other_processes.clear();
    let note = format!(
        "the device is sized from the trace's first OOM entry: PyTorch held {} reserved plus {} free = {} ({capacity} bytes) for the allocator; the context and other processes are outside it",
        Bytes(estimate - snap_device_free(snap, trace).unwrap_or(0)),
        Bytes(snap_device_free(snap, trace).unwrap_or(0)),
        Bytes(capacity)
    );
    Ok(ReplayDevice {
        profile: p,
        note,
        capacity_from_oom_bytes: Some(capacity),
    })
}

/// `device_free` of the trace's first OOM entry.
fn snap_device_free(snap: &Snapshot, trace: DeviceTrace) -> Option<u64> {
    (trace.start..trace.end)
        .find(|&i| snap.entries.action(i) == Action::Oom)
        .map(|i| snap.entries.addr(i))
}
