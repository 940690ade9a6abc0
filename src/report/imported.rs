//! What a run folder says when its run was imported rather than run here (`headroom import
//! torch`): where the evidence came from, how faithfully headroom's allocator model
//! reproduced the recording allocator's decisions, and who held the memory at the peak.
//! Stored in `summary.json` (`import`) and rendered as a section of `report.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::alloc::replay::Fidelity;
use crate::report::markdown::cell;
use crate::report::md_table::{self, Left, Right};
use crate::units::Bytes;

/// One live allocation at a moment of interest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveAllocation {
    /// Bytes the program asked for.
    pub requested_bytes: u64,
    /// The trace entry that made it (`None`: before the trace began).
    pub entry: Option<u64>,
    /// The user's line that made it (`train.py:42 (step)`).
    pub origin: String,
    /// The same with the full file name.
    pub origin_path: String,
    pub stream: String,
}

/// Live bytes summed by the line that made them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OriginTotal {
    pub origin: String,
    pub bytes: u64,
    pub allocations: u64,
}

/// The live allocations at one trace entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveAt {
    /// Trace entry (0-based, in this device's trace).
    pub entry: u64,
    pub live_bytes: u64,
    pub live_allocations: u64,
    pub largest: Vec<LiveAllocation>,
    pub by_origin: Vec<OriginTotal>,
}

/// An `oom` entry as PyTorch recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecordedOom {
    /// Trace entry (0-based, in this device's trace).
    pub entry: u64,
    /// `size`: the request PyTorch refused, rounded, as recorded.
    pub requested_bytes: u64,
    /// `device_free`: free device memory at the failure, as recorded.
    pub device_free_bytes: u64,
    /// PyTorch's reserved memory then, per the trace's own segment entries.
    pub pytorch_reserved_bytes: u64,
    /// Memory outside PyTorch's cache then (the device total − `device_free` − reserved):
    /// `None` without a device total.
    pub outside_pytorch_bytes: Option<u64>,
    /// What `outside_pytorch_bytes` is derived from (`--device-total …`, `--profile …`).
    pub derived_from: Option<String>,
}

/// What the snapshot says about the device, and what it does not: a snapshot records the
/// free memory at each OOM, not the device's total, its idle reading, other processes or
/// memory outside PyTorch. Those stay `None` unless the user gives a device
/// (`--device-total`, `--profile`), and are then labeled as derived from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceEvidence {
    pub device_total_bytes: Option<u64>,
    pub idle_free_bytes: Option<u64>,
    pub other_processes_bytes: Option<u64>,
    /// At the first OOM.
    pub outside_pytorch_bytes: Option<u64>,
    /// Why the figures are unknown, or what they are derived from.
    pub basis: String,
    pub recorded_ooms: Vec<RecordedOom>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ImportInfo {
    /// `PyTorch memory snapshot`.
    pub kind: String,
    pub source: String,
    /// `pickle (protocol 4)` or `JSON`.
    pub encoding: String,
    pub device_index: u32,
    pub trace_entries: u64,
    /// Entries per action (`alloc`, `free_requested`, …).
    pub actions: BTreeMap<String, u64>,
    /// The caching-allocator settings the trace was replayed with.
    pub replayed_settings: String,
    /// `PYTORCH_CUDA_ALLOC_CONF` as the snapshot recorded it, when it did.
    pub recorded_settings: Option<String>,
    /// How the replay device was chosen.
    pub device_note: String,
    /// `time_us of the trace` or `entry order (no times recorded)`.
    pub time_base: String,
    /// Reserved memory per PyTorch's own segment entries.
    pub pytorch_reserved_peak_bytes: u64,
    /// Segments held when recording began (recreated before the replay).
    pub pre_trace_segments: u64,
    pub pre_trace_segment_bytes: u64,
    pub fidelity: Option<Fidelity>,
    /// Who held memory at the allocated peak, and at the first OOM.
    pub at_peak: Option<LiveAt>,
    pub at_first_oom: Option<LiveAt>,
    /// Rows of events.csv against trace entries (events.csv is thinned past a limit;
    /// alloc-log.csv keeps every request).
    pub events_written: u64,
    /// The recorded OOM figures, verbatim, and the device figures the snapshot lacks.
    pub device_evidence: DeviceEvidence,
    pub notes: Vec<String>,
}

fn live_table(o: &mut String, at: &LiveAt, title: &str) {
    let _ = writeln!(
        o,
        "\n### {title} (entry {}): {} live in {} allocations\n",
        at.entry,
        Bytes(at.live_bytes),
        at.live_allocations
    );
    let _ = writeln!(
        o,
        "{}",
        md_table::header(&[
            ("made at", Left),
            ("bytes", Right),
            ("", Right),
            ("allocations", Right),
        ])
    );
    for t in &at.by_origin {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            cell(&t.origin),
            t.bytes,
            Bytes(t.bytes),
            t.allocations
        );
    }
    let _ = writeln!(
        o,
        "\nLargest allocations:\n\n{}",
        md_table::header(&[
            ("requested", Right),
            ("", Right),
            ("made at", Left),
            ("entry", Right),
            ("stream", Left),
        ])
    );
    for l in &at.largest {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            l.requested_bytes,
            Bytes(l.requested_bytes),
            cell(if l.origin_path.is_empty() {
                &l.origin
            } else {
                &l.origin_path
            }),
            l.entry.map_or("before the trace".into(), |e| e.to_string()),
            cell(&l.stream)
        );
    }
}

/// The `report.md` section of an imported run.
pub fn section(o: &mut String, i: &ImportInfo) {
    let _ = writeln!(o, "\n## Imported: {}\n", i.kind);
    let _ = writeln!(
        o,
        "`{}` ({}), device {}: {} trace entries ({}), replayed through headroom's caching-allocator model with `{}`{}.",
        i.source,
        i.encoding,
        i.device_index,
        i.trace_entries,
        i.actions
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", "),
        if i.replayed_settings.is_empty() {
            "PyTorch's default settings".to_string()
        } else {
            i.replayed_settings.clone()
        },
        i.recorded_settings
            .as_ref()
            .map(|s| format!(" (recorded: PYTORCH_CUDA_ALLOC_CONF={s:?})"))
            .unwrap_or_default()
    );
    let _ = writeln!(o, "\n- Device: {}.", i.device_note);
    evidence(o, &i.device_evidence);
    let _ = writeln!(o, "- Time base: {}.", i.time_base);
    let _ = writeln!(
        o,
        "- PyTorch's own reserved peak (its segment entries): {} ({} bytes).",
        Bytes(i.pytorch_reserved_peak_bytes),
        i.pytorch_reserved_peak_bytes
    );
    if i.pre_trace_segments > 0 {
        let _ = writeln!(
            o,
            "- The trace began with {} segments ({}) already held: recreated from the snapshot before replaying.",
            i.pre_trace_segments,
            Bytes(i.pre_trace_segment_bytes)
        );
    }
    match &i.fidelity {
        Some(f) => {
            let _ = writeln!(
                o,
                "- **Segments reproduced: {}** — PyTorch's segment_alloc/segment_free/segment_map/segment_unmap decisions made again by the model for the same request, over {} requests{}.",
                f.summary(),
                f.requests_compared,
                if f.outcome_mismatches > 0 {
                    format!(
                        "; {} requests served in one and refused in the other",
                        f.outcome_mismatches
                    )
                } else {
                    String::new()
                }
            );
            if let Some(d) = &f.first_divergence {
                let _ = writeln!(
                    o,
                    "- First divergence at entry {}: {}{} — PyTorch: {} [{}]; model: {} [{}].",
                    d.at,
                    d.request,
                    d.origin
                        .as_ref()
                        .map(|x| format!(" (at {x})"))
                        .unwrap_or_default(),
                    d.recorded_outcome,
                    d.recorded.join(", "),
                    d.replayed_outcome,
                    d.replayed.join(", ")
                );
            }
        }
        None => {
            let _ = writeln!(o, "- Segments reproduced: not measured (no trace).");
        }
    }
    let _ = writeln!(
        o,
        "- events.csv holds {} rows for {} trace entries; alloc-log.csv holds every replayed request.",
        i.events_written, i.trace_entries
    );
    for n in &i.notes {
        let _ = writeln!(o, "- Note: {n}");
    }
    if let Some(p) = &i.at_peak {
        live_table(o, p, "Who held memory at the allocated peak");
    }
    if let Some(p) = &i.at_first_oom {
        live_table(o, p, "Who held memory at the first OOM");
    }
}

/// The device figures: recorded, derived from what the user gave, or unknown.
fn evidence(o: &mut String, e: &DeviceEvidence) {
    let fig = |v: Option<u64>| match v {
        Some(b) => format!("{} ({b} bytes)", Bytes(b)),
        None => "unknown".into(),
    };
    let _ = writeln!(
        o,
        "- Device total {}, idle free {}, other processes {}, outside PyTorch at the first OOM {}: {}.",
        fig(e.device_total_bytes),
        fig(e.idle_free_bytes),
        fig(e.other_processes_bytes),
        fig(e.outside_pytorch_bytes),
        e.basis
    );
    for r in &e.recorded_ooms {
        let _ = writeln!(
            o,
            "- Recorded OOM at entry {}: {} ({} bytes) requested, {} ({} bytes) free on the device (`device_free`), PyTorch holding {} reserved; outside PyTorch: {}.",
            r.entry,
            Bytes(r.requested_bytes),
            r.requested_bytes,
            Bytes(r.device_free_bytes),
            r.device_free_bytes,
            Bytes(r.pytorch_reserved_bytes),
            match (&r.outside_pytorch_bytes, &r.derived_from) {
                (Some(b), Some(from)) => format!("{} ({b} bytes), derived from {from}", Bytes(*b)),
                _ => "unknown (no device total)".into(),
            }
        );
    }
}
