//! Running every format reader over a text, keeping the most specific reading of each span,
//! numbering lines; the line-by-line scanner; and the lines that look like an unknown format.

use std::collections::BTreeMap;

use super::{Detail, OomMessage, Span, Unrecognized, driver, nccl, pytorch, vllm, xla};

/// A reader's find, before line numbers are known.
#[derive(Debug, Clone)]
pub(super) struct Found {
    pub start: usize,
    pub end: usize,
    pub raised_as: Option<String>,
    pub detail: Detail,
}

type Reader = fn(&str, &mut Vec<Found>);

/// Most specific first: a span claimed by an earlier reader is not read again by a later one
/// (the `CUDA_ERROR_OUT_OF_MEMORY` inside a StreamExecutor line is not a second message).
const READERS: &[Reader] = &[
    pytorch::find,
    vllm::find,
    xla::find_tensorflow,
    xla::find_bfc,
    xla::find_xla,
    nccl::find,
    driver::find_stream_executor,
    driver::find,
];

pub(super) fn find_all(text: &str) -> Vec<OomMessage> {
    let mut taken: BTreeMap<usize, usize> = BTreeMap::new();
    let mut kept: Vec<Found> = Vec::new();
    let mut found = Vec::new();
    for reader in READERS {
        found.clear();
        reader(text, &mut found);
        for f in found.drain(..) {
            let overlaps_before = taken
                .range(..=f.start)
                .next_back()
                .is_some_and(|(_, &end)| end > f.start);
            let overlaps_after = taken
                .range(f.start..f.end.max(f.start + 1))
                .next()
                .is_some();
            if f.end <= f.start || overlaps_before || overlaps_after {
                continue;
            }
            taken.insert(f.start, f.end);
            kept.push(f);
        }
    }
    kept.sort_by_key(|f| f.start);
    number_lines(text, kept)
}

fn number_lines(text: &str, kept: Vec<Found>) -> Vec<OomMessage> {
    let bytes = text.as_bytes();
    let (mut line, mut at) = (1usize, 0usize);
    kept.into_iter()
        .map(|f| {
            line += bytes[at..f.start].iter().filter(|&&b| b == b'\n').count();
            at = f.start;
            let mut detail = f.detail;
            if let Detail::TfBfcAllocator {
                stats: Some(stats), ..
            } = &mut detail
            {
                let between = &bytes[f.start..stats.offset.max(f.start)];
                stats.line = line + between.iter().filter(|&&b| b == b'\n').count();
            }
            OomMessage {
                span: Span {
                    start_byte: f.start,
                    end_byte: f.end,
                    line,
                },
                text: text[f.start..f.end].to_string(),
                raised_as: f.raised_as,
                detail,
            }
        })
        .collect()
}

/// The exception or logger name printed right before `start` on its line, as in
/// `torch.OutOfMemoryError: CUDA out of memory…` or `ValueError: No available memory…`.
pub(super) fn raised_as(text: &str, start: usize) -> Option<String> {
    let from = super::cursor::floor_boundary(text, start.saturating_sub(LOOK_BACK));
    let before = text[from..start].strip_suffix(": ")?;
    let token_start = before
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let token = &before[token_start..];
    let named = token.ends_with("Error") || token.ends_with("Exception");
    (named && token.len() <= 80).then(|| token.to_string())
}

/// How far back a reader looks for the start of a message's line: a bound, so a huge
/// single-line input with many anchors stays linear.
const LOOK_BACK: usize = 256;

/// The start of the line holding byte `at`, or `at − LOOK_BACK` if the line began earlier.
pub(super) fn line_start(text: &str, at: usize) -> usize {
    let from = super::cursor::floor_boundary(text, at.saturating_sub(LOOK_BACK));
    text[from..at].rfind('\n').map_or(from, |i| from + i + 1)
}

/// Lines longer than this are shown cut, with an ellipsis.
const SHOWN_LINE_CHARS: usize = 400;

const SUSPECT_WORDS: &[&str] = &[
    "out of memory",
    "outofmemory",
    "out_of_memory",
    "resource_exhausted",
    "resource exhausted",
    "alloc_failed",
    "memoryallocation",
    "not enough memory",
];

fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    h.len() >= n.len() && h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

/// `OOM` as a word (not inside `ROOM` or `oomph`).
fn has_oom_word(line: &str) -> bool {
    line.match_indices("OOM").any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + 3..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric()) && !after.is_some_and(|c| c.is_alphanumeric())
    })
}

pub(super) fn suspicious_lines(text: &str, found: &[OomMessage]) -> Vec<Unrecognized> {
    let mut out = Vec::new();
    let mut spans = found.iter().map(|m| m.span).peekable();
    let mut offset = 0;
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let (start, end) = (offset, offset + raw.len());
        offset = end;
        while spans.peek().is_some_and(|s| s.end_byte <= start) {
            spans.next();
        }
        if spans.peek().is_some_and(|s| s.start_byte < end) {
            continue;
        }
        let line = raw.trim_end_matches(['\n', '\r']);
        if SUSPECT_WORDS.iter().any(|w| contains_ignore_case(line, w)) || has_oom_word(line) {
            let shown: String = line.chars().take(SHOWN_LINE_CHARS).collect();
            let cut = shown.len() < line.len();
            out.push(Unrecognized {
                line: index + 1,
                text: if cut { format!("{shown}…") } else { shown },
            });
        }
    }
    out
}

/// Lines kept while waiting for the rest of a message: more than the longest format has.
const WINDOW_LINES: usize = 32;

/// Lines that must follow a message's first line before it is reported: more than the
/// longest message spans (the `cudaMallocAsync` table takes seven).
const HOLD_LINES: usize = 8;

/// Finds messages in text that arrives a line at a time (a child's stderr, for `watch`).
///
/// A message is reported once `HOLD_LINES` lines have followed its first one (so a wrapped
/// or multi-line message is whole), at `flush` (the caller saw the stream go quiet) or at
/// `finish`. Offsets and line numbers count from the first line pushed. The BFC statistics
/// TensorFlow prints after the allocator's message are attached only when they arrive before
/// the message is reported.
#[derive(Debug, Default)]
pub struct LineScanner {
    window: String,
    /// Byte offset and 1-based line of the window's first byte in the whole stream.
    base_byte: usize,
    base_line: usize,
    /// Start offsets (in the window) of its lines.
    line_starts: Vec<usize>,
    /// Everything before this stream offset has been reported.
    reported_until: usize,
}

impl LineScanner {
    pub fn new() -> LineScanner {
        LineScanner {
            base_line: 1,
            ..LineScanner::default()
        }
    }

    /// Takes one line (with or without its newline); returns the messages now complete.
    pub fn push_line(&mut self, line: &str) -> Vec<OomMessage> {
        self.line_starts.push(self.window.len());
        self.window.push_str(line.trim_end_matches(['\n', '\r']));
        self.window.push('\n');
        let lines = self.line_starts.len();
        let out = self.take(|m| lines.saturating_sub(m.span.line) >= HOLD_LINES);
        self.trim();
        out
    }

    /// Reports every message found so far, whole or not (the stream has gone quiet).
    pub fn flush(&mut self) -> Vec<OomMessage> {
        self.take(|_| true)
    }

    /// Reports what is left (the stream has ended).
    pub fn finish(&mut self) -> Vec<OomMessage> {
        let out = self.take(|_| true);
        self.window.clear();
        self.line_starts.clear();
        out
    }

    fn take(&mut self, complete: impl Fn(&OomMessage) -> bool) -> Vec<OomMessage> {
        let mut out = Vec::new();
        for mut m in find_all(&self.window) {
            let start = self.base_byte + m.span.start_byte;
            if start < self.reported_until || !complete(&m) {
                continue;
            }
            self.reported_until = self.base_byte + m.span.end_byte;
            m.span.start_byte = start;
            m.span.end_byte = self.reported_until;
            m.span.line += self.base_line - 1;
            if let Detail::TfBfcAllocator {
                stats: Some(stats), ..
            } = &mut m.detail
            {
                stats.line += self.base_line - 1;
            }
            out.push(m);
        }
        out
    }

    fn trim(&mut self) {
        if self.line_starts.len() <= WINDOW_LINES {
            return;
        }
        let drop_lines = self.line_starts.len() - WINDOW_LINES;
        let cut = self.line_starts[drop_lines];
        self.window.drain(..cut);
        self.line_starts.drain(..drop_lines);
        for s in &mut self.line_starts {
            *s -= cut;
        }
        self.base_byte += cut;
        self.base_line += drop_lines;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_names_before_the_message_are_kept() {
        let t = "x torch.OutOfMemoryError: CUDA";
        assert_eq!(raised_as(t, 26).as_deref(), Some("torch.OutOfMemoryError"));
        assert_eq!(raised_as("note: CUDA", 6), None);
        assert_eq!(raised_as("CUDA", 0), None);
        // Multi-byte characters right before the name or the device word (found by proptest).
        assert_eq!(raised_as("é: CUDA", 4), None);
        assert_eq!(
            raised_as("éValueError: x", 14).as_deref(),
            Some("ValueError")
        );
        let found = find_all("éCUDA out of memory. Tried to allocate 1.00 MiB");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].span.start_byte, 2);
    }

    #[test]
    fn oom_is_a_word_not_a_fragment() {
        assert!(has_oom_word("Killed: OOM in step 3"));
        assert!(!has_oom_word("ROOM 12"));
        assert!(contains_ignore_case("Ran Out Of Memory", "out of memory"));
    }
}
