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
        self.checked_rounding_bounds(scale, round_places)
            .unwrap_or((u128::MAX, u128::MAX))
    }

    /// As `rounding_bounds`, `None` where the products would not fit in 128 bits.
    fn checked_rounding_bounds(self, scale: u128, round_places: u32) -> Option<(u128, u128)> {
        // x = m / 10^p and h = 1 / (2·10^r); over the common denominator 2·10^(p+r):
        // x ± h = (2·m·10^r ± 10^p) / (2·10^(p+r)).
        let p = 10u128.checked_pow(self.places)?;
        let r = 10u128.checked_pow(round_places)?;
        let denominator = p.checked_mul(r)?.checked_mul(2)?;
        let centre = self.mantissa.checked_mul(r)?.checked_mul(2)?;
        let low_numerator = centre.saturating_sub(p).checked_mul(scale)?;
        let high_numerator = centre.checked_add(p)?.checked_mul(scale)?;
        Some((
            low_numerator.div_ceil(denominator),
            high_numerator / denominator,
        ))
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

/// PaddlePaddle's `string::HumanReadableSize`: `%f` (six decimals, rounded) of the size
/// divided by 1024 while it is at least 1024, with `B`, `kB`, `MB`, `GB`, `TB`, `PB`, `EB`.
pub fn paddle_bytes(number: &str, unit: &str) -> Option<ByteRange> {
    let d = Decimal::parse(number)?;
    let steps = match unit {
        "B" => 0,
        "kB" | "KB" => 1,
        "MB" => 2,
        "GB" => 3,
        "TB" => 4,
        "PB" => 5,
        "EB" => 6,
        _ => return None,
    };
    let scale = 1u128 << (10 * steps);
    let (low, high) = d.checked_rounding_bounds(scale, 6)?;
    // The unit is the one where the scaled value first falls below 1024.
    let unit_low = if steps == 0 { 0 } else { scale };
    let unit_high = (scale << 10) - 1;
    Some(within(low, high, unit_low, unit_high))
}

/// PyTorch's MPS allocator (`MPSHeapAllocatorImpl::format_size`): two decimals of the size
/// cast to `float` and divided by 1024, 1024² or 1024³, named `KB`/`MB`/`GB` (later releases
/// `KiB`/`MiB`/`GiB`), `N bytes` up to 1 KiB. The cast to `float` can move a size by one part
/// in 2^24, so the bounds allow that much more.
pub fn mps_bytes(number: &str, unit: &str) -> Option<ByteRange> {
    let d = Decimal::parse(number)?;
    if unit == "bytes" {
        return (d.places == 0).then(|| ByteRange::exact(clamp_u64(d.mantissa)));
    }
    let (scale, unit_low, unit_high) = match unit {
        "KB" | "KiB" => (KIB, KIB + 1, MIB),
        "MB" | "MiB" => (MIB, MIB + 1, GIB),
        "GB" | "GiB" => (GIB, GIB + 1, u128::MAX),
        _ => return None,
    };
    let (low, high) = d.checked_rounding_bounds(scale, d.places)?;
    let (low, high) = (low - (low >> 24), high + (high >> 24));
    Some(within(low, high, unit_low, unit_high))
}

/// ggml's `%.2f MiB` of `size / 1024.0 / 1024.0` (a comma where the C locale is not in use).
pub fn ggml_mib_bytes(number: &str) -> Option<ByteRange> {
    let d = Decimal::parse(&number.replace(',', "."))?;
    let (low, high) = d.checked_rounding_bounds(MIB, 2)?;
    Some(within(low, high, 0, u128::MAX))
}

/// PyTorch's "more than 1EB": any size from 2^60 bytes up.
pub fn more_than_one_eib() -> ByteRange {
    ByteRange {
        low: 1 << 60,
        high: u64::MAX,
    }
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

    #[test]
    fn paddle_sizes_have_six_decimals_and_kilo_with_a_small_k() {
        let r = paddle_bytes("1.000000", "GB").unwrap();
        assert!(r.low <= G && G <= r.high && r.high - r.low <= 1100);
        let r = paddle_bytes("39.250000", "kB").unwrap();
        assert_eq!((r.low, r.high), (40192, 40192));
        assert_eq!(paddle_bytes("0.000000", "B"), Some(ByteRange::exact(0)));
        assert!(paddle_bytes("85.412131", "TB").unwrap().low > 85 << 40);
        assert_eq!(paddle_bytes("1.0", "GiB"), None);
    }

    #[test]
    fn mps_sizes_allow_for_the_float_cast() {
        let r = mps_bytes("9.07", "GB").unwrap();
        let exact = torch_bytes("9.07", "GiB").unwrap();
        assert!(r.low < exact.low && r.high > exact.high);
        assert!(r.high - r.low < exact.high - exact.low + 2048);
        assert_eq!(mps_bytes("256", "bytes"), Some(ByteRange::exact(256)));
        assert_eq!(
            mps_bytes("1.59", "MiB").unwrap().low,
            mps_bytes("1.59", "MB").unwrap().low
        );
    }

    #[test]
    fn ggml_mib_takes_a_point_or_a_comma() {
        let r = ggml_mib_bytes("9866.00").unwrap();
        assert!(r.low <= 9866 * M && 9866 * M <= r.high);
        assert_eq!(ggml_mib_bytes("1900,00"), ggml_mib_bytes("1900.00"));
    }
}
