//! The watch report's PyTorch section (`torch.md`, also appended to `report.md`): per
//! snapshot, every view apart at each OOM and at the device's true peak, the top source lines
//! at that instant, `explain` of each OOM with the snapshot's exact figures; and each snapshot
//! imported as a run folder beside it (`torch/<snapshot>/`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::import::torch::folder::{ImportOptions, import};
use crate::import::torch::model::{DeviceTrace, Snapshot};
use crate::oom_message::{Detail, Quantity};
use crate::record::View;
use crate::report::md_table::{self, Left, Right, cell};
use crate::report::summary::Summary;
use crate::units::Bytes;

use super::SNAPSHOTS_DIR;
use super::instants::{Instant, Timeline, at_entry, entry_at, oom_entries};

/// Lines listed at each instant.
const TOP_LINES: usize = 5;

fn reading(o: &mut String, view: &str, v: Option<u64>, source: &str) {
    let (raw, human) = match v {
        Some(b) => (b.to_string(), Bytes(b).to_string()),
        None => ("".into(), "-".into()),
    };
    let _ = writeln!(o, "{}", md_table::row(&[view, &raw, &human, source]));
}

fn age(r: Option<super::instants::Reading>) -> String {
    r.map_or(String::new(), |r| {
        format!(", read {:.1} ms before", r.age_ns as f64 / 1e6)
    })
}

fn paired_age(at: &Instant) -> String {
    at.paired.map_or(" (none read)".into(), |p| {
        format!(" read {:.1} ms before", p.age_ns as f64 / 1e6)
    })
}

fn instant_table(o: &mut String, at: &Instant, recorded_free: Option<u64>) {
    let _ = writeln!(
        o,
        "\n{}",
        md_table::header(&[
            ("view", Left),
            ("bytes", Right),
            ("", Right),
            ("from", Left)
        ])
    );
    reading(
        o,
        "device_used_bytes",
        at.device_used.map(|r| r.bytes),
        &format!("NVML, the whole device{}", age(at.device_used)),
    );
    reading(
        o,
        "job_used_bytes",
        at.job_used.map(|r| r.bytes),
        &format!(
            "NVML's process list, the job's processes{}",
            age(at.job_used)
        ),
    );
    reading(
        o,
        "pytorch_reserved_bytes",
        Some(at.pytorch_reserved_bytes),
        "the snapshot: segments PyTorch held",
    );
    reading(
        o,
        "pytorch_allocated_bytes",
        Some(at.pytorch_allocated_bytes),
        "the snapshot: live allocations, as requested",
    );
    reading(
        o,
        "outside_pytorch_bytes",
        at.outside_pytorch_bytes(),
        &format!(
            "job − PyTorch reserved, both as of one row{}: context, NCCL, cuBLAS, other libraries",
            paired_age(at)
        ),
    );
    reading(
        o,
        "other_processes_bytes",
        at.other_processes_bytes(),
        &format!("device − job, both as of one row{}", paired_age(at)),
    );
    if let Some(f) = recorded_free {
        reading(
            o,
            "device_free_bytes",
            Some(f),
            "the snapshot: cudaMemGetInfo's free at the OOM",
        );
    }
    let _ = writeln!(o, "\nTop source lines holding memory at that instant:\n");
    let _ = writeln!(
        o,
        "{}",
        md_table::header(&[
            ("made at", Left),
            ("bytes", Right),
            ("", Right),
            ("allocations", Right)
        ])
    );
    for (line, bytes, n) in at.top_lines.iter().take(TOP_LINES) {
        let _ = writeln!(
            o,
            "{}",
            md_table::row(&[
                cell(line),
                bytes.to_string(),
                Bytes(*bytes).to_string(),
                n.to_string()
            ])
        );
    }
}

/// PyTorch's `format_size` (c10/cuda/CUDACachingAllocator.cpp), for the message explained.
fn format_size(n: u64) -> String {
    match n {
        0..=1024 => format!("{n} bytes"),
        1025..=1_048_576 => format!("{:.2} KiB", n as f64 / 1024.0),
        1_048_577..=1_073_741_824 => format!("{:.2} MiB", n as f64 / 1_048_576.0),
        _ => format!("{:.2} GiB", n as f64 / 1_073_741_824.0),
    }
}

/// `explain` of an OOM with the snapshot's figures, exact, in place of a message's rounding:
/// the request and free memory PyTorch recorded, PyTorch's allocated and reserved memory at
/// that entry, the device's total and (a job of one GPU process) the job's memory from the
/// watch.
fn explain_oom(
    at: &Instant,
    requested: u64,
    free: u64,
    total: u64,
    device_index: u32,
    one_process: bool,
) -> Option<String> {
    let unallocated = at
        .pytorch_reserved_bytes
        .saturating_sub(at.pytorch_allocated_bytes);
    // "This process" is NVML's figure for the job only when the job had one process on the GPU.
    let this = at.job_used.map(|j| j.bytes).filter(|_| one_process);
    let text = format!(
        "CUDA out of memory. Tried to allocate {}. GPU {device_index} has a total capacity of {} of which {} is free. {}Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch but unallocated.",
        format_size(requested),
        format_size(total),
        format_size(free),
        this.map_or(String::new(), |b| format!(
            "Including non-PyTorch memory, this process has {} memory in use. ",
            format_size(b)
        )),
        format_size(at.pytorch_allocated_bytes),
        format_size(unallocated),
    );
    let mut msg = crate::oom_message::find_all(&text).into_iter().next()?;
    let exact = |b: u64| Quantity::exact(&format!("{b} bytes"), b);
    if let Detail::PytorchCaching {
        requested: r,
        device_total,
        device_free,
        this_process,
        allocated,
        reserved_unallocated,
        ..
    } = &mut msg.detail
    {
        *r = exact(requested);
        *device_total = Some(exact(total));
        *device_free = Some(exact(free));
        *this_process = this.map(exact);
        *allocated = Some(exact(at.pytorch_allocated_bytes));
        *reserved_unallocated = Some(exact(unallocated));
    }
    let e = crate::explain::explain(msg, &[]);
    Some(crate::explain::render::render_message(&e, 0, Some(1)))
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `rank0-pid123` of `rank0-pid123-002-oom`: the process that took the snapshot.
fn process_of(stem: &str) -> &str {
    let mut parts = stem.splitn(3, '-');
    match (parts.next(), parts.next()) {
        (Some(r), Some(p)) => &stem[..r.len() + 1 + p.len()],
        _ => stem,
    }
}

/// One snapshot's part of the section: the OOMs not shown from an earlier snapshot of the
/// same process (`seen`), and the device's peak from the process's last snapshot (`peak`).
fn snapshot_part(
    o: &mut String,
    (snap, trace): (&Snapshot, DeviceTrace),
    (timeline, summary, one_process): (&Timeline, &Summary, bool),
    seen: &mut BTreeSet<(String, Option<i64>, u64)>,
    process: &str,
    peak: bool,
) {
    for e in oom_entries(snap, trace) {
        let i = trace.start + e as usize;
        let key = (
            process.to_string(),
            snap.entries.time_us(i),
            snap.entries.size(i),
        );
        if !seen.insert(key) {
            let _ = writeln!(
                o,
                "\nThe out of memory at trace entry {e} is the one shown above (an earlier snapshot of this process)."
            );
            continue;
        }
        let at = at_entry(snap, trace, e, None, timeline);
        let (free, requested) = (snap.entries.get(i).addr, snap.entries.size(i));
        let when = at.t_ns.map_or("outside the watch's readings".into(), |t| {
            format!("{:.3} s into the watch", t as f64 / 1e9)
        });
        let _ = writeln!(
            o,
            "\n#### Out of memory at trace entry {e} ({when}): {} ({requested} bytes) requested on device {}",
            Bytes(requested),
            trace.device
        );
        instant_table(o, &at, Some(free));
        if let Some(total) = summary.device_total()
            && let Some(text) = explain_oom(&at, requested, free, total, trace.device, one_process)
        {
            let _ = writeln!(
                o,
                "\nexplain, with the snapshot's figures:\n\n```\n{}```",
                text
            );
        }
    }
    if let Some(p) = summary
        .peaks()
        .run
        .get(View::DeviceUsed.key())
        .filter(|_| peak)
        && let Some(e) = entry_at(snap, trace, timeline.unix_us_of(p.t_ns))
    {
        let at = at_entry(snap, trace, e, Some(p.t_ns), timeline);
        let _ = writeln!(
            o,
            "\n#### At the device's true peak ({} at {:.3} s; the snapshot's state at trace entry {e})",
            Bytes(p.bytes),
            p.t_ns as f64 / 1e9
        );
        instant_table(o, &at, None);
    }
}

/// Writes each snapshot's import beside it and returns the section.
pub fn write(
    dir: &Path,
    (summary, one_process): (&Summary, bool),
    snapshots: &[PathBuf],
    notes: &[(String, String)],
) -> anyhow::Result<String> {
    let timeline = Timeline::read(dir, summary)?;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n## PyTorch (`--torch`): every view at one timestamp\n\nThe snapshots' trace times and the device's readings on one clock (the watch's start, `started_utc`, to the millisecond). Views are apart, never added: `outside_pytorch_bytes` and `other_processes_bytes` are differences of two readings, which NVML's process list takes less often than the device view (their age is given)."
    );
    let mut seen = BTreeSet::new();
    for (k, path) in snapshots.iter().enumerate() {
        let name = stem(path);
        let process = process_of(&name);
        // Files sort by process, then by the number each process gives its snapshots.
        let last = snapshots
            .get(k + 1)
            .is_none_or(|next| process_of(&stem(next)) != process);
        let _ = writeln!(o, "\n### `{SNAPSHOTS_DIR}/{name}.pickle`");
        let snap = match crate::import::torch::read(path) {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(o, "\nnot read: {e:#}");
                continue;
            }
        };
        for trace in snap.traced_devices() {
            snapshot_part(
                &mut o,
                (&snap, trace),
                (&timeline, summary, one_process),
                &mut seen,
                process,
                last,
            );
        }
        let opts = ImportOptions {
            out: Some(dir.join(SNAPSHOTS_DIR).join(&name)),
            results_root: dir.join(SNAPSHOTS_DIR),
            profile: None,
            settings: None,
            device_total: summary.device_total(),
        };
        match import(&snap, &opts) {
            Ok(done) => {
                for d in done {
                    let _ = writeln!(
                        o,
                        "\nImported as a run folder: `{}` (replay it: `headroom replay {SNAPSHOTS_DIR}/{name}.pickle --find-capacity`, `--try-settings`).",
                        d.dir.strip_prefix(dir).unwrap_or(&d.dir).display()
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(o, "\nnot imported: {e:#}");
            }
        }
    }
    let said: Vec<&(String, String)> = notes
        .iter()
        .filter(|(_, l)| !l.starts_with("snapshot ") && !l.starts_with("recording "))
        .collect();
    if !said.is_empty() {
        let _ = writeln!(o, "\nNotes from the job's processes:\n");
        for (who, line) in said {
            let _ = writeln!(o, "- {who}: {}", cell(line));
        }
    }
    Ok(o)
}
