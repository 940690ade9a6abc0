//! A timeline read back in bounded memory: every row while there are few, then, past
//! `EXACT_ROWS_MAX`, per time bucket the rows that hold each column's first, lowest, highest
//! and last value. No extreme is lost (every view's peak and every dip stays a row), and a run
//! of any length keeps at most `BUCKETS_MAX` buckets of a few rows each.
//!
//! Buckets start as wide as the rows seen so far need and double (two merged into one) when
//! there would be more than `BUCKETS_MAX`: the extremes of two buckets are among the rows
//! each kept, so merging is exact.

use crate::record::{Reading, View};

/// Up to this many rows are kept as they are.
pub const EXACT_ROWS_MAX: usize = 100_000;
/// At most this many time buckets once rows are reduced.
pub const BUCKETS_MAX: u64 = 4_096;
/// Columns whose extremes are kept: device free, then every view.
const COLUMNS: usize = 1 + View::COUNT;

/// Rows in time order in, a bounded selection of them out.
#[derive(Debug)]
pub struct Downsample {
    exact_rows_max: usize,
    buckets_max: u64,
    exact: Vec<Reading>,
    reduced: Option<Buckets>,
}

impl Default for Downsample {
    fn default() -> Self {
        Downsample::with_bounds(EXACT_ROWS_MAX, BUCKETS_MAX)
    }
}

impl Downsample {
    /// Keeps up to `exact_rows_max` rows whole, then reduces to `buckets_max` buckets.
    pub fn with_bounds(exact_rows_max: usize, buckets_max: u64) -> Downsample {
        Downsample {
            exact_rows_max,
            buckets_max: buckets_max.max(1),
            exact: Vec::new(),
            reduced: None,
        }
    }

    /// Adds the next row (rows come in time order).
    pub fn push(&mut self, r: Reading) {
        if let Some(b) = &mut self.reduced {
            b.push(r);
            return;
        }
        self.exact.push(r);
        if self.exact.len() > self.exact_rows_max {
            let first = self.exact[0].t_ns;
            let span = r.t_ns.saturating_sub(first).saturating_add(1);
            let width = span.div_ceil(self.buckets_max).next_power_of_two();
            let mut b = Buckets::new(first, width, self.buckets_max);
            for row in std::mem::take(&mut self.exact) {
                b.push(row);
            }
            self.reduced = Some(b);
        }
    }

    /// Rows held now: what this costs in memory, at most `exact_rows_max` or a few per bucket.
    pub fn rows_held(&self) -> usize {
        match &self.reduced {
            Some(b) => b.kept.len() + b.current.rows.len(),
            None => self.exact.len(),
        }
    }

    /// Whether rows were left out.
    pub fn is_reduced(&self) -> bool {
        self.reduced.is_some()
    }

    /// The kept rows, in time order.
    pub fn finish(self) -> Vec<Reading> {
        match self.reduced {
            Some(mut b) => {
                b.close_bucket();
                b.kept
            }
            None => self.exact,
        }
    }
}

/// Rows bucketed by time: `kept` holds the closed buckets' rows, `current` the open one.
#[derive(Debug)]
struct Buckets {
    origin_ns: u64,
    width_ns: u64,
    buckets_max: u64,
    kept: Vec<Reading>,
    /// How many closed buckets `kept` holds rows of.
    closed: u64,
    current_index: Option<u64>,
    current: Bucket,
}

impl Buckets {
    fn new(origin_ns: u64, width_ns: u64, buckets_max: u64) -> Buckets {
        Buckets {
            origin_ns,
            width_ns: width_ns.max(1),
            buckets_max,
            kept: Vec::new(),
            closed: 0,
            current_index: None,
            current: Bucket::default(),
        }
    }

    fn index(&self, t_ns: u64) -> u64 {
        t_ns.saturating_sub(self.origin_ns) / self.width_ns
    }

    fn push(&mut self, r: Reading) {
        let mut i = self.index(r.t_ns);
        if self.current_index != Some(i) {
            self.close_bucket();
            if self.closed >= self.buckets_max {
                // The last merged bucket stays open: this row may fall in it.
                self.widen();
                i = self.index(r.t_ns);
                if self.current_index != Some(i) {
                    self.close_bucket();
                }
            }
            self.current_index = Some(i);
        }
        self.current.push(r);
    }

    fn close_bucket(&mut self) {
        if self.current_index.take().is_some() {
            self.kept
                .extend(std::mem::take(&mut self.current).into_rows());
            self.closed += 1;
        }
    }

    /// Doubles the bucket width and reduces the closed buckets' rows to it; the last bucket
    /// is left open.
    fn widen(&mut self) {
        let mut wider = Buckets::new(self.origin_ns, self.width_ns * 2, self.buckets_max);
        for r in std::mem::take(&mut self.kept) {
            wider.push_closed(r);
        }
        *self = wider;
    }

    /// `push` without widening: merging closed buckets never makes more of them.
    fn push_closed(&mut self, r: Reading) {
        let i = self.index(r.t_ns);
        if self.current_index != Some(i) {
            self.close_bucket();
            self.current_index = Some(i);
        }
        self.current.push(r);
    }
}

/// One bucket's candidate rows and, per column, which of them holds its lowest and highest.
#[derive(Debug, Default)]
struct Bucket {
    rows: Vec<Reading>,
    low: [Option<usize>; COLUMNS],
    high: [Option<usize>; COLUMNS],
}

impl Bucket {
    /// Rows beyond this are pruned to the ones still first, last or an extreme.
    const PRUNE_AT: usize = 4 * COLUMNS;

    fn push(&mut self, r: Reading) {
        let at = self.rows.len();
        self.rows.push(r);
        for c in 0..COLUMNS {
            let Some(v) = column(&r, c) else { continue };
            if self.low[c].is_none_or(|i| v < column(&self.rows[i], c).unwrap_or(u64::MAX)) {
                self.low[c] = Some(at);
            }
            if self.high[c].is_none_or(|i| v > column(&self.rows[i], c).unwrap_or(0)) {
                self.high[c] = Some(at);
            }
        }
        if self.rows.len() > Self::PRUNE_AT {
            self.prune();
        }
    }

    /// Drops every row that is neither first, last nor a column's extreme.
    fn prune(&mut self) {
        let n = self.rows.len();
        let mut keep = vec![false; n];
        keep[0] = true;
        keep[n - 1] = true;
        for i in self.low.iter().chain(&self.high).flatten() {
            keep[*i] = true;
        }
        let mut new_index = vec![0; n];
        let mut j = 0;
        for (i, k) in keep.iter().enumerate() {
            new_index[i] = j;
            if *k {
                self.rows[j] = self.rows[i];
                j += 1;
            }
        }
        self.rows.truncate(j);
        for i in self.low.iter_mut().chain(self.high.iter_mut()).flatten() {
            *i = new_index[*i];
        }
    }

    fn into_rows(mut self) -> Vec<Reading> {
        if !self.rows.is_empty() {
            self.prune();
        }
        self.rows
    }
}

/// Column `c` of a row: device free for 0, then the views in column order.
fn column(r: &Reading, c: usize) -> Option<u64> {
    match c {
        0 => Some(r.device_free_bytes),
        _ => r.views.get(View::ALL[c - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Source, ViewSet};

    fn row(t_ns: u64, own: u64) -> Reading {
        Reading {
            t_ns,
            phase: 0,
            source: Source::Sampler,
            device_free_bytes: 1_000_000 - own,
            views: ViewSet::default().with(View::OwnBytes, own),
        }
    }

    /// A sawtooth with one spike and one dip, each a single row.
    fn series(n: u64) -> impl Iterator<Item = Reading> {
        (0..n).map(move |t| {
            let own = match t {
                t if t == n / 3 => 900_000,
                t if t == 2 * n / 3 => 1,
                t => 1_000 + t % 97,
            };
            row(t * 1_000, own)
        })
    }

    #[test]
    fn few_rows_are_kept_as_they_are() {
        let mut d = Downsample::with_bounds(1_000, 16);
        series(1_000).for_each(|r| d.push(r));
        assert!(!d.is_reduced());
        assert_eq!(d.finish(), series(1_000).collect::<Vec<_>>());
    }

    #[test]
    fn many_rows_are_held_in_bounded_memory_and_every_extreme_is_kept() {
        let mut d = Downsample::with_bounds(1_000, 16);
        let mut held_max = 0;
        for r in series(1_000_000) {
            d.push(r);
            held_max = held_max.max(d.rows_held());
        }
        assert!(d.is_reduced());
        // 16 buckets of at most 2 + 2 × 14 rows each, plus the open bucket's pruning slack.
        assert!(held_max <= 1_000 + 1, "{held_max}");
        let kept = d.finish();
        assert!(kept.len() <= 17 * 4, "{}", kept.len());
        assert!(kept.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
        let own: Vec<u64> = kept
            .iter()
            .map(|r| r.views.get(View::OwnBytes).unwrap())
            .collect();
        assert_eq!(own.iter().max(), Some(&900_000));
        assert_eq!(own.iter().min(), Some(&1));
        let spike = kept
            .iter()
            .find(|r| r.views.get(View::OwnBytes) == Some(900_000));
        assert_eq!(spike.unwrap().t_ns, 1_000_000 / 3 * 1_000);
        assert_eq!(kept.first(), series(1_000_000).next().as_ref());
        assert_eq!(kept.last().unwrap().t_ns, 999_999 * 1_000);
    }
}
