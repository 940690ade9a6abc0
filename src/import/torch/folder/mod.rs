//! `headroom import torch SNAPSHOT`: one run folder per device of the snapshot, holding what
//! a run writes — `timeline.csv`, `events.csv`, `alloc-log.csv`, `summary.json` and the
//! reports derived from them — so `report`, `compare` and `merge` read it like any run.
//!
//! The trace is replayed through headroom's caching-allocator model with the snapshot's own
//! settings on a simulated device (`device::choose`); every view comes from that replay, at
//! the trace's own times, and the fidelity figure says how closely the replay made PyTorch's
//! own segment decisions. A device without a trace (a snapshot taken without history) gets a
//! folder with the state its segments show.

mod events;
mod idle;
mod observer;
mod state;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;

use crate::alloc::caching::CachingConfig;
use crate::alloc::replay::{RecordedOptions, replay_recorded};
use crate::alloc::{Allocator, AllocatorSpec};
use crate::device::prelude::*;
use crate::device::sim::SimDevice;
use crate::folder::{Record, records};
use crate::outdir;
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};
use crate::report::imported::{ImportInfo, LiveAllocation, LiveAt, OriginTotal};
use crate::report::summary::{
    PhaseStatus, PhaseSummary, RunStatus, Summary, SummaryStart, WorkloadInfo,
};
use crate::units::{utc_folder_stamp, utc_timestamp};

use super::device::{ReplayDevice, choose, pytorch_reserved};
use super::live::{by_origin, live_at, origin};
use super::model::{DeviceTrace, Snapshot};
use super::requests::TorchRequests;
use super::settings;
use events::EVENTS_MAX;
use observer::{Timeline, stream_name};

/// How to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The folder to write (new or empty); with several devices, one sub-folder each.
    pub out: Option<PathBuf>,
    /// Where `<UTC stamp>-torch-<name>-device<N>/` folders go without `out`.
    pub results_root: PathBuf,
    /// A simulated profile to replay on instead of the one `device::choose` picks.
    pub profile: Option<String>,
    /// Settings to replay with instead of the snapshot's own.
    pub settings: Option<CachingConfig>,
    /// The device's total memory, as the user gives it (`--device-total`).
    pub device_total: Option<u64>,
}

/// The device figures of `trace`: the recorded OOMs verbatim, and what the user gave.
/// `simulated` is the replay device's (total, idle free), used only under `--profile`.
pub(super) fn device_evidence(
    snap: &Snapshot,
    trace: DeviceTrace,
    pre_trace_bytes: u64,
    opts: &ImportOptions,
    simulated: (u64, u64),
) -> crate::report::imported::DeviceEvidence {
    use super::model::Action;
    use crate::report::imported::{DeviceEvidence, RecordedOom};
    let (total, idle, other, from) = match (opts.device_total, opts.profile.as_deref()) {
        // The whole total assumed free at idle, as the summary's idle reading says.
        (Some(t), _) => (Some(t), Some(t), None, Some(format!("--device-total {t}"))),
        (None, Some(p)) => (
            Some(simulated.0),
            Some(simulated.1),
            Some(0),
            Some(format!("--profile {p} (assumed, not recorded)")),
        ),
        (None, None) => (None, None, None, None),
    };
    let mut ooms = Vec::new();
    pytorch_reserved(snap, trace, pre_trace_bytes, |i, reserved| {
        let e = snap.entries.get(i);
        if e.action == Action::Oom {
            let outside = total.map(|t| t.saturating_sub(e.addr).saturating_sub(reserved));
            ooms.push(RecordedOom {
                entry: (i - trace.start) as u64,
                requested_bytes: e.size,
                device_free_bytes: e.addr,
                pytorch_reserved_bytes: reserved,
                outside_pytorch_bytes: outside,
                derived_from: outside.and(from.clone()),
            });
        }
    });
    DeviceEvidence {
        device_total_bytes: total,
        idle_free_bytes: idle,
        other_processes_bytes: other,
        outside_pytorch_bytes: ooms.first().and_then(|o| o.outside_pytorch_bytes),
        basis: evidence_basis(opts),
        recorded_ooms: ooms,
    }
}

/// Whether the user gave the device (`--device-total`, `--profile`).
pub(super) fn device_given(opts: &ImportOptions) -> bool {
    opts.device_total.is_some() || opts.profile.is_some()
}

/// What the device figures of an import rest on: nothing (they are not in the snapshot), or
/// what the user gave.
pub(super) fn evidence_basis(opts: &ImportOptions) -> String {
    let from = match (opts.device_total, opts.profile.as_deref()) {
        (Some(t), _) => Some(format!("--device-total {t}")),
        (None, Some(p)) => Some(format!("--profile {p} (assumed, not recorded)")),
        (None, None) => None,
    };
    match &from {
        None => "not in the snapshot (PyTorch records the free memory at an OOM, `device_free`, not the device's total, its idle reading, other processes or memory outside PyTorch; give --device-total BYTES or --profile NAME to derive them)".to_string(),
        Some(f) if opts.device_total.is_some() => format!(
            "the total from {f}; the idle reading derived from it as the whole total free; outside PyTorch derived as the total − device_free − PyTorch's reserved at the OOM; other processes are not in the snapshot"
        ),
        Some(f) => format!("derived from {f}: the simulated device's total, idle reading and no other processes"),
    }
}

/// One device's folder.
pub struct Imported {
    pub device: u32,
    pub dir: PathBuf,
    pub summary: Summary,
}

/// Largest allocations and origins listed in the report.
const TOP: usize = 10;

/// Imports every device of the snapshot (those with a trace, and those with segments only).
pub fn import(snap: &Snapshot, opts: &ImportOptions) -> anyhow::Result<Vec<Imported>> {
    let mut devices: BTreeSet<u32> = snap.traced_devices().iter().map(|t| t.device).collect();
    devices.extend(
        snap.segments
            .iter()
            .filter_map(|s| u32::try_from(s.device).ok()),
    );
    if devices.is_empty() {
        anyhow::bail!(
            "{}: the snapshot holds no segments and no trace entries: nothing to import (was memory allocated on the GPU before it was taken?)",
            snap.source
        );
    }
    let stem = Path::new(&snap.source)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "snapshot".into());
    let several = devices.len() > 1;
    let stamp = utc_folder_stamp(SystemTime::now());
    let mut out = Vec::new();
    for d in devices {
        let dir = match &opts.out {
            Some(o) if several => outdir::create(Some(&o.join(format!("device-{d}"))), o, "", "")?,
            Some(o) => outdir::create(Some(o), o, "", "")?,
            None => outdir::create(
                None,
                &opts.results_root,
                &stamp,
                &format!("torch-{stem}-device{d}"),
            )?,
        };
        let trace = snap
            .traces
            .iter()
            .find(|t| t.device == d && !t.is_empty())
            .copied();
        state::write_segments(snap, d, &dir)?;
        let imported = match trace {
            Some(t) => one_device(snap, t, &dir, opts),
            None => state::state_only(snap, d, &dir, opts),
        }
        .with_context(|| format!("importing device {d} into {}", dir.display()))?;
        out.push(imported);
    }
    Ok(out)
}

/// `PYTORCH_CUDA_ALLOC_CONF` as recorded (none before PyTorch 2.5).
fn recorded_conf(snap: &Snapshot) -> Option<String> {
    snap.settings.as_ref().map(|s| s.conf.clone())
}

fn utc_of(time_us: Option<i64>) -> Option<String> {
    time_us
        .filter(|t| *t > 946_684_800_000_000)
        .map(|t| utc_timestamp(SystemTime::UNIX_EPOCH + Duration::from_micros(t as u64)))
}

/// The live allocations at `entry`, for the report.
pub(super) fn live_summary(snap: &Snapshot, trace: DeviceTrace, entry: u64) -> LiveAt {
    let live = live_at(snap, trace, entry);
    let largest = live
        .iter()
        .take(TOP)
        .map(|l| {
            let (o, path) = origin(snap, l.stack, l.entry);
            LiveAllocation {
                requested_bytes: l.bytes,
                entry: l.entry,
                origin: o,
                origin_path: path,
                stream: stream_name(snap, l.stream),
            }
        })
        .collect();
    LiveAt {
        entry,
        live_bytes: live.iter().map(|l| l.bytes).sum(),
        live_allocations: live.len() as u64,
        largest,
        by_origin: by_origin(snap, &live)
            .into_iter()
            .take(TOP)
            .map(|(origin, bytes, allocations)| OriginTotal {
                origin,
                bytes,
                allocations,
            })
            .collect(),
    }
}

/// Everything `summary.json` holds that does not depend on how the views were obtained.
pub(super) struct Frame<'a> {
    pub snap: &'a Snapshot,
    pub device: u32,
    pub dev: &'a mut SimDevice,
    pub rdev: &'a ReplayDevice,
    pub config: &'a CachingConfig,
    pub opts: &'a ImportOptions,
    pub idle: Reading,
    pub record: Record,
    pub end_ns: u64,
    pub status: RunStatus,
    pub requests: u64,
}

/// Fills the summary common to both kinds of import, writes it and the derived reports.
pub(super) fn finish(
    f: Frame<'_>,
    dir: &Path,
    import: ImportInfo,
    ooms: Vec<crate::oom::OomRecord>,
    allocator_stats: crate::alloc::AllocStats,
    times: (Option<i64>, Option<i64>),
) -> anyhow::Result<Imported> {
    let mut record = f.record;
    record.flush_timeline().context("writing timeline.csv")?;
    let info = f.dev.info().clone();
    let before = f.dev.before_context();
    let now = utc_timestamp(SystemTime::now());
    let idle = idle::idle_evidence(
        f.opts,
        idle::Simulated {
            total: info.total_bytes,
            free: f.idle.device_free_bytes,
            before,
            context_bytes: f.rdev.profile.memory.context_overhead_bytes.0,
        },
    );
    let summary = Summary::begin(SummaryStart {
        workload: WorkloadInfo {
            name: format!(
                "torch snapshot {} device {}",
                Path::new(&f.snap.source)
                    .file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                f.device
            ),
            file: f.snap.source.clone(),
            description: format!(
                "PyTorch memory snapshot ({}), device {}, replayed through the caching-allocator model",
                f.snap.encoding, f.device
            ),
            allocator: crate::alloc::AllocatorKind::Caching,
            allocator_settings: serde_json::to_value(AllocatorSpec::Caching(f.config.clone()))
                .unwrap_or_default(),
            sample_interval_ns: 0,
            keep_free_bytes: 0,
            allow_oom: true,
        },
        // The total as given (`--device-total`, `--profile`), else null ("not in the
        // snapshot"): the replay device's is sized from the OOM, not recorded.
        device: crate::device::DeviceInfo {
            total_bytes: idle.total.unwrap_or(0),
            ..info.clone()
        },
        started_utc: utc_of(times.0).unwrap_or_else(|| now.clone()),
        start_ns: 0,
        idle: idle.idle,
        idle_basis: Some(idle.basis),
        phases: vec![PhaseSummary {
            name: "trace".into(),
            status: if f.status == RunStatus::Oom {
                PhaseStatus::Oom
            } else {
                PhaseStatus::Completed
            },
            start_ns: Some(0),
            end_ns: Some(f.end_ns),
            actions_run: f.requests,
            actions_planned: f.requests,
            peaks: Default::default(),
        }],
        sampler_perturbation: None,
        plan: None,
    });
    let mut folder = record.with_summary(summary);
    folder.set_status(f.status, None);
    folder.set_exit_code(0);
    folder.set_finished_utc(utc_of(times.1).unwrap_or(now));
    folder.set_end_ns(f.end_ns);
    folder.set_ooms(ooms);
    folder.set_allocator_stats(allocator_stats);
    folder.set_import(import);
    folder.close_pollers(f.end_ns);
    folder.fill_peaks();
    folder.write_summary().context("writing summary.json")?;
    if let Err(e) = folder.write_reports(false) {
        crate::errln!("warning: writing the reports of {}: {e:#}", dir.display());
    }
    let summary = folder.into_summary();
    Ok(Imported {
        device: f.device,
        dir: dir.to_path_buf(),
        summary,
    })
}

fn one_device(
    snap: &Snapshot,
    trace: DeviceTrace,
    dir: &Path,
    opts: &ImportOptions,
) -> anyhow::Result<Imported> {
    let (config, mut notes) = match &opts.settings {
        Some(c) => (c.clone(), Vec::new()),
        None => {
            let s = settings::recorded(snap);
            (s.config, s.notes)
        }
    };
    let mut source = TorchRequests::new(snap, trace);
    let rdev = choose(
        snap,
        trace,
        source.pre_trace_segment_bytes,
        opts.profile.as_deref(),
    )?;
    let mut dev = SimDevice::open(rdev.profile.clone(), trace.device);
    let total = dev.info().total_bytes;
    let idle_mem = dev.mem_info()?;
    let spec = AllocatorSpec::Caching(config.clone());
    let built = spec
        .build(&mut dev)
        .map_err(|e| anyhow::anyhow!("cannot set up the caching allocator: {e}"))?;
    let mut alloc = records::alloc_log(built, dir)?;
    let mut record = Record::create(dir, vec!["trace".into()], total, 0)?;
    if !device_given(opts) {
        // The replay device's free memory is modeled on a device the snapshot does not
        // record: timeline.csv leaves it (and device used) empty.
        record.free_not_recorded();
    }
    let idle = Reading {
        t_ns: 0,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle_mem.free_bytes,
        views: ViewSet::default().with(View::OwnBytes, 0),
    };
    record.reading(idle);
    let mut tl = Timeline::new(snap, trace, record, idle_mem.free_bytes);
    tl.device_given = device_given(opts);
    tl.given_total = opts.device_total.or(opts.profile.as_ref().map(|_| total));
    tl.given_idle = tl.given_total.is_some();
    if let Some(t) = opts.device_total {
        // The idle reading derived from the total (all of it free), as the summary's.
        tl.idle_free_bytes = t;
    }
    tl.unknown_basis = evidence_basis(opts);
    let report = replay_recorded(
        &mut source,
        &mut alloc,
        &spec.to_string(),
        &mut dev,
        RecordedOptions {
            keep_going: true,
            compare: true,
        },
        &mut tl,
    )?;
    tl.flush_bucket();
    let final_stats = report.stats_at_end;
    if let Err(e) = alloc.release_all(&mut dev) {
        notes.push(format!("releasing the replay's memory failed: {e}"));
    }
    alloc.flush().context("writing alloc-log.csv")?;
    let event_rows = events::write(&mut tl.record, snap, trace).context("writing events.csv")?;
    tl.record.flush_events().context("writing events.csv")?;

    notes.extend(source.notes.iter().cloned());
    notes.extend(source.anomaly_note());
    let sk = source.skipped;
    if sk.pre_trace_block_frees > 0 || sk.pre_trace_segment_frees > 0 {
        notes.push(format!(
            "{} frees of blocks and {} releases of segments the trace never allocated (held before recording began) were left out",
            sk.pre_trace_block_frees, sk.pre_trace_segment_frees
        ));
    }
    if sk.private_pool_entries > 0 {
        notes.push(format!(
            "{} entries belong to private pools (CUDA graphs, torch.cuda.MemPool), which the model does not keep apart: they were replayed in the default pool",
            sk.private_pool_entries
        ));
    }
    if sk.releases_before_alloc > 0 {
        notes.push(format!(
            "{} releases of cached segments right before an allocation were replayed as empty_cache(): PyTorch records its out-of-memory retry and empty_cache() alike",
            sk.releases_before_alloc
        ));
    }
    if !snap.unknown_actions.is_empty() {
        notes.push(format!(
            "trace actions this reader does not know were skipped: {}",
            snap.unknown_actions
                .iter()
                .map(|(k, v)| format!("{k} ×{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !snap.ignored_keys.is_empty() {
        notes.push(format!(
            "snapshot keys not used: {}",
            snap.ignored_keys.join(", ")
        ));
    }
    if report.bad_rows.len() as u64 > sk.pre_trace_block_frees {
        notes.push(format!(
            "{} requests could not be applied (first: entry {}: {})",
            report.bad_rows.len(),
            report.bad_rows[0].line,
            report.bad_rows[0].message
        ));
    }
    if trace.len() > EVENTS_MAX {
        notes.push(format!(
            "events.csv is thinned to {EVENTS_MAX} rows: every segment decision and OOM is there, allocations and frees evenly"
        ));
    }
    let mut pt_peak = 0;
    pytorch_reserved(snap, trace, source.pre_trace_segment_bytes, |_, r| {
        pt_peak = pt_peak.max(r)
    });
    let e = &snap.entries;
    let first_time = (trace.start..trace.end).find_map(|i| e.get(i).time_us);
    let last_time = (trace.start..trace.end)
        .rev()
        .find_map(|i| e.get(i).time_us);
    let at_peak = (tl.peak_allocated.0 > 0).then(|| live_summary(snap, trace, tl.peak_allocated.1));
    let at_first_oom = tl.first_oom_entry.map(|at| live_summary(snap, trace, at));
    let import = ImportInfo {
        kind: "PyTorch memory snapshot".into(),
        source: snap.source.clone(),
        encoding: snap.encoding.to_string(),
        device_index: trace.device,
        trace_entries: trace.len() as u64,
        actions: snap
            .action_counts(&trace)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        replayed_settings: config.to_string(),
        recorded_settings: recorded_conf(snap),
        device_note: rdev.note.clone(),
        time_base: if first_time.is_some() {
            "the trace's time_us (microseconds), from its first entry".into()
        } else {
            "entry order, one microsecond each (the snapshot records no times)".into()
        },
        pytorch_reserved_peak_bytes: pt_peak,
        pre_trace_segments: source.pre_trace_segments,
        pre_trace_segment_bytes: source.pre_trace_segment_bytes,
        fidelity: report.fidelity.clone(),
        at_peak,
        at_first_oom,
        events_written: event_rows,
        device_evidence: device_evidence(
            snap,
            trace,
            source.pre_trace_segment_bytes,
            opts,
            (total, idle_mem.free_bytes),
        ),
        notes,
    };
    let status = if tl.ooms.is_empty() {
        RunStatus::Completed
    } else {
        RunStatus::Oom
    };
    let end_ns = tl.last_t_ns;
    let requests = tl.requests;
    let ooms = std::mem::take(&mut tl.ooms);
    let record = tl.record;
    finish(
        Frame {
            snap,
            device: trace.device,
            dev: &mut dev,
            rdev: &rdev,
            config: &config,
            opts,
            idle,
            record,
            end_ns,
            status,
            requests,
        },
        dir,
        import,
        ooms,
        final_stats,
        (first_time, last_time),
    )
}
