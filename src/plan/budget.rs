//! The planning arithmetic: `KV budget = capacity − weights − other peak − safety margin`, and
//! how many requests of a given KV size that budget holds.
//!
//! Everything is exact integer bytes. A budget that would come out negative, or a request size
//! of zero, is refused with the arithmetic that failed, so the person reading it sees which
//! category is too large rather than a bare "invalid plan".

use std::fmt;

use serde::Serialize;

use crate::units::{GIB, KIB, MIB};

/// The four categories and the per-request KV size a plan states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BudgetInputs {
    pub capacity_bytes: u64,
    pub weights_bytes: u64,
    /// Activations, workspace, runtime/communication and graphs at their peak: everything but
    /// weights, KV and the margin.
    pub other_peak_bytes: u64,
    pub margin_bytes: u64,
    pub kv_per_request_bytes: u64,
}

/// The arithmetic, done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Budget {
    #[serde(flatten)]
    pub inputs: BudgetInputs,
    pub kv_budget_bytes: u64,
    /// Whole requests the KV budget holds: `kv_budget_bytes / kv_per_request_bytes`.
    pub requests: u64,
    /// What is left of the KV budget after those requests.
    pub kv_leftover_bytes: u64,
}

/// Why a plan's arithmetic was refused. Each message shows the arithmetic that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("the capacity is 0 B: nothing can be planned on it")]
    ZeroCapacity,
    #[error("{arithmetic}: the categories exceed the capacity{detail}")]
    CategoriesExceedCapacity { arithmetic: String, detail: String },
    #[error(
        "the KV per request is 0 B: {budget} ÷ 0 B per request has no answer; give the KV bytes one request holds"
    )]
    ZeroPerRequest { budget: String },
}

impl BudgetInputs {
    /// Does the arithmetic, or refuses it with the line that failed.
    pub fn compute(&self) -> Result<Budget, BudgetError> {
        if self.capacity_bytes == 0 {
            return Err(BudgetError::ZeroCapacity);
        }
        let spent = self.weights_bytes as i128 + self.other_peak_bytes as i128;
        let kv_budget = self.capacity_bytes as i128 - spent - self.margin_bytes as i128;
        if kv_budget < 0 {
            let left = self.capacity_bytes as i128 - spent;
            let detail = if left >= 0 {
                format!(
                    " (the {} safety margin is larger than the {} left after weights and other peak)",
                    Short(self.margin_bytes as i128),
                    Short(left)
                )
            } else {
                format!(
                    " (weights and other peak alone come to {}, {} more than the capacity)",
                    Short(spent),
                    Short(-left)
                )
            };
            return Err(BudgetError::CategoriesExceedCapacity {
                arithmetic: self.subtraction(kv_budget, false),
                detail,
            });
        }
        let kv_budget_bytes = kv_budget as u64;
        if self.kv_per_request_bytes == 0 {
            return Err(BudgetError::ZeroPerRequest {
                budget: Short(kv_budget).to_string(),
            });
        }
        Ok(Budget {
            inputs: *self,
            kv_budget_bytes,
            requests: kv_budget_bytes / self.kv_per_request_bytes,
            kv_leftover_bytes: kv_budget_bytes % self.kv_per_request_bytes,
        })
    }

    fn terms(&self) -> [i128; 4] {
        [
            self.capacity_bytes as i128,
            self.weights_bytes as i128,
            self.other_peak_bytes as i128,
            self.margin_bytes as i128,
        ]
    }

    /// `80 GiB − 48 GiB − 28 GiB − 8 GiB = −4 GiB`, or with `compact` and a unit every term
    /// shares, the article's `80 − 48 − 20 − 4 = 8 GiB`.
    pub fn subtraction(&self, result: i128, compact: bool) -> String {
        let terms = self.terms();
        let mut all = terms.to_vec();
        all.push(result);
        if let Some(unit) = common_unit(&all).filter(|_| compact) {
            let parts: Vec<String> = terms.iter().map(|t| in_unit(*t, unit)).collect();
            return format!(
                "{} = {} {}",
                parts.join(" − "),
                in_unit(result, unit),
                unit_name(unit)
            );
        }
        let parts: Vec<String> = terms.iter().map(|t| Short(*t).to_string()).collect();
        format!("{} = {}", parts.join(" − "), Short(result))
    }
}

impl Budget {
    /// `80 − 48 − 20 − 4 = 8 GiB for KV`.
    pub fn budget_line(&self) -> String {
        format!(
            "{} for KV",
            self.inputs.subtraction(self.kv_budget_bytes as i128, true)
        )
    }

    /// `8 GiB ÷ 0.5 GiB per request = 16 requests`, with what is left over if anything.
    pub fn requests_line(&self) -> String {
        let mut s = format!(
            "{} ÷ {} per request = {} request{}",
            Short(self.kv_budget_bytes as i128),
            Short(self.inputs.kv_per_request_bytes as i128),
            self.requests,
            if self.requests == 1 { "" } else { "s" }
        );
        if self.kv_leftover_bytes > 0 {
            s.push_str(&format!(
                " ({} left over)",
                Short(self.kv_leftover_bytes as i128)
            ));
        }
        s
    }
}

const UNITS: [(u128, &str); 4] = [
    (GIB as u128 * 1024, "TiB"),
    (GIB as u128, "GiB"),
    (MIB as u128, "MiB"),
    (KIB as u128, "KiB"),
];

fn unit_name(unit: u128) -> &'static str {
    UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map_or("B", |(_, n)| n)
}

/// Whether `v` is a whole number of hundredths of `unit` (so two decimals show it exactly).
fn exact_in(v: u128, unit: u128) -> bool {
    (v * 100) % unit == 0
}

/// `v` in `unit` with at most two decimals, trailing zeros dropped, and a real minus sign.
fn in_unit(v: i128, unit: u128) -> String {
    let sign = if v < 0 { "−" } else { "" };
    let a = v.unsigned_abs();
    let hundredths = a * 100 / unit;
    let whole = hundredths / 100;
    let frac = hundredths % 100;
    let frac = if frac == 0 {
        String::new()
    } else if frac % 10 == 0 {
        format!(".{}", frac / 10)
    } else {
        format!(".{frac:02}")
    };
    format!("{sign}{whole}{frac}")
}

/// The largest unit in which every value is exact to two decimals (and the largest is at
/// least one whole unit); `None` when only bytes would do.
fn common_unit(values: &[i128]) -> Option<u128> {
    let max = values.iter().map(|v| v.unsigned_abs()).max()?;
    UNITS
        .iter()
        .map(|(u, _)| *u)
        .find(|u| max >= *u && values.iter().all(|v| exact_in(v.unsigned_abs(), *u)))
}

/// A size for arithmetic people read: exact, in the largest unit that shows it exactly with
/// at most two decimals (`0.5 GiB`, `143156 MiB`, `1.5 MiB`, `−4 GiB`); bytes otherwise.
#[derive(Debug, Clone, Copy)]
pub struct Short(pub i128);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0.unsigned_abs();
        for (unit, name) in UNITS {
            if 2 * a >= unit && exact_in(a, unit) {
                return write!(f, "{} {name}", in_unit(self.0, unit));
            }
        }
        write!(f, "{} B", in_unit(self.0, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn article(other_peak_gib: u64, kv_per_request: u64) -> BudgetInputs {
        BudgetInputs {
            capacity_bytes: 80 * GIB,
            weights_bytes: 48 * GIB,
            other_peak_bytes: other_peak_gib * GIB,
            margin_bytes: 4 * GIB,
            kv_per_request_bytes: kv_per_request,
        }
    }

    #[test]
    fn the_article_eight_gib_sixteen_requests() {
        let b = article(20, GIB / 2).compute().unwrap();
        assert_eq!(b.kv_budget_bytes, 8 * GIB);
        assert_eq!(b.requests, 16);
        assert_eq!(b.kv_leftover_bytes, 0);
        assert_eq!(b.budget_line(), "80 − 48 − 20 − 4 = 8 GiB for KV");
        assert_eq!(
            b.requests_line(),
            "8 GiB ÷ 0.5 GiB per request = 16 requests"
        );
    }

    #[test]
    fn the_article_one_gib_per_request_gives_eight() {
        let b = article(20, GIB).compute().unwrap();
        assert_eq!(b.kv_budget_bytes, 8 * GIB);
        assert_eq!(b.requests, 8);
    }

    #[test]
    fn the_article_other_peak_28_gib_leaves_nothing() {
        let b = article(28, GIB / 2).compute().unwrap();
        assert_eq!(b.kv_budget_bytes, 0);
        assert_eq!(b.requests, 0);
        assert_eq!(b.budget_line(), "80 − 48 − 28 − 4 = 0 GiB for KV");
        assert_eq!(b.requests_line(), "0 B ÷ 0.5 GiB per request = 0 requests");
    }

    #[test]
    fn categories_over_the_capacity_show_the_failed_arithmetic() {
        let mut i = article(28, GIB / 2);
        i.margin_bytes = 8 * GIB;
        let e = i.compute().unwrap_err().to_string();
        assert_eq!(
            e,
            "80 GiB − 48 GiB − 28 GiB − 8 GiB = −4 GiB: the categories exceed the capacity \
             (the 8 GiB safety margin is larger than the 4 GiB left after weights and other peak)"
        );
        let e = article(40, GIB / 2).compute().unwrap_err().to_string();
        assert!(
            e.starts_with("80 GiB − 48 GiB − 40 GiB − 4 GiB = −12 GiB: the categories exceed"),
            "{e}"
        );
        assert!(e.contains("alone come to 88 GiB, 8 GiB more"), "{e}");
    }

    #[test]
    fn zero_per_request_and_zero_capacity_are_refused() {
        let e = article(20, 0).compute().unwrap_err().to_string();
        assert!(e.contains("8 GiB ÷ 0 B per request"), "{e}");
        let mut i = article(20, GIB);
        i.capacity_bytes = 0;
        assert_eq!(i.compute().unwrap_err(), BudgetError::ZeroCapacity);
    }

    #[test]
    fn leftover_and_uneven_units() {
        let b = BudgetInputs {
            capacity_bytes: 143_156 * MIB,
            weights_bytes: 48 * GIB,
            other_peak_bytes: 20 * GIB,
            margin_bytes: 4 * GIB,
            kv_per_request_bytes: GIB / 2,
        }
        .compute()
        .unwrap();
        assert_eq!(b.kv_budget_bytes, 69_428 * MIB);
        assert_eq!(b.requests, 135);
        assert_eq!(b.kv_leftover_bytes, 308 * MIB);
        assert_eq!(
            b.budget_line(),
            "143156 − 49152 − 20480 − 4096 = 69428 MiB for KV"
        );
        assert_eq!(
            b.requests_line(),
            "69428 MiB ÷ 0.5 GiB per request = 135 requests (308 MiB left over)"
        );
    }

    #[test]
    fn short_sizes_are_exact() {
        assert_eq!(Short(512 * MIB as i128).to_string(), "0.5 GiB");
        assert_eq!(Short(256 * MIB as i128).to_string(), "256 MiB");
        assert_eq!(Short(3 * MIB as i128 / 2).to_string(), "1.5 MiB");
        assert_eq!(Short(-4 * GIB as i128).to_string(), "−4 GiB");
        assert_eq!(Short(0).to_string(), "0 B");
        assert_eq!(Short(1000).to_string(), "1000 B");
        assert_eq!(Short(1 << 40).to_string(), "1 TiB");
    }
}
