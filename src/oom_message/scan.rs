//! Running every format reader over a text: one pass of a multi-pattern search finds every
//! anchor phrase in the folded text (`shadow`), the reader behind each anchor reads the message
//! around it, the most specific reading of each span is kept, and spans and lines are mapped
//! back to the input. Also: the lines that look like an unknown format.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::shadow::Shadow;
use super::{
    Detail, OomMessage, Span, Unrecognized, driver, generic, ggml, nccl, others, pytorch,
    pytorch_legacy, tensorflow, vllm, xla,
};

/// A reader's find, in folded-text offsets, before line numbers are known.
#[derive(Debug, Clone)]
pub(super) struct Found {
    pub start: usize,
    pub end: usize,
    pub raised_as: Option<String>,
    pub detail: Detail,
}

/// Reads the message around an anchor found at `text[at..anchor_end]` (folded text).
pub(super) type Reader = fn(text: &str, at: usize, anchor_end: usize) -> Option<Found>;

/// Most specific first: a span claimed by an earlier reader is not read again by a later one
/// (the `CUDA_ERROR_OUT_OF_MEMORY` inside a StreamExecutor line is not a second message).
/// The reader by principle comes twice: with figures before the bare driver errors (which
/// carry none), and with none at all after them; "out of" with the memory's qualifiers between
/// ("out of GPU and shared host memory") last.
fn families() -> [&'static [(&'static str, Reader)]; 13] {
    [
        pytorch::ANCHORS,
        pytorch_legacy::ANCHORS,
        vllm::ANCHORS,
        ggml::ANCHORS,
        others::ANCHORS,
        tensorflow::ANCHORS,
        xla::ANCHORS,
        nccl::ANCHORS,
        driver::SPECIFIC_ANCHORS,
        generic::with_figures_anchors(),
        driver::GENERIC_ANCHORS,
        generic::any_anchors(),
        generic::QUALIFIED_ANCHORS,
    ]
}

/// The anchors of one search: its automaton, and per pattern its reader and its family's rank
/// (lower is more specific).
struct Anchors {
    search: AhoCorasick,
    readers: Vec<(Reader, usize)>,
}

impl Anchors {
    fn build(anchors: Vec<(&'static str, Reader, usize)>, ignore_case: bool) -> Anchors {
        let patterns: Vec<&str> = anchors.iter().map(|&(a, _, _)| a).collect();
        let search = AhoCorasickBuilder::new()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(ignore_case)
            .build(&patterns)
            .expect("the anchor phrases build an automaton");
        let readers = anchors.into_iter().map(|(_, r, rank)| (r, rank)).collect();
        Anchors { search, readers }
    }
}

/// Anchors matched as printed, and the distinctive ones (`distinctive`) matched in any case.
struct Registry {
    exact: Anchors,
    any_case: Anchors,
}

/// Words an anchor needs to be matched without regard to case: a phrase of five words or more
/// names its message whatever the case it is retold in ("no available memory for the cache
/// blocks" in a user's sentence); a shorter one ("Tried to allocate ", "Cuda failure ") does
/// not, and is matched as the runtime prints it.
const DISTINCTIVE_WORDS: usize = 5;

fn distinctive(anchor: &str) -> bool {
    anchor.split_whitespace().count() >= DISTINCTIVE_WORDS
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let (mut exact, mut any_case) = (Vec::new(), Vec::new());
        for (rank, family) in families().into_iter().enumerate() {
            for &(anchor, read) in family {
                let to = if distinctive(anchor) {
                    &mut any_case
                } else {
                    &mut exact
                };
                to.push((anchor, read, rank));
            }
        }
        Registry {
            exact: Anchors::build(exact, false),
            any_case: Anchors::build(any_case, true),
        }
    })
}

/// Every reading of every anchor in folded `text`, with its rank.
fn candidates(text: &str) -> Vec<(usize, Found)> {
    let r = registry();
    let mut out = Vec::new();
    // An anchor that ends in a space ("failed to alloc ") is ended by the text's end as well: a
    // paste cut right after its words. The text's last bytes are searched with a space after.
    let tail_from = super::cursor::floor_boundary(text, text.len().saturating_sub(TAIL_BYTES));
    let padded = (!text.ends_with(' ')).then(|| format!("{} ", &text[tail_from..]));
    for anchors in [&r.exact, &r.any_case] {
        let at_end = padded.iter().flat_map(|p| {
            anchors
                .search
                .find_overlapping_iter(p.as_str())
                .filter(|m| m.end() == p.len())
                .map(|m| (m.pattern(), tail_from + m.start(), text.len()))
        });
        let hits = anchors
            .search
            .find_overlapping_iter(text)
            .map(|m| (m.pattern(), m.start(), m.end()))
            .chain(at_end);
        for (pattern, start, end) in hits {
            let (read, rank) = anchors.readers[pattern.as_usize()];
            if let Some(f) = read(text, start, end)
                && f.end > f.start
            {
                out.push((rank, f));
            }
        }
    }
    out
}

/// How many of a text's last bytes are searched for an anchor its end cut (`candidates`).
const TAIL_BYTES: usize = 64;

/// The byte intervals of every size a reading holds (printed sizes and exact byte counts).
fn sizes(detail: &Detail) -> Vec<(u64, u64)> {
    fn walk(v: &serde_json::Value, out: &mut Vec<(u64, u64)>) {
        match v {
            serde_json::Value::Object(o) => {
                if let (Some(low), Some(high)) = (
                    o.get("low").and_then(serde_json::Value::as_u64),
                    o.get("high").and_then(serde_json::Value::as_u64),
                ) {
                    out.push((low, high));
                    return;
                }
                for (k, x) in o {
                    match x.as_u64() {
                        Some(b) if k.ends_with("_bytes") => out.push((b, b)),
                        _ => walk(x, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_json::to_value(detail) {
        walk(&v, &mut out);
    }
    out
}

/// A specific reading that stopped short: the driver's bare error, or PyTorch's message cut
/// (by the paste, or by a word its reader did not know). Only these give way to a reading by
/// principle that holds every size they hold and more.
fn stopped_short(detail: &Detail) -> bool {
    matches!(
        detail,
        Detail::CudaDriver { .. }
            | Detail::PytorchCaching {
                truncated: true,
                ..
            }
            | Detail::PytorchCaching {
                device_free: None,
                ..
            }
            | Detail::PytorchCachingLegacy {
                truncated: true,
                ..
            }
    )
}

/// The non-overlapping readings, most specific first, in order of position; a reading by
/// principle replaces the specific readings it overlaps when they stopped short (a typo, a
/// wording their reader does not know, `stopped_short`) and it holds each of their sizes and
/// more labelled ones.
fn select(mut found: Vec<(usize, Found)>) -> Vec<Found> {
    found.sort_by_key(|(rank, f)| (*rank, f.start));
    // Start → (end, index in `kept`).
    let mut taken: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut kept: Vec<Option<Found>> = Vec::new();
    let mut kept_sizes: Vec<Option<Vec<(u64, u64)>>> = Vec::new();
    for (_, f) in found {
        let mut overlapping: Vec<usize> = taken
            .range(..=f.start)
            .next_back()
            .filter(|(_, (end, _))| *end > f.start)
            .map(|(&s, _)| s)
            .into_iter()
            .collect();
        overlapping.extend(taken.range(f.start..f.end).map(|(&s, _)| s));
        overlapping.dedup();
        if !overlapping.is_empty() {
            let Detail::Generic { figures, .. } = &f.detail else {
                continue;
            };
            // Each kept reading's sizes are worked out once, however many readings overlap it.
            for s in &overlapping {
                let i = taken[s].1;
                if kept_sizes[i].is_none() {
                    kept_sizes[i] = kept[i].as_ref().map(|k| sizes(&k.detail));
                }
            }
            let theirs: Vec<&Found> = overlapping
                .iter()
                .filter_map(|s| kept[taken[s].1].as_ref())
                .collect();
            let their_sizes: Vec<(u64, u64)> = overlapping
                .iter()
                .filter_map(|s| kept_sizes[taken[s].1].as_ref())
                .flatten()
                .copied()
                .collect();
            let holds_all = their_sizes.iter().all(|&(low, high)| {
                figures
                    .iter()
                    .any(|g| g.quantity.bytes.low <= low && high <= g.quantity.bytes.high)
            });
            let labelled = figures.iter().filter(|g| g.label.is_some()).count();
            if !theirs.iter().all(|k| stopped_short(&k.detail))
                || !holds_all
                || labelled <= their_sizes.len()
            {
                continue;
            }
            for s in overlapping {
                if let Some((_, i)) = taken.remove(&s) {
                    kept[i] = None;
                }
            }
        }
        taken.insert(f.start, (f.end, kept.len()));
        kept.push(Some(f));
        kept_sizes.push(None);
    }
    let mut kept: Vec<Found> = kept.into_iter().flatten().collect();
    kept.sort_by_key(|f| f.start);
    kept
}

pub(super) fn find_all(text: &str) -> Vec<OomMessage> {
    let shadow = Shadow::new(text);
    let found = generic::with_line_ends(&shadow.line_ends, || candidates(&shadow.text));
    let kept = select(found);
    to_messages(text, &shadow, kept)
}

fn to_messages(text: &str, shadow: &Shadow, kept: Vec<Found>) -> Vec<OomMessage> {
    let bytes = text.as_bytes();
    let (mut line, mut at) = (1usize, 0usize);
    kept.into_iter()
        .map(|f| {
            let (start, end) = shadow.span_to_input(f.start, f.end);
            line += bytes[at..start].iter().filter(|&&b| b == b'\n').count();
            at = start;
            let mut detail = f.detail;
            if let Detail::TfBfcAllocator {
                stats: Some(stats), ..
            }
            | Detail::TfOomTensor {
                stats: Some(stats), ..
            } = &mut detail
            {
                stats.offset = shadow.to_input(stats.offset).max(start);
                let between = &bytes[start..stats.offset.min(bytes.len())];
                stats.line = line + between.iter().filter(|&&b| b == b'\n').count();
            }
            if let Detail::TfOomTensor {
                device_properties: Some(p),
                ..
            } = &mut detail
            {
                // Printed before the message.
                p.offset = shadow.to_input(p.offset).min(start);
                let between = &bytes[p.offset..start];
                p.line = line - between.iter().filter(|&&b| b == b'\n').count();
            }
            OomMessage {
                span: Span {
                    start_byte: start,
                    end_byte: end,
                    line,
                },
                text: text[start..end].to_string(),
                raised_as: f.raised_as,
                detail,
                cut_figure: None,
                nearby: Vec::new(),
            }
        })
        .collect()
}

/// How far back a reader looks for what precedes an anchor on its line: a bound, so a huge
/// single-line input with many anchors stays linear.
pub(super) const LOOK_BACK: usize = 256;

/// The start of the window `LOOK_BACK` bytes before `at` (on a char boundary).
pub(super) fn back_from(text: &str, at: usize) -> usize {
    super::cursor::floor_boundary(text, at.saturating_sub(LOOK_BACK))
}

/// The exception or logger name printed right before `start`, as in
/// `torch.OutOfMemoryError: CUDA out of memory…` or `ValueError: No available memory…`.
pub(super) fn raised_as(text: &str, start: usize) -> Option<String> {
    let from = back_from(text, start);
    let before = text[from..start].trim_end_matches(' ');
    let before = before.strip_suffix(':')?;
    let token_start = before
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let token = &before[token_start..];
    let named = token.ends_with("Error") || token.ends_with("Exception");
    (named && token.len() <= 80).then(|| token.to_string())
}

/// Calls that create a CUDA context (or the first state right after it): an out-of-memory
/// error raised there means the memory was held before this process asked for any.
const CONTEXT_CALLS: &[&str] = &[
    "cuCtxCreate",
    "cuDevicePrimaryCtxRetain",
    "cudaSetDevice",
    "_cuda_init",
    "cuInit",
    "THCTensorRandom.cu",
    "initializeGenerator",
    "CuContext",
    "cudaDeviceReset",
];

/// How far around a message its traceback is searched for a context-creation call.
const CONTEXT_REACH: usize = 2048;

/// The context-creation call printed within `CONTEXT_REACH` of `text[start..end]`, if any.
pub(super) fn context_call(text: &str, start: usize, end: usize) -> Option<String> {
    let cursor = super::cursor::floor_boundary;
    let from = cursor(text, start.saturating_sub(CONTEXT_REACH));
    let to = cursor(text, end.saturating_add(CONTEXT_REACH));
    let window = &text[from..to];
    CONTEXT_CALLS
        .iter()
        .filter_map(|c| window.find(c).map(|i| (i, *c)))
        .min_by_key(|&(i, _)| i)
        .map(|(_, c)| c.to_string())
}

/// Lines longer than this are shown cut, with an ellipsis.
const SHOWN_LINE_CHARS: usize = 400;

/// Every known way of saying a device (or host) ran out of memory, matched without regard to
/// case in the folded text: a line with one that no reader took is reported.
pub(super) const SUSPECT_PHRASES: &[&str] = &[
    "out of memory",
    "out of gpu memory",
    "out of device memory",
    "out of host memory",
    "out of cuda memory",
    "out of video memory",
    "out of vram",
    "outofmemory",
    "out_of_memory",
    "resource_exhausted",
    "resource exhausted",
    "resourceexhausted",
    "alloc_failed",
    "memoryallocation",
    "not enough memory",
    "failed to allocate memory",
    "cannot allocate memory",
    "could not allocate",
    "unable to allocate",
    "insufficient memory",
    "memory exhausted",
    "failed to alloc ",
    "failed to allocate",
    "allocation failed",
    "bad_alloc",
    "memoryerror",
    "malloc failed",
];

fn suspect_search() -> &'static (AhoCorasick, AhoCorasick) {
    static SEARCH: OnceLock<(AhoCorasick, AhoCorasick)> = OnceLock::new();
    SEARCH.get_or_init(|| {
        let phrases = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .build(
                SUSPECT_PHRASES
                    .iter()
                    .map(|p| p.to_string())
                    .chain(generic::translated_forms()),
            )
            .expect("the suspect phrases build an automaton");
        let oom = AhoCorasick::new(["OOM"]).expect("one pattern");
        (phrases, oom)
    })
}

/// `OOM` as a word (not inside `ROOM` or `oomph`).
fn is_oom_word(text: &str, at: usize) -> bool {
    let before = text[..at].chars().next_back();
    let after = text[at + 3..].chars().next();
    !before.is_some_and(|c| c.is_alphanumeric()) && !after.is_some_and(|c| c.is_alphanumeric())
}

/// Input offsets of every suspect phrase in `text`.
fn suspect_offsets(text: &str) -> Vec<usize> {
    let shadow = Shadow::new(text);
    let (phrases, oom) = suspect_search();
    let mut hits: Vec<usize> = phrases
        .find_iter(&shadow.text)
        .map(|m| m.start())
        .chain(
            oom.find_iter(&shadow.text)
                .map(|m| m.start())
                .filter(|&at| is_oom_word(&shadow.text, at)),
        )
        .map(|at| shadow.to_input(at))
        .collect();
    hits.sort_unstable();
    hits.dedup();
    hits
}

pub(super) fn suspicious_lines(text: &str, found: &[OomMessage]) -> Vec<Unrecognized> {
    let hits = suspect_offsets(text);
    let bytes = text.as_bytes();
    let mut out: Vec<Unrecognized> = Vec::new();
    let mut spans = found.iter().map(|m| m.span).peekable();
    // The line reached so far, its start and end, and the offset its newlines are counted
    // to: every byte is looked at a bounded number of times, whatever the shape of the lines
    // (a million phrases on one line cost what a million lines do).
    let (mut line, mut line_start, mut line_end) = (1usize, 0usize, None::<usize>);
    let mut counted_to = 0usize;
    for at in hits {
        if line_end.is_none_or(|end| at > end) {
            let newlines = memchr::memchr_iter(b'\n', &bytes[counted_to..at]).count();
            if newlines > 0 {
                line += newlines;
                line_start = memchr::memrchr(b'\n', &bytes[counted_to..at])
                    .map_or(0, |i| counted_to + i + 1);
            }
            counted_to = at;
            line_end = Some(memchr::memchr(b'\n', &bytes[at..]).map_or(text.len(), |i| at + i));
        }
        let line_end = line_end.unwrap_or(text.len());
        if out.last().is_some_and(|u| u.line == line) {
            continue;
        }
        while spans.peek().is_some_and(|s| s.end_byte <= line_start) {
            spans.next();
        }
        if spans
            .peek()
            .is_some_and(|s| s.start_byte < line_end.max(line_start + 1))
        {
            continue;
        }
        let shown_line = text[line_start..line_end].trim_end_matches('\r');
        let shown: String = shown_line.chars().take(SHOWN_LINE_CHARS).collect();
        let cut = shown.len() < shown_line.len();
        out.push(Unrecognized {
            line,
            text: if cut { format!("{shown}…") } else { shown },
        });
    }
    out
}

mod prefilter;
mod stream;

pub(crate) use prefilter::scan;

/// Every anchor phrase of every reader.
pub(super) fn anchor_phrases() -> Vec<&'static str> {
    families()
        .into_iter()
        .flat_map(|f| f.iter().map(|(a, _)| *a))
        .collect()
}

pub use stream::{LineScanner, STREAM_CHUNK_BYTES, Settled, StreamScanner};

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
    fn an_anchor_ending_in_a_space_is_ended_by_the_text_s_end_too() {
        let message = "bfc_arena.cc:376 void* onnxruntime::BFCArena::AllocateRawInternal(size_t) Failed to alloc";
        for text in [
            message.to_string(),
            format!("{message}\n"),
            format!("> {message}"),
            format!("\x1b[31m{message}\x1b[0m"),
        ] {
            let found = find_all(&text);
            assert_eq!(found.len(), 1, "{text:?}");
            assert!(
                found[0].text.trim_end().ends_with("Failed to alloc"),
                "{found:?}"
            );
        }
        // Its words inside a longer one, or not at the end, are not it.
        assert!(find_all("BFCArena: Failed to allocx").is_empty());
        assert!(find_all("Failed to alloc8").is_empty());
    }

    #[test]
    fn oom_is_a_word_not_a_fragment() {
        assert!(is_oom_word("Killed: OOM in step 3", 8));
        assert!(!is_oom_word("ROOM 12", 1));
        let lines = suspicious_lines("ok\nRan Out Of\n  Memory here\nROOM\n", &[]);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].line, 2);
    }

    #[test]
    fn a_wrapped_message_keeps_its_input_span_and_line() {
        let text = "start\n[1] E foo] Execution failed: Resource exhausted: Out \nof memory while trying to allocate 5520758552 bytes.\n";
        let found = find_all(text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].span.line, 2);
        assert!(
            found[0]
                .text
                .starts_with("Resource exhausted: Out \nof memory")
        );
        assert!(found[0].text.ends_with("bytes."));
    }

    #[test]
    fn a_distinctive_phrase_is_known_in_any_case() {
        let text =
            "I received the error no available memory for the cache blocks during allocation.";
        let found = find_all(text);
        assert_eq!(found.len(), 1);
        assert!(matches!(found[0].detail, Detail::VllmNoKvCacheMemory {}));
        assert_eq!(found[0].text, "no available memory for the cache blocks");
        let printed = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.";
        assert_eq!(find_all(printed)[0].text.len(), printed.len() - 12);
        // A short anchor is matched only as printed: "tried to allocate" is any sentence's.
        assert!(distinctive("No available memory for the cache blocks"));
        assert!(!distinctive("Tried to allocate "));
    }

    #[test]
    fn context_calls_near_a_message_are_named() {
        let text = "x\ncuDevicePrimaryCtxRetain\n ERROR: Out of GPU memory";
        assert_eq!(
            context_call(text, 30, 50).as_deref(),
            Some("cuDevicePrimaryCtxRetain")
        );
        assert_eq!(context_call("nothing here", 0, 4), None);
    }
}
