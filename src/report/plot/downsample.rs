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
