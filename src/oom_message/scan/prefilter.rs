//! The fast path over a large text: one case-insensitive multi-pattern search (aho-corasick,
//! SIMD-accelerated) over the raw bytes for the words that every anchor phrase and every
//! suspect phrase contains; the readers then run only on windows of lines around those words.
//! A log of ordinary lines with a message every few megabytes is mostly skipped at the
//! search's speed; what the readers see around a word is what they would have seen in the
//! whole text (the window reaches further back than any reader looks, and a message that
//! reaches the window's end is read again in a longer one).

use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::super::{OomMessage, Unrecognized};
use super::stream::rebase;
use super::{find_all, suspicious_lines};

/// Words of which every anchor phrase (as its reader matches it) and every suspect phrase (in
/// lower case, upper case, capitalized or title case) contains at least one, unbroken by the
/// folding of whitespace; a test checks it. Each is searched in lower case, capitalized and
/// upper case: a search that ignored case entirely could not skip ahead on rare bytes, and
/// would run ten times slower.
pub(super) const WORDS: &[&str] = &[
    "memory",
    "alloc",
    "exhausted",
    "ggml",
    "vram",
    "cuda failure",
    "failed call",
    "runtime error",
    "max seq len",
    "serve at least",
    "resource",
];

/// Searched as written, besides the three forms of each word.
pub(super) const EXACT: &[&str] = &[
    "OOM",
    "THCudaCheck",
    "hipError_t(1002)",
    "with error 2",
    // TensorFlow's BFC dump, which only a failed allocation prints.
    "Sum Total of in-use",
    // A CUDA status named by its type and its number (`CUresult … 2`).
    "CUresult",
    "cudaError",
    "CUDA error",
    "CUDA Error",
    "cuda error",
    "CUDA failure",
    "HIP error",
    "hipError",
    "cudaMalloc",
    "cuMemAlloc",
    "cuMemCreate",
    "hipMalloc",
];

/// Every form searched.
pub(super) fn forms() -> Vec<String> {
    let mut out: Vec<String> = EXACT.iter().map(|s| s.to_string()).collect();
    // The translated wordings' words, in every case form.
    out.extend(super::super::generic::unicode_forms(
        super::super::generic::TRANSLATED_KEYS,
    ));
    for w in WORDS {
        let mut cap = w.to_string();
        cap[..1].make_ascii_uppercase();
        out.extend([w.to_string(), cap, w.to_ascii_uppercase()]);
    }
    out
}

/// How far before a word its window starts: more than a reader looks back on its line
/// (`LOOK_BACK`) and than a traceback is searched for a context call (`CONTEXT_REACH`).
const BEFORE_BYTES: usize = 4 << 10;

/// How far after a word its window first ends.
const AFTER_BYTES: usize = 16 << 10;

/// A message ending this close to its window's end may go on: its window is read again,
/// reaching `LONG_AFTER_BYTES` (more than any message spans) past the word.
const END_MARGIN_BYTES: usize = 4 << 10;
const LONG_AFTER_BYTES: usize = 256 << 10;

fn search() -> &'static AhoCorasick {
    static SEARCH: OnceLock<AhoCorasick> = OnceLock::new();
    SEARCH.get_or_init(|| {
        AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostFirst)
            .build(forms())
            .expect("the prefilter words build an automaton")
    })
}

/// Offsets of the words in `text`, in order.
fn hits(text: &str) -> impl Iterator<Item = usize> + '_ {
    search().find_iter(text.as_bytes()).map(|m| m.start())
}

fn line_start(text: &str, at: usize) -> usize {
    memchr::memrchr(b'\n', &text.as_bytes()[..at]).map_or(0, |i| i + 1)
}

fn line_end(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    memchr::memchr(b'\n', &text.as_bytes()[at..]).map_or(text.len(), |i| at + i + 1)
}

fn newlines(bytes: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', bytes).count()
}

/// Every message and unrecognized line of `text`, as `find_all` and `suspicious_lines` over
/// the whole text would give them.
pub(crate) fn scan(text: &str) -> (Vec<OomMessage>, Vec<Unrecognized>) {
    let mut hits = hits(text).peekable();
    let mut messages = Vec::new();
    let mut unrecognized = Vec::new();
    // Stream position: the byte and 1-based line reached so far.
    let (mut at, mut line) = (0usize, 1usize);
    while let Some(first) = hits.next() {
        let start = line_start(text, first.saturating_sub(BEFORE_BYTES)).max(at);
        let mut end = line_end(text, first + AFTER_BYTES);
        // Later words whose windows would overlap join this one.
        while let Some(&h) = hits.peek() {
            if h.saturating_sub(BEFORE_BYTES) > end {
                break;
            }
            // `end` is a line's end: a word whose reach stops before it cannot move it, and
            // skipping the search then keeps a line of a million words linear.
            if h + AFTER_BYTES >= end {
                end = line_end(text, h + AFTER_BYTES);
            }
            hits.next();
        }
        let mut found = find_all(&text[start..end]);
        if end < text.len()
            && found
                .last()
                .is_some_and(|m| m.span.end_byte + END_MARGIN_BYTES > end - start)
        {
            let last_start = start + found.last().map_or(0, |m| m.span.start_byte);
            end = end.max(line_end(text, last_start + LONG_AFTER_BYTES));
            while hits.peek().is_some_and(|&h| h < end) {
                hits.next();
            }
            found = find_all(&text[start..end]);
        }
        let window = &text[start..end];
        let lines = suspicious_lines(window, &found);
        line += newlines(&text.as_bytes()[at..start]);
        for mut m in found {
            rebase(&mut m, start, line);
            messages.push(m);
        }
        unrecognized.extend(lines.into_iter().map(|mut u| {
            u.line += line - 1;
            u
        }));
        line += newlines(window.as_bytes());
        at = end;
    }
    (messages, unrecognized)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_anchor_and_suspect_phrase_holds_a_prefilter_word() {
        let forms = forms();
        let held = |p: &str| forms.iter().any(|w| p.contains(w.as_str()));
        for p in super::super::anchor_phrases().into_iter().chain(["OOM"]) {
            assert!(held(p), "{p:?} holds none of the prefilter words");
        }
        for p in super::super::SUSPECT_PHRASES {
            let title: Vec<String> = p
                .split(' ')
                .map(|w| {
                    let mut w = w.to_string();
                    if let Some(c) = w.get_mut(..1) {
                        c.make_ascii_uppercase();
                    }
                    w
                })
                .collect();
            let mut cap = p.to_string();
            cap[..1].make_ascii_uppercase();
            for form in [p.to_string(), p.to_ascii_uppercase(), cap, title.join(" ")] {
                assert!(held(&form), "{form:?} holds none of the prefilter words");
            }
        }
    }

    #[test]
    fn windows_find_what_the_whole_text_holds() {
        let filler = "step 1200 loss 0.25 lr 1e-4 tokens/s 10400\n".repeat(3000);
        let mut text = String::new();
        for (i, m) in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 \
             has a total capacity of 79.19 GiB of which 6.00 MiB is free.",
            "Killed: OOM in step 3",
            "RuntimeError: CUDA error: out of memory",
            "2024-01-01 W tensorflow] Allocator (GPU_0_bfc) ran out of memory trying to \
             allocate 1.00GiB (rounded to 1073741824).",
        ]
        .iter()
        .enumerate()
        {
            text.push_str(&filler[..(i + 1) * 9000]);
            text.push_str(m);
            text.push('\n');
        }
        text.push_str(&filler);
        let whole = find_all(&text);
        let whole_lines = suspicious_lines(&text, &whole);
        let (found, lines) = scan(&text);
        assert_eq!(found, whole);
        assert_eq!(lines, whole_lines);
        assert_eq!(found.len(), 3);
        assert_eq!(lines.len(), 1);
        assert!(scan(&filler).0.is_empty());
    }
}
