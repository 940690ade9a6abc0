//! One side of a diff, read from what the user names: a PyTorch snapshot (pickle or JSON),
//! or a result folder (`import torch`, `watch`, `run`). A snapshot gives everything — the
//! live set at PyTorch's allocated peak with its stacks, segments, settings; a folder gives
//! what its `summary.json` kept: its peaks per view and, for an import, the source lines that
//! held memory at the peak (no stacks, so no categories).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};

use crate::import::pickle::FastMap;
use crate::import::torch::live::{live_at, origin};
use crate::import::torch::model::{Action, DeviceTrace, Snapshot};
use crate::import::torch::requests::TorchRequests;
use crate::record::View;

use super::SideInfo;
use super::category::{Category, classify};

/// One allocation live at the peak, by where it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// `file.py:42 (fn)`: the user's line.
    pub origin: String,
    /// The full path of that line, where known.
    pub origin_path: String,
    pub category: Category,
    pub requested_bytes: u64,
}

/// What one side says: what the diff reports of it (`info`), and what it compares.
#[derive(Debug, Clone, Default)]
pub struct Side {
    pub info: SideInfo,
    /// The allocator settings as recorded (`PYTORCH_CUDA_ALLOC_CONF` and the parsed values).
    pub settings: BTreeMap<String, String>,
    /// Allocations live at the peak (a snapshot), or one row per source line (an import).
    pub held: Vec<Held>,
    /// Whether `held` is one row per allocation (a snapshot) or per line (a folder).
    pub held_per_allocation: bool,
}

/// Reads a side: a folder by its `summary.json`, a file as a snapshot.
pub fn load(path: &Path) -> anyhow::Result<Side> {
    let source = path.display().to_string();
    if path.is_dir() {
        return from_folder(path, source);
    }
    if !path.exists() {
        bail!(
            "{source}: no such file or folder (give two PyTorch snapshots or two result folders)"
        );
    }
    let snap = crate::import::torch::read(path)?;
    from_snapshot(&snap, source)
}

/// The snapshot a `watch --torch` folder's first process took last (its fullest trace), and
/// how many processes left snapshots.
fn watch_snapshot(dir: &Path) -> Option<(std::path::PathBuf, usize)> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join(crate::torch_job::SNAPSHOTS_DIR))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pickle"))
        .collect();
    names.sort();
    let process = |n: &str| n.splitn(3, '-').take(2).collect::<Vec<_>>().join("-");
    let first = process(names.first()?);
    let mut processes: Vec<String> = names.iter().map(|n| process(n)).collect();
    processes.dedup();
    let last = names.iter().rev().find(|n| process(n) == first)?;
    Some((
        dir.join(crate::torch_job::SNAPSHOTS_DIR).join(last),
        processes.len(),
    ))
}

fn from_folder(dir: &Path, source: String) -> anyhow::Result<Side> {
    let summary = crate::report::rundata::load_summary(dir)
        .with_context(|| format!("{source}: not a result folder headroom can diff"))?;
    if summary.watch().is_some()
        && let Some((path, processes)) = watch_snapshot(dir)
    {
        // A watch with --torch: the device's and the job's peaks from the folder, PyTorch's
        // figures and lines from the snapshot.
        let snap = crate::import::torch::read(&path)?;
        let mut side = from_snapshot(&snap, source)?;
        let peak = |v: View| summary.peaks().run.get(v.key()).map(|p| p.bytes);
        side.info.kind = "watch".into();
        side.info.device_used_peak_bytes = peak(View::DeviceUsed);
        side.info.job_used_peak_bytes = peak(View::JobUsed);
        side.info.notes.push(format!(
            "PyTorch's figures from {}{}",
            path.display(),
            if processes > 1 {
                format!(" (the first of {processes} processes that left snapshots)")
            } else {
                String::new()
            }
        ));
        return Ok(side);
    }
    let peak = |v: View| summary.peaks().run.get(v.key()).map(|p| p.bytes);
    let mut side = Side {
        info: SideInfo {
            source,
            kind: if summary.import().is_some() {
                "import"
            } else if summary.watch().is_some() {
                "watch"
            } else {
                "run"
            }
            .into(),
            device_used_peak_bytes: peak(View::DeviceUsed),
            job_used_peak_bytes: peak(View::JobUsed),
            ..SideInfo::default()
        },
        ..Side::default()
    };
    if let Some(i) = summary.import() {
        side.info.device_index = Some(i.device_index);
        side.info.reserved_peak_bytes = Some(i.pytorch_reserved_peak_bytes);
        if let Some(s) = &i.recorded_settings {
            side.settings.insert("recorded".into(), s.clone());
        }
        if let Some(at) = &i.at_peak {
            side.info.allocated_peak_bytes = Some(at.live_bytes);
            side.info.peak_entry = Some(at.entry);
            side.held = at
                .by_origin
                .iter()
                .map(|o| Held {
                    origin: o.origin.clone(),
                    origin_path: String::new(),
                    category: Category::Unknown,
                    requested_bytes: o.bytes,
                })
                .collect();
            side.info.notes.push(
                "an imported folder keeps the lines that held memory at the peak, not their stacks: categories are unknown (diff the snapshots for them)".into(),
            );
        }
    } else {
        side.info.allocated_peak_bytes = peak(View::AllocAllocated);
        side.info.reserved_peak_bytes = peak(View::AllocReserved);
        side.info.notes.push(format!(
            "a {} folder holds no stacks: no source lines to compare (watch with --torch, or diff snapshots, for them)",
            side.info.kind
        ));
    }
    Ok(side)
}

/// The entry of PyTorch's allocated peak (the first, if it is reached more than once): the
/// live set grows by each `alloc` and shrinks at the first free of each block (a block
/// allocated before the trace began shrinks it at its first recorded free).
fn allocated_peak_entry(snap: &Snapshot, trace: DeviceTrace) -> u64 {
    let mut sizes: FastMap<u64, u64> = FastMap::default();
    let mut before_trace_freed: FastMap<u64, ()> = FastMap::default();
    // A block's free is requested, then completed: only the first counts.
    let mut allocated_in_trace: FastMap<u64, ()> = FastMap::default();
    let (mut now, mut best, mut at) = (0i128, 0i128, 0u64);
    for i in trace.start..trace.end {
        let e = snap.entries.get(i);
        match e.action {
            Action::Alloc => {
                sizes.insert(e.addr, e.size);
                allocated_in_trace.insert(e.addr, ());
                now += e.size as i128;
            }
            Action::FreeRequested | Action::FreeCompleted => {
                if let Some(s) = sizes.remove(&e.addr) {
                    now -= s as i128;
                } else if !allocated_in_trace.contains_key(&e.addr)
                    && before_trace_freed.insert(e.addr, ()).is_none()
                {
                    now -= e.size as i128;
                }
            }
            _ => {}
        }
        if now > best || i == trace.start {
            best = now;
            at = (i - trace.start) as u64;
        }
    }
    at
}

fn from_snapshot(snap: &Snapshot, source: String) -> anyhow::Result<Side> {
    let traced = snap.traced_devices();
    let mut side = Side {
        info: SideInfo {
            source,
            kind: "snapshot".into(),
            ..SideInfo::default()
        },
        held_per_allocation: true,
        ..Side::default()
    };
    let trace = match traced.as_slice() {
        [] => {
            let device = snap.segments.first().map_or(0, |s| s.device.max(0) as u32);
            side.info.notes.push(
                "the snapshot records no trace (taken without memory history): the live set is the one it was taken at".into(),
            );
            DeviceTrace {
                device,
                start: 0,
                end: 0,
            }
        }
        [t, rest @ ..] => {
            if !rest.is_empty() {
                side.info.notes.push(format!(
                    "the snapshot traces {} devices: device {} is compared",
                    traced.len(),
                    t.device
                ));
            }
            *t
        }
    };
    side.info.device_index = Some(trace.device);
    let at = if trace.is_empty() {
        0
    } else {
        allocated_peak_entry(snap, trace)
    };
    let live = live_at(snap, trace, at);
    side.info.allocated_peak_bytes = Some(live.iter().map(|l| l.bytes).sum());
    side.info.peak_entry = (!trace.is_empty()).then_some(at);
    side.held = live
        .iter()
        .map(|l| {
            let (short, long) = origin(snap, l.stack, l.entry);
            Held {
                origin: short,
                origin_path: long,
                category: classify(snap.frames.stack(l.stack)),
                requested_bytes: l.bytes,
            }
        })
        .collect();
    let segments: Vec<_> = snap
        .segments
        .iter()
        .filter(|s| s.device == trace.device as i64)
        .collect();
    side.info.segments_held = Some(segments.len() as u64);
    if trace.is_empty() {
        side.info.reserved_peak_bytes = Some(segments.iter().map(|s| s.total_size).sum());
    } else {
        let pre = TorchRequests::new(snap, trace).pre_trace_segment_bytes;
        let mut peak = 0u64;
        crate::import::torch::device::pytorch_reserved(snap, trace, pre, |_, r| peak = peak.max(r));
        side.info.reserved_peak_bytes = Some(peak);
        side.info.segment_allocs = Some(
            (trace.start..trace.end)
                .filter(|&i| snap.entries.action(i) == Action::SegmentAlloc)
                .count() as u64,
        );
    }
    side.settings = settings_of(snap);
    Ok(side)
}

/// The recorded allocator settings as key → value text (empty before PyTorch 2.5).
fn settings_of(snap: &Snapshot) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(s) = &snap.settings else {
        return out;
    };
    out.insert("PYTORCH_CUDA_ALLOC_CONF".into(), s.conf.clone());
    out.insert(
        "max_split_size".into(),
        s.max_split_size_bytes
            .map_or("unlimited".into(), |b| b.to_string()),
    );
    out.insert(
        "garbage_collection_threshold".into(),
        s.garbage_collection_threshold.to_string(),
    );
    out.insert(
        "expandable_segments".into(),
        s.expandable_segments.to_string(),
    );
    for (k, v) in &s.other {
        out.insert(k.clone(), v.clone());
    }
    out
}
