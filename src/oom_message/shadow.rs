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
    "workspace",
];

/// Input offsets of the line breaks a terminal put in when it cut a line at its width W: a
/// line of W characters (the text's widest, at least `MIN_WRAP_COLUMNS`) whose last word and
/// the next line's first are the halves of one number (`…of which 21.9` / `5 GiB`) or of one
/// word of the messages (`alloc` / `ated`, `Mi` / `B`). A wrapper that breaks at spaces never
/// cuts a word, and its lines' edges make no such word. Each offset is that of the line's
/// terminator (its `\r` when the line ends in CRLF).
fn soft_wrap_breaks(bytes: &[u8]) -> Vec<usize> {
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
        if chars == widest
            && cut_inside_a_word(&bytes[start..body_end], &bytes[next_start..next_end])
        {
            out.push(body_end);
        }
    }
    out
}

/// Whether the end of `line` and the start of `next` are the halves of one number or of one of
/// `MESSAGE_WORDS`.
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
    if tail_len == 0 || head_len == 0 || tail_len + head_len > 16 {
        return false;
    }
    let word: String = line[line.len() - tail_len..]
        .iter()
        .chain(&next[..head_len])
        .map(|b| b.to_ascii_lowercase() as char)
        .collect();
    MESSAGE_WORDS.contains(&word.as_str())
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
        let soft_wraps = soft_wrap_breaks(bytes);
        let is_soft_wrap = |i: usize| soft_wraps.binary_search(&i).is_ok();
        let mut i = 0;
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
                    // A terminal's cut: the line goes on, with nothing between.
                    i += if bytes[i] == b'\r' { 2 } else { 1 };
                } else if bytes[i] == b'\n' {
                    spaced = true;
                    line_end = true;
                    i += 1 + quote_marker_len(bytes, i + 1);
                } else if is_space(bytes[i]) {
                    spaced = true;
                    i += 1;
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
    fn plain_text_needs_no_map() {
        let s = Shadow::new("CUDA out of memory. Tried to allocate 2.00 MiB\nnext line");
        assert!(s.breaks.is_empty());
        assert_eq!(s.to_input(20), 20);
        let s = Shadow::new("é\x1b");
        assert_eq!(s.text, "é");
        assert_eq!(Shadow::new("\x1bé").text, "é");
    }
}
