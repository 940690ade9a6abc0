//! The text the readers see, and the way back to the input's offsets.
//!
//! Pasted messages are wrapped by terminals and editors, indented by log formatters, coloured
//! with ANSI escape codes (raw, or as the `^[[31m` a pager prints), written with CRLF, or
//! quoted inside a string whose line breaks are the two characters `\n`. The readers see one
//! text where every run of whitespace (and of those escapes) is a single space and colour codes
//! are gone, so a phrase matches however it was broken. Each message found is mapped back to
//! the bytes it came from, so its text and line are the input's own.

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

/// A full-width form (U+FF01–U+FF5E: `１２．５ＧｉＢ`, as CJK input methods type them) or the
/// ideographic space (U+3000): its length (3 bytes) and the ASCII byte it stands for.
fn full_width(bytes: &[u8], i: usize) -> Option<(usize, u8)> {
    let (b1, b2) = (*bytes.get(i + 1)?, *bytes.get(i + 2)?);
    let code = match bytes[i] {
        0xEF => 0xF000 | (u32::from(b1 & 0x3F) << 6) | u32::from(b2 & 0x3F),
        0xE3 if b1 == 0x80 && b2 == 0x80 => return Some((3, b' ')),
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
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            let entity = match b {
                b'&' => html_entity(bytes, i),
                0xE3 | 0xEF => full_width(bytes, i),
                _ => None,
            };
            if let Some((len, stands_for)) = entity {
                text.push(stands_for);
                i += len;
                substitutes.push((text.len() - 1, i));
                breaks.push((text.len(), i));
                continue;
            }
            let special = is_space(b) || b == 0x1b || b == b'^' || b == b'\\';
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
                if bytes[i] == b'\n' {
                    spaced = true;
                    line_end = true;
                    i += 1 + quote_marker_len(bytes, i + 1);
                } else if is_space(bytes[i]) {
                    spaced = true;
                    i += 1;
                } else if is_escaped_space(bytes, i) {
                    spaced = true;
                    i += 2;
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
    fn plain_text_needs_no_map() {
        let s = Shadow::new("CUDA out of memory. Tried to allocate 2.00 MiB\nnext line");
        assert!(s.breaks.is_empty());
        assert_eq!(s.to_input(20), 20);
        let s = Shadow::new("é\x1b");
        assert_eq!(s.text, "é");
        assert_eq!(Shadow::new("\x1bé").text, "é");
    }
}
