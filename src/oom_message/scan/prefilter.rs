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
    // A worker the kernel's out-of-memory killer ended.
    "killed by signal: Killed",
];

/// Every form searched, a phrase's also with no-break spaces.
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
    // A web page's no-break spaces between a phrase's words (`shadow` reads them as spaces).
    let spaced: Vec<String> = out
        .iter()
        .filter(|f| f.contains(' '))
        .map(|f| f.replace(' ', "\u{a0}"))
        .collect();
    out.extend(spaced);
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

/// The forms in ASCII, and those with other bytes (other scripts, accents, no-break spaces):
/// two automata, so that a log in ASCII (most are) is searched by the small one alone, at the
/// speed of a few words, and the other runs only on text that has a byte past ASCII.
fn searches() -> &'static (AhoCorasick, AhoCorasick) {
    static SEARCH: OnceLock<(AhoCorasick, AhoCorasick)> = OnceLock::new();
    SEARCH.get_or_init(|| {
        let (ascii, other): (Vec<String>, Vec<String>) =
            forms().into_iter().partition(|f| f.is_ascii());
        let build = |forms: Vec<String>| {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostFirst)
                .build(forms)
                .expect("the prefilter words build an automaton")
        };
        (build(ascii), build(other))
    })
}

/// The ASCII forms' automaton (every form a reader needs in an ASCII text).
fn search() -> &'static AhoCorasick {
    &searches().0
}

/// Offsets of the words in `text`, in order, and of those a terminal cut at a line's end
/// (`cut_hits`).
fn hits(text: &str) -> Vec<usize> {
    let (ascii, other) = searches();
    let mut out: Vec<usize> = ascii
        .find_iter(text.as_bytes())
        .map(|m| m.start())
        .collect();
    let mut merge = |more: Vec<usize>| {
        if !more.is_empty() {
            out.extend(more);
            out.sort_unstable();
            out.dedup();
        }
    };
    if !text.is_ascii() {
        merge(
            other
                .find_iter(text.as_bytes())
                .map(|m| m.start())
                .collect(),
        );
    }
    merge(cut_hits(text));
    out
}

/// Every pair of bytes next to each other in a form searched for, by `first << 8 | second`.
fn pairs() -> &'static [bool] {
    static PAIRS: OnceLock<Vec<bool>> = OnceLock::new();
    PAIRS.get_or_init(|| {
        let mut pairs = vec![false; 1 << 16];
        for f in forms() {
            for w in f.as_bytes().windows(2) {
                pairs[usize::from(w[0]) << 8 | usize::from(w[1])] = true;
            }
        }
        pairs
    })
}

/// The shortest line a terminal's cut is looked for at (its width, as `shadow` joins cuts).
const MIN_CUT_LINE: usize = 40;

/// The most letters either side of a line end looked at for a cut word.
const CUT_WORD_BYTES: usize = 16;

/// Offsets of the words a terminal cut at its width (`out of m` / `emory`, `cudaMal` / `loc`,
/// `with err` / `or 2`): at each line end between two letters, after a line of a terminal's
/// width at least, the bytes either side are joined and searched for a word across the break.
/// A few bytes a line, so a long log stays linear; the readers then see the word whole, where
/// the folding joins it back (`shadow`).
fn cut_hits(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut joined = Vec::with_capacity(2 * CUT_WORD_BYTES);
    let mut line_from = 0;
    for nl in memchr::memchr_iter(b'\n', b) {
        let end = if nl > 0 && b[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        // A cut inside a word, with letters either side, of a line as wide as a terminal.
        let letter = |k: usize| b.get(k).is_some_and(u8::is_ascii_alphabetic);
        if end == 0 || !letter(end - 1) || !letter(nl + 1) || end - line_from < MIN_CUT_LINE {
            line_from = nl + 1;
            continue;
        }
        line_from = nl + 1;
        // Only where the two letters either side of the break are next to each other in a
        // word searched for.
        if !pairs()[usize::from(b[end - 1]) << 8 | usize::from(b[nl + 1])] {
            continue;
        }
        // The line's last bytes and the next line's first, for a phrase across the break
        // ("with err" / "or 2").
        let within = |s: &mut dyn Iterator<Item = &u8>| {
            s.take(CUT_WORD_BYTES)
                .take_while(|c| !matches!(c, b'\n' | b'\r'))
                .count()
        };
        let tail = within(&mut b[..end].iter().rev());
        let head = within(&mut b[nl + 1..].iter());
        joined.clear();
        joined.extend_from_slice(&b[end - tail..end]);
        joined.extend_from_slice(&b[nl + 1..nl + 1 + head]);
        // A word across the break, not one whole on either side.
        if let Some(m) = search()
            .find_iter(&joined[..])
            .find(|m| m.start() < tail && m.end() > tail)
        {
            out.push(end - tail + m.start());
        }
    }
    out
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
    let mut hits = hits(text).into_iter().peekable();
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
    fn a_word_a_terminal_cut_at_its_width_is_found() {
        let filler = "step 1200 loss 0.25 lr 1e-4 tokens/s 10400\n".repeat(3000);
        // "memory", the message's only prefilter word, cut at 100 columns.
        let message = "F0911 12:46:40.284883 18216 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of m\nemory\n";
        for end in ["\n", "\r\n"] {
            let text = format!("{filler}{}{filler}", message.replace('\n', end));
            assert!(search().find_iter(text.as_bytes()).next().is_none());
            let (found, _) = scan(&text);
            assert_eq!(found, find_all(&text), "{end:?}");
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].span.line, 3001);
        }
        // After a line of a terminal's width.
        let pad = "a".repeat(40) + " ";
        let at = pad.len();
        assert_eq!(cut_hits(&format!("{pad}out of m\nemory")), [at + 7]);
        // `cudaMalloc` is searched whole: the hit is at its start.
        assert_eq!(cut_hits(&format!("{pad}cudaMal\r\nloc failed")), [at]);
        assert_eq!(
            cut_hits(&format!("{pad}execution failed with err\nor 2")),
            [at + 17]
        );
        assert!(cut_hits("out of m\nemory").is_empty());
        // Letters either side that make no prefilter word, or a break between words.
        assert!(cut_hits(&format!("{pad}kept in m\nind\n{pad}memory \nlater")).is_empty());
    }

    #[test]
    fn a_phrase_spaced_with_no_break_spaces_is_found() {
        let filler = "step 1200 loss 0.25 lr 1e-4 tokens/s 10400\n".repeat(3000);
        let message = "spconv failed (cuda execution failed with error 2)".replace(' ', "\u{a0}");
        let text = format!("{filler}{message}\n{filler}");
        let (found, _) = scan(&text);
        assert_eq!(found, find_all(&text));
        assert_eq!(found.len(), 1);
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
