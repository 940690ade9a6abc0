//! The merged Markdown: a roll-up per GPU model and driver (the spread of every view's true
//! peak and of the headroom at the peak), then the findings said once across nodes, the runs
//! one per row only while they fit on a screen (the CSV always has them), and what was
//! skipped. Its length does not grow with the fleet: 1,000 nodes read as 8 do.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::merge::findings::findings;
use crate::merge::{FIGURES, Merged, RunRow};
use crate::record::View;
use crate::report::markdown::cell;
use crate::report::md_table::{Left, Right, header};
use crate::units::Bytes;

/// Up to this many runs, the report has a row for each.
pub const RUN_TABLE_MAX: usize = 32;

/// Up to this many skipped folders are named.
pub const SKIPPED_SHOWN: usize = 20;

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// min, median, max of some values.
fn spread(mut v: Vec<u64>) -> Option<(u64, u64, u64)> {
    v.sort_unstable();
    Some((*v.first()?, v[v.len() / 2], *v.last()?))
}

fn spread_row(o: &mut String, label: &str, v: Vec<u64>) {
    let n = v.len();
    if let Some((lo, med, hi)) = spread(v) {
        let _ = writeln!(
            o,
            "| {label} | {n} | {} | {} | {} | {} |",
            Bytes(lo),
            Bytes(med),
            Bytes(hi),
            Bytes(hi - lo)
        );
    }
}

/// The merged Markdown report.
pub fn markdown(m: &Merged) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## headroom merge: {}{}, {}",
        plural(m.runs.len(), "run", "runs"),
        if m.nodes > 0 {
            format!(" on {}", plural(m.nodes, "node", "nodes"))
        } else {
            String::new()
        },
        plural(
            m.groups.len(),
            "GPU model/driver group",
            "GPU model/driver groups"
        )
    );
    for (g, (model, driver)) in m.groups.iter().enumerate() {
        rollup(&mut o, m, g, model, driver);
    }
    let lines = findings(m);
    if !lines.is_empty() {
        let _ = writeln!(o, "\n### Findings across the fleet\n");
        for l in &lines {
            let _ = writeln!(o, "- {}", cell(l));
        }
    }
    if m.runs.len() <= RUN_TABLE_MAX {
        run_table(&mut o, m);
    } else {
        let _ = writeln!(
            o,
            "\nOne row per run ({}) is in the CSV (`--out FILE` or `--csv`).",
            m.runs.len()
        );
    }
    if !m.skipped.is_empty() {
        let _ = writeln!(o, "\n### Skipped: incomplete ({})\n", m.skipped.len());
        for (name, why) in m.skipped.iter().take(SKIPPED_SHOWN) {
            let _ = writeln!(o, "- {}: {}", cell(name), cell(why));
        }
        if m.skipped.len() > SKIPPED_SHOWN {
            let _ = writeln!(
                o,
                "- and {} more (merge's stderr names each)",
                m.skipped.len() - SKIPPED_SHOWN
            );
        }
    }
    o
}

/// One group's roll-up: runs, nodes, outcomes and the spread of every figure.
fn rollup(o: &mut String, m: &Merged, g: usize, model: &str, driver: &str) {
    let rs: Vec<&RunRow> = m.runs.iter().filter(|r| r.group == g).collect();
    let nodes: BTreeSet<&str> = rs.iter().filter_map(|r| r.node.as_deref()).collect();
    let _ = writeln!(
        o,
        "\n### {} · driver {} · {}{}\n",
        cell(model),
        cell(driver),
        plural(rs.len(), "run", "runs"),
        if nodes.is_empty() {
            String::new()
        } else {
            format!(" on {}", plural(nodes.len(), "node", "nodes"))
        }
    );
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rs {
        *statuses.entry(&r.status).or_default() += 1;
    }
    let workloads: BTreeSet<&str> = rs
        .iter()
        .map(|r| m.workloads[r.workload].as_str())
        .collect();
    let ooms = rs.iter().filter(|r| r.ooms > 0).count();
    let _ = writeln!(
        o,
        "Workload{} {}; {}; {}.\n",
        if workloads.len() == 1 { "" } else { "s" },
        cell(&workloads.into_iter().collect::<Vec<_>>().join(", ")),
        statuses
            .iter()
            .map(|(s, n)| format!("{n} {}", cell(s)))
            .collect::<Vec<_>>()
            .join(", "),
        if ooms == 0 {
            "no OOM".to_string()
        } else {
            format!("an OOM in {}", plural(ooms, "run", "runs"))
        },
    );
    let _ = writeln!(
        o,
        "{}",
        header(&[
            ("figure", Left),
            ("runs", Right),
            ("min", Right),
            ("median", Right),
            ("max", Right),
            ("spread", Right)
        ])
    );
    let col = |k: usize| -> Vec<u64> { rs.iter().filter_map(|r| r.figures[k]).collect() };
    spread_row(o, FIGURES[0], col(0));
    spread_row(o, FIGURES[1], col(1));
    spread_row(o, FIGURES[3], col(3));
    for (k, v) in View::ALL.iter().enumerate() {
        let vals: Vec<u64> = rs.iter().filter_map(|r| r.peaks[k]).collect();
        spread_row(o, &format!("true peak `{}`", v.key()), vals);
    }
    spread_row(o, FIGURES[2], col(2));
}

/// A row per run, for a merge small enough to read them all.
fn run_table(o: &mut String, m: &Merged) {
    if m.runs.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n### Runs\n");
    let _ = writeln!(
        o,
        "{}",
        header(&[
            ("run", Left),
            ("workload", Left),
            ("GPU", Right),
            ("status", Left),
            ("idle used", Right),
            ("true peak device used", Right),
            ("true peak own", Right),
            ("headroom at the peak", Right),
            ("OOMs", Right)
        ])
    );
    let h = |v: Option<u64>| v.map_or("-".into(), |b| Bytes(b).to_string());
    // A figure of the idle reading or the device total: why it is missing, or what it is
    // derived from, where it was not measured.
    let said = |r: &RunRow, v: Option<u64>| match (v, &r.idle_basis) {
        (None, Some(b)) => cell(b),
        (Some(x), Some(b)) => format!("{} ({})", Bytes(x), cell(b)),
        (v, None) => h(v),
    };
    for r in &m.runs {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&r.name),
            cell(&m.workloads[r.workload]),
            r.index,
            cell(&r.status),
            said(r, r.figures[1]),
            h(r.peaks[0]),
            h(r.peaks[1]),
            said(r, r.figures[2]),
            r.ooms
        );
    }
}
