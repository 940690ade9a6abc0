//! TOML value text for the generator: sizes, durations, counts, numbers and names, mostly
//! ordinary (so that generated workloads get deep into the expander) and often at an edge
//! (0, 2^32 − 1, 2^64 − 1, every unit, fractions, shares of the device) or plainly wrong.

use proptest::prelude::*;

pub type Text = BoxedStrategy<String>;

/// The weight of wrong values: none in a clean file (which then gets deep into the
/// expander), some in a wild one.
pub fn w(wild: bool, weight: u32) -> u32 {
    if wild { weight } else { 0 }
}

/// `s` as a TOML basic string, escaped.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn quoted(s: impl Strategy<Value = String> + 'static) -> Text {
    s.prop_map(|s| quote(&s)).boxed()
}

/// Numbers where bugs live: zero, one, page and block sizes, 2^32 ± 1, 2^63, 2^64 − 1.
pub fn edge_u64() -> BoxedStrategy<u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(2),
        Just(511),
        Just(512),
        Just(4096),
        Just(1 << 20),
        Just(2 << 20),
        Just(999_999),
        Just(1_000_000),
        Just(1_000_001),
        Just(u32::MAX as u64),
        Just(u32::MAX as u64 + 1),
        Just(i64::MAX as u64),
        Just(1 << 63),
        Just(u64::MAX),
        0..64u64,
        any::<u64>(),
    ]
    .boxed()
}

/// An integer as TOML writes it (those past i64 are not valid TOML, which is a case too).
fn int_text(n: impl Strategy<Value = u64> + 'static) -> Text {
    n.prop_map(|n| n.to_string()).boxed()
}

const SIZE_UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"];
const BAD_SIZE_UNITS: &[&str] = &["", "G", "Ki", "PiB", "b", "kib", " MiB", "MiB ", "iB", "µs"];
const DURATION_UNITS: &[&str] = &["ns", "us", "µs", "ms", "s", "min", "h"];
const BAD_DURATION_UNITS: &[&str] = &["", "m", "d", "days", "sec", "NS", " ms"];

fn unit(
    good: &'static [&'static str],
    bad: &'static [&'static str],
) -> BoxedStrategy<&'static str> {
    prop_oneof![6 => prop::sample::select(good), 1 => prop::sample::select(bad)].boxed()
}

/// A size in bytes (no share of the device), as `stride`, `block` or `keep_free` take.
pub fn bytes(wild: bool) -> Text {
    sized(wild, false)
}

/// A size that may be a share of the device, as `allocate` or `weights` take.
pub fn size(wild: bool) -> Text {
    sized(wild, true)
}

/// A size: mostly an ordinary one, else edges, fractions, shares and junk.
fn sized(wild: bool, share: bool) -> Text {
    prop_oneof![
        8 => (1..=512u64, prop::sample::select(&["KiB", "MiB", "MiB", "MiB"][..]))
            .prop_map(|(n, u)| quote(&format!("{n}{u}"))),
        2 => (1..=3u64).prop_map(|n| quote(&format!("{n}GiB"))),
        w(wild, 3) => quoted((edge_u64(), unit(SIZE_UNITS, BAD_SIZE_UNITS)).prop_map(|(n, u)| format!("{n}{u}"))),
        1 => quoted((edge_u64(), prop::sample::select(&["B", "KiB", "MB"][..])).prop_map(|(n, u)| format!("{}{u}", n % (1 << 40)))),
        w(wild, 1) => quoted((0..10u64, 0..100_000u64, unit(SIZE_UNITS, BAD_SIZE_UNITS))
            .prop_map(|(i, f, u)| format!("{i}.{f}{u}"))),
        if share || wild { 2 } else { 0 } =>
            quoted((1..=10_000u32).prop_map(|h| format!("{}.{:02}% of total", h / 100, h % 100))),
        w(wild, 1) => quoted(prop::sample::select(&[
            "100% of total", "0% of total", "1% of total", "% of total", "50%", "50% of all",
            "1e3B", "0x10B", "+1B", "-1B", "1_000B", "1 GiB", "", " ", "GiB", "1.3B", "0.5GiB",
            "12G", "18446744073709551615B", "18446744073709551616B", "16EiB", "17179869184GiB",
        ][..]).prop_map(String::from)),
        w(wild, 2) => int_text(edge_u64()),
        1 => int_text(1..(1u64 << 30)),
        w(wild, 1) => prop::sample::select(&["-1", "1.5", "nan", "inf", "true", "[1]", "{}", "0"][..])
            .prop_map(String::from),
    ]
    .boxed()
}

/// A duration: mostly short, else every unit at an edge, the 30-day limit, and junk.
pub fn duration(wild: bool) -> Text {
    prop_oneof![
        6 => (0..=20u64, prop::sample::select(&["ns", "us", "ms", "ms", "s"][..]))
            .prop_map(|(n, u)| quote(&format!("{n}{u}"))),
        w(wild, 3) => quoted((edge_u64(), unit(DURATION_UNITS, BAD_DURATION_UNITS))
            .prop_map(|(n, u)| format!("{n}{u}"))),
        w(wild, 1) => quoted(prop::sample::select(&[
            "18446744073709551615ns", "18446744073709551616ns", "2592000s", "2592001s", "720h",
            "721h", "43200min", "0.5ns", "1.5us", "-1ms", "", "1", "ms", "1e3ms",
        ][..]).prop_map(String::from)),
        w(wild, 2) => int_text(edge_u64()),
        1 => int_text(0..1_000_000u64),
        w(wild, 1) => prop::sample::select(&["-1", "1.0", "false", "\"\""][..]).prop_map(String::from),
    ]
    .boxed()
}

/// A u32 field (times, tensors, layers, seeds…): small mostly, else edges and wrong types.
pub fn count_u32(wild: bool) -> Text {
    prop_oneof![
        // Counts that take a file to the action bound are rare: each such case costs
        // a million actions' work.
        80 => int_text(u64::from(!wild)..6),
        20 => int_text(6..100u64),
        1 => int_text(prop::sample::select(&[
            999_999u64, 1_000_000, 1_000_001, 65_536, u32::MAX as u64,
        ][..])),
        w(wild, 5) => int_text(prop::sample::select(&[u32::MAX as u64 + 1, i64::MAX as u64][..])),
        w(wild, 5) => prop::sample::select(&["-1", "1.5", "\"3\"", "true", "[]"][..]).prop_map(String::from),
    ]
    .boxed()
}

/// An `allocate` count: a number, `"fill"`, or not one.
pub fn count(wild: bool) -> Text {
    prop_oneof![
        6 => int_text(1..5u64),
        2 => Just(quote("fill")),
        3 => count_u32(wild),
        w(wild, 1) => prop::sample::select(&["\"all\"", "\"Fill\"", "0"][..]).prop_map(String::from),
    ]
    .boxed()
}

pub fn boolean(wild: bool) -> Text {
    prop_oneof![
        4 => prop::sample::select(&["true", "false"][..]).prop_map(String::from),
        w(wild, 1) => prop::sample::select(&["\"yes\"", "1", "\"true\""][..]).prop_map(String::from),
    ]
    .boxed()
}

/// Allocation names: a few that steps share (so frees and touches find them), and odd ones.
pub fn name(wild: bool) -> Text {
    prop_oneof![
        12 => quoted(prop::sample::select(&["w", "w", "w", "a", "a", "b", "weights", "act"][..]).prop_map(String::from)),
        2 => quoted(prop::sample::select(&["kv", "ws", "comm", "x.y", "w.r{rank}"][..]).prop_map(String::from)),
        1 => quoted(prop::sample::select(&[
            "w[0]", "w[1]", "w[", "w]", "[", "w[18446744073709551616]", "w[-1]", "g.out",
            "act.scratch", "kv.r0[0]", "{rank_count}",
        ][..]).prop_map(String::from)),
        w(wild, 1) => quoted(odd_name()),
    ]
    .boxed()
}

/// Names with control characters, quotes, non-ASCII, or at and past the length limit.
pub fn odd_name() -> BoxedStrategy<String> {
    prop_oneof![
        prop::sample::select(
            &[
                "",
                " ",
                "\u{0}",
                "\u{7}",
                "\u{1b}[31m",
                "\u{7f}",
                "\u{85}",
                "名前",
                "🙂",
                "a\"b",
                "a\\b",
                "tab\there",
                "line\nbreak",
                "\u{202e}rtl",
                "'",
                "#",
            ][..]
        )
        .prop_map(String::from),
        (
            prop::sample::select(&["x", "é", "🙂"][..]),
            prop::sample::select(&[199usize, 200, 201][..])
        )
            .prop_map(|(c, n)| c.repeat(n)),
        prop::sample::select(&[1_000usize, 65_536][..]).prop_map(|n| "n".repeat(n)),
        "[ -~]{0,12}",
        "\\PC{0,8}",
    ]
    .boxed()
}

pub fn stream(wild: bool) -> Text {
    prop_oneof![
        8 => quoted(prop::sample::select(&["main", "main", "s1", "s2", "graphs"][..]).prop_map(String::from)),
        w(wild, 1) => quoted(odd_name()),
    ]
    .boxed()
}

pub fn graph(wild: bool) -> Text {
    prop_oneof![
        8 => quoted(prop::sample::select(&["g", "g", "h", "decode", "g[1]", "decode[1]", "decode.sample[1]"][..]).prop_map(String::from)),
        w(wild, 1) => quoted(odd_name()),
    ]
    .boxed()
}

pub fn float() -> Text {
    prop::sample::select(
        &[
            "3.0", "0.0", "-1.0", "1e40", "-1e40", "nan", "inf", "-inf", "0.5", "1", "\"x\"",
        ][..],
    )
    .prop_map(String::from)
    .boxed()
}

/// A list of u32s (`batch_sizes`, `samples`).
pub fn u32_list(wild: bool) -> Text {
    prop_oneof![
        4 => prop::collection::vec(prop_oneof![4 => 1..=64u64, 1 => edge_u64().prop_map(|n| n % (1 << 32))], 1..6)
            .prop_map(|v| format!("[{}]", v.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))),
        w(wild, 1) => prop::sample::select(&["[1, 1]", "[0]", "[\"a\"]", "1", "[]", "[-1, 2]"][..]).prop_map(String::from),
    ]
    .boxed()
}

/// Any value at all, for a field given the wrong kind of thing.
pub fn junk() -> Text {
    prop_oneof![
        size(true),
        duration(true),
        count_u32(true),
        boolean(true),
        name(true),
        prop::sample::select(
            &[
                "[]",
                "{}",
                "{ a = 1 }",
                "[[1], [2]]",
                "1979-05-27T07:32:00Z"
            ][..]
        )
        .prop_map(String::from),
    ]
    .boxed()
}

/// `Some` of `s` with probability `p` (0 and 1 included).
pub fn maybe<T: std::fmt::Debug + Clone + 'static>(
    p: f64,
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    if p >= 1.0 {
        s.prop_map(Some).boxed()
    } else if p <= 0.0 {
        Just(None).boxed()
    } else {
        prop::option::weighted(p, s).boxed()
    }
}
