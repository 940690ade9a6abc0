//! Size figures read by principle rather than by format: every number with a size unit (or a
//! bare byte count after a size word) in a stretch of text, with the interval its printed
//! precision allows, labelled by the words around it (requested, free, total, in use,
//! allocated, reserved, reserved-unallocated, cached, limit) and left unlabelled when no word
//! says what it is. Words match within one edit ("fre" for "free"), so a user's typo does not
//! lose a label.
//!
//! The interval allows every formatter a runtime may use: rounding to nearest or truncating at
//! the printed precision, and for `KB`/`MB`/`GB` (and `K`/`M`/`G`), which runtimes print for
//! both powers, either 1000 or 1024 a step.

use serde::Serialize;

use super::size::{ByteRange, Decimal, Quantity};

/// What a figure is, from the words around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// The allocation that failed ("tried to allocate", "requested", "size of").
    Requested,
    /// Free on the device (or pool): "is free", "available".
    Free,
    /// The device's (or pool's) whole memory: "total", "capacity".
    Total,
    /// What the process or allocator has in use: "in use", "used".
    InUse,
    /// Allocated by the framework: "allocated".
    Allocated,
    /// Reserved by the framework's allocator: "reserved".
    Reserved,
    /// Reserved but not allocated: "reserved … but unallocated".
    ReservedUnallocated,
    /// "cached" (older allocators' word for reserved-but-unallocated).
    Cached,
    /// A cap: "limit", "allowed", "max".
    Limit,
}

impl Label {
    pub fn as_str(self) -> &'static str {
        match self {
            Label::Requested => "requested",
            Label::Free => "free",
            Label::Total => "total",
            Label::InUse => "in_use",
            Label::Allocated => "allocated",
            Label::Reserved => "reserved",
            Label::ReservedUnallocated => "reserved_unallocated",
            Label::Cached => "cached",
            Label::Limit => "limit",
        }
    }
}

/// One size figure of a message: what the words around it say it is (`None`: they do not
/// say), as printed and as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Figure {
    pub label: Option<Label>,
    #[serde(flatten)]
    pub quantity: Quantity,
    /// Offset of the figure in the text it was read from.
    #[serde(skip)]
    pub at: usize,
    #[serde(skip)]
    pub end: usize,
    /// Whose memory the words right before it say it is ("this process has X", "Process 4048
    /// has X"): PyTorch's sentence form names each holder so.
    #[serde(skip)]
    pub owner: Owner,
}

/// Whose memory an in-use figure is, by the words right before it: PyTorch's sentence form
/// prints "Process {pid} has X memory in use" for each other process NVML lists and "…, this
/// process has X memory in use" for its own (`c10/cuda/CUDACachingAllocator.cpp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Owner {
    #[default]
    Unsaid,
    ThisProcess,
    Process(u64),
}

/// Where the words before `at` that `owner` reads start: a line's worth back.
fn floor_start(text: &str, at: usize) -> usize {
    super::cursor::floor_boundary(text, at.saturating_sub(40))
}

/// The owner the words before a figure name: "this process has", "Process 4048 has".
fn owner(before: &str) -> Owner {
    let lower = before.to_ascii_lowercase();
    let Some(head) = lower.trim_end().strip_suffix("has") else {
        return Owner::Unsaid;
    };
    let head = head.trim_end();
    if head.ends_with("this process") {
        return Owner::ThisProcess;
    }
    let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (rest, pid) = head.split_at(head.len() - digits);
    match (pid.parse::<u64>(), rest.trim_end().ends_with("process")) {
        (Ok(pid), true) => Owner::Process(pid),
        _ => Owner::Unsaid,
    }
}

/// Words of no weight between a figure and its label ("X *is* free", "X *of memory* in use").
const FILLER: &[&str] = &[
    "is",
    "are",
    "was",
    "of",
    "memory",
    "gpu",
    "device",
    "in",
    "has",
    "have",
    "been",
    "the",
    "a",
    "an",
    "by",
    "bytes",
    "mem",
    "vram",
    "ram",
    "cuda",
    "already",
    "currently",
    "so",
    "far",
];

/// Words after a figure, and what they make it.
const AFTER: &[(&str, Label)] = &[
    ("free", Label::Free),
    ("available", Label::Free),
    ("remaining", Label::Free),
    ("total", Label::Total),
    ("capacity", Label::Total),
    ("allocated", Label::Allocated),
    ("reserved", Label::Reserved),
    ("cached", Label::Cached),
    ("use", Label::InUse),
    ("used", Label::InUse),
    ("allowed", Label::Limit),
    ("limit", Label::Limit),
    ("requested", Label::Requested),
];

/// Words before a figure (the nearest decides), and what they make it.
const BEFORE: &[(&str, Label)] = &[
    ("allocate", Label::Requested),
    ("allocating", Label::Requested),
    ("allocation", Label::Requested),
    ("alloc", Label::Requested),
    ("malloc", Label::Requested),
    ("request", Label::Requested),
    ("requested", Label::Requested),
    ("requesting", Label::Requested),
    ("requires", Label::Requested),
    ("required", Label::Requested),
    ("need", Label::Requested),
    ("needs", Label::Requested),
    ("needed", Label::Requested),
    ("size", Label::Requested),
    ("buffer", Label::Requested),
    ("total", Label::Total),
    ("capacity", Label::Total),
    ("free", Label::Free),
    ("available", Label::Free),
    ("remaining", Label::Free),
    ("limit", Label::Limit),
    ("limitation", Label::Limit),
    ("allowed", Label::Limit),
    ("max", Label::Limit),
    ("maximum", Label::Limit),
    ("allocated", Label::Allocated),
    ("reserved", Label::Reserved),
    ("cached", Label::Cached),
    ("using", Label::InUse),
    ("usage", Label::InUse),
    ("use", Label::InUse),
    ("used", Label::InUse),
];

/// Every word that labels a figure, before or after it, and the words of no weight between.
pub(super) fn label_words() -> impl Iterator<Item = &'static str> {
    AFTER
        .iter()
        .chain(BEFORE)
        .map(|&(w, _)| w)
        .chain(FILLER.iter().copied())
}

/// Whether `word` is `known` or one edit from it (for known words of four letters or more).
pub(super) fn near(word: &str, known: &str) -> bool {
    if word == known {
        return true;
    }
    if known.len() < 4 || word.len() < 3 {
        return false;
    }
    let (a, b) = (word.as_bytes(), known.as_bytes());
    if a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    // What is left between the common prefix and suffix is the edit: at most one byte each.
    a.len() - prefix - suffix <= 1 && b.len() - prefix - suffix <= 1
}

fn lookup(word: &str, table: &[(&str, Label)]) -> Option<Label> {
    table
        .iter()
        .find(|(w, _)| *w == word)
        .or_else(|| table.iter().find(|(w, _)| w.len() >= 4 && near(word, w)))
        .map(|&(_, l)| l)
}

/// The words of `s`, in order, as slices of `lower` (`s` in lower case); a capital after a
/// small letter starts a word, so words a paste or a log format ran together
/// ("memoryRequired", "InUse") are still words.
fn words<'a>(s: &str, lower: &'a str) -> impl DoubleEndedIterator<Item = &'a str> {
    let b = s.as_bytes();
    let mut cuts = Vec::new();
    let mut start = None;
    for i in 0..=b.len() {
        let c = b.get(i).copied().unwrap_or(b' ');
        let camel = i > 0 && c.is_ascii_uppercase() && b[i - 1].is_ascii_lowercase();
        if let Some(s0) = start
            && (!c.is_ascii_alphabetic() || camel)
        {
            cuts.push((s0, i));
            start = None;
        }
        if start.is_none() && c.is_ascii_alphabetic() {
            start = Some(i);
        }
    }
    cuts.into_iter().map(move |(a, z)| &lower[a..z])
}

/// Where a clause ends: the label of a figure is looked for no further.
fn is_clause_break(c: char) -> bool {
    matches!(
        c,
        '.' | ';' | ',' | '(' | ')' | '|' | '\n' | '[' | ']' | '=' | '"' | '\''
    )
}

fn label_after(after: &str) -> Option<Label> {
    // A colon right after a figure ends its clause too ("… >= 9.60G: reserved 530.00M").
    let clause = after
        .bytes()
        .position(|b| is_clause_break(b as char) || b == b':')
        .map_or(after, |i| &after[..i]);
    let mut seen = 0;
    let lower = clause.to_ascii_lowercase();
    let ws: Vec<&str> = words(clause, &lower).take(8).collect();
    for (i, &w) in ws.iter().enumerate() {
        if FILLER.contains(&w) {
            continue;
        }
        if let Some(l) = lookup(w, AFTER) {
            // "… GPU 0 has a total capacity of 7.75 GiB": a label further on that takes the
            // next figure with "of" names that one, not this (a sentence whose full stop was
            // dropped: "Tried to allocate 20.00 MiB GPU 0 has a total capacity of …"); right
            // after the figure it is still this one's ("200 MB free of 8 GB").
            let word_end = w.as_ptr() as usize - lower.as_ptr() as usize + w.len();
            if i > 0 && names_the_next_figure(&lower[word_end..]) {
                return None;
            }
            let rest = &ws[i + 1..];
            if l == Label::Reserved && rest.iter().any(|w| near(w, "unallocated")) {
                return Some(Label::ReservedUnallocated);
            }
            return Some(l);
        }
        seen += 1;
        if seen >= 1 {
            return None;
        }
    }
    None
}

/// Whether the words after a label ("capacity of 7…") give it to the figure that follows: other
/// label words, then "of" and a digit.
fn names_the_next_figure(after: &str) -> bool {
    let mut rest = after.trim_start();
    loop {
        if let Some(figure) = rest.strip_prefix("of ") {
            return figure
                .trim_start()
                .starts_with(|c: char| c.is_ascii_digit());
        }
        let word_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        if word_len == 0 || lookup(&rest[..word_len], AFTER).is_none() {
            return false;
        }
        rest = rest[word_len..].trim_start();
    }
}

fn label_before(before: &str) -> Option<Label> {
    // "Used 41.74G of 16.00G": a size of a size is out of a total.
    if let Some(head) = before.trim_end().strip_suffix(" of")
        && head
            .rsplit(' ')
            .next()
            .is_some_and(|t| t.bytes().any(|b| b.is_ascii_digit()))
    {
        return Some(Label::Total);
    }
    // A figure in parentheses is named by the words before them ("Requested amount of GPU
    // memory (15485030400 bytes)").
    let before = before.trim_end().strip_suffix('(').unwrap_or(before);
    let clause = before
        .bytes()
        .rposition(|b| matches!(b, b'.' | b';' | b'|' | b'\n' | b'(' | b','))
        .map_or(before, |i| &before[i + 1..]);
    let lower = clause.to_ascii_lowercase();
    words(clause, &lower)
        .rev()
        .take(6)
        .find_map(|w| lookup(w, BEFORE))
}

/// Label words of the languages a message is translated into or printed in (`generic`'s
/// translated wordings), before the figure as those languages put them ("已分配11.99 GB内存",
/// "可用内存仅为0 B"): Chinese (simplified and traditional), Japanese, Korean.
const CJK_BEFORE: &[(&str, Label)] = &[
    ("已分配", Label::Allocated),
    ("已配置", Label::Allocated),
    ("分配", Label::Requested),
    ("申请", Label::Requested),
    ("請求", Label::Requested),
    ("请求", Label::Requested),
    ("需要", Label::Requested),
    ("割り当て", Label::Requested),
    ("할당", Label::Requested),
    ("可用", Label::Free),
    ("剩余", Label::Free),
    ("空闲", Label::Free),
    ("空き", Label::Free),
    ("사용 가능", Label::Free),
    ("总共", Label::Total),
    ("总计", Label::Total),
    ("总容量", Label::Total),
    ("總容量", Label::Total),
    ("容量", Label::Total),
    ("可用容量", Label::Free),
    ("剩余容量", Label::Free),
    ("空き容量", Label::Free),
    ("可使用", Label::Free),
    ("总", Label::Total),
    ("合計", Label::Total),
    ("전체", Label::Total),
    ("已使用", Label::InUse),
    ("已用", Label::InUse),
    ("占用", Label::InUse),
    ("使用", Label::InUse),
    ("使用中", Label::InUse),
    ("保留", Label::Reserved),
    ("预留", Label::Reserved),
    ("缓存", Label::Cached),
    ("限制", Label::Limit),
    ("上限", Label::Limit),
];

/// The word for bytes in Chinese, Japanese and Korean.
const BYTE_WORDS: &[&str] = &["字节", "位元組", "バイト", "바이트"];

/// Label words right after a figure in the same languages ("0字节可用": 0 bytes free).
const CJK_AFTER: &[(&str, Label)] = &[
    ("可用", Label::Free),
    ("空闲", Label::Free),
    ("剩余", Label::Free),
    ("空き", Label::Free),
    ("已分配", Label::Allocated),
    ("已使用", Label::InUse),
    ("已用", Label::InUse),
    ("使用中", Label::InUse),
    ("总容量", Label::Total),
    ("總容量", Label::Total),
];

/// The label of `CJK_AFTER` right after a figure (past spaces).
fn label_cjk_after(after: &str) -> Option<Label> {
    if after.is_ascii() {
        return None;
    }
    // Words of no weight first ("13.31 MiB 是空闲的": is free; "5.09 GiB 内存在使用中": of memory
    // in use), as `FILLER` in English.
    let mut after = after.trim_start();
    for _ in 0..4 {
        match CJK_FILLER.iter().find(|w| after.starts_with(**w)) {
            Some(w) => after = after[w.len()..].trim_start(),
            None => break,
        }
    }
    CJK_AFTER
        .iter()
        .find(|(w, _)| after.starts_with(w))
        .map(|&(_, l)| l)
}

/// Words of no weight between a figure and the label after it.
const CJK_FILLER: &[&str] = &[
    "是",
    "为",
    "的",
    "内存",
    "显存",
    "記憶體",
    "在",
    "被",
    "メモリ",
    "が",
];

/// The label of `CJK_BEFORE` nearest before a figure, in its clause and within a few words:
/// the word that ends last, the longer of two that end together ("已分配" over "分配").
fn label_cjk_before(before: &str) -> Option<Label> {
    if before.is_ascii() {
        return None;
    }
    let before = before.trim_end();
    let from = super::cursor::floor_boundary(before, before.len().saturating_sub(30));
    let near = &before[from..];
    let clause = near
        .rfind([',', '.', ';', '\n', '，', '。', '；', '、'])
        .map_or(near, |i| {
            &near[i + near[i..].chars().next().map_or(1, char::len_utf8)..]
        });
    CJK_BEFORE
        .iter()
        .filter_map(|&(w, l)| clause.rfind(w).map(|i| (i + w.len(), w.len(), l)))
        .max_by_key(|&(end, len, _)| (end, len))
        .map(|(_, _, l)| l)
}

/// What the words around `text[at..end]` make the figure there.
fn label(text: &str, at: usize, end: usize) -> Option<Label> {
    let from = super::cursor::floor_boundary(text, at.saturating_sub(80));
    let to = super::cursor::floor_boundary(text, (end + 80).min(text.len()));
    label_after(&text[end..to])
        .or_else(|| label_before(&text[from..at]))
        .or_else(|| label_cjk_before(&text[from..at]))
        .or_else(|| label_cjk_after(&text[end..to]))
}

/// The scale of a unit word, as `(low, high)` bytes a unit: equal for bytes and the binary
/// units (`KiB`…`TiB`, Kubernetes' `Ki`…`Ti`), 1000 and 1024 powers for `KB`/`MB`/`GB`/`TB` and
/// the spelled-out words (`gigabytes`), whose meaning varies by runtime and writer; any case
/// (`gib`, `MB`, `mb`, `Gb`: a pasted "Gb" means bytes, not bits). `spaced`: the unit was printed
/// after a space (single letters then are words, not units).
fn unit_scale(unit: &str, spaced: bool) -> Option<(u128, u128)> {
    let binary = |k: u32| Some((1u128 << (10 * k), 1u128 << (10 * k)));
    match unit {
        "Ki" => return binary(1),
        "Mi" => return binary(2),
        "Gi" => return binary(3),
        "Ti" => return binary(4),
        "K" | "k" | "M" | "G" | "T" if spaced => return None,
        _ => {}
    }
    let k = match unit.to_ascii_lowercase().as_str() {
        "b" | "byte" | "bytes" => return Some((1, 1)),
        "kib" => return binary(1),
        "mib" => return binary(2),
        "gib" => return binary(3),
        "tib" => return binary(4),
        "kb" | "k" | "kilobyte" | "kilobytes" => 1,
        "mb" | "m" | "megabyte" | "megabytes" => 2,
        "gb" | "g" | "gigabyte" | "gigabytes" => 3,
        "tb" | "t" | "terabyte" | "terabytes" => 4,
        _ => return None,
    };
    // A lone lower-case `m`, `g` or `t` joined to a number is a time, a network or a count
    // more often than a size ("5m", "5g"); `k` stays, as runtimes print it.
    if matches!(unit, "m" | "g" | "t") {
        return None;
    }
    Some((1000u128.pow(k), 1024u128.pow(k)))
}

/// The bytes `number` (as digits) times the unit can stand for: rounded to nearest or cut at
/// the printed places.
fn interval(d: Decimal, low_scale: u128, high_scale: u128) -> Option<ByteRange> {
    let p = 10u128.checked_pow(d.places)?;
    if low_scale == 1 && high_scale == 1 {
        if d.places == 0 {
            return u64::try_from(d.mantissa).ok().map(ByteRange::exact);
        }
        // Bytes printed with a `%f` formatter ("0.000000B", PaddlePaddle's): the whole byte
        // counts the printed places allow; a fraction no whole count rounds or cuts to ("1.5
        // B") is no byte count.
        let low = (d.mantissa.checked_mul(2)?.saturating_sub(1)).div_ceil(p.checked_mul(2)?);
        let high = d.mantissa / p;
        return (low <= high).then(|| ByteRange {
            low: u64::try_from(low).unwrap_or(u64::MAX),
            high: u64::try_from(high).unwrap_or(u64::MAX),
        });
    }
    // [(m − ½)/p · low, (m + 1)/p · high]: the values that round or truncate to the text.
    let low = (d.mantissa.checked_mul(2)?.saturating_sub(1))
        .checked_mul(low_scale)?
        .div_ceil(p.checked_mul(2)?);
    // The largest whole byte count below (m + 1)/p · high.
    let high = (d.mantissa.checked_add(1)?.checked_mul(high_scale)? - 1) / p;
    Some(ByteRange {
        low: u64::try_from(low).unwrap_or(u64::MAX),
        high: u64::try_from(high).unwrap_or(u64::MAX),
    })
}

/// Every size figure in `text`, labelled.
pub fn read(text: &str) -> Vec<Figure> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let starts = b.is_ascii_digit()
            && !(i > 0
                && (bytes[i - 1].is_ascii_alphanumeric()
                    || matches!(bytes[i - 1], b'.' | b'_' | b':' | b'-' | b'/' | b'x')));
        if !starts {
            i += 1;
            continue;
        }
        match figure_at(text, i).or_else(|| pair_at(text, i)) {
            Some(f) => {
                let first_at = f.at;
                i = f.end;
                let slash = bytes.get(i) == Some(&b'/');
                out.push(f);
                // The second of a pair that shares one unit ("3457/3576 MiB").
                if slash && let Some(mut g) = figure_at(text, i + 1) {
                    if let Some((_, second)) = pair_labels(text, first_at) {
                        g.label = second;
                    }
                    i = g.end;
                    out.push(g);
                }
            }
            None => {
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'.' | b',' | b':'))
                {
                    i += 1;
                }
            }
        }
    }
    out
}

/// The number starting at `bytes[at]`, as plain digits with at most one `.` for its decimal
/// mark, and where it ends. Every locale's separators are read: `1,234.5` (English), `1.234,5`
/// (German), `1'234,5` (Swiss), `1234,5` (a decimal comma: a comma followed by other than three
/// digits). A comma followed by exactly three digits, alone, is a thousands separator, the
/// commoner reading; a mark with no digit after it ends the number ("20." at a sentence's end).
fn number_at(bytes: &[u8], at: usize) -> Option<(String, usize)> {
    let mut j = at;
    // (offset, mark) of every separator between digits.
    let mut marks: Vec<(usize, u8)> = Vec::new();
    while j < bytes.len() {
        let c = bytes[j];
        if c.is_ascii_digit() {
            j += 1;
        } else if matches!(c, b',' | b'.' | b'\'')
            && bytes.get(j + 1).is_some_and(u8::is_ascii_digit)
        {
            marks.push((j, c));
            j += 1;
        } else {
            break;
        }
    }
    let digits_after = |i: usize| marks.get(i + 1).map_or(j, |&(m, _)| m) - marks[i].0 - 1;
    let grouped = |range: std::ops::Range<usize>| range.into_iter().all(|i| digits_after(i) == 3);
    let n = marks.len();
    // (decimal mark's index, where the number ends).
    let (decimal, end) = match marks.last() {
        None => (None, j),
        Some(&(_, kind)) if marks.iter().all(|&(_, k)| k == kind) => match kind {
            b',' if n == 1 && digits_after(0) != 3 => (Some(0), j),
            b'.' if n == 1 => (Some(0), j),
            _ if grouped(0..n) => (None, j),
            // "1.2.3": the first dot is the decimal mark and the number ends at the second.
            b'.' => (Some(0), marks[1].0),
            _ => (None, marks[0].0),
        },
        Some(&(_, kind)) => {
            let before_differ = marks[..n - 1].iter().all(|&(_, k)| k != kind);
            if kind != b'\'' && before_differ && grouped(0..n - 1) {
                (Some(n - 1), j)
            } else {
                (None, marks[0].0)
            }
        }
    };
    let decimal_at = decimal.map(|i| marks[i].0);
    let mut digits = String::with_capacity(end - at);
    for (i, &b) in bytes[at..end].iter().enumerate() {
        if b.is_ascii_digit() {
            digits.push(b as char);
        } else if decimal_at == Some(at + i) {
            digits.push('.');
        }
    }
    Some((digits, end))
}

/// The size printed at `text[at..]` (a number and its unit, or a bare byte count after a size
/// word), read as `read` reads each figure; its label is the caller's to set.
pub(super) fn size_at(text: &str, at: usize) -> Option<Figure> {
    figure_at(text, at)
}

/// The figure whose number starts at `at`, if a size is printed there.
fn figure_at(text: &str, at: usize) -> Option<Figure> {
    let bytes = text.as_bytes();
    let (digits, j) = number_at(bytes, at)?;
    let number_end = j;
    let d = Decimal::parse(&digits)?;
    // The unit after one space, a non-breaking one (U+00A0, U+202F, as locales print it), or
    // none.
    let gap = [" ", "\u{a0}", "\u{202f}"]
        .iter()
        .find(|g| text[j..].starts_with(*g))
        .map_or(0, |g| g.len());
    let spaced = gap > 0;
    // "15485030400-byte": a unit joined by a hyphen.
    if bytes.get(j) == Some(&b'-') && text[j + 1..].starts_with("byte") {
        let d = Decimal::parse(&digits)?;
        let end = j
            + 1
            + if text[j + 1..].starts_with("bytes") {
                5
            } else {
                4
            };
        return Some(Figure {
            label: label(text, at, end),
            quantity: Quantity {
                printed: text[at..end].to_string(),
                bytes: interval(d, 1, 1)?,
            },
            at,
            end,
            owner: owner(&text[floor_start(text, at)..at]),
        });
    }
    let unit_start = j + gap;
    // "0字节", "512 バイト", "512 바이트": bytes, as Chinese, Japanese and Korean write the word.
    if let Some(word) = BYTE_WORDS
        .iter()
        .find(|w| text[unit_start..].starts_with(**w))
    {
        let end = unit_start + word.len();
        return Some(Figure {
            label: label(text, at, end),
            quantity: Quantity {
                printed: text[at..end].to_string(),
                bytes: interval(d, 1, 1)?,
            },
            at,
            end,
            owner: owner(&text[floor_start(text, at)..at]),
        });
    }
    let mut k = unit_start;
    while k < bytes.len() && bytes[k].is_ascii_alphabetic() {
        k += 1;
    }
    let unit = &text[unit_start..k];
    let (range, end) = match unit_scale(unit, spaced) {
        Some((low, high)) if !unit.is_empty() => (interval(d, low, high)?, k),
        _ => {
            // A bare count: bytes only when whole, of four digits or more, and a size word
            // comes right before it ("allocate buffer: 655360000"), or before the "of" that
            // takes a size word's value (TensorRT's builder: "insufficient memory on requested
            // size of 11580055552"; ONNX Runtime's arena: "requested bytes of N").
            let whole = d.places == 0 && digits.len() >= 4;
            // A word may follow without a space where a paste lost it ("110592Hardware").
            let after_ok = !matches!(bytes.get(number_end), Some(b':' | b'-' | b'/' | b'x'))
                && !bytes.get(number_end).is_some_and(u8::is_ascii_lowercase);
            let from = super::cursor::floor_boundary(text, at.saturating_sub(32));
            let before = text[from..at].to_ascii_lowercase();
            let before = before.trim_end_matches([' ', ':', '=']);
            let before = before
                .strip_suffix(" of")
                .map_or(before, |b| b.trim_end_matches(' '));
            let last_word = before
                .rsplit(|c: char| !c.is_ascii_alphabetic())
                .next()
                .unwrap_or("");
            let sized = [
                "alloc", "size", "buffer", "request", "bytes", "memory", "required", "limit",
            ]
            .iter()
            .any(|w| last_word.starts_with(w));
            if !(whole && after_ok && sized) {
                return None;
            }
            (interval(d, 1, 1)?, number_end)
        }
    };
    Some(Figure {
        label: label(text, at, end),
        quantity: Quantity {
            printed: text[at..end].to_string(),
            bytes: range,
        },
        at,
        end,
        owner: owner(&text[floor_start(text, at)..at]),
    })
}

/// The first of two numbers that share the unit after the second ("active/reserved: 3457/3576
/// MiB", "VRAM 4096/4096 MiB"), as a web UI or a status line prints a pair: the unit it takes
/// from the second, and its label from the first of two words joined the same way before them
/// ("active/reserved"), or from the words around it. It ends at the slash; the second is read
/// as itself.
fn pair_at(text: &str, at: usize) -> Option<Figure> {
    let bytes = text.as_bytes();
    let (digits, j) = number_at(bytes, at)?;
    if bytes.get(j) != Some(&b'/') || !bytes.get(j + 1).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let second = figure_at(text, j + 1)?;
    let unit = second.quantity.printed[number_at(bytes, j + 1)?.1 - (j + 1)..].trim_start();
    let (low, high) = unit_scale(unit, false).or_else(|| unit_scale(unit, true))?;
    if unit.is_empty() {
        return None;
    }
    let d = Decimal::parse(&digits)?;
    Some(Figure {
        label: pair_labels(text, at).map_or_else(|| label(text, at, j), |(first, _)| first),
        quantity: Quantity {
            printed: format!("{} {unit}", &text[at..j]),
            bytes: interval(d, low, high)?,
        },
        at,
        end: j,
        owner: owner(&text[floor_start(text, at)..at]),
    })
}

/// The labels two words joined by a slash right before a pair of figures give them
/// ("active/reserved: ", "used/total "), the first word's to the first figure.
fn pair_labels(text: &str, at: usize) -> Option<(Option<Label>, Option<Label>)> {
    let from = super::cursor::floor_boundary(text, at.saturating_sub(48));
    let token = text[from..at]
        .trim_end_matches([' ', ':', '='])
        .rsplit(|c: char| !(c.is_ascii_alphabetic() || c == '/'))
        .next()?;
    let (a, b) = token.split_once('/')?;
    let named = |w: &str| lookup(&w.to_ascii_lowercase(), BEFORE);
    Some((named(a), named(b)))
}

/// The largest unit a cut figure may have lost: TiB.
const CUT_HIGH_SCALE: u128 = 1 << 40;

/// The figure a text ends in when the paste cut it before its unit ("… of which 212.81",
/// "…; 20."): a number with no unit, on the last line, with a decimal mark (no runtime prints a
/// byte count with one, so a unit was lost) or a size word before it. `tail` is the text after
/// the message, to the end of the input. Its bytes are every value the printed digits allow in
/// any unit from bytes (from kB for a decimal) to TiB, rounded or cut; its label is the words
/// before it, when they name one.
pub fn cut_at_end(tail: &str) -> Option<Figure> {
    let trimmed = tail.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '`'));
    if trimmed.len() > 160 || trimmed.contains('\n') {
        return None;
    }
    let b = trimmed.as_bytes();
    let at = b.len()
        - b.iter()
            .rev()
            .take_while(|&&c| c.is_ascii_digit() || matches!(c, b'.' | b','))
            .count();
    let at = at + b[at..].iter().take_while(|c| !c.is_ascii_digit()).count();
    if at >= b.len() || (at > 0 && !matches!(b[at - 1], b' ' | b'(' | b'=')) {
        return None;
    }
    let (digits, end) = number_at(b, at)?;
    let dotted = trimmed[end..] == *"." || digits.contains('.');
    if end + usize::from(trimmed[end..] == *".") != b.len() {
        return None;
    }
    let d = Decimal::parse(digits.trim_end_matches('.'))?;
    let label = label_before(&trimmed[..at]);
    if !dotted && label.is_none() {
        return None;
    }
    let low_scale = if dotted { 1000 } else { 1 };
    let p = 10u128.checked_pow(d.places)?;
    let low = (d.mantissa.checked_mul(2)?.saturating_sub(1))
        .checked_mul(low_scale)?
        .div_ceil(p.checked_mul(2)?);
    let high = (d.mantissa.checked_add(1)?.checked_mul(CUT_HIGH_SCALE)? - 1) / p;
    Some(Figure {
        label,
        quantity: Quantity {
            printed: trimmed[at..].to_string(),
            bytes: ByteRange {
                low: u64::try_from(low).unwrap_or(u64::MAX),
                high: u64::try_from(high).unwrap_or(u64::MAX),
            },
        },
        at,
        end: trimmed.len(),
        owner: Owner::Unsaid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(text: &str) -> Vec<(Option<&'static str>, String, u64, u64)> {
        read(text)
            .into_iter()
            .map(|f| {
                (
                    f.label.map(Label::as_str),
                    f.quantity.printed,
                    f.quantity.bytes.low,
                    f.quantity.bytes.high,
                )
            })
            .collect()
    }

    #[test]
    fn figures_are_labelled_by_the_words_around_them() {
        let got = labels(
            "Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.69 GiB of which 5.06 MiB is fre. \
             Including non-PyTorch memory, this process has 23.67 GiB memory in use. Of the allocated \
             memory 22.1 GiB is allocated by PyTorch, and 1.1 GiB is reserved by PyTorch but unallocated.",
        );
        let names: Vec<Option<&str>> = got.iter().map(|g| g.0).collect();
        assert_eq!(
            names,
            [
                Some("requested"),
                Some("total"),
                Some("free"),
                Some("in_use"),
                Some("allocated"),
                Some("reserved_unallocated")
            ]
        );
        // 20.00 MiB rounded or cut: [19.995, 20.01) MiB.
        assert_eq!((got[0].2, got[0].3), (20_966_278, 20_982_005));
    }

    #[test]
    fn a_sentence_without_its_full_stop_keeps_its_labels() {
        let got = labels(
            "CUDA out of memory Tried to allocate 20.00 MiB GPU 0 has a total capacity of 7.75 GiB of which 13.31 MiB is free Process 4048 has 2.31 GiB memory in use",
        );
        let names: Vec<Option<&str>> = got.iter().map(|g| g.0).collect();
        assert_eq!(
            names,
            [
                Some("requested"),
                Some("total"),
                Some("free"),
                Some("in_use")
            ]
        );
        // Right after its figure, a label with "of" is still that figure's.
        let got = labels("only 200 MB free of 8 GB total");
        assert_eq!((got[0].0, got[1].0), (Some("free"), Some("total")));
    }

    #[test]
    fn in_use_figures_carry_the_process_the_words_before_them_name() {
        let owners: Vec<Owner> = read(
            "Process 4048 has 2.31 GiB memory in use Including non PyTorch memory, this process has 5.09 GiB memory in use and 3.00 GiB in use",
        )
        .iter()
        .map(|f| f.owner)
        .collect();
        assert_eq!(
            owners,
            [Owner::Process(4048), Owner::ThisProcess, Owner::Unsaid]
        );
    }

    #[test]
    fn bare_counts_need_a_size_word_and_units_keep_their_ambiguity() {
        let got =
            labels("Memory not available to allocate buffer: 655360000 at line 70, pid 12345");
        assert_eq!(
            got,
            [(Some("requested"), "655360000".into(), 655360000, 655360000)]
        );
        let got = labels("you tried to allocate 1.5GB");
        assert_eq!(got[0].2, 1_450_000_000);
        assert_eq!(got[0].3, 1_717_986_918);
        assert!(labels("2018-07-17 09:05:55.622488: step 1234").is_empty());
        // TensorRT's builder prints the request in bytes with no unit, after "size of"; the
        // tactic's number and id, a line number and an error code are not sizes.
        let got = labels(
            "[W] [TRT] Skipping tactic 0 due to insufficient memory on requested size of 11580055552 detected for tactic 0x0000000000000000. [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory) at line 1234",
        );
        assert_eq!(
            got,
            [(
                Some("requested"),
                "11580055552".into(),
                11580055552,
                11580055552
            )]
        );
        assert!(labels("a batch of 4096 tokens, with a count of 1024").is_empty());
        // A number with a unit but no word that says what it is.
        assert_eq!(labels("warning: 3.00 GiB").first().map(|g| g.0), Some(None));
    }

    #[test]
    fn every_locale_s_decimal_and_thousands_marks_are_read() {
        let one = |t: &str| {
            let g = labels(t);
            assert_eq!(g.len(), 1, "{t}: {g:?}");
            (g[0].1.clone(), g[0].2, g[0].3)
        };
        // A decimal comma: 1900,00 MiB is 1900.00 MiB, not 1900 bytes and 0 MiB.
        assert_eq!(
            one("failed to allocate 1900,00 MiB of pinned memory"),
            ("1900,00 MiB".into(), 1_992_289_158, 1_992_304_885)
        );
        // German (dot thousands, comma decimal), Swiss (apostrophe), English (comma thousands).
        // 1234.5 MiB rounded or cut: from 1234.45 MiB.
        assert_eq!(one("tried to allocate 1.234,5 MiB").1, 1_294_414_644);
        assert_eq!(one("tried to allocate 1'234 MiB").1, 1_293_418_496);
        assert_eq!(one("tried to allocate 1,234.5 MiB").1, 1_294_414_644);
        assert_eq!(
            one("tried to allocate 1,234 bytes"),
            ("1,234 bytes".into(), 1234, 1234)
        );
        // A non-breaking space between number and unit, as French and Russian locales print.
        assert_eq!(one("tried to allocate 2,5\u{a0}GiB").1, 2_630_667_469);
        // A list is not a number.
        assert!(labels("shape[16,112,112,147] float").is_empty());
    }

    #[test]
    fn units_are_read_in_any_case_and_spelled_out() {
        let one = |t: &str| {
            let g = labels(t);
            assert_eq!(g.len(), 1, "{t}: {g:?}");
            (g[0].2, g[0].3)
        };
        assert_eq!(one("tried to allocate 512Mi"), (536_346_624, 537_919_487));
        assert_eq!(
            one("tried to allocate 2 gigabytes"),
            (1_500_000_000, 3_221_225_471)
        );
        assert_eq!(
            one("tried to allocate 2 GIB"),
            one("tried to allocate 2 GiB")
        );
        assert_eq!(one("tried to allocate 2 mb"), one("tried to allocate 2 MB"));
        assert_eq!(one("tried to allocate 4096 BYTES"), (4096, 4096));
        // A lone letter after a space, or a lower-case `m` joined to a number, is no unit.
        assert!(labels("tried to allocate 2 M").is_empty());
        assert!(labels("took 5m").is_empty());
    }

    #[test]
    fn words_run_together_keep_their_labels() {
        let got = labels("out of resource: shared memoryRequired: 110592Hardware limit: 101376");
        assert_eq!(
            got,
            [
                (Some("requested"), "110592".into(), 110592, 110592),
                (Some("limit"), "101376".into(), 101376, 101376)
            ]
        );
    }

    #[test]
    fn a_figure_cut_before_its_unit_is_listed_with_every_unit_it_could_have() {
        let f = cut_at_end(" of which 212.81\n").unwrap();
        assert_eq!(f.quantity.printed, "212.81");
        // [212.805 kB, 212.82 TiB): from kB (a byte count has no decimal mark) to TiB.
        assert_eq!(
            (f.quantity.bytes.low, f.quantity.bytes.high),
            (212_805, 233_998_064_623_288)
        );
        assert_eq!(cut_at_end("; 20.").unwrap().quantity.bytes.low, 19_500);
        // A whole number is a cut figure only after a size word.
        let f = cut_at_end(" Tried to allocate 20").unwrap();
        assert_eq!(f.label, Some(Label::Requested));
        assert_eq!(f.quantity.bytes.low, 20);
        assert!(cut_at_end(" at step 1234\n").is_none());
        // Not at the end, or not on the last line: nothing was cut.
        assert!(cut_at_end(" 2.25 GiB in use").is_none());
        assert!(cut_at_end(" 2.25\nnext line").is_none());
    }

    #[test]
    fn bytes_printed_with_a_fixed_point_formatter_are_whole_bytes() {
        // PaddlePaddle prints `%f` of its sizes, bytes included.
        let got = labels("available memory is only 0.000000B");
        assert_eq!(got, [(Some("free"), "0.000000B".into(), 0, 0)]);
        let got = labels("tried to allocate 512.000000 bytes");
        assert_eq!((got[0].2, got[0].3), (512, 512));
        // No whole byte count prints as 1.5 B.
        assert!(labels("tried to allocate 1.5 B").is_empty());
    }

    #[test]
    fn labels_in_other_languages_are_read_before_their_figures() {
        let got =
            labels("已分配11.999512 GB内存，可用内存仅为0.000000B，无法在GPU 0上分配50.000000MB");
        let names: Vec<Option<&str>> = got.iter().map(|g| g.0).collect();
        assert_eq!(names, [Some("allocated"), Some("free"), Some("requested")]);
        // The nearest word decides; an English label still wins where it is one.
        let got = labels("总共 8 GiB，已使用 7.5 GiB，tried to allocate 1 GiB");
        let names: Vec<Option<&str>> = got.iter().map(|g| g.0).collect();
        assert_eq!(names, [Some("total"), Some("in_use"), Some("requested")]);
    }

    #[test]
    fn a_pair_of_numbers_shares_the_unit_after_the_second() {
        let got = labels("Torch active/reserved: 3457/3576 MiB, Sys VRAM: 4096/4096 MiB (100.0%)");
        let printed: Vec<(&str, u64)> = got.iter().map(|g| (g.1.as_str(), g.2)).collect();
        assert_eq!(
            printed,
            [
                // From 3456.5 MiB: rounded or cut at the printed places.
                ("3457 MiB", 3_624_402_944),
                ("3576 MiB", 3_749_183_488),
                ("4096 MiB", 4_294_443_008),
                ("4096 MiB", 4_294_443_008),
            ]
        );
        // The words joined the same way name each: the first by the word before the slash.
        let got = labels("used/total: 7.5/8 GiB");
        assert_eq!((got[0].0, got[1].0), (Some("in_use"), Some("total")));
        let got = labels("free/total 1000/8000 bytes");
        assert_eq!((got[0].2, got[1].2), (1000, 8000));
        // A date, a ratio or a pair without a unit is no size.
        assert!(labels("on 2024/03/01 at step 10/20").is_empty());
        assert!(labels("Free memory/Total memory: 22635/85095").is_empty());
    }

    #[test]
    fn a_message_machine_translated_keeps_its_labels_and_its_bytes() {
        // PyTorch's parenthesis form as a translator renders it, full-width punctuation folded.
        let got = labels(
            "CUDA内存不足。尝试分配20.00 MiB（GPU 0；总容量7.79 GiB；已分配6.84 GiB；0字节可用；PyTorch总共保留6.91 GiB）",
        );
        let names: Vec<(Option<&str>, &str)> = got.iter().map(|g| (g.0, g.1.as_str())).collect();
        assert_eq!(
            names,
            [
                (Some("requested"), "20.00 MiB"),
                (Some("total"), "7.79 GiB"),
                (Some("allocated"), "6.84 GiB"),
                (Some("free"), "0字节"),
                (Some("reserved"), "6.91 GiB"),
            ]
        );
        assert_eq!((got[3].2, got[3].3), (0, 0));
        // The sentence form, translated: label words after their figures, past words of no
        // weight.
        let got = labels(
            "CUDA内存不足。尝试分配 20.00 MiB。GPU 0 的总容量为 7.75 GiB，其中 13.31 MiB 是空闲的。此进程有 5.09 GiB 内存在使用中。",
        );
        let names: Vec<Option<&str>> = got.iter().map(|g| g.0).collect();
        assert_eq!(
            names,
            [
                Some("requested"),
                Some("total"),
                Some("free"),
                Some("in_use")
            ]
        );
        let got = labels("メモリ不足: 512 バイト 空き, 空き容量 2 GiB");
        let names: Vec<Option<&str>> = got.iter().map(|g| g.0).collect();
        assert_eq!(names, [Some("free"), Some("free")]);
    }

    #[test]
    fn one_edit_is_a_typo_two_are_another_word() {
        assert!(near("fre", "free"));
        assert!(near("alocated", "allocated"));
        assert!(near("totl", "total"));
        assert!(!near("frame", "free"));
    }
}
