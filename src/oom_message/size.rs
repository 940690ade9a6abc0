//! Printed sizes back to bytes, as the interval the printed precision allows.
//!
//! Each framework rounds differently, so each spelling has its own reader:
//!
//! - PyTorch's `format_size` (c10/cuda/CUDACachingAllocator.cpp): `N bytes` up to 1 KiB, then
//!   `x.yy KiB` up to 1 MiB, `x.yy MiB` up to 1 GiB, `x.yy GiB` above; the value is
//!   `size / scale` printed with `std::fixed` and precision 2, i.e. rounded to nearest.
//! - tsl's `HumanReadableNumBytes` (XLA, TensorFlow): `NB` below 1 KiB, `x.yKiB` (one decimal),
//!   then `x.yyMiB`, `x.yyGiB`, … where the integer count is first divided by 1024 *with
//!   truncation* once per step past KiB, and only the last step is a rounded division.
//! - vLLM's `format_gib` (vllm/utils/mem_utils.py): `round(b / GiB_bytes, 2)` printed by Python,
//!   so `7.0` means anything that rounds to 7.00 GiB, however few digits are shown.
//!
//! Bounds include both rounding ties: a bound never claims more than the text says. All the
//! arithmetic is on integers (u128), so no float ever decides a byte.

use serde::Serialize;

/// Inclusive bounds on a byte count. `low == high` when the message printed exact bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ByteRange {
    pub low: u64,
    pub high: u64,
}

impl ByteRange {
    pub fn exact(bytes: u64) -> ByteRange {
        ByteRange {
            low: bytes,
            high: bytes,
        }
    }

    pub fn is_exact(&self) -> bool {
        self.low == self.high
    }
}

/// A size as the message printed it, and the bytes it can stand for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Quantity {
    pub printed: String,
    #[serde(flatten)]
    pub bytes: ByteRange,
}

impl Quantity {
    pub fn exact(printed: &str, bytes: u64) -> Quantity {
        Quantity {
            printed: printed.to_string(),
            bytes: ByteRange::exact(bytes),
        }
    }
}

/// A decimal literal as digits: `79.11` is mantissa 7911 with 2 places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal {
    pub mantissa: u128,
    pub places: u32,
}

/// At most this many digits in one number: keeps every product below u128::MAX.
const MAX_DIGITS: usize = 24;

impl Decimal {
    /// Reads `123`, `79.11` or `.5`; `None` for anything else or too many digits.
    pub fn parse(text: &str) -> Option<Decimal> {
        let (int_part, frac_part) = match text.split_once('.') {
            Some((i, f)) => (i, f),
            None => (text, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        if int_part.len() + frac_part.len() > MAX_DIGITS
            || !int_part.bytes().all(|b| b.is_ascii_digit())
            || !frac_part.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let mut mantissa: u128 = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa * 10 + u128::from(b - b'0');
        }
        Some(Decimal {
            mantissa,
            places: frac_part.len() as u32,
        })
    }

    /// `[ceil((x − h)·scale), floor((x + h)·scale)]` where `h` is half a unit in the
    /// `round_places`-th decimal: the values that round to this literal.
    fn rounding_bounds(self, scale: u128, round_places: u32) -> (u128, u128) {
        // x = m / 10^p and h = 1 / (2·10^r); over the common denominator 2·10^(p+r):
        // x ± h = (2·m·10^r ± 10^p) / (2·10^(p+r)).
        let p = 10u128.pow(self.places);
        let r = 10u128.pow(round_places);
        let denominator = 2 * p * r;
        let centre = 2 * self.mantissa * r;
        let low_numerator = centre.saturating_sub(p) * scale;
        let high_numerator = (centre + p) * scale;
        (
            low_numerator.div_ceil(denominator),
            high_numerator / denominator,
        )
    }
}

const KIB: u128 = 1 << 10;
const MIB: u128 = 1 << 20;
const GIB: u128 = 1 << 30;

fn clamp_u64(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Intersects `[low, high]` with the values the unit is printed for; if the two do not meet
/// (text no formatter would print), keeps the rounding bounds rather than inventing others.
fn within(low: u128, high: u128, unit_low: u128, unit_high: u128) -> ByteRange {
    let (l, h) = (low.max(unit_low), high.min(unit_high));
    let (l, h) = if l <= h { (l, h) } else { (low, high) };
    ByteRange {
        low: clamp_u64(l),
        high: clamp_u64(h),
    }
}

/// PyTorch's `format_size`: `number` and `unit` as printed (`"79.11"`, `"GiB"`).
pub fn torch_bytes(number: &str, unit: &str) -> Option<ByteRange> {
    let d = Decimal::parse(number)?;
    if unit == "bytes" {
        return (d.places == 0).then(|| ByteRange::exact(clamp_u64(d.mantissa)));
    }
    let (scale, unit_low, unit_high) = match unit {
        "KiB" => (KIB, KIB + 1, MIB),
        "MiB" => (MIB, MIB + 1, GIB),
        "GiB" => (GIB, GIB + 1, u128::MAX),
        _ => return None,
    };
    let (low, high) = d.rounding_bounds(scale, d.places);
    Some(within(low, high, unit_low, unit_high))
}

/// tsl's `HumanReadableNumBytes`: `"16.00GiB"`, `"1.5KiB"`, `"512B"`.
pub fn tsl_bytes(text: &str) -> Option<ByteRange> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let d = Decimal::parse(number)?;
    if unit == "B" {
        return (d.places == 0).then(|| ByteRange::exact(clamp_u64(d.mantissa)));
    }
    // Steps of integer division by 1024 taken before the last, rounded, one.
    let steps = match unit {
        "KiB" => 0,
        "MiB" => 1,
        "GiB" => 2,
        "TiB" => 3,
        "PiB" => 4,
        "EiB" => 5,
        _ => return None,
    };
    let truncated = 1u128 << (10 * steps);
    // n = floor(bytes / truncated) rounds to the literal when divided by 1024.
    let (n_low, n_high) = d.rounding_bounds(KIB, d.places);
    let low = n_low * truncated;
    let high = n_high * truncated + (truncated - 1);
    // The loop stops once the truncated count is below 1 MiB; KiB is used from 1 KiB on.
    let unit_low = if steps == 0 {
        KIB
    } else {
        MIB << (10 * (steps - 1))
    };
    let unit_high = (MIB << (10 * steps)) - 1;
    Some(within(low, high, unit_low, unit_high))
}

/// vLLM's `format_gib`: `round(bytes / 2^30, 2)`, printed by Python (`"7.0"`, `"2.39"`).
pub fn vllm_gib_bytes(number: &str) -> Option<ByteRange> {
    let d = Decimal::parse(number)?;
    // Rounded to two places whatever Python's repr shows; more places are not vLLM's.
    if d.places > 2 {
        return None;
    }
    let (low, high) = d.rounding_bounds(GIB, 2);
    Some(within(low, high, 0, u128::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;

    #[test]
    fn torch_sizes_are_the_values_that_round_to_the_text() {
        // 79.11 GiB: [79.105, 79.115] GiB.
        let r = torch_bytes("79.11", "GiB").unwrap();
        assert_eq!(r.low, (79_105 * G).div_ceil(1000));
        assert_eq!(r.high, 79_115 * G / 1000);
        // 786.00 MiB: [785.995, 786.005] MiB.
        let r = torch_bytes("786.00", "MiB").unwrap();
        assert_eq!(r.low, (785_995 * M).div_ceil(1000));
        assert_eq!(r.high, 786_005 * M / 1000);
        assert_eq!(torch_bytes("512", "bytes"), Some(ByteRange::exact(512)));
        assert_eq!(torch_bytes("0", "bytes"), Some(ByteRange::exact(0)));
        assert_eq!(torch_bytes("1.5", "bytes"), None);
        assert_eq!(torch_bytes("2.00", "TiB"), None);
    }

    #[test]
    fn torch_units_bound_the_interval() {
        // 1.00 KiB is printed only above 1024 bytes ("1024 bytes" below).
        let r = torch_bytes("1.00", "KiB").unwrap();
        assert_eq!((r.low, r.high), (1025, 1029));
        // 1024.00 MiB is at most exactly 1 GiB.
        let r = torch_bytes("1024.00", "MiB").unwrap();
        assert_eq!(r.high, G);
    }

    #[test]
    fn tsl_sizes_truncate_before_the_last_step() {
        // 16.00GiB: floor(b / 1 MiB) in [16378.88, 16389.12] → [16379, 16389] MiB, and any
        // remainder below 1 MiB.
        let r = tsl_bytes("16.00GiB").unwrap();
        assert_eq!(r.low, 16_379 * M);
        assert_eq!(r.high, 16_389 * M + (M - 1));
        assert!(r.low <= 16 * G && 16 * G <= r.high);
        assert_eq!(tsl_bytes("512B"), Some(ByteRange::exact(512)));
        let r = tsl_bytes("1.5KiB").unwrap();
        assert_eq!((r.low, r.high), (1485, 1587));
        assert_eq!(tsl_bytes("2.00G"), None);
    }

    #[test]
    fn vllm_gib_rounds_to_two_places_whatever_is_shown() {
        let r = vllm_gib_bytes("7.0").unwrap();
        assert_eq!(r.low, (6995 * G).div_ceil(1000));
        assert_eq!(r.high, 7005 * G / 1000);
        let r = vllm_gib_bytes("0.0").unwrap();
        assert_eq!((r.low, r.high), (0, 5 * G / 1000));
        assert_eq!(vllm_gib_bytes("1.234"), None);
    }

    #[test]
    fn absurd_sizes_saturate_instead_of_overflowing() {
        // NVML has reported 2^64 bytes for a process (17179869184.00 GiB).
        let r = torch_bytes("17179869184.00", "GiB").unwrap();
        assert_eq!(r.high, u64::MAX);
        assert!(Decimal::parse("1234567890123456789012345").is_none());
        assert!(Decimal::parse(".").is_none());
        assert!(Decimal::parse("1.2.3").is_none());
    }
}
