//! The spread of each figure across a node's GPUs, and the GPUs that differ from the others.
//!
//! A GPU is compared with the node's median (upper median for an even count), so one odd card
//! among eight stands out and never drags the reference with it. A byte figure is flagged
//! when it is further than the threshold (64 MiB by default) from the median, a rate when it
//! is more than 10% from it, a count when it differs at all; a model, driver or outcome when
//! it is not the most common one.

use std::collections::BTreeMap;

use crate::node::safety::{Occupancy, describe};
use crate::node::summary::{Flag, GpuRow, Outcome, Spread};
use crate::units::Bytes;

/// The default threshold for byte figures.
pub const DEFAULT_THRESHOLD_BYTES: u64 = 64 << 20;

/// Run figures worth a flag; the rest (free, polls) follow from these.
const RUN_FLAGGED: &[&str] = &[
    "idle_device_used_bytes",
    "context_overhead_bytes",
    "peak_device_used_bytes",
    "peak_own_bytes",
    "peak_alloc_reserved_bytes",
    "headroom_at_peak_bytes",
];

/// Every figure's spread, `total_bytes` first, then the rest by name.
pub fn spread(rows: &[GpuRow]) -> Vec<Spread> {
    columns(rows)
        .into_iter()
        .filter(|(_, vals)| !vals.is_empty())
        .map(|(figure, vals)| {
            let (min_index, min) = *vals.iter().min_by_key(|(_, v)| *v).expect("not empty");
            let (max_index, max) = *vals.iter().max_by_key(|(_, v)| *v).expect("not empty");
            Spread {
                gpus: vals.len(),
                median: median(&vals),
                min,
                max,
                spread: max - min,
                min_index,
                max_index,
                figure,
            }
        })
        .collect()
}

/// Each figure as (GPU index, value) pairs, `total_bytes` (every GPU) first.
fn columns(rows: &[GpuRow]) -> Vec<(String, Vec<(u32, u64)>)> {
    let mut out = vec![(
        "total_bytes".to_string(),
        rows.iter()
            .map(|r| (r.gpu.index, r.gpu.total_bytes))
            .collect(),
    )];
    let mut by: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.outcome == Outcome::Ran) {
        for (k, v) in &r.figures {
            by.entry(k.as_str()).or_default().push((r.gpu.index, *v));
        }
    }
    out.extend(
        by.into_iter()
            .filter(|(k, _)| *k != "total_bytes")
            .map(|(k, v)| (k.to_string(), v)),
    );
    out
}

fn median(vals: &[(u32, u64)]) -> u64 {
    let mut v: Vec<u64> = vals.iter().map(|(_, x)| *x).collect();
    v.sort_unstable();
    v[v.len() / 2]
}

/// The most common value of a property, if any GPU has one.
fn most_common<'a>(values: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(v, _)| v)
}

/// Every GPU that differs from the others, in GPU order. MIG instances are compared only
/// with instances of the same MIG profile (a 1g.18gb is not a short 3g.71gb), whole GPUs with
/// whole GPUs.
pub fn flags(rows: &[GpuRow], threshold_bytes: u64) -> Vec<Flag> {
    let mut out = Vec::new();
    let mut flag = |r: &GpuRow, what: &str, message: String| {
        out.push(Flag {
            index: r.gpu.index,
            uuid: r.gpu.uuid.clone(),
            what: what.to_string(),
            message,
        });
    };
    for r in rows {
        match &r.occupancy {
            Occupancy::Busy { others } => flag(
                r,
                "processes",
                format!("other processes present: {}", describe(others)),
            ),
            Occupancy::Doubted { why } => flag(
                r,
                "processes",
                format!("process list doubted ({why}); not acted on"),
            ),
            _ => {}
        }
        match r.outcome {
            Outcome::Skipped => flag(r, "skipped", format!("skipped: {}", reason(r))),
            Outcome::Failed => flag(r, "failed", format!("failed: {}", reason(r))),
            _ => {}
        }
    }
    let mut kinds: BTreeMap<Option<&str>, Vec<GpuRow>> = BTreeMap::new();
    for r in rows {
        let kind = r
            .gpu
            .mig
            .as_ref()
            .map(|m| m.profile.as_deref().unwrap_or("?"));
        kinds.entry(kind).or_default().push(r.clone());
    }
    for group in kinds.values() {
        out.extend(compared(group, threshold_bytes));
    }
    out.sort_by_key(|f| f.index);
    out
}

/// The GPUs of one kind (whole GPUs, or MIG instances of one profile) that differ from the
/// others of that kind: model, driver, exit code, OOM outcome and figures.
fn compared(rows: &[GpuRow], threshold_bytes: u64) -> Vec<Flag> {
    let mut out = Vec::new();
    let mut flag = |r: &GpuRow, what: &str, message: String| {
        out.push(Flag {
            index: r.gpu.index,
            uuid: r.gpu.uuid.clone(),
            what: what.to_string(),
            message,
        });
    };
    let name = most_common(rows.iter().map(|r| r.gpu.name.as_str()));
    let driver = most_common(rows.iter().filter_map(|r| r.gpu.driver_version.as_deref()));
    for r in rows {
        if let Some(n) = name.filter(|n| *n != r.gpu.name) {
            flag(
                r,
                "name",
                format!("model {} while the others are {n}", r.gpu.name),
            );
        }
        if let (Some(d), Some(mine)) = (driver, r.gpu.driver_version.as_deref())
            && d != mine
        {
            flag(
                r,
                "driver_version",
                format!("driver {mine} while the others have {d}"),
            );
        }
    }
    let ran: Vec<&GpuRow> = rows.iter().filter(|r| r.outcome == Outcome::Ran).collect();
    let exit = most_common(ran.iter().filter_map(|r| r.exit_code.map(code_word)));
    let oom = most_common(ran.iter().filter_map(|r| r.ooms.map(oom_word)));
    for r in &ran {
        if let (Some(e), Some(c)) = (exit, r.exit_code)
            && code_word(c) != e
        {
            flag(r, "exit_code", format!("exit {c} while most exited {e}"));
        }
        if let (Some(o), Some(n)) = (oom, r.ooms)
            && oom_word(n) != o
        {
            let msg = match &r.first_oom {
                Some(f) => format!("out of memory at {} while most GPUs had {o}", f.at),
                None => format!("no OOM while most GPUs had {o}"),
            };
            flag(r, "oom", msg);
        }
    }
    for (figure, vals) in columns(rows) {
        if vals.len() < 2 || !(figure == "total_bytes" || flagged(rows, &figure)) {
            continue;
        }
        let m = median(&vals);
        for (index, v) in vals {
            let Some(r) = rows.iter().find(|r| r.gpu.index == index) else {
                continue;
            };
            if let Some(msg) = differs(&figure, v, m, threshold_bytes) {
                flag(r, &figure, msg);
            }
        }
    }
    out
}

/// Whether a figure is one to flag: the run figures above, every other command's figures.
fn flagged(rows: &[GpuRow], figure: &str) -> bool {
    let is_run = rows
        .iter()
        .any(|r| r.figures.contains_key("idle_device_used_bytes"));
    !is_run || RUN_FLAGGED.contains(&figure)
}

/// The message when `v` is too far from the median `m`.
fn differs(figure: &str, v: u64, m: u64, threshold_bytes: u64) -> Option<String> {
    let gap = v.abs_diff(m);
    let side = if v < m { "below" } else { "above" };
    if figure.ends_with("_bytes_per_s") {
        (gap as f64 > 0.10 * m as f64).then(|| {
            format!(
                "{figure} {:.1} GB/s is {:.0}% {side} the node's median {:.1} GB/s",
                v as f64 / 1e9,
                gap as f64 / m.max(1) as f64 * 100.0,
                m as f64 / 1e9
            )
        })
    } else if figure.ends_with("_bytes") {
        (gap > threshold_bytes).then(|| {
            format!(
                "{figure} {} is {} {side} the node's median {}",
                Bytes(v),
                Bytes(gap),
                Bytes(m)
            )
        })
    } else {
        (gap > 0).then(|| format!("{figure} {v} while the node's median is {m}"))
    }
}

fn reason(r: &GpuRow) -> String {
    r.reason
        .clone()
        .unwrap_or_else(|| "no reason recorded".into())
}

fn code_word(c: i32) -> &'static str {
    match c {
        0 => "0",
        1 => "1",
        2 => "2",
        130 => "130",
        _ => "another code",
    }
}

fn oom_word(n: u64) -> &'static str {
    if n == 0 { "no OOM" } else { "an OOM" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::mig::MigIdentity;
    use crate::node::inventory::GpuIdentity;

    const GIB: u64 = 1 << 30;

    fn row(index: u32, profile: Option<&str>, total_bytes: u64) -> GpuRow {
        let gpu = GpuIdentity {
            index,
            name: profile.map_or("NVIDIA H200".into(), |p| format!("NVIDIA H200 MIG {p}")),
            uuid: format!("MIG-{index}"),
            compute_capability: "9.0".into(),
            multiprocessors: 16,
            compute_mode: "default".into(),
            total_bytes,
            free_bytes: None,
            driver_version: Some("550".into()),
            nvml: None,
            processes: None,
            processes_unavailable: Some("refused".into()),
            mig: profile.map(|p| MigIdentity {
                profile: Some(p.into()),
                parent_index: Some(0),
                parent_uuid: "GPU-0".into(),
                parent_name: None,
                gpu_instance_id: None,
                compute_instance_id: None,
            }),
            cuda_visible_devices: Some(format!("MIG-{index}")),
        };
        GpuRow {
            folder: gpu.folder_name(),
            gpu,
            rank: None,
            log: None,
            occupancy: Occupancy::Unknown,
            outcome: Outcome::Ran,
            reason: None,
            pid: None,
            exit_code: Some(0),
            signal: None,
            elapsed_ns: None,
            status: None,
            ooms: Some(0),
            first_oom: None,
            figures: Default::default(),
        }
    }

    #[test]
    fn mig_instances_are_compared_within_their_profile() {
        let mut rows = vec![
            row(0, Some("1g.18gb"), 16 * GIB),
            row(1, Some("1g.18gb"), 16 * GIB),
            row(2, Some("1g.18gb"), 15 * GIB),
            row(3, Some("3g.71gb"), 65 * GIB),
        ];
        // The 3g.71gb is neither a model that differs nor a long card; an OOM only there
        // (or only on the small ones) is a difference of profiles, not of GPUs.
        rows[3].ooms = Some(1);
        let f = flags(&rows, DEFAULT_THRESHOLD_BYTES);
        let whats: Vec<(u32, &str)> = f.iter().map(|f| (f.index, f.what.as_str())).collect();
        assert_eq!(whats, [(2, "total_bytes")], "{f:?}");
        assert!(
            f[0].message
                .contains("1.00 GiB below the node's median 16.00 GiB")
        );
        // Whole GPUs are still compared with one another.
        let whole = vec![
            row(0, None, 80 * GIB),
            row(1, None, 80 * GIB),
            row(2, None, 79 * GIB),
        ];
        let f = flags(&whole, DEFAULT_THRESHOLD_BYTES);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].index, f[0].what.as_str()), (2, "total_bytes"));
    }
}
