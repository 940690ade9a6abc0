//! Arithmetic on byte intervals, and comparisons that can answer "undecided".
//!
//! A message printed with two decimals pins each figure down to an interval; sums and
//! differences of figures widen it. A comparison is decided only when the two intervals do
//! not overlap, so no conclusion rests on digits the message did not print.

use std::fmt;

use crate::oom_message::{ByteRange, Quantity};
use crate::units::{Bytes, SignedBytes};

/// Inclusive bounds on a (possibly negative) byte count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iv {
    pub low: i128,
    pub high: i128,
}

/// The answer to a comparison of intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Yes,
    No,
    /// The intervals overlap: the printed precision cannot tell.
    Undecided,
}

impl Iv {
    pub fn exact(v: i128) -> Iv {
        Iv { low: v, high: v }
    }

    pub fn of(q: &Quantity) -> Iv {
        Iv::from(q.bytes)
    }

    pub fn plus(self, o: Iv) -> Iv {
        Iv {
            low: self.low + o.low,
            high: self.high + o.high,
        }
    }

    pub fn minus(self, o: Iv) -> Iv {
        Iv {
            low: self.low - o.high,
            high: self.high - o.low,
        }
    }

    /// The part of the interval that is a possible amount of memory (≥ 0).
    pub fn non_negative(self) -> Iv {
        Iv {
            low: self.low.max(0),
            high: self.high.max(0),
        }
    }

    /// `self ≥ o` for every value in both, for none, or undecided.
    pub fn ge(self, o: Iv) -> Verdict {
        if self.low >= o.high {
            Verdict::Yes
        } else if self.high < o.low {
            Verdict::No
        } else {
            Verdict::Undecided
        }
    }

    /// `self > o`.
    pub fn gt(self, o: Iv) -> Verdict {
        if self.low > o.high {
            Verdict::Yes
        } else if self.high <= o.low {
            Verdict::No
        } else {
            Verdict::Undecided
        }
    }

    /// `self / o` as fractions, where `o` is positive.
    pub fn ratio(self, o: Iv) -> Option<(f64, f64)> {
        (o.low > 0).then(|| {
            (
                self.low.max(0) as f64 / o.high as f64,
                self.high.max(0) as f64 / o.low as f64,
            )
        })
    }

    pub fn mid(self) -> i128 {
        self.low + (self.high - self.low) / 2
    }

    pub fn is_exact(self) -> bool {
        self.low == self.high
    }
}

impl From<ByteRange> for Iv {
    fn from(r: ByteRange) -> Iv {
        Iv {
            low: i128::from(r.low),
            high: i128::from(r.high),
        }
    }
}

fn human(v: i128) -> String {
    if v < 0 {
        SignedBytes(v).to_string()
    } else {
        Bytes(u64::try_from(v).unwrap_or(u64::MAX)).to_string()
    }
}

/// `786.00 MiB` when exact or when both ends print the same; else `9.79–9.81 GiB`.
impl fmt::Display for Iv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (low, high) = (human(self.low), human(self.high));
        if low == high {
            return write!(f, "{low}");
        }
        match (low.rsplit_once(' '), high.rsplit_once(' ')) {
            (Some((l, lu)), Some((h, hu))) if lu == hu => write!(f, "{l}–{h} {hu}"),
            _ => write!(f, "{low}–{high}"),
        }
    }
}

/// A fraction interval as a percentage: `0.5%`, `0.4–0.6%`.
pub fn percent((low, high): (f64, f64)) -> String {
    let digits = |v: f64| {
        if v >= 0.1 {
            format!("{:.0}", v * 100.0)
        } else {
            format!("{:.1}", v * 100.0)
        }
    };
    let (l, h) = (digits(low), digits(high));
    if l == h {
        format!("{l}%")
    } else {
        format!("{l}–{h}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: i128 = 1 << 20;

    #[test]
    fn differences_widen_and_comparisons_refuse_to_guess() {
        let a = Iv { low: 10, high: 12 };
        let b = Iv { low: 3, high: 4 };
        assert_eq!(a.minus(b), Iv { low: 6, high: 9 });
        assert_eq!(a.plus(b), Iv { low: 13, high: 16 });
        assert_eq!(a.ge(b), Verdict::Yes);
        assert_eq!(b.ge(a), Verdict::No);
        assert_eq!(a.ge(Iv { low: 11, high: 11 }), Verdict::Undecided);
        assert_eq!(Iv::exact(5).ge(Iv::exact(5)), Verdict::Yes);
        assert_eq!(Iv::exact(5).gt(Iv::exact(5)), Verdict::No);
        assert_eq!(
            Iv { low: -3, high: 2 }.non_negative(),
            Iv { low: 0, high: 2 }
        );
    }

    #[test]
    fn intervals_print_once_when_the_precision_agrees() {
        assert_eq!(Iv::exact(786 * M).to_string(), "786.00 MiB");
        let iv = Iv {
            low: 9 * 1024 * M + 800 * M,
            high: 9 * 1024 * M + 830 * M,
        };
        assert_eq!(iv.to_string(), "9.78–9.81 GiB");
        assert_eq!(percent((0.0047, 0.0048)), "0.5%");
        assert_eq!(percent((0.25, 0.26)), "25–26%");
    }
}
