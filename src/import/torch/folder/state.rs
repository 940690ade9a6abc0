//! A device the snapshot has segments for but no trace (taken without
//! `_record_memory_history`): one reading of the state its segments show, and who holds the
//! memory, by the frames recorded with each block.

use std::path::Path;

use anyhow::Context;

use crate::alloc::AllocStats;
use crate::device::prelude::*;
use crate::device::profile::{DEFAULT_PROFILE, SimProfile};
use crate::device::sim::SimDevice;
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};
use crate::report::imported::ImportInfo;
use crate::report::summary::RunStatus;

use super::super::device::ReplayDevice;
use super::super::model::{BlockState, DeviceTrace, Snapshot};
use super::super::settings;
use super::{Frame, ImportOptions, Imported, finish, live_summary, recorded_conf};

/// The allocator's counters as the device's segments show them.
fn stats_of(snap: &Snapshot, device: u32) -> AllocStats {
    let mut s = AllocStats::default();
    for seg in snap.segments.iter().filter(|s| s.device == device as i64) {
        s.reserved_bytes += seg.total_size;
        s.segment_count += 1;
        let split = seg.blocks.len() > 1 && seg.is_expandable != Some(true);
        for b in &seg.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    s.allocated_bytes += b.size;
                    s.active_bytes += b.size;
                    s.requested_bytes += b.requested_size;
                }
                BlockState::ActivePendingFree => {
                    s.active_bytes += b.size;
                    s.requested_bytes += b.requested_size;
                }
                BlockState::Inactive => {
                    s.largest_free_bytes = s.largest_free_bytes.max(b.size);
                    if split {
                        s.inactive_split_bytes += b.size;
                        s.inactive_split_count += 1;
                    }
                }
            }
        }
    }
    s
}

pub(super) fn state_only(
    snap: &Snapshot,
    device: u32,
    dir: &Path,
    opts: &ImportOptions,
) -> anyhow::Result<Imported> {
    let config = opts
        .settings
        .clone()
        .unwrap_or_else(|| settings::recorded(snap).config);
    let name = opts.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
    let profile = SimProfile::resolve(name)?;
    let rdev = ReplayDevice {
        note: format!(
            "the snapshot has no trace for this device, only its segments: their state is shown on the simulated {} (profile {})",
            profile.gpu_name, profile.name
        ),
        profile,
        capacity_from_oom_bytes: None,
    };
    let mut dev = SimDevice::open(rdev.profile.clone(), device);
    let total = dev.info().total_bytes;
    let idle_free = dev.mem_info()?.free_bytes;
    let stats = stats_of(snap, device);
    let mut record = crate::folder::Record::create(dir, vec!["trace".into()], total, 0)?;
    if !super::device_given(opts) {
        record.free_not_recorded();
    }
    let idle = Reading {
        t_ns: 0,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle_free,
        views: ViewSet::default().with(View::OwnBytes, 0),
    };
    record.reading(idle);
    let mut views = stats.views();
    views.set(View::OwnBytes, stats.reserved_bytes);
    record.reading(Reading {
        t_ns: 1_000,
        phase: 0,
        source: Source::Event,
        device_free_bytes: idle_free.saturating_sub(stats.reserved_bytes),
        views,
    });
    record.flush_events()?;
    crate::folder::records::empty_alloc_log(dir)?;
    let empty = DeviceTrace {
        device,
        start: 0,
        end: 0,
    };
    let live = live_summary(snap, empty, 0);
    let import = ImportInfo {
        kind: "PyTorch memory snapshot".into(),
        source: snap.source.clone(),
        encoding: snap.encoding.to_string(),
        device_index: device,
        trace_entries: 0,
        actions: Default::default(),
        replayed_settings: config.to_string(),
        recorded_settings: recorded_conf(snap),
        device_note: rdev.note.clone(),
        time_base: "none: the snapshot has no trace (one reading of its segments)".into(),
        pytorch_reserved_peak_bytes: stats.reserved_bytes,
        pre_trace_segments: 0,
        pre_trace_segment_bytes: 0,
        fidelity: None,
        at_peak: (live.live_allocations > 0).then_some(live),
        at_first_oom: None,
        events_written: 0,
        device_evidence: super::device_evidence(snap, empty, 0, opts, (total, idle_free)),
        notes: vec![
            "no history was recorded: peaks are the state at the snapshot, not over time (record with torch.cuda.memory._record_memory_history() for a timeline)".into(),
        ],
    };
    finish(
        Frame {
            snap,
            device,
            dev: &mut dev,
            rdev: &rdev,
            config: &config,
            opts,
            idle,
            record,
            end_ns: 1_000,
            status: RunStatus::Completed,
            requests: 0,
        },
        dir,
        import,
        Vec::new(),
        stats,
        (None, None),
    )
}

/// `segments.csv`: the device's segments as the snapshot holds them when it was taken, one
/// row each, byte counts as raw integers.
pub(super) fn write_segments(snap: &Snapshot, device: u32, dir: &Path) -> anyhow::Result<u64> {
    let path = dir.join("segments.csv");
    let mut w = csv::Writer::from_path(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    w.write_record([
        "address",
        "total_bytes",
        "allocated_bytes",
        "active_bytes",
        "stream",
        "pool",
        "expandable",
        "blocks",
        "live_blocks",
    ])?;
    let mut rows = 0;
    for s in snap.segments.iter().filter(|s| s.device == device as i64) {
        let live = s
            .blocks
            .iter()
            .filter(|b| b.state != BlockState::Inactive)
            .count();
        w.write_record([
            s.address.to_string(),
            s.total_size.to_string(),
            s.allocated_size.to_string(),
            s.active_size.to_string(),
            s.stream.to_string(),
            if s.is_large { "large" } else { "small" }.to_string(),
            s.is_expandable.map_or(String::new(), |e| e.to_string()),
            s.blocks.len().to_string(),
            live.to_string(),
        ])?;
        rows += 1;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(rows)
}
