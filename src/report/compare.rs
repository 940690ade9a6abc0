//! `headroom compare A B`: two result folders side by side (one workload on two GPUs, drivers
//! or allocator settings): idle readings, true and 1 Hz peaks per view and per phase with their
//! deltas (B − A, in bytes and percent of A), and what each run's OOMs were.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::record::View;
use crate::record::timeline::FORMAT_VERSION;
use crate::report::escape::line;
use crate::report::markdown::{cell, status_name};
use crate::report::md_table::{Left, Right, header};
use crate::report::rundata::load_summary;
use crate::report::summary::Summary;
use crate::text_table::{Align, TextTable};
use crate::units::{Bytes, SignedBytes};

/// One side of the comparison.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunInfo {
    pub dir: PathBuf,
    pub workload: String,
    pub workload_file: String,
    pub allocator: crate::alloc::AllocatorKind,
    pub device: String,
    pub backend: crate::device::BackendKind,
    pub profile: Option<String>,
    pub driver_version: String,
    /// Null for an import whose evidence does not record it.
    pub device_total_bytes: Option<u64>,
    pub started_utc: String,
    pub status: String,
    pub exit_code: Option<i32>,
    pub expectations_held: usize,
    pub expectations_total: usize,
    pub ooms: Vec<OomBrief>,
    /// Why the run has no idle reading (`not in the snapshot`), or what it is derived from;
    /// absent when it was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_basis: Option<String>,
}

/// An OOM in one line.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct OomBrief {
    pub at: String,
    pub op: String,
    pub name: String,
    pub requested_bytes: u64,
    pub observation: String,
    pub causes: Vec<crate::cause::Cause>,
}

/// One quantity in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Row {
    pub name: String,
    pub a_bytes: Option<u64>,
    pub b_bytes: Option<u64>,
    /// B − A.
    pub delta_bytes: Option<i64>,
    /// (B − A) / A × 100, to two decimals; `None` when A is zero or missing.
    pub delta_pct: Option<f64>,
}

impl Row {
    fn new(name: impl Into<String>, a: Option<u64>, b: Option<u64>) -> Row {
        let delta = match (a, b) {
            (Some(a), Some(b)) => Some(b as i64 - a as i64),
            _ => None,
        };
        let pct = match (a, delta) {
            (Some(a), Some(d)) if a > 0 => Some((d as f64 / a as f64 * 10_000.0).round() / 100.0),
            _ => None,
        };
        Row {
            name: name.into(),
            a_bytes: a,
            b_bytes: b,
            delta_bytes: delta,
            delta_pct: pct,
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Comparison {
    pub format_version: u32,
    pub a: RunInfo,
    pub b: RunInfo,
    /// Whether both ran the same workload (by name); deltas of different workloads mean little.
    pub same_workload: bool,
    pub idle: Vec<Row>,
    /// True interval peak of each view over the whole run.
    pub peaks: Vec<Row>,
    /// What a 1 Hz poller would have reported.
    pub polled_1hz: Vec<Row>,
    /// Per phase (matched by name): `phase/view`.
    pub phases: Vec<Row>,
}

fn info(dir: &Path, s: &Summary) -> RunInfo {
    RunInfo {
        dir: dir.to_path_buf(),
        workload: s.workload.name.clone(),
        workload_file: s.workload.file.clone(),
        allocator: s.workload.allocator,
        device: s.device.name.clone(),
        backend: s.device.backend,
        profile: s.device.profile.clone(),
        driver_version: s.device.driver_version.clone(),
        device_total_bytes: s.device_total(),
        started_utc: s.started_utc.clone(),
        status: status_name(s),
        exit_code: s.exit_code,
        expectations_held: s.expectations.iter().filter(|e| e.held).count(),
        expectations_total: s.expectations.len(),
        ooms: s
            .ooms
            .iter()
            .map(|o| OomBrief {
                at: format!("{}/{}", o.phase, o.step),
                op: o.op.clone(),
                name: o.name.clone(),
                requested_bytes: o.requested_bytes,
                observation: o.diagnosis.observation.clone(),
                causes: o.diagnosis.causes.clone(),
            })
            .collect(),
        idle_basis: s.idle_basis_short().map(String::from),
    }
}

/// Reads two result folders and compares them.
pub fn load(a: &Path, b: &Path) -> anyhow::Result<Comparison> {
    Ok(compare(a, &finished(a)?, b, &finished(b)?))
}

/// A finished run's summary; a folder a killed run left is refused as incomplete (exit 2).
fn finished(dir: &Path) -> anyhow::Result<Summary> {
    let reasons = crate::report::complete::incomplete_reasons(dir);
    anyhow::ensure!(
        reasons.is_empty(),
        "{}: incomplete, not a result to compare: {}",
        line(&dir.display().to_string()),
        crate::report::complete::describe(&reasons)
    );
    load_summary(dir)
}

/// Compares two summaries.
pub fn compare(a_dir: &Path, a: &Summary, b_dir: &Path, b: &Summary) -> Comparison {
    let (ia, ib) = (a.idle_after(), b.idle_after());
    let idle = vec![
        Row::new(
            "device_free_bytes",
            ia.map(|i| i.device_free_bytes),
            ib.map(|i| i.device_free_bytes),
        ),
        Row::new(
            "device_used_bytes",
            ia.map(|i| i.device_used_bytes),
            ib.map(|i| i.device_used_bytes),
        ),
        Row::new(
            "device_total_bytes",
            ia.map(|i| i.device_total_bytes),
            ib.map(|i| i.device_total_bytes),
        ),
        Row::new(
            "context_overhead_bytes",
            a.idle.as_ref().and_then(|i| i.context_overhead_bytes),
            b.idle.as_ref().and_then(|i| i.context_overhead_bytes),
        ),
    ];
    let measured = |v: View| a.peaks.run.contains_key(v.key()) || b.peaks.run.contains_key(v.key());
    let mut peaks: Vec<Row> = View::ALL
        .into_iter()
        .filter(|v| measured(*v))
        .map(|v| {
            Row::new(
                v.key(),
                a.peaks.run.get(v.key()).map(|p| p.bytes),
                b.peaks.run.get(v.key()).map(|p| p.bytes),
            )
        })
        .collect();
    peaks.push(Row::new(
        "headroom_at_peak_bytes",
        a.peaks.headroom_at_peak_bytes,
        b.peaks.headroom_at_peak_bytes,
    ));
    let polled = |s: &Summary, v: View| {
        s.peaks
            .polled
            .get("1hz")
            .and_then(|p| p.peaks.get(v.key()).copied())
    };
    let polled_1hz = View::ALL
        .into_iter()
        .filter(|v| measured(*v))
        .map(|v| Row::new(v.key(), polled(a, v), polled(b, v)))
        .collect();
    let mut names: Vec<&str> = a.phases.iter().map(|p| p.name.as_str()).collect();
    for p in &b.phases {
        if !names.contains(&p.name.as_str()) {
            names.push(&p.name);
        }
    }
    let phase_peak = |s: &Summary, name: &str, v: View| {
        s.phases
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.peaks.get(v.key()))
            .map(|p| p.bytes)
    };
    let mut phases = Vec::new();
    for name in names {
        for v in [View::DeviceUsed, View::OwnBytes, View::AllocReserved] {
            let (pa, pb) = (phase_peak(a, name, v), phase_peak(b, name, v));
            if pa.is_some() || pb.is_some() {
                phases.push(Row::new(format!("{name}/{}", v.key()), pa, pb));
            }
        }
    }
    Comparison {
        format_version: FORMAT_VERSION,
        a: info(a_dir, a),
        b: info(b_dir, b),
        same_workload: a.workload.name == b.workload.name,
        idle,
        peaks,
        polled_1hz,
        phases,
    }
}

fn human(v: Option<u64>) -> String {
    v.map_or("-".into(), |b| Bytes(b).to_string())
}

fn delta(r: &Row) -> (String, String) {
    (
        r.delta_bytes
            .map_or("-".into(), |d| SignedBytes(d as i128).to_string()),
        r.delta_pct.map_or("-".into(), |p| format!("{p:+.2}%")),
    )
}

fn run_line(r: &RunInfo) -> String {
    format!(
        "{} · {} on {}{} · driver {} · {}{}{}",
        r.dir.display(),
        r.workload,
        r.device,
        r.profile
            .as_ref()
            .map(|p| format!(" (profile {p})"))
            .unwrap_or_default(),
        r.driver_version,
        r.status,
        r.exit_code
            .map(|c| format!(" (exit {c})"))
            .unwrap_or_default(),
        r.idle_basis
            .as_ref()
            .map(|b| format!(" · idle reading {b}"))
            .unwrap_or_default()
    )
}

fn oom_line(r: &RunInfo) -> String {
    if r.ooms.is_empty() {
        return "no OOM".into();
    }
    r.ooms
        .iter()
        .map(|o| {
            format!(
                "OOM at {} ({} {}, {} asked): {}",
                o.at,
                o.op,
                o.name,
                Bytes(o.requested_bytes),
                o.observation
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn sections(c: &Comparison) -> [(&'static str, &[Row]); 4] {
    [
        ("idle", &c.idle),
        ("true peak", &c.peaks),
        ("1 Hz poll", &c.polled_1hz),
        ("per phase", &c.phases),
    ]
}

/// The comparison as an aligned text table.
pub fn render_text(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A: {}", line(&run_line(&c.a)));
    let _ = writeln!(o, "B: {}", line(&run_line(&c.b)));
    if !c.same_workload {
        let _ = writeln!(
            o,
            "note: the workloads differ ({} vs {}): the deltas compare different work",
            line(&c.a.workload),
            line(&c.b.workload)
        );
    }
    for (title, rows) in sections(c) {
        let mut t = TextTable::new(&[
            (title, Align::Left),
            ("A", Align::Right),
            ("B", Align::Right),
            ("B − A", Align::Right),
            ("%", Align::Right),
        ]);
        for r in rows {
            let (d, p) = delta(r);
            t.row([line(&r.name), human(r.a_bytes), human(r.b_bytes), d, p]);
        }
        let _ = writeln!(o);
        o.push_str(&t.render());
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "OOM A: {}", line(&oom_line(&c.a)));
    let _ = writeln!(o, "OOM B: {}", line(&oom_line(&c.b)));
    let _ = writeln!(
        o,
        "expectations held: A {}/{}, B {}/{}",
        c.a.expectations_held,
        c.a.expectations_total,
        c.b.expectations_held,
        c.b.expectations_total
    );
    o
}

/// A name as inline code when it is plain (letters, digits, spaces, `_./:-`), else escaped text: a
/// backtick or markup in a phase name cannot break out of the cell.
fn code(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:- ".contains(c))
    {
        format!("`{s}`")
    } else {
        cell(s)
    }
}

/// The comparison as Markdown tables.
pub fn render_markdown(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## headroom compare\n");
    let _ = writeln!(o, "- **A**: {}", cell(&run_line(&c.a)));
    let _ = writeln!(o, "- **B**: {}", cell(&run_line(&c.b)));
    if !c.same_workload {
        let _ = writeln!(
            o,
            "- note: the workloads differ ({} vs {})",
            cell(&c.a.workload),
            cell(&c.b.workload)
        );
    }
    for (title, rows) in sections(c) {
        let _ = writeln!(
            o,
            "\n{}",
            header(&[
                (title, Left),
                ("A", Right),
                ("B", Right),
                ("B − A", Right),
                ("%", Right)
            ])
        );
        for r in rows {
            let (d, p) = delta(r);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {d} | {p} |",
                code(&r.name),
                human(r.a_bytes),
                human(r.b_bytes)
            );
        }
    }
    let _ = writeln!(
        o,
        "\n{}",
        header(&[("", Left), ("OOM", Left), ("expectations held", Left)])
    );
    for (k, r) in [("A", &c.a), ("B", &c.b)] {
        let _ = writeln!(
            o,
            "| {k} | {} | {}/{} |",
            cell(&oom_line(r)),
            r.expectations_held,
            r.expectations_total
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_b_minus_a_in_bytes_and_percent_of_a() {
        let r = Row::new("x", Some(3 << 30), Some(2 << 30));
        assert_eq!(r.delta_bytes, Some(-(1 << 30)));
        assert_eq!(r.delta_pct, Some(-33.33));
        assert_eq!(Row::new("x", Some(0), Some(5)).delta_pct, None);
        assert_eq!(Row::new("x", None, Some(5)).delta_bytes, None);
    }
}
