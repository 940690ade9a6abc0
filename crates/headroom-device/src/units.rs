//! Human sizes and durations in, exact integers out; and the reverse for text meant for people.
//!
//! Sizes are binary with `KiB`/`MiB`/`GiB`/`TiB` and decimal with `KB`/`MB`/`GB`/`TB`; a bare
//! `G` or `M` is refused because nobody can tell which of the two was meant. Fractions are
//! allowed only when they come out to a whole number of bytes ("0.5GiB" yes, "1.3B" no).

use std::fmt;

/// Why a size or duration string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad {what} {input:?}: {reason}")]
pub struct ParseError {
    pub what: &'static str,
    pub input: String,
    pub reason: String,
}

fn err(what: &'static str, input: &str, reason: impl Into<String>) -> ParseError {
    ParseError {
        what,
        input: input.to_string(),
        reason: reason.into(),
    }
}

const SIZE_UNITS: &[(&str, u128)] = &[
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

const AMBIGUOUS: &[&str] = &[
    "K", "M", "G", "T", "k", "m", "g", "t", "Ki", "Mi", "Gi", "Ti",
];

/// Splits "12.5GiB" into ("12.5", "GiB"), trimming blanks between them.
fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == '_'))
        .unwrap_or(s.len());
    (s[..end].trim(), s[end..].trim())
}

/// Multiplies a decimal literal by an integer scale exactly; `None` if the result is not whole.
fn scale_decimal(number: &str, scale: u128) -> Result<Option<u128>, String> {
    let number = number.replace('_', "");
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i.to_string(), f.to_string()),
        None => (number.clone(), String::new()),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err("no number".into());
    }
    if !int_part.chars().all(|c| c.is_ascii_digit())
        || !frac_part.chars().all(|c| c.is_ascii_digit())
    {
        return Err("not a number".into());
    }
    if frac_part.len() > 18 {
        return Err("too many decimal places".into());
    }
    let digits = format!("{int_part}{frac_part}");
    let mantissa: u128 = digits.parse().map_err(|_| "number too large".to_string())?;
    let denom = 10u128.pow(frac_part.len() as u32);
    let scaled = mantissa
        .checked_mul(scale)
        .ok_or_else(|| "number too large".to_string())?;
    if scaled % denom != 0 {
        return Ok(None);
    }
    Ok(Some(scaled / denom))
}

/// Parses a human size such as `"512MiB"`, `"0.5GiB"`, `"2GB"` or `"4096B"` into bytes.
pub fn parse_size(input: &str) -> Result<u64, ParseError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(err("size", input, "empty"));
    }
    if s.starts_with('-') {
        return Err(err("size", input, "sizes cannot be negative"));
    }
    let (number, unit) = split_number(s);
    if unit.is_empty() {
        return Err(err(
            "size",
            input,
            "no unit; write e.g. 4096B, 512MiB (binary) or 2GB (decimal)",
        ));
    }
    if AMBIGUOUS.contains(&unit) {
        let letter = &unit[..1].to_uppercase();
        return Err(err(
            "size",
            input,
            format!(
                "{unit:?} is ambiguous; write {number}{letter}iB (binary, powers of 1024) or {number}{letter}B (decimal, powers of 1000)"
            ),
        ));
    }
    let Some(&(_, scale)) = SIZE_UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(err(
            "size",
            input,
            format!("unknown unit {unit:?}; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"),
        ));
    };
    match scale_decimal(number, scale) {
        Err(reason) => Err(err("size", input, reason)),
        Ok(None) => Err(err("size", input, "is not a whole number of bytes")),
        Ok(Some(v)) => u64::try_from(v).map_err(|_| err("size", input, "too large")),
    }
}

/// A command-line size (`--keep-free 2GiB`), for clap's `value_parser`.
pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// A command-line duration (`--sample-interval 1ms`), for clap's `value_parser`.
pub fn duration_arg(s: &str) -> Result<u64, String> {
    parse_duration_ns(s).map_err(|e| e.to_string())
}

/// Parses a duration such as `"50ms"`, `"1.5s"`, `"200us"`, `"10ns"` or `"2min"` into
/// nanoseconds; anything longer than `MAX_DURATION_NS` (30 days) is refused.
pub fn parse_duration_ns(input: &str) -> Result<u64, ParseError> {
    let s = input.trim();
    if s.starts_with('-') {
        return Err(err("duration", input, "durations cannot be negative"));
    }
    let (number, unit) = split_number(s);
    let scale: u128 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "" => {
            return Err(err(
                "duration",
                input,
                "no unit; use ns, us, ms, s, min or h",
            ));
        }
        other => {
            return Err(err(
                "duration",
                input,
                format!("unknown unit {other:?}; use ns, us, ms, s, min or h"),
            ));
        }
    };
    match scale_decimal(number, scale) {
        Err(reason) => Err(err("duration", input, reason)),
        Ok(None) => Err(err(
            "duration",
            input,
            "is not a whole number of nanoseconds",
        )),
        Ok(Some(v)) if v > u128::from(MAX_DURATION_NS) => Err(err(
            "duration",
            input,
            "is longer than 30 days, the longest duration headroom accepts",
        )),
        Ok(Some(v)) => Ok(v as u64),
    }
}

/// The longest duration headroom accepts anywhere (30 days): every duration a workload, a
/// profile or a flag states, and the sum of a workload's stated sleeps and spins. Keeping time
/// far below `u64::MAX` nanoseconds (584 years) means no clock or sum of durations can wrap.
pub const MAX_DURATION_NS: u64 = 30 * 24 * 3_600 * 1_000_000_000;

/// Bytes in binary units for people: `1.50 GiB`, `2.00 MiB`, `512 B`.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_bytes_signed(self.0 as i128, f)
    }
}

/// A signed byte difference for people: `+2.00 MiB`, `-1.00 GiB`.
pub struct SignedBytes(pub i128);

impl fmt::Display for SignedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 0 {
            write!(f, "+")?;
        }
        fmt_bytes_signed(self.0, f)
    }
}

fn fmt_bytes_signed(v: i128, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs();
    const UNITS: &[(&str, u128)] = &[
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, scale) in UNITS {
        if a >= *scale {
            return write!(f, "{sign}{:.2} {name}", a as f64 / *scale as f64);
        }
    }
    write!(f, "{sign}{a} B")
}

/// Nanoseconds for people: `850 ns`, `12.3 µs`, `4.56 ms`, `1.234 s`.
pub struct Nanos(pub u64);

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v < 1_000 {
            write!(f, "{v} ns")
        } else if v < 1_000_000 {
            write!(f, "{:.1} µs", v as f64 / 1e3)
        } else if v < 1_000_000_000 {
            write!(f, "{:.2} ms", v as f64 / 1e6)
        } else {
            write!(f, "{:.3} s", v as f64 / 1e9)
        }
    }
}

/// Rounds `v` up to a multiple of `to` (a power of two or any positive step); `None` when that
/// multiple does not fit in 64 bits.
pub const fn checked_round_up(v: u64, to: u64) -> Option<u64> {
    v.div_ceil(to).checked_mul(to)
}

/// Rounds `v` up to a multiple of `to`, or `u64::MAX` when that multiple does not fit in 64 bits:
/// a size that large fits on no device, so every "does it fit" comparison still says no.
pub const fn round_up(v: u64, to: u64) -> u64 {
    match checked_round_up(v, to) {
        Some(r) => r,
        None => u64::MAX,
    }
}

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// An RFC 3339 UTC timestamp with milliseconds, e.g. `2026-11-29T18:40:00.123Z`.
pub fn utc_timestamp(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// A UTC timestamp safe in a folder name, e.g. `20261129T184000Z`.
pub fn utc_folder_stamp(t: std::time::SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.replace(['-', ':'], "")
}

/// A size in a TOML file: a human string (`"512MiB"`) or a whole number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

impl<'de> serde::Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"512MiB\" or a whole number of bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("bad size {v}: sizes cannot be negative")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Size, E> {
                Err(E::custom(format!(
                    "bad size {v}: give a whole number of bytes or a string with a unit, e.g. \"{v}GiB\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl serde::Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// Written as raw bytes, an unsigned integer.
impl schemars::JsonSchema for Size {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Bytes".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer", "minimum": 0})
    }
}

/// A size in a workload that may be relative to the device: `"512MiB"`, or `"60% of total"`
/// (a share of the CUDA-visible total, rounded down to a whole 2 MiB page), so one scenario
/// file means the same pressure on a 4 GiB test device and a 141 GB H200.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum SizeSpec {
    Bytes(u64),
    /// Hundredths of a percent of the device total.
    PercentOfTotal(u32),
}

impl Default for SizeSpec {
    fn default() -> Self {
        SizeSpec::Bytes(0)
    }
}

impl SizeSpec {
    /// Bytes on a device with `total_bytes` CUDA-visible.
    pub fn resolve(&self, total_bytes: u64) -> u64 {
        match *self {
            SizeSpec::Bytes(b) => b,
            SizeSpec::PercentOfTotal(hundredths) => {
                let raw = (total_bytes as u128 * hundredths as u128 / 10_000) as u64;
                crate::rounding::AllocRounding::DRIVER.whole_pages_in(raw)
            }
        }
    }
}

/// Parses `"60% of total"` or `"12.5% of total"` into hundredths of a percent.
pub fn parse_percent_of_total(input: &str) -> Result<u32, ParseError> {
    let s = input.trim();
    let Some((num, rest)) = s.split_once('%') else {
        return Err(err("size", input, "no % sign"));
    };
    if rest.trim() != "of total" {
        return Err(err(
            "size",
            input,
            "write a share of the device as \"N% of total\"",
        ));
    }
    match scale_decimal(num.trim(), 100) {
        Ok(Some(v)) if v > 0 && v <= 10_000 => Ok(v as u32),
        Ok(Some(_)) => Err(err(
            "size",
            input,
            "the share must be above 0% and at most 100%",
        )),
        _ => Err(err(
            "size",
            input,
            "the share must be a number with at most two decimals",
        )),
    }
}

impl<'de> serde::Deserialize<'de> for SizeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SizeSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a size such as \"512MiB\", \"60% of total\", or a whole number of bytes",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SizeSpec, E> {
                if v.contains('%') {
                    parse_percent_of_total(v)
                        .map(SizeSpec::PercentOfTotal)
                        .map_err(E::custom)
                } else {
                    parse_size(v).map(SizeSpec::Bytes).map_err(E::custom)
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeSpec, E> {
                <Size as serde::Deserialize>::deserialize(
                    serde::de::value::I64Deserializer::<E>::new(v),
                )
                .map(|s| SizeSpec::Bytes(s.0))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeSpec, E> {
                Ok(SizeSpec::Bytes(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<SizeSpec, E> {
                <Size as serde::Deserialize>::deserialize(
                    serde::de::value::F64Deserializer::<E>::new(v),
                )
                .map(|s| SizeSpec::Bytes(s.0))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration in a TOML file: a human string (`"50ms"`) or a whole number of nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DurationNs(pub u64);

impl<'de> serde::Deserialize<'de> for DurationNs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = DurationNs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"50ms\" or a whole number of nanoseconds")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationNs, E> {
                parse_duration_ns(v).map(DurationNs).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<DurationNs, E> {
                let v = u64::try_from(v).map_err(|_| {
                    E::custom(format!("bad duration {v}: durations cannot be negative"))
                })?;
                self.visit_u64(v)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<DurationNs, E> {
                if v > MAX_DURATION_NS {
                    return Err(E::custom(format!(
                        "bad duration {v} (nanoseconds): longer than 30 days, the longest duration headroom accepts"
                    )));
                }
                Ok(DurationNs(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl serde::Serialize for DurationNs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 * MIB);
        assert_eq!(parse_size("0.5GiB").unwrap(), 512 * MIB);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("4096B").unwrap(), 4096);
        assert_eq!(parse_size(" 1.5 MiB ").unwrap(), 1_572_864);
        assert_eq!(parse_size("1TiB").unwrap(), 1 << 40);
        assert_eq!(parse_size("0B").unwrap(), 0);
        assert_eq!(parse_size("1_024KiB").unwrap(), MIB);
    }

    #[test]
    fn ambiguous_units_are_refused_with_both_spellings() {
        let e = parse_size("12G").unwrap_err();
        assert!(e.to_string().contains("ambiguous"), "{e}");
        assert!(e.to_string().contains("12GiB"), "{e}");
        assert!(e.to_string().contains("12GB"), "{e}");
        assert!(parse_size("3m").is_err());
        assert!(parse_size("1Gi").is_err());
    }

    #[test]
    fn bad_sizes() {
        assert!(
            parse_size("-1GiB")
                .unwrap_err()
                .to_string()
                .contains("negative")
        );
        assert!(
            parse_size("1.3B")
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("").is_err());
        assert!(
            parse_size("12")
                .unwrap_err()
                .to_string()
                .contains("no unit")
        );
        assert!(parse_size("1.2.3GiB").is_err());
        assert!(
            parse_size("5 parsecs")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
        assert!(
            parse_size("99999999TiB")
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
    }

    #[test]
    fn shares_of_the_device_total() {
        assert_eq!(parse_percent_of_total("60% of total").unwrap(), 6000);
        assert_eq!(parse_percent_of_total("12.5% of total").unwrap(), 1250);
        assert!(parse_percent_of_total("60%").is_err());
        assert!(parse_percent_of_total("0% of total").is_err());
        assert!(parse_percent_of_total("101% of total").is_err());
        // 60% of 4 GiB is 2457.6 MiB, rounded down to a whole 2 MiB page.
        assert_eq!(SizeSpec::PercentOfTotal(6000).resolve(4 * GIB), 2456 * MIB);
        assert_eq!(SizeSpec::Bytes(5).resolve(4 * GIB), 5);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("50ms").unwrap(), 50_000_000);
        assert_eq!(parse_duration_ns("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration_ns("200us").unwrap(), 200_000);
        assert_eq!(parse_duration_ns("2min").unwrap(), 120_000_000_000);
        assert!(parse_duration_ns("5").is_err());
        assert!(parse_duration_ns("-5ms").is_err());
        assert!(parse_duration_ns("0.5ns").is_err());
    }

    #[test]
    fn human_output() {
        assert_eq!(Bytes(3 * GIB).to_string(), "3.00 GiB");
        assert_eq!(Bytes(1_572_864).to_string(), "1.50 MiB");
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(SignedBytes(-2 * MIB as i128).to_string(), "-2.00 MiB");
        assert_eq!(SignedBytes(0).to_string(), "+0 B");
        assert_eq!(Nanos(12_345).to_string(), "12.3 µs");
        assert_eq!(round_up(1_572_864, 2 * MIB), 2 * MIB);
        assert_eq!(round_up(0, 2 * MIB), 0);
    }

    #[test]
    fn rounding_near_two_to_the_64_saturates_instead_of_wrapping() {
        let huge = u64::MAX - 3;
        assert_eq!(checked_round_up(huge, 2 * MIB), None);
        assert_eq!(
            round_up(huge, 2 * MIB),
            u64::MAX,
            "never 0: it must not fit"
        );
        assert_eq!(
            checked_round_up(u64::MAX - 2 * MIB + 1, 2 * MIB),
            Some(u64::MAX - 2 * MIB + 1)
        );
    }

    #[test]
    fn durations_beyond_the_cap_are_refused() {
        assert_eq!(parse_duration_ns("30min").unwrap(), 1_800_000_000_000);
        assert_eq!(
            parse_duration_ns(&format!("{MAX_DURATION_NS}ns")).unwrap(),
            MAX_DURATION_NS
        );
        let e = parse_duration_ns("18446744073709551615ns").unwrap_err();
        assert!(e.to_string().contains("18446744073709551615ns"), "{e}");
        assert!(e.to_string().contains("30 days"), "{e}");
        assert!(parse_duration_ns("721h").is_err());
        assert!(parse_duration_ns("720h").is_ok());
    }
}
