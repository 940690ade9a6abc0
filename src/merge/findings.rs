//! What stands out in a merged fleet, each said once across nodes: a GPU index whose figure is
//! far from the median of its group ("GPU index 3: CUDA-visible total 128 MiB below the median
//! on 64/64 nodes"), a status other than the group's usual one, a GPU UUID found more than
//! once (a GPU counted twice), GPUs the nodes did not run, nodes that never finished.

use std::collections::{BTreeMap, HashMap};

use crate::merge::{FIGURES, Merged, RunRow, natural_cmp};
use crate::units::Bytes;

/// A figure this far from its group's median is an outlier (the node summary's rule).
pub const THRESHOLD_BYTES: u64 = crate::node::flags::DEFAULT_THRESHOLD_BYTES;

/// At most this many names are listed in one finding; the rest are counted.
pub const NAMES_SHOWN: usize = 3;

/// At most this many duplicate UUIDs get a line of their own.
pub const UUIDS_SHOWN: usize = 5;

/// The figures compared against the median: `FIGURES` (but the context overhead, which
/// follows from the others) and the true peak of device used.
fn compared(r: &RunRow) -> [(&'static str, Option<u64>); 4] {
    [
        (FIGURES[0], r.figures[0]),
        (FIGURES[1], r.figures[1]),
        ("true peak of device used", r.peaks[0]),
        (FIGURES[2], r.figures[2]),
    ]
}

/// Names, the first few of them kept and the rest counted.
#[derive(Debug, Default)]
struct Names {
    shown: Vec<String>,
    count: usize,
}

impl Names {
    fn push(&mut self, s: &str) {
        self.count += 1;
        if self.shown.len() < NAMES_SHOWN {
            self.shown.push(s.to_string());
        }
    }

    fn list(&self) -> String {
        let more = self.count - self.shown.len();
        let mut s = self.shown.join(", ");
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        s
    }
}

fn unit(runs_in_nodes: bool) -> &'static str {
    if runs_in_nodes { "nodes" } else { "runs" }
}

/// Every finding, one line each, in a fixed order.
pub fn findings(m: &Merged) -> Vec<String> {
    let mut lines = outliers(m);
    lines.extend(statuses(m));
    lines.extend(duplicate_uuids(m));
    lines.extend(not_run(m));
    if !m.unfinished_nodes.is_empty() {
        let mut n = Names::default();
        for name in &m.unfinished_nodes {
            n.push(name);
        }
        lines.push(format!(
            "{} node{} never finished (node.json still says running; {} GPUs are judged one by one): {}",
            n.count,
            if n.count == 1 { "" } else { "s" },
            if n.count == 1 { "its" } else { "their" },
            n.list()
        ));
    }
    lines
}

/// The prefix naming a group and workload, when the merge has more than one of either.
fn scope(m: &Merged, group: usize, workload: usize) -> String {
    let mut s = String::new();
    if m.groups.len() > 1 {
        let (model, driver) = &m.groups[group];
        s.push_str(&format!("{model} · driver {driver}"));
    }
    if m.workloads.len() > 1 {
        if !s.is_empty() {
            s.push_str(" · ");
        }
        s.push_str(&m.workloads[workload]);
    }
    if !s.is_empty() {
        s.push_str(": ");
    }
    s
}

#[derive(Default)]
struct Outlier {
    names: Names,
    min_delta: u64,
    max_delta: u64,
    in_nodes: bool,
}

/// Figures further than `THRESHOLD_BYTES` from the median of their group and workload,
/// grouped by GPU index, figure and direction.
fn outliers(m: &Merged) -> Vec<String> {
    // (group, workload) → per figure, every run's value.
    let mut values: HashMap<(usize, usize), Vec<Vec<u64>>> = HashMap::new();
    // (group, workload, index) → runs at that index.
    let mut at_index: HashMap<(usize, usize, u32), usize> = HashMap::new();
    for r in &m.runs {
        let v = values
            .entry((r.group, r.workload))
            .or_insert_with(|| vec![Vec::new(); 4]);
        for (k, (_, x)) in compared(r).iter().enumerate() {
            if let Some(x) = x {
                v[k].push(*x);
            }
        }
        *at_index.entry((r.group, r.workload, r.index)).or_default() += 1;
    }
    let medians: HashMap<(usize, usize), Vec<Option<u64>>> = values
        .into_iter()
        .map(|(key, mut figs)| {
            let meds = figs
                .iter_mut()
                .map(|v| {
                    v.sort_unstable();
                    (v.len() > 1).then(|| v[v.len() / 2])
                })
                .collect();
            (key, meds)
        })
        .collect();
    type Key = (usize, usize, u32, usize, bool);
    let mut found: BTreeMap<Key, Outlier> = BTreeMap::new();
    for r in &m.runs {
        let meds = &medians[&(r.group, r.workload)];
        for (k, (_, x)) in compared(r).iter().enumerate() {
            let (Some(x), Some(med)) = (x, meds[k]) else {
                continue;
            };
            let d = x.abs_diff(med);
            if d <= THRESHOLD_BYTES {
                continue;
            }
            let o = found
                .entry((r.group, r.workload, r.index, k, *x < med))
                .or_default();
            o.min_delta = if o.names.count == 0 {
                d
            } else {
                o.min_delta.min(d)
            };
            o.max_delta = o.max_delta.max(d);
            o.in_nodes |= r.node.is_some();
            o.names.push(r.node.as_deref().unwrap_or(&r.name));
        }
    }
    let sample: HashMap<(usize, usize), &RunRow> =
        m.runs.iter().map(|r| ((r.group, r.workload), r)).collect();
    found
        .into_iter()
        .map(|((group, workload, index, k, below), o)| {
            let figure = compared(sample[&(group, workload)])[k].0;
            let med = medians[&(group, workload)][k].unwrap_or_default();
            let delta = if o.min_delta == o.max_delta {
                Bytes(o.min_delta).to_string()
            } else {
                format!("{} to {}", Bytes(o.min_delta), Bytes(o.max_delta))
            };
            let total = at_index[&(group, workload, index)];
            let names = if o.names.count <= NAMES_SHOWN {
                format!(" ({})", o.names.list())
            } else {
                String::new()
            };
            format!(
                "{}GPU index {index}: {figure} {delta} {} the median ({}) on {}/{total} {}{names}",
                scope(m, group, workload),
                if below { "below" } else { "above" },
                Bytes(med),
                o.names.count,
                unit(o.in_nodes),
            )
        })
        .collect()
}

/// Runs whose status is not their group's most common one, grouped by status.
fn statuses(m: &Merged) -> Vec<String> {
    let mut counts: BTreeMap<(usize, usize), BTreeMap<&str, usize>> = BTreeMap::new();
    for r in &m.runs {
        *counts
            .entry((r.group, r.workload))
            .or_default()
            .entry(&r.status)
            .or_default() += 1;
    }
    let mut lines = Vec::new();
    for ((group, workload), by_status) in &counts {
        let total: usize = by_status.values().sum();
        let Some((usual, _)) = by_status
            .iter()
            .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
        else {
            continue;
        };
        for (status, n) in by_status.iter().filter(|(s, _)| *s != usual) {
            let mut names = Names::default();
            for r in m
                .runs
                .iter()
                .filter(|r| (r.group, r.workload) == (*group, *workload) && r.status == *status)
            {
                names.push(&r.name);
            }
            lines.push(format!(
                "{}status {status} on {n}/{total} runs ({}); the others {usual}",
                scope(m, *group, *workload),
                names.list()
            ));
        }
    }
    lines
}

/// UUIDs found on more than one GPU (a run or a GPU a node skipped): a GPU counted twice,
/// or folders copied from one node to another.
fn duplicate_uuids(m: &Merged) -> Vec<String> {
    let mut places: HashMap<&str, Vec<String>> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for r in &m.runs {
        if let Some(u) = r.uuid.as_deref() {
            let p = places.entry(u).or_default();
            if p.is_empty() {
                order.push(u);
            }
            p.push(match &r.node {
                Some(n) => format!("{n} GPU {}", r.index),
                None => r.name.clone(),
            });
        }
    }
    for g in &m.not_run {
        let p = places.entry(&g.uuid).or_default();
        if p.is_empty() {
            order.push(&g.uuid);
        }
        p.push(format!("{} GPU {}", g.node, g.index));
    }
    let dups: Vec<&str> = order.into_iter().filter(|u| places[u].len() > 1).collect();
    let mut lines = Vec::new();
    for u in dups.iter().take(UUIDS_SHOWN) {
        let mut names = Names::default();
        let mut ps = places[u].clone();
        ps.sort_by(|a, b| natural_cmp(a, b));
        for p in &ps {
            names.push(p);
        }
        lines.push(format!(
            "duplicate UUID {u} on {} GPUs ({}): one GPU counted more than once, or folders copied between nodes",
            names.count,
            names.list()
        ));
    }
    if dups.len() > UUIDS_SHOWN {
        lines.push(format!(
            "and {} more UUIDs found on more than one GPU ({} duplicated in all; the CSV's uuid column lists every run)",
            dups.len() - UUIDS_SHOWN,
            dups.len()
        ));
    }
    lines
}

/// GPUs the nodes did not run, grouped by index and reason.
fn not_run(m: &Merged) -> Vec<String> {
    let mut by: BTreeMap<(u32, &str), Names> = BTreeMap::new();
    for g in &m.not_run {
        by.entry((g.index, &g.reason)).or_default().push(&g.node);
    }
    by.into_iter()
        .map(|((index, reason), names)| {
            let which = if names.count <= NAMES_SHOWN {
                format!(" ({})", names.list())
            } else {
                String::new()
            };
            format!(
                "GPU index {index} not run on {}/{} nodes{which}: {reason}",
                names.count, m.nodes
            )
        })
        .collect()
}
