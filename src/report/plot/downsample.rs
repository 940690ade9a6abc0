//! Drawing a long timeline without losing its peaks: per pixel column keep the first, lowest,
//! highest and last reading (in time order), then draw the result as steps, since a memory
//! view holds its value until the next reading.

/// Reduces `points` (x ascending, value) to at most four per column of width `column`,
/// keeping each column's minimum and maximum. `x` is pixels for a plot, nanoseconds for a
/// trace.
pub fn min_max_columns(
    points: impl IntoIterator<Item = (f64, u64)>,
    column: f64,
) -> Vec<(f64, u64)> {
    let column = column.max(f64::MIN_POSITIVE);
    let mut out = Vec::new();
    let mut col: Option<(i64, Column)> = None;
    for (x, v) in points {
        let c = (x / column).floor() as i64;
        match &mut col {
            Some((cur, acc)) if *cur == c => acc.add(x, v),
            _ => {
                if let Some((_, acc)) = col.take() {
                    acc.emit(&mut out);
                }
                col = Some((c, Column::new(x, v)));
            }
        }
    }
    if let Some((_, acc)) = col {
        acc.emit(&mut out);
    }
    out
}

/// The readings of one pixel column that matter for drawing it.
struct Column {
    first: (f64, u64),
    min: (f64, u64),
    max: (f64, u64),
    last: (f64, u64),
}

impl Column {
    fn new(x: f64, v: u64) -> Column {
        Column {
            first: (x, v),
            min: (x, v),
            max: (x, v),
            last: (x, v),
        }
    }

    fn add(&mut self, x: f64, v: u64) {
        if v < self.min.1 {
            self.min = (x, v);
        }
        if v > self.max.1 {
            self.max = (x, v);
        }
        self.last = (x, v);
    }

    fn emit(self, out: &mut Vec<(f64, u64)>) {
        let mut pts = [self.first, self.min, self.max, self.last];
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        for p in pts {
            if out.last() != Some(&p) {
                out.push(p);
            }
        }
    }
}

/// A run of pixel columns where the value turned back at least twice within one column (fast
/// allocate/free churn): drawn as a shaded band from each column's lowest to its highest value,
/// not as a solid block of vertical strokes.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// (column start x, lowest, highest) per column, then the x where the band ends.
    pub columns: Vec<(f64, u64, u64)>,
    pub end_x: f64,
}

/// The line and the churn bands of one series, in buckets of `bucket` pixels: a bucket whose
/// value turns back twice or more is churn, shown by a band from its lowest to its highest
/// value, and the line stops at the band and starts again after it (so churn is a band, not a
/// block of vertical strokes). Any other bucket keeps every reading `min_max_columns` would
/// keep. Returns the line's pieces and the bands.
pub fn line_and_bands(
    points: impl IntoIterator<Item = (f64, u64)>,
    bucket: f64,
) -> (Vec<Vec<(f64, u64)>>, Vec<Band>) {
    let bucket = bucket.max(f64::MIN_POSITIVE);
    let mut pieces: Vec<Vec<(f64, u64)>> = vec![Vec::new()];
    let mut bands: Vec<Band> = Vec::new();
    let mut flush = |c: i64, pts: Vec<(f64, u64)>, pieces: &mut Vec<Vec<(f64, u64)>>| {
        // Reversals (up then down, or down then up): a ramp is not churn, however steep.
        let mut reversals = 0;
        let mut last_dir = 0i8;
        for w in pts.windows(2) {
            let dir = (w[1].1 > w[0].1) as i8 - (w[1].1 < w[0].1) as i8;
            if dir != 0 {
                if last_dir != 0 && dir != last_dir {
                    reversals += 1;
                }
                last_dir = dir;
            }
        }
        let line = pieces.last_mut().expect("one piece at least");
        if reversals < 2 {
            let mut col: Option<Column> = None;
            for (x, v) in pts {
                match &mut col {
                    Some(acc) => acc.add(x, v),
                    None => col = Some(Column::new(x, v)),
                }
            }
            if let Some(acc) = col {
                acc.emit(line);
            }
            return;
        }
        let (lo, hi) = pts
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
        let x_start = c as f64 * bucket;
        match bands.last_mut() {
            Some(b) if (b.end_x - x_start).abs() < bucket * 0.5 => {
                b.columns.push((x_start, lo, hi));
                b.end_x = x_start + bucket;
                // Still inside the band: the piece after it starts at this bucket's end.
                if let Some(p) = line.last_mut() {
                    *p = pts[pts.len() - 1];
                }
            }
            _ => {
                if line.last() != Some(&pts[0]) {
                    line.push(pts[0]);
                }
                bands.push(Band {
                    columns: vec![(x_start, lo, hi)],
                    end_x: x_start + bucket,
                });
                pieces.push(vec![pts[pts.len() - 1]]);
            }
        }
    };
    let mut cur: Option<(i64, Vec<(f64, u64)>)> = None;
    for (x, v) in points {
        let c = (x / bucket).floor() as i64;
        match &mut cur {
            Some((k, pts)) if *k == c => pts.push((x, v)),
            _ => {
                if let Some((k, pts)) = cur.take() {
                    flush(k, pts, &mut pieces);
                }
                cur = Some((c, vec![(x, v)]));
            }
        }
    }
    if let Some((k, pts)) = cur {
        flush(k, pts, &mut pieces);
    }
    pieces.retain(|p| !p.is_empty());
    (pieces, bands)
}

/// Turns readings into the corners of a step line: each value holds until the next reading.
pub fn steps(points: &[(f64, u64)]) -> Vec<(f64, u64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for &(x, v) in points {
        if let Some(&(_, prev)) = out.last()
            && prev != v
        {
            out.push((x, prev));
        }
        if out.last().is_none_or(|&(px, pv)| px != x || pv != v) {
            out.push((x, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_a_million_readings_keep_a_single_reading_spike() {
        let n = 500_000u64;
        let spike_at = 312_345u64;
        let width = 1000.0f64;
        let pts = (0..n).map(|i| {
            let v = if i == spike_at { 9_000 } else { 1_000 + i % 7 };
            (i as f64 * width / n as f64, v)
        });
        let out = min_max_columns(pts, 1.0);
        assert!(out.len() <= 4 * 1000 + 4, "{}", out.len());
        assert_eq!(out.iter().map(|p| p.1).max(), Some(9_000));
        assert_eq!(out.iter().map(|p| p.1).min(), Some(1_000));
    }

    #[test]
    fn churn_becomes_a_band_and_the_line_stops_at_it() {
        // 2 buckets of churn (0/5 alternating 10 times each), then a quiet bucket.
        let mut pts: Vec<(f64, u64)> = vec![(0.0, 3)];
        pts.extend((1..20).map(|i| (1.0 + i as f64 / 10.0, (i % 2) * 5)));
        pts.push((3.5, 7));
        let (pieces, bands) = line_and_bands(pts, 1.0);
        assert_eq!(bands.len(), 1);
        assert_eq!(bands[0].columns, [(1.0, 0, 5), (2.0, 0, 5)]);
        assert_eq!(bands[0].end_x, 3.0);
        // Up to the band's first reading, then from its last reading on.
        assert_eq!(
            pieces,
            [vec![(0.0, 3), (1.1, 5)], vec![(1.0 + 1.9, 5), (3.5, 7)]]
        );
    }

    #[test]
    fn a_steep_ramp_is_a_line_not_a_band() {
        let pts: Vec<(f64, u64)> = (0..50).map(|i| (i as f64 * 0.01, i * 3)).collect();
        let (pieces, bands) = line_and_bands(pts, 1.0);
        assert!(bands.is_empty());
        assert_eq!(pieces, [vec![(0.0, 0), (0.49, 147)]]);
    }

    #[test]
    fn columns_keep_time_order_and_steps_hold_values() {
        let out = min_max_columns([(0.1, 5), (0.2, 9), (0.3, 1), (0.4, 4), (1.5, 4)], 1.0);
        assert_eq!(out, [(0.1, 5), (0.2, 9), (0.3, 1), (0.4, 4), (1.5, 4)]);
        let s = steps(&[(0.0, 1), (2.0, 3), (3.0, 3), (5.0, 0)]);
        assert_eq!(
            s,
            [(0.0, 1), (2.0, 1), (2.0, 3), (3.0, 3), (5.0, 3), (5.0, 0)]
        );
    }
}
