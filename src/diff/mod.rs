//! `headroom diff A B`: two PyTorch snapshots, two imports, two watches or two runs — the
//! peak of each and the difference, by category where the stacks tell and by source line,
//! the lines whose memory at the peak grew or shrank most, allocator settings and segment
//! counts, and the largest single allocation B holds at its peak that A did not.
//!
//! Differences are B − A in bytes. "At the peak" is at each side's own peak of PyTorch's
//! allocated memory: the two peaks need not be at the same step, and that is the question
//! ("the new version needs more memory — where, at its worst?").

pub mod category;
pub mod render;
pub mod side;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use category::Category;
use side::{Held, Side};

/// The most source lines listed (all are summed into the categories).
pub const LINES_LISTED: usize = 20;

/// One side as the diff reports it.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct SideInfo {
    pub source: String,
    /// `snapshot`, `import`, `watch` or `run`.
    pub kind: String,
    pub device_index: Option<u32>,
    /// PyTorch's allocated bytes at their peak (the live set at that trace entry).
    pub allocated_peak_bytes: Option<u64>,
    /// The trace entry of that peak (device-relative).
    pub peak_entry: Option<u64>,
    pub reserved_peak_bytes: Option<u64>,
    /// The whole device at its true peak (a run's or watch's folder).
    pub device_used_peak_bytes: Option<u64>,
    /// The watched job's processes at their peak.
    pub job_used_peak_bytes: Option<u64>,
    /// Segments held when the snapshot was taken.
    pub segments_held: Option<u64>,
    /// cudaMalloc calls in the trace (`segment_alloc` entries).
    pub segment_allocs: Option<u64>,
    pub notes: Vec<String>,
}

/// A figure on both sides and B − A.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Delta {
    pub name: String,
    pub a: Option<u64>,
    pub b: Option<u64>,
    /// B − A; `null` when either side lacks the figure.
    pub delta: Option<i64>,
}

impl Delta {
    fn new(name: &str, a: Option<u64>, b: Option<u64>) -> Delta {
        Delta {
            name: name.into(),
            a,
            b,
            delta: a.zip(b).map(|(a, b)| b as i64 - a as i64),
        }
    }
}

/// Bytes held at the peak by one category or one source line, on both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct HeldRow {
    /// The category, or the line (`file.py:42 (fn)`).
    pub name: String,
    /// The line's full path (lines only, where known).
    pub path: String,
    /// The category the line's allocations fall in (lines only; `mixed` if they differ).
    pub category: String,
    pub a_bytes: u64,
    pub b_bytes: u64,
    pub delta_bytes: i64,
    pub a_allocations: u64,
    pub b_allocations: u64,
}

/// A setting that differs, or is on one side only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SettingDiff {
    pub name: String,
    pub a: Option<String>,
    pub b: Option<String>,
}

/// The largest allocation live at B's peak with no allocation of the same line and size
/// live at A's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct NewAllocation {
    pub requested_bytes: u64,
    pub origin: String,
    pub origin_path: String,
    pub category: Category,
}

/// `headroom diff --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Diff {
    pub a: SideInfo,
    pub b: SideInfo,
    /// Peaks and counts, each on both sides with B − A.
    pub figures: Vec<Delta>,
    /// Bytes at the peak by category (every category present on either side).
    pub by_category: Vec<HeldRow>,
    /// Source lines by how much their memory at the peak changed, largest |B − A| first
    /// (at most `LINES_LISTED`; unchanged lines left out).
    pub lines: Vec<HeldRow>,
    /// Source lines that changed and are not listed.
    pub lines_not_listed: u64,
    pub settings: Vec<SettingDiff>,
    pub largest_new_allocation: Option<NewAllocation>,
}

/// Reads both sides and diffs them.
pub fn load(a: &Path, b: &Path) -> anyhow::Result<Diff> {
    Ok(diff(&side::load(a)?, &side::load(b)?))
}

#[derive(Default)]
struct Sum {
    path: String,
    categories: BTreeMap<Category, ()>,
    bytes: [u64; 2],
    count: [u64; 2],
}

fn add(map: &mut BTreeMap<String, Sum>, key: String, h: &Held, side: usize) {
    let s = map.entry(key).or_default();
    if s.path.is_empty() {
        s.path = h.origin_path.clone();
    }
    s.categories.insert(h.category, ());
    s.bytes[side] += h.requested_bytes;
    s.count[side] += 1;
}

fn rows(map: BTreeMap<String, Sum>) -> Vec<HeldRow> {
    map.into_iter()
        .map(|(name, s)| HeldRow {
            name,
            path: s.path,
            category: match s.categories.keys().collect::<Vec<_>>().as_slice() {
                [one] => one.name().into(),
                _ => "mixed".into(),
            },
            a_bytes: s.bytes[0],
            b_bytes: s.bytes[1],
            delta_bytes: s.bytes[1] as i64 - s.bytes[0] as i64,
            a_allocations: s.count[0],
            b_allocations: s.count[1],
        })
        .collect()
}

/// The diff of two sides.
pub fn diff(a: &Side, b: &Side) -> Diff {
    let figures = vec![
        Delta::new(
            "allocated_peak_bytes",
            a.info.allocated_peak_bytes,
            b.info.allocated_peak_bytes,
        ),
        Delta::new(
            "reserved_peak_bytes",
            a.info.reserved_peak_bytes,
            b.info.reserved_peak_bytes,
        ),
        Delta::new(
            "device_used_peak_bytes",
            a.info.device_used_peak_bytes,
            b.info.device_used_peak_bytes,
        ),
        Delta::new(
            "job_used_peak_bytes",
            a.info.job_used_peak_bytes,
            b.info.job_used_peak_bytes,
        ),
        Delta::new("segments_held", a.info.segments_held, b.info.segments_held),
        Delta::new(
            "segment_allocs",
            a.info.segment_allocs,
            b.info.segment_allocs,
        ),
    ]
    .into_iter()
    .filter(|d| d.a.is_some() || d.b.is_some())
    .collect();

    let (mut lines, mut cats) = (BTreeMap::new(), BTreeMap::new());
    for (i, side) in [a, b].into_iter().enumerate() {
        for h in &side.held {
            // The full path tells two files of one name apart; the short form is shown.
            add(
                &mut lines,
                h.origin.clone() + "\u{0}" + &h.origin_path,
                h,
                i,
            );
            add(&mut cats, h.category.name().to_string(), h, i);
        }
    }
    let mut lines: Vec<HeldRow> = rows(lines)
        .into_iter()
        .map(|mut r| {
            r.name = r.name.split('\u{0}').next().unwrap_or_default().to_string();
            r
        })
        .filter(|r| r.delta_bytes != 0)
        .collect();
    lines.sort_by(|x, y| {
        y.delta_bytes
            .unsigned_abs()
            .cmp(&x.delta_bytes.unsigned_abs())
            .then(y.delta_bytes.cmp(&x.delta_bytes))
            .then(x.name.cmp(&y.name))
    });
    let lines_not_listed = lines.len().saturating_sub(LINES_LISTED) as u64;
    lines.truncate(LINES_LISTED);
    let mut by_category = rows(cats);
    for r in &mut by_category {
        r.category = r.name.clone();
    }
    by_category.sort_by(|x, y| y.delta_bytes.cmp(&x.delta_bytes).then(x.name.cmp(&y.name)));

    let mut settings = Vec::new();
    let keys: std::collections::BTreeSet<&String> =
        a.settings.keys().chain(b.settings.keys()).collect();
    for k in keys {
        let (x, y) = (a.settings.get(k), b.settings.get(k));
        if x != y {
            settings.push(SettingDiff {
                name: k.clone(),
                a: x.cloned(),
                b: y.cloned(),
            });
        }
    }

    Diff {
        a: a.info.clone(),
        b: b.info.clone(),
        figures,
        by_category,
        lines,
        lines_not_listed,
        settings,
        largest_new_allocation: largest_new(a, b),
    }
}

/// B's largest allocation at its peak that A's peak does not match by line and size; only
/// when both sides list allocations one by one (snapshots).
fn largest_new(a: &Side, b: &Side) -> Option<NewAllocation> {
    if !(a.held_per_allocation && b.held_per_allocation) {
        return None;
    }
    let mut in_a: BTreeMap<(&str, &str, u64), u64> = BTreeMap::new();
    for h in &a.held {
        *in_a
            .entry((&h.origin, &h.origin_path, h.requested_bytes))
            .or_default() += 1;
    }
    let mut new: Vec<&Held> = Vec::new();
    for h in &b.held {
        match in_a.get_mut(&(h.origin.as_str(), h.origin_path.as_str(), h.requested_bytes)) {
            Some(n) if *n > 0 => *n -= 1,
            _ => new.push(h),
        }
    }
    new.into_iter()
        .max_by(|x, y| {
            x.requested_bytes
                .cmp(&y.requested_bytes)
                .then(y.origin.cmp(&x.origin))
        })
        .map(|h| NewAllocation {
            requested_bytes: h.requested_bytes,
            origin: h.origin.clone(),
            origin_path: h.origin_path.clone(),
            category: h.category,
        })
}
