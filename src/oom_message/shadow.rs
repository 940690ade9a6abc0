//! The text the readers see, and the way back to the input's offsets.
//!
//! Pasted messages are wrapped by terminals and editors, indented by log formatters, coloured
//! with ANSI escape codes (raw, or as the `^[[31m` a pager prints), written with CRLF, spaced
//! with a web page's non-breaking spaces, or quoted inside a string whose line breaks are the
//! two characters `\n`. The readers see one text where every run of whitespace (and of those
//! escapes) is a single space, colour codes and invisible characters are gone, and a line a
//! terminal cut at its width is joined to the next, so a phrase matches however it was broken.
//! Each message found is mapped back to the bytes it came from, so its text and line are the
//! input's own.

/// The folded text and the points where its offsets and the input's stop moving together.
#[derive(Debug, Clone, Default)]
pub struct Shadow {
    pub text: String,
    /// Offsets of the spaces that stand for a run holding a line break, ascending: where the
    /// input's lines end, for the reader that reads by lines (`generic`).
    pub line_ends: Vec<usize>,
    /// `(shadow offset, input offset)` of the first byte after every fold, ascending.
    breaks: Vec<(usize, usize)>,
    /// `(shadow offset, input end)` of every byte that stands for several (an HTML entity, a
    /// full-width character), ascending: a span ending on one ends after all of them.
    substitutes: Vec<(usize, usize)>,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Length of the escape sequence starting at `i` (`ESC [ … final`, `ESC ] … BEL`, `^[[…m`),
/// or 0 when there is none.
fn escape_len(bytes: &[u8], i: usize) -> usize {
    let at = |k: usize| bytes.get(i + k).copied();
    let csi = |from: usize| {
        // Parameters and intermediates, then one final byte.
        let mut k = from;
        while let Some(b) = at(k) {
            if (0x20..=0x3f).contains(&b) {
                k += 1;
            } else if (0x40..=0x7e).contains(&b) {
                return k + 1;
            } else {
                return 0;
            }
            if k - from > 32 {
                return 0;
            }
        }
        0
    };
    match (at(0), at(1)) {
        (Some(0x1b), Some(b'[')) => csi(2),
        (Some(0x1b), Some(b']')) => {
            let mut k = 2;
            while let Some(b) = at(k) {
                if b == 0x07 {
                    return k + 1;
                }
                if b == 0x1b && at(k + 1) == Some(b'\\') {
                    return k + 2;
                }
                if k > 256 {
                    return 0;
                }
                k += 1;
            }
            0
        }
        (Some(0x1b), Some(b)) if b.is_ascii() => 2,
        (Some(0x1b), Some(_)) => 1,
        (Some(0x1b), None) => 1,
        (Some(b'^'), Some(b'[')) if at(2) == Some(b'[') => {
            // Caret notation: only colour and cursor codes, digits and semicolons then a letter.
            let mut k = 3;
            while let Some(b) = at(k) {
                if b.is_ascii_digit() || b == b';' {
                    k += 1;
                } else if b.is_ascii_alphabetic() {
                    return k + 1;
                } else {
                    return 0;
                }
            }
            0
        }
        _ => 0,
    }
}

/// A Markdown or e-mail quote marker at the start of a line (`> `, `>> `, `> > `): a quote of a
/// log is still the log.
fn quote_marker_len(bytes: &[u8], i: usize) -> usize {
    let mut k = i;
    while bytes.get(k) == Some(&b' ') && k - i < 8 {
        k += 1;
    }
    let mut marked = false;
    while bytes.get(k) == Some(&b'>') {
        marked = true;
        k += 1;
        if bytes.get(k) == Some(&b' ') {
            k += 1;
        }
    }
    if marked { k - i } else { 0 }
}

/// An HTML entity a web page or an exported thread leaves in a paste (`&gt;=`, `&lt;=`,
/// `&amp;`, `&quot;`, `&#39;`, `&nbsp;`): its length and the byte it stands for.
fn html_entity(bytes: &[u8], i: usize) -> Option<(usize, u8)> {
    const ENTITIES: &[(&[u8], u8)] = &[
        (b"&gt;", b'>'),
        (b"&lt;", b'<'),
        (b"&amp;", b'&'),
        (b"&quot;", b'"'),
        (b"&#39;", b'\''),
        (b"&#x27;", b'\''),
        (b"&apos;", b'\''),
        (b"&nbsp;", b' '),
    ];
    let rest = &bytes[i..];
    ENTITIES
        .iter()
        .find(|(e, _)| rest.starts_with(e))
        .map(|&(e, b)| (e.len(), b))
}

/// A full-width form (U+FF01–U+FF5E: `１２．５ＧｉＢ`, as CJK input methods type them): its
/// length (3 bytes) and the ASCII byte it stands for.
fn full_width(bytes: &[u8], i: usize) -> Option<(usize, u8)> {
    let (b1, b2) = (*bytes.get(i + 1)?, *bytes.get(i + 2)?);
    let code = match bytes[i] {
        0xEF => 0xF000 | (u32::from(b1 & 0x3F) << 6) | u32::from(b2 & 0x3F),
        _ => return None,
    };
    if b1 & 0xC0 != 0x80 || b2 & 0xC0 != 0x80 || !(0xFF01..=0xFF5E).contains(&code) {
        return None;
    }
    Some((3, (code - 0xFEE0) as u8))
}

/// A Markdown escape: a backslash before punctuation Markdown would otherwise read
/// (`CUDA\_ERROR\_OUT\_OF\_MEMORY`, `\*\*`), as a paste into an issue editor leaves it. The
/// backslash is dropped.
fn is_markdown_escape(bytes: &[u8], i: usize) -> bool {
    bytes[i] == b'\\'
        && matches!(
            bytes.get(i + 1),
            Some(
                b'_' | b'*'
                    | b'['
                    | b']'
                    | b'('
                    | b')'
                    | b'#'
                    | b'.'
                    | b'!'
                    | b'|'
                    | b'<'
                    | b'>'
                    | b'`'
                    | b'-'
                    | b'+'
                    | b'{'
                    | b'}'
            )
        )
}

/// What a Unicode space or invisible character does to the text.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unicode {
    /// A space of another width (no-break U+00A0, figure U+2007, narrow no-break U+202F,
    /// ideographic U+3000, …): a space.
    Space,
    /// The line and paragraph separators (U+2028, U+2029): a line break.
    LineBreak,
    /// Zero-width characters, the byte-order mark and the soft hyphen: nothing.
    Invisible,
}

/// A Unicode space or invisible character at `i` (a web page's or a word processor's, kept by
/// a copy): its length in bytes and what it does.
fn unicode_space(bytes: &[u8], i: usize) -> Option<(usize, Unicode)> {
    let at = |k: usize| bytes.get(i + k).copied();
    match (bytes[i], at(1)?) {
        (0xC2, 0xA0) => Some((2, Unicode::Space)),
        (0xC2, 0xAD) => Some((2, Unicode::Invisible)),
        (0xE1, 0x9A) if at(2)? == 0x80 => Some((3, Unicode::Space)),
        (0xE2, 0x80) => match at(2)? {
            0x80..=0x8A | 0xAF => Some((3, Unicode::Space)),
            0x8B..=0x8D => Some((3, Unicode::Invisible)),
            0xA8 | 0xA9 => Some((3, Unicode::LineBreak)),
            _ => None,
        },
        (0xE2, 0x81) => match at(2)? {
            0x9F => Some((3, Unicode::Space)),
            0xA0 => Some((3, Unicode::Invisible)),
            _ => None,
        },
        (0xE3, 0x80) if at(2)? == 0x80 => Some((3, Unicode::Space)),
        (0xEF, 0xBB) if at(2)? == 0xBF => Some((3, Unicode::Invisible)),
        _ => None,
    }
}

use std::collections::HashSet;
use std::sync::OnceLock;

/// The shortest width a terminal's wrap is recognised at.
const MIN_WRAP_COLUMNS: usize = 40;

/// Words of the runtimes' out-of-memory messages and the size units, lower case: a word a
/// terminal cut at its width is joined back when its two halves make one of these.
const MESSAGE_WORDS: &[&str] = &[
    "allocate",
    "allocated",
    "allocating",
    "allocation",
    "allocations",
    "allocator",
    "already",
    "available",
    "buffer",
    "bytes",
    "cached",
    "capacity",
    "cudamalloc",
    "device",
    "exhausted",
    "failed",
    "fragmentation",
    "free",
    "gib",
    "insufficient",
    "kib",
    "limit",
    "memory",
    "mib",
    "process",
    "processes",
    "pytorch",
    "requested",
    "reserved",
    "resource",
    "tensor",
    "tib",
    "total",
    "tried",
    "unallocated",
    "workspace",
];

/// Input offsets of the line breaks a terminal put in when it cut a line at its width W: a
/// line of W characters (the text's widest, at least `MIN_WRAP_COLUMNS`) whose last word and
/// the next line's first are the halves of one number (`…of which 21.9` / `5 GiB`) or of one
/// word of the messages (`alloc` / `ated`, `Mi` / `B`). A wrapper that breaks at spaces never
/// cuts a word, and its lines' edges make no such word. Each offset is that of the line's
/// terminator (its `\r` when the line ends in CRLF).
fn soft_wrap_breaks(bytes: &[u8], prefix_at: impl Fn(usize) -> usize) -> Vec<usize> {
    // Each line: start, end of its text (before a CR), end (its `\n` or the text's end), and
    // characters (UTF-8 continuation bytes not counted).
    let lines = || {
        let mut start = 0;
        std::iter::from_fn(move || {
            if start > bytes.len() {
                return None;
            }
            let end = bytes[start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |k| start + k);
            let body_end = if end > start && bytes[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            let chars = bytes[start..body_end]
                .iter()
                .filter(|&&b| b & 0xC0 != 0x80)
                .count();
            let item = (start, body_end, end, chars);
            start = end + 1;
            Some(item)
        })
    };
    let widest = lines().map(|(_, _, _, chars)| chars).max().unwrap_or(0);
    if widest < MIN_WRAP_COLUMNS {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut it = lines().peekable();
    while let Some((start, body_end, _, chars)) = it.next() {
        let Some(&(next_start, next_end, _, _)) = it.peek() else {
            break;
        };
        // The next line's text starts after its logger's prefix, if it has one.
        let next_start = next_start + line_prefix_skip(bytes, next_start, &prefix_at);
        if chars == widest
            && cut_inside_a_word(
                &bytes[start..body_end],
                &bytes[next_start.min(next_end)..next_end],
            )
        {
            out.push(body_end);
        }
    }
    out
}

/// Whether `word` (lower case) is one the readers know: one of `MESSAGE_WORDS`, a word that
/// labels a figure or names a runtime or a memory space, or a word of an anchor phrase of any
/// reader or of a phrase the unrecognized lines are found by
/// (`unable t` / `o allocate`, `cac` / `he blocks`, `Hardware li` / `mitation`).
fn is_message_word(word: &str) -> bool {
    static WORDS: OnceLock<HashSet<String>> = OnceLock::new();
    WORDS
        .get_or_init(|| {
            let phrases = super::scan::anchor_phrases()
                .into_iter()
                .chain(super::scan::SUSPECT_PHRASES.iter().copied())
                .chain(super::figures::label_words())
                .chain(super::generic::vocabulary_words())
                .chain(MESSAGE_WORDS.iter().copied());
            let mut words = HashSet::new();
            for p in phrases {
                let p = p.to_ascii_lowercase();
                for w in p.split(|c: char| !c.is_ascii_alphabetic()) {
                    if w.len() >= 2 {
                        words.insert(w.to_string());
                    }
                }
            }
            words
        })
        .contains(word)
}

/// Whether the end of `line` and the start of `next` are the halves of one number or of one
/// word the readers know (`is_message_word`).
fn cut_inside_a_word(line: &[u8], next: &[u8]) -> bool {
    let numeric = |b: &u8| b.is_ascii_digit() || *b == b'.';
    let tail_len = line.iter().rev().take_while(|b| numeric(b)).count();
    let head_len = next.iter().take_while(|b| numeric(b)).count();
    if tail_len > 0 && head_len > 0 {
        let tail = &line[line.len() - tail_len..];
        let head = &next[..head_len];
        let dots = tail.iter().chain(head).filter(|&&b| b == b'.').count();
        // A number goes on to a space, its unit or the end of its clause, not to a date's
        // or a time's separator (the next line's timestamp).
        let after = next.get(head_len).copied();
        if matches!(after, Some(b'-' | b':' | b'/' | b'_')) {
            return false;
        }
        let digits_each_side =
            tail.iter().any(u8::is_ascii_digit) && head.iter().any(u8::is_ascii_digit);
        return dots <= 1 && digits_each_side;
    }
    let tail_len = line
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_alphabetic())
        .count();
    let head_len = next.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    if tail_len == 0 || head_len == 0 {
        return false;
    }
    let (tail, head) = (&line[line.len() - tail_len..], &next[..head_len]);
    let known = |tail: &[u8], head: &[u8]| {
        let word: String = tail
            .iter()
            .chain(head)
            .map(|b| b.to_ascii_lowercase() as char)
            .collect();
        word.len() <= 16 && is_message_word(&word)
    };
    // The run of letters, or the word of a name written in camel case the cut fell in
    // (`OutOfMem` / `oryError`: `Memory`).
    let camel_tail = tail.len() - tail.iter().rposition(u8::is_ascii_uppercase).unwrap_or(0);
    let camel_head = head
        .iter()
        .position(u8::is_ascii_uppercase)
        .filter(|&k| k > 0)
        .unwrap_or(head.len());
    known(tail, head) || known(&tail[tail.len() - camel_tail..], &head[..camel_head])
}

/// A pair of input offsets: a line's start and its prefix's length, or a JSON value's end and
/// its line's.
type Span = (usize, usize);

/// The longest line prefix taken for a logger's.
const MAX_PREFIX_BYTES: usize = 200;

/// The most words a logger's field is taken to have (syslog's `Mar  4 05:06:07 HOST prog[42]:`).
const MAX_FIELD_WORDS: usize = 6;

/// Where the fields a line may start with end (relative to `line`): after a `]`, `)`, `:` or
/// `-` followed by a space or a tab (a prefix is followed by the line's text).
fn field_ends(line: &[u8]) -> Vec<usize> {
    (1..=line.len().min(MAX_PREFIX_BYTES))
        .filter(|&p| {
            matches!(line[p - 1], b']' | b')' | b':' | b'-')
                && matches!(line.get(p), Some(b' ' | b'\t'))
        })
        .collect()
}

/// Whether `field` (the first of a line when `first`, else one after another, from its space)
/// can be a logger's: a timestamp, a level, a rank, a pid, a host and program, a source line
/// (`2025-03-04 05:06:07,890 -`, ` ERROR -`, `[rank3]:`, `(Worker pid=42)`, `main.cc:88]`).
/// Not a message's own words: no out-of-memory wording, no label before its colon (`Size:`,
/// `InUse:`), no word and its number (`Error Code 2:`, `Bin (256):`), and the first field
/// starts at the line's first column and carries a digit, as a logger's time or rank does (a
/// table row's `|` and an indented `File "…"` line are not prefixes).
fn is_log_field(field: &[u8], first: bool) -> bool {
    let body = if first {
        if !(field[0].is_ascii_alphanumeric() || matches!(field[0], b'[' | b'(')) {
            return false;
        }
        field
    } else {
        match field {
            [b' ', b, ..] if !b.is_ascii_whitespace() => &field[1..],
            _ => return false,
        }
    };
    // A logger writes its prefix in ASCII, in a few words.
    if !body
        .iter()
        .all(|b| b.is_ascii_graphic() || matches!(b, b' ' | b'\t'))
    {
        return false;
    }
    let digit = body.iter().any(u8::is_ascii_digit);
    // The field without its separator: one word (a logger's name, a level) or several.
    let core_len = body.len()
        - body
            .iter()
            .rev()
            .take_while(|b| matches!(b, b' ' | b'\t' | b']' | b')' | b':' | b'-'))
            .count();
    let one_token = !body[..core_len].iter().any(|b| matches!(b, b' ' | b'\t'));
    if !(digit || (one_token && !first)) {
        return false;
    }
    if let [.., before, b':'] = body
        && !(before.is_ascii_digit() || matches!(before, b']' | b')'))
    {
        return false;
    }
    let tokens: Vec<&[u8]> = body
        .split(|b| matches!(b, b' ' | b'\t'))
        .filter(|t| !t.is_empty())
        .collect();
    if tokens.len() > MAX_FIELD_WORDS {
        return false;
    }
    // A bracketed index alone (NCCL's `[0]`) names the device a message is about, and a name
    // in parentheses after a word (`Allocator (GPU_0_bfc)`) is the message's own: a logger's
    // parenthesised field is one group (`(Worker pid=42)`).
    if let Some(last) = tokens.last() {
        let bare = last.strip_suffix(b":").unwrap_or(last);
        if let [b'[', inner @ .., b']'] = bare
            && !inner.is_empty()
            && inner.iter().all(u8::is_ascii_digit)
        {
            return false;
        }
        if bare.ends_with(b")") && !matches!(tokens[0].first(), Some(b'(')) {
            return false;
        }
    }
    if let [.., word, last] = tokens[..] {
        let number = last
            .iter()
            .filter(|b| !matches!(b, b'(' | b'[' | b']' | b')' | b':' | b'-'))
            .collect::<Vec<_>>();
        if !number.is_empty()
            && number.iter().all(|b| b.is_ascii_digit())
            && word.iter().all(u8::is_ascii_alphabetic)
        {
            return false;
        }
    }
    std::str::from_utf8(field).is_ok_and(|f| !super::generic::has_wording(f))
}

/// `field` with every run of digits made one `0`: a logger's prefix keeps its shape while its
/// time, pid and line number change.
fn masked(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    for (k, &b) in field.iter().enumerate() {
        if b.is_ascii_digit() {
            if k == 0 || !field[k - 1].is_ascii_digit() {
                out.push(b'0');
            }
        } else {
            out.push(b);
        }
    }
    out
}

/// The lengths of the prefix lines `a` and `b` share as a logger's: the fields (`is_log_field`)
/// they start with, of one shape once digits are masked; 0 when none.
fn shared_prefix(a: &[u8], b: &[u8]) -> (usize, usize) {
    let (ends_a, ends_b) = (field_ends(a), field_ends(b));
    let (mut pa, mut pb) = (0, 0);
    for &na in &ends_a {
        let field = &a[pa..na];
        if !is_log_field(field, pa == 0) {
            break;
        }
        let shape = masked(field);
        let Some(&nb) = ends_b
            .iter()
            .filter(|&&nb| nb > pb)
            .take_while(|&&nb| nb - pb <= field.len() + 32)
            .find(|&&nb| masked(&b[pb..nb]) == shape)
        else {
            break;
        };
        pa = na;
        pb = nb;
    }
    (pa, pb)
}

/// `(start, length)` of the prefix each line starts with that a logger put on it and on the
/// line before or after it (`shared_prefix`), with one space or tab after it: `[rank3]: `, a
/// timestamp and a level, a Ray worker's `(Worker pid=42) `, syslog's host and program, a glog
/// header. Found on every line in one pass (at most `MAX_PREFIX_BYTES` a line read), so a long
/// log stays linear. A line's start is after its quote marker, past the first line. A JSON log
/// line's prefix is all before its text (`json_log_value`) and a logger's prefix inside it; the
/// second list holds where each such text ends and its line does, for the rest to be folded.
fn line_prefixes(bytes: &[u8]) -> (Vec<Span>, Vec<Span>) {
    // Per line: where its prefix is looked up (after its quote marker), and its text (a JSON
    // log line's value).
    let mut lines: Vec<(usize, usize, usize)> = Vec::new();
    let mut suffixes = Vec::new();
    let mut start = 0;
    while start <= bytes.len() {
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |k| start + k);
        let content = if start == 0 {
            0
        } else {
            start + quote_marker_len(bytes, start)
        }
        .min(end);
        let body_end = if end > content && bytes[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        match json_log_value(&bytes[content..body_end]) {
            Some((from, to)) => {
                lines.push((content, content + from, content + to));
                suffixes.push((content + to, body_end));
            }
            None => lines.push((content, content, end)),
        }
        start = end + 1;
    }
    let line = |k: usize| {
        let (_, s, e) = lines[k];
        &bytes[s..e]
    };
    // Per pair of neighbours: the prefix each of the two has.
    let shared: Vec<(usize, usize)> = (1..lines.len())
        .map(|k| shared_prefix(line(k - 1), line(k)))
        .collect();
    let mut out = Vec::new();
    for (k, &(key, s, e)) in lines.iter().enumerate() {
        let before = if k > 0 { shared[k - 1].1 } else { 0 };
        let after = shared.get(k).map_or(0, |p| p.0);
        let mut len = before.max(after);
        if len > 0 && s + len < e && matches!(bytes[s + len], b' ' | b'\t') {
            len += 1;
        }
        if s + len > key {
            out.push((key, s + len - key));
        }
    }
    (out, suffixes)
}

/// The log keys a structured log line carries its text in (Docker's json-file driver writes
/// `{"log":"…\n","stream":"stderr","time":"…"}`; other loggers `message` or `msg`).
const JSON_LOG_KEYS: &[&[u8]] = &[b"\"log\":\"", b"\"message\":\"", b"\"msg\":\""];

/// The text of a JSON log line (`{…, "log":"TEXT", …}`), as the span of its string's
/// characters in `line`: the line is one object and the key comes before any other string
/// value ends. Its escapes stay as written (`\n` and `\t` fold as spaces).
fn json_log_value(line: &[u8]) -> Option<(usize, usize)> {
    let trimmed = line.trim_ascii_end();
    if !(trimmed.starts_with(b"{\"") && trimmed.ends_with(b"}")) {
        return None;
    }
    let head = &line[..line.len().min(MAX_PREFIX_BYTES)];
    let from = JSON_LOG_KEYS
        .iter()
        .filter_map(|k| {
            head.windows(k.len())
                .position(|w| w == *k)
                .map(|at| at + k.len())
        })
        .min()?;
    let mut k = from;
    while k < line.len() {
        match line[k] {
            b'\\' => k += 2,
            b'"' => return Some((from, k)),
            _ => k += 1,
        }
    }
    None
}

/// What to skip at the start of the line at `start` to reach its text when it has a logger's
/// prefix: its quote marker and the prefix; 0 when it has none.
fn line_prefix_skip(bytes: &[u8], start: usize, prefix_at: impl Fn(usize) -> usize) -> usize {
    let quote = quote_marker_len(bytes, start);
    match prefix_at(start + quote) {
        0 => 0,
        n => quote + n,
    }
}

/// `\n`, `\r` or `\t` written as two characters (a quoted or debug-printed string).
fn is_escaped_space(bytes: &[u8], i: usize) -> bool {
    bytes[i] == b'\\' && matches!(bytes.get(i + 1), Some(b'n' | b'r' | b't'))
}

impl Shadow {
    pub fn new(input: &str) -> Shadow {
        let bytes = input.as_bytes();
        let mut text = Vec::with_capacity(bytes.len());
        let mut breaks = Vec::new();
        let mut line_ends = Vec::new();
        let mut substitutes = Vec::new();
        let (prefixes, suffixes) = line_prefixes(bytes);
        // Where a JSON log line's value ends, the rest of its line is folded.
        let suffix_at = |i: usize| {
            suffixes
                .binary_search_by_key(&i, |&(s, _)| s)
                .ok()
                .map(|k| suffixes[k].1)
        };
        let prefix_at = |i: usize| {
            prefixes
                .binary_search_by_key(&i, |&(s, _)| s)
                .map_or(0, |k| prefixes[k].1)
        };
        let soft_wraps = soft_wrap_breaks(bytes, prefix_at);
        let is_soft_wrap = |i: usize| soft_wraps.binary_search(&i).is_ok();
        // The first line's logger prefix is nothing.
        let mut i = prefix_at(0);
        if i > 0 {
            breaks.push((0, i));
        }
        while i < bytes.len() {
            let b = bytes[i];
            let entity = match b {
                b'&' => html_entity(bytes, i),
                0xEF => full_width(bytes, i),
                _ => None,
            };
            if let Some((len, stands_for)) = entity {
                text.push(stands_for);
                i += len;
                substitutes.push((text.len() - 1, i));
                breaks.push((text.len(), i));
                continue;
            }
            let special = is_space(b)
                || (b == b'"' && suffix_at(i).is_some())
                || b == 0x1b
                || b == b'^'
                || b == b'\\'
                || (b >= 0xC2 && unicode_space(bytes, i).is_some());
            if !special {
                text.push(b);
                i += 1;
                continue;
            }
            // A run of whitespace and escapes: one space if it held any whitespace.
            let run_start = i;
            let mut spaced = false;
            let mut line_end = false;
            loop {
                if i >= bytes.len() {
                    break;
                }
                if is_soft_wrap(i) {
                    // A terminal's cut: the line goes on, with nothing between (nor the next
                    // line's logger prefix).
                    i += if bytes[i] == b'\r' { 2 } else { 1 };
                    i += line_prefix_skip(bytes, i, prefix_at);
                } else if bytes[i] == b'\n' {
                    spaced = true;
                    line_end = true;
                    i += 1 + quote_marker_len(bytes, i + 1);
                    // A logger's prefix repeated on the lines is folded like whitespace.
                    i += prefix_at(i);
                } else if is_space(bytes[i]) {
                    spaced = true;
                    i += 1;
                } else if let Some(end) = suffix_at(i).filter(|&end| end > i) {
                    // The rest of a JSON log line after its text.
                    i = end;
                } else if is_escaped_space(bytes, i) {
                    spaced = true;
                    i += 2;
                } else if let Some((n, kind)) = unicode_space(bytes, i) {
                    match kind {
                        Unicode::Space => spaced = true,
                        Unicode::LineBreak => {
                            spaced = true;
                            line_end = true;
                        }
                        Unicode::Invisible => {}
                    }
                    i += n;
                } else if is_markdown_escape(bytes, i) {
                    i += 1;
                    // The escaped byte is the text's own: the run ends before it.
                    break;
                } else {
                    let n = escape_len(bytes, i);
                    if n == 0 {
                        break;
                    }
                    i += n;
                }
            }
            if i == run_start {
                // A `^` or `\` that starts nothing: an ordinary byte.
                text.push(b);
                i += 1;
                continue;
            }
            if spaced {
                if line_end {
                    line_ends.push(text.len());
                }
                text.push(b' ');
            }
            let consumed = i - run_start;
            let emitted = usize::from(spaced);
            if consumed != emitted {
                breaks.push((text.len(), i));
            }
        }
        Shadow {
            // Only whole ASCII bytes were dropped or replaced by ASCII (an entity's bytes, or a
            // full-width character's, by the one it stands for): still UTF-8.
            text: String::from_utf8(text).unwrap_or_default(),
            line_ends,
            breaks,
            substitutes,
        }
    }

    /// The input offset of shadow byte `at` (for `at` past the end: the input's end).
    pub fn to_input(&self, at: usize) -> usize {
        let k = self.breaks.partition_point(|&(s, _)| s <= at);
        match k {
            0 => at,
            _ => {
                let (s, o) = self.breaks[k - 1];
                o + (at - s)
            }
        }
    }

    /// The input span of shadow bytes `start..end`: from the first byte's origin to just past
    /// the last byte's, so folded whitespace after a message is not part of it.
    pub fn span_to_input(&self, start: usize, end: usize) -> (usize, usize) {
        if end <= start {
            let s = self.to_input(start);
            return (s, s);
        }
        let last = end - 1;
        let end = match self.substitutes.binary_search_by_key(&last, |&(at, _)| at) {
            Ok(k) => self.substitutes[k].1,
            Err(_) => self.to_input(last) + 1,
        };
        (self.to_input(start), end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_indents_and_colours_fold_to_one_space() {
        let input = "Out \nof   memory\r\n\t\x1b[31mwhile\x1b[0m trying\\nto";
        let s = Shadow::new(input);
        assert_eq!(s.text, "Out of memory while trying to");
        // "while" starts after the colour code in the input.
        let at = s.text.find("while").unwrap();
        assert_eq!(&input[s.to_input(at)..s.to_input(at) + 5], "while");
        let (a, b) = s.span_to_input(0, s.text.len());
        assert_eq!(&input[a..b], input);
    }

    #[test]
    fn colour_codes_inside_a_word_leave_no_space() {
        let s = Shadow::new("GPU_0_\x1b[31mbfc and ^[[0;36mvllm^[[0m x^y a\\b");
        assert_eq!(s.text, "GPU_0_bfc and vllm x^y a\\b");
    }

    #[test]
    fn quote_markers_at_line_starts_are_folded() {
        let s = Shadow::new("> a\n> > b\n>c\nd > e");
        assert_eq!(s.text, "> a b c d > e");
    }

    #[test]
    fn unicode_spaces_are_spaces_and_invisible_characters_nothing() {
        let input = "CUDA\u{a0}out of\u{202f}memory.\u{3000}Tried to allo\u{200b}cate 2.00\u{2007}MiB\u{2028}\u{feff}next";
        let s = Shadow::new(input);
        assert_eq!(
            s.text,
            "CUDA out of memory. Tried to allocate 2.00 MiB next"
        );
        assert_eq!(s.line_ends, vec![46]);
        let at = s.text.find("MiB").unwrap();
        assert_eq!(&input[s.to_input(at)..s.to_input(at) + 3], "MiB");
        let (a, b) = s.span_to_input(0, s.text.len());
        assert_eq!(&input[a..b], input);
        // Other characters of the same lead bytes stay.
        assert_eq!(
            Shadow::new("a\u{a9}b \u{2013} \u{3001}").text,
            "a\u{a9}b \u{2013} \u{3001}"
        );
    }

    #[test]
    fn lines_a_terminal_cut_at_its_width_are_joined() {
        // Cut at 40 columns: after "Tried" (the space on the next line), inside "total".
        let message = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)";
        let chars: Vec<char> = message.chars().collect();
        let wrapped: Vec<String> = chars.chunks(40).map(|c| c.iter().collect()).collect();
        assert_eq!(wrapped[1], "to allocate 20.00 MiB (GPU 0; 7.79 GiB t");
        for end in ["\n", "\r\n"] {
            let s = Shadow::new(&wrapped.join(end));
            assert_eq!(s.text, message, "{end:?}");
            let (a, b) = s.span_to_input(0, s.text.len());
            assert_eq!(b - a, wrapped.join(end).len());
        }
        // Only the first line is of the widest width: only its cut is joined.
        let cut = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.7\n9 GiB total capa\ncity; 5.2 GiB already alloc\nated)";
        assert_eq!(
            Shadow::new(cut).text,
            "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capa city; 5.2 GiB already alloc ated)"
        );
        // A wrapper's break between two words of a full line stays a space.
        let words = format!(
            "{}\ncapacity; 4.35 GiB already allocated",
            "x".repeat(36) + " total"
        );
        assert!(Shadow::new(&words).text.contains("total capacity"));
        // Numbers cut: joined only as one number.
        let line = "a".repeat(37) + " 21.9";
        assert!(
            Shadow::new(&format!("{line}\n5 GiB free"))
                .text
                .ends_with("21.95 GiB free")
        );
        assert!(
            Shadow::new(&format!("{line}\n5.0 GiB"))
                .text
                .ends_with("21.9 5.0 GiB")
        );
        // A line that ends in a number before a line that starts with a date or a time.
        let log = "a".repeat(37) + " 1279";
        assert!(
            Shadow::new(&format!("{log}\n2024-01-01 12:00"))
                .text
                .ends_with("1279 2024-01-01 12:00")
        );
        assert!(
            Shadow::new(&format!("{log}\n12:00:01 next"))
                .text
                .ends_with("1279 12:00:01 next")
        );
        // Lines shorter than a terminal are as written.
        assert_eq!(Shadow::new("alloc\nated").text, "alloc ated");
    }

    #[test]
    fn a_word_of_any_reader_cut_at_a_terminal_s_width_is_joined() {
        let cut_at = |message: &str, width: usize| {
            let chars: Vec<char> = message.chars().collect();
            chars
                .chunks(width)
                .map(|c| c.iter().collect::<String>())
                .collect::<Vec<_>>()
                .join("\n")
        };
        for (message, width) in [
            // Anchor phrases' words: "unable to allocate", "cache blocks", "limitation".
            (
                "Error: llama runner process has terminated: error loading model: unable to allocate backend buffer",
                81,
            ),
            ("ValueError: No available memory for the cache blocks.", 43),
            (
                "out of resource: shared memory, Required: 163842, Hardware limitation: 101376.",
                62,
            ),
            (
                "RuntimeError while loading: torch.OutOfMemoryError: CUDA out of memory.",
                42,
            ),
        ] {
            let wrapped = cut_at(message, width);
            assert!(wrapped.lines().count() > 1);
            assert_eq!(Shadow::new(&wrapped).text, message, "{wrapped:?}");
        }
        // Halves that make no word the readers know stay apart.
        let line = "a".repeat(40) + " xyl";
        assert!(
            Shadow::new(&format!("{line}\nophone"))
                .text
                .ends_with("xyl ophone")
        );
        assert!(is_message_word("allocate") && is_message_word("limitation"));
        // The words the reader by principle names runtimes and memory spaces by.
        assert!(is_message_word("tensorview") && is_message_word("hbm"));
        let line = "a".repeat(40) + " Ran out of memory in memory space h";
        assert!(
            Shadow::new(&format!("{line}\nbm. Used"))
                .text
                .ends_with("space hbm. Used")
        );
        assert!(!is_message_word("xylophone"));
    }

    #[test]
    fn a_container_s_json_log_lines_read_as_their_text() {
        let plain =
            "CUDA out of memory. Tried to allocate 2.00 MiB\n  File \"a.py\", line 3\nInUse: 1234";
        let docker: Vec<String> = plain
            .lines()
            .enumerate()
            .map(|(k, l)| {
                format!(
                    "{{\"log\":\"{}\\n\",\"stream\":\"stderr\",\"time\":\"2025-03-04T05:06:0{k}.89Z\"}}",
                    l.replace('"', "\\\"")
                )
            })
            .collect();
        let input = docker.join("\n");
        let s = Shadow::new(&input);
        assert_eq!(
            s.text.trim_end(),
            "CUDA out of memory. Tried to allocate 2.00 MiB File \\\"a.py\\\", line 3 InUse: 1234",
            "{input}"
        );
        assert_eq!(s.line_ends.len(), 2);
        let at = s.text.find("InUse").unwrap();
        assert_eq!(&input[s.to_input(at)..s.to_input(at) + 5], "InUse");
        // Another key, first or not, and a logger's prefix inside the text.
        let input = "{\"time\":\"05:06:07\",\"message\":\"[rank1]: Stats:\"}\n{\"time\":\"05:06:08\",\"message\":\"[rank1]: Limit: 0\"}";
        assert_eq!(Shadow::new(input).text, "Stats: Limit: 0");
        // A JSON line with no log text, or not one object, is as written.
        for input in [
            "{\"level\":\"error\",\"code\":2}",
            "{\"log\":\"unterminated}",
            "x {\"log\":\"a\"}",
        ] {
            assert_eq!(Shadow::new(input).text, input);
        }
    }

    #[test]
    fn a_logger_s_prefix_on_every_line_is_folded() {
        let lines = ["Stats: Limit: 0", "InUse:     1234", "", "  Total: 8 GiB"];
        let plain = Shadow::new(&lines.join("\n"));
        assert_eq!(plain.text, "Stats: Limit: 0 InUse: 1234 Total: 8 GiB");
        let prefixes: [fn(usize) -> String; 7] = [
            |k| format!("2025-03-04 05:06:{:02},890 - trainer - ERROR - ", 7 + k),
            |_| "[rank3]: ".to_string(),
            |k| {
                format!(
                    "E0304 05:06:07.{}  4242 main.cc:{}] ",
                    890123 + k * 97,
                    88 + k
                )
            },
            |_| "(RayWorkerWrapper pid=4242, ip=10.0.0.7) ".to_string(),
            |_| "12: ".to_string(),
            |k| format!("Mar  4 05:06:{:02} HOST python3[4242]: ", 7 + k),
            |k| format!("[2025-03-04T05:06:{:02}.890Z] ", 7 + k),
        ];
        for prefix in prefixes {
            let input: Vec<String> = lines
                .iter()
                .enumerate()
                .map(|(k, l)| format!("{}{l}", prefix(k)))
                .collect();
            let input = input.join("\n");
            let s = Shadow::new(&input);
            assert_eq!(s.text.trim_start(), plain.text, "{input:?}");
            assert_eq!(s.line_ends.len(), plain.line_ends.len(), "{input:?}");
            // The words map back to the input's own.
            let at = s.text.find("InUse").unwrap();
            assert_eq!(&input[s.to_input(at)..s.to_input(at) + 5], "InUse");
            // Quoted, with CRLF line ends.
            let quoted = format!("> {}", input.replace('\n', "\r\n> "));
            assert!(
                Shadow::new(&quoted)
                    .text
                    .ends_with("Limit: 0 InUse: 1234 Total: 8 GiB"),
                "{quoted:?}"
            );
        }
        // A terminal's cut inside a word is joined across the next line's prefix.
        let cut = format!(
            "[rank3]: {} is reserv\n[rank3]: ed by PyTorch",
            "x".repeat(40)
        );
        assert!(Shadow::new(&cut).text.ends_with("is reserved by PyTorch"));
    }

    #[test]
    fn a_message_s_own_repeated_line_starts_are_kept() {
        for input in [
            // Table rows, traceback lines, indented figures: no logger's first column.
            "|   0  NVIDIA A100  |  1024MiB / 40960MiB |\n|   1  NVIDIA A100  |  2048MiB / 40960MiB |",
            "  File \"a.py\", line 3, in f\n  File \"b.py\", line 9, in g",
            "  1. Size: 1.00G\n  2. Size: 2.00G",
            // A label before its colon, a word and its number, a name in parentheses.
            "Bin (256): Total Chunks: 1\nBin (512): Total Chunks: 2",
            "12 Error Code 2: OutOfMemory\n13 Error Code 2: OutOfMemory",
            // NCCL's device index.
            "HOST:1:2 [0] alloc.h:178 NCCL WARN a\nHOST:1:2 [0] alloc.h:185 NCCL WARN b",
            // An out-of-memory wording, however it repeats.
            "12 failed to allocate x2] a\n13 failed to allocate x2] b",
            // Words run together by non-breaking spaces are not a logger's few.
            "2019-01-08\u{a0}19:06:11:\u{a0}E\u{a0}x.cc:601] a\n2019-01-08\u{a0}19:06:11:\u{a0}E\u{a0}x.cc:601] b",
        ] {
            let folded = input.split_whitespace().collect::<Vec<_>>().join(" ");
            assert_eq!(Shadow::new(input).text.trim_start(), folded, "{input:?}");
        }
        // A prefix on one line only is the line's text.
        let one = "[rank3]: Stats: Limit: 0\nInUse: 1234";
        assert_eq!(
            Shadow::new(one).text,
            "[rank3]: Stats: Limit: 0 InUse: 1234"
        );
        // The kept part after the shared fields.
        assert_eq!(
            Shadow::new("2024-01-01 12:00:01: W bfc.cc:246] Allocator (GPU_0_bfc) ran out\n2024-01-01 12:00:02: W bfc.cc:246] Allocator (GPU_0_bfc) ran out").text,
            "Allocator (GPU_0_bfc) ran out Allocator (GPU_0_bfc) ran out"
        );
        assert_eq!(
            Shadow::new("[rank0]: Bin (256): a\n[rank0]: Bin (512): b").text,
            "Bin (256): a Bin (512): b"
        );
    }

    #[test]
    fn plain_text_needs_no_map() {
        let s = Shadow::new("CUDA out of memory. Tried to allocate 2.00 MiB\nnext line");
        assert!(s.breaks.is_empty());
        assert_eq!(s.to_input(20), 20);
        let s = Shadow::new("é\x1b");
        assert_eq!(s.text, "é");
        assert_eq!(Shadow::new("\x1bé").text, "é");
    }
}
