//! `node.md`: the node summary for people (also what the command prints): one row per GPU,
//! the spread of each figure across the GPUs, and the GPUs that differ from the others.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::node::summary::{GpuRow, NodeCommand, NodeSummary, Outcome};
use crate::report::markdown::cell;
use crate::report::md_table::{Left, Right, header};
use crate::units::{Bytes, Nanos};

/// The run figures shown per GPU, with their column titles.
const RUN_COLUMNS: &[(&str, &str)] = &[
    ("idle_device_used_bytes", "idle used"),
    ("peak_device_used_bytes", "peak device used"),
    ("peak_own_bytes", "peak own"),
    ("peak_alloc_reserved_bytes", "peak alloc reserved"),
    ("headroom_at_peak_bytes", "headroom at peak"),
];

/// A figure for people: bytes as sizes, rates in GB/s, counts as they are.
pub fn human_figure(key: &str, v: u64) -> String {
    if key.ends_with("_bytes_per_s") {
        format!("{:.1} GB/s", v as f64 / 1e9)
    } else if key.ends_with("_bytes") {
        Bytes(v).to_string()
    } else {
        v.to_string()
    }
}

fn outcome_cell(r: &GpuRow) -> String {
    let word = match r.outcome {
        Outcome::Running => "running",
        Outcome::Ran => "ran",
        Outcome::Skipped => "skipped",
        Outcome::Failed => "failed",
    };
    match (&r.status, r.outcome) {
        (Some(s), Outcome::Ran) => format!("{word}: {s}"),
        _ => word.to_string(),
    }
}

fn exit_cell(r: &GpuRow) -> String {
    match (r.exit_code, r.signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("signal {s}"),
        _ => "-".into(),
    }
}

/// The whole `node.md`.
pub fn markdown(n: &NodeSummary) -> String {
    let mut o = String::new();
    let count = |k: Outcome| n.gpus.iter().filter(|r| r.outcome == k).count();
    let _ = writeln!(
        o,
        "# headroom node · {} {} · {} GPU{} · {}{}\n",
        n.command.name(),
        n.label,
        n.gpus.len(),
        if n.gpus.len() == 1 { "" } else { "s" },
        n.backend,
        n.profile
            .as_ref()
            .map(|p| format!(" (profile {p})"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        o,
        "started {} · {} · exit {} (the worst worker's) · {} ran, {} skipped, {} failed{}\n",
        n.started_utc,
        n.finished_utc
            .as_ref()
            .map_or("still running".into(), |f| format!("finished {f}")),
        n.exit_code.map_or("-".into(), |c| c.to_string()),
        count(Outcome::Ran),
        count(Outcome::Skipped),
        count(Outcome::Failed),
        if count(Outcome::Running) > 0 {
            format!(", {} running", count(Outcome::Running))
        } else {
            String::new()
        }
    );
    gpu_table(&mut o, n);
    if n.spread.iter().any(|s| s.gpus > 1) {
        let _ = writeln!(o, "\n## Spread across GPUs\n");
        let _ = writeln!(
            o,
            "{}",
            header(&[
                ("figure", Left),
                ("GPUs", Right),
                ("min", Right),
                ("median", Right),
                ("max", Right),
                ("spread", Right)
            ])
        );
        for s in n.spread.iter().filter(|s| s.gpus > 1) {
            let h = |v| human_figure(&s.figure, v);
            let _ = writeln!(
                o,
                "| {} | {} | {} (GPU {}) | {} | {} (GPU {}) | {} |",
                s.figure,
                s.gpus,
                h(s.min),
                s.min_index,
                h(s.median),
                h(s.max),
                s.max_index,
                h(s.spread)
            );
        }
    }
    let _ = writeln!(
        o,
        "\n## GPUs that differ\n\nThreshold: {} from the node's median for sizes, 10% for rates.\n",
        Bytes(n.threshold_bytes)
    );
    if n.flags.is_empty() {
        let _ = writeln!(o, "None: every GPU is within the threshold of the others.");
    }
    for f in &n.flags {
        let _ = writeln!(o, "- GPU {} ({}): {}", f.index, f.uuid, cell(&f.message));
    }
    o
}

fn gpu_table(o: &mut String, n: &NodeSummary) {
    let extra: Vec<(String, String)> = if n.command == NodeCommand::Run {
        RUN_COLUMNS
            .iter()
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .collect()
    } else {
        let keys: BTreeSet<&String> = n.gpus.iter().flat_map(|r| r.figures.keys()).collect();
        keys.into_iter().map(|k| (k.clone(), k.clone())).collect()
    };
    let mut columns = vec![
        ("GPU", Right),
        ("model", Left),
        ("UUID", Left),
        ("CUDA-visible", Right),
    ];
    columns.extend(extra.iter().map(|(_, t)| (t.as_str(), Right)));
    if n.command == NodeCommand::Run {
        columns.push(("OOM", Left));
    }
    columns.extend([("outcome", Left), ("exit", Right), ("time", Right)]);
    let _ = writeln!(o, "{}", header(&columns));
    for r in &n.gpus {
        let _ = write!(
            o,
            "| {} | {} | {} | {} |",
            r.gpu.index,
            cell(&r.gpu.name),
            r.gpu.uuid,
            Bytes(r.gpu.total_bytes)
        );
        for (k, _) in &extra {
            let v = r.figures.get(k).map_or("-".into(), |v| human_figure(k, *v));
            let _ = write!(o, " {v} |");
        }
        if n.command == NodeCommand::Run {
            let oom = match (&r.first_oom, r.ooms) {
                (Some(f), _) => format!("{} ({} asked)", f.at, Bytes(f.requested_bytes)),
                (None, Some(0)) => "none".into(),
                _ => "-".into(),
            };
            let _ = write!(o, " {} |", cell(&oom));
        }
        let _ = writeln!(
            o,
            " {} | {} | {} |",
            cell(&outcome_cell(r)),
            exit_cell(r),
            r.elapsed_ns.map_or("-".into(), |t| Nanos(t).to_string())
        );
    }
}
