//! Out-of-memory messages found in arbitrary text, read into typed, format-tagged records.
//!
//! Pure: no I/O, no printing. `find_all` reads a whole log; `LineScanner` takes a child's
//! output line by line (for `watch`), `StreamScanner` a large text in chunks (for `explain
//! FILE`); `import torch` calls the same readers. Text is matched on a folded copy (wraps,
//! indentation, ANSI colour codes and quote markers made one space, `shadow`), so a pasted,
//! hard-wrapped or coloured message reads as the plain one. Every size keeps
//! the text it was printed as and the interval of bytes that text can stand for
//! (`size`), so nothing downstream claims more precision than the message had.
//!
//! Each format is read the way its framework writes it, learnt from the source (the files and
//! commits are listed in `SOURCES` and in docs/oom.md). What no reader accepts is never
//! guessed at: `suspicious_lines` lists the lines that mention running out of memory in a way
//! none of the formats covers, for the caller to report as not recognized.

mod cursor;
mod detail;
mod driver;
pub mod figures;
mod generic;
mod ggml;
mod nccl;
mod others;
mod pytorch;
mod pytorch_legacy;
mod scan;
mod shadow;
pub mod size;
mod sources;
mod tensorflow;
mod vllm;
mod xla;

use serde::Serialize;

pub use detail::{
    BfcStats, BufferAssignment, Detail, Format, MemoryKind, ProcessUse, TfDeviceProperties,
    TorchHint,
};
pub use figures::{Figure, Label, Owner};
pub use generic::MemorySpace;
pub use scan::{LineScanner, STREAM_CHUNK_BYTES, Settled, StreamScanner};
pub use size::{ByteRange, Quantity};
pub use sources::SOURCES;

/// Where a message sits in the text it was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Span {
    /// Byte offset of the first byte of the message.
    pub start_byte: usize,
    /// Byte offset one past its last byte.
    pub end_byte: usize,
    /// 1-based line of its first byte.
    pub line: usize,
}

/// One out-of-memory message: where it was, its text, and what it says.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct OomMessage {
    #[serde(flatten)]
    pub span: Span,
    /// The message exactly as it appears in the input (line breaks included).
    pub text: String,
    /// The exception or log prefix printed right before it, e.g. `torch.OutOfMemoryError`.
    pub raised_as: Option<String>,
    #[serde(flatten)]
    pub detail: Detail,
    /// The figure the input ends in, cut by the paste before its unit (`"… of which 212.81"`):
    /// listed as cut, with the bytes any unit could make of it, and its label when the words
    /// before it give one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_figure: Option<Figure>,
    /// Sizes printed on the lines right around the message, not by it (`mark_nearby`): the
    /// device's memory as the runtime announced it, a buffer allocated on the line before, a
    /// status line after, a user's own print of the sizes. Listed as the paste shows them,
    /// unlabelled (their words name them for their own line, not for the failed allocation),
    /// and never used in the arithmetic.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nearby: Vec<Figure>,
}

impl OomMessage {
    pub fn format(&self) -> Format {
        self.detail.format()
    }
}

/// Every message in `text`, in order of position. Linear in the length of the text.
pub fn find_all(text: &str) -> Vec<OomMessage> {
    let mut found = scan::find_all(text);
    mark_cut_figure(text, &mut found);
    mark_nearby(text, &mut found);
    found
}

/// How many whole lines before a message, and after it, are read for nearby sizes.
const NEARBY_LINES_BEFORE: usize = 3;
const NEARBY_LINES_AFTER: usize = 2;
/// How much of a line is read: a log line's worth (a line of many messages is not re-read).
const NEARBY_LINE_BYTES: usize = 512;
/// How far a line break is looked for: a longer line is no log line, and is not read.
const NEARBY_SCAN_BYTES: usize = 4096;

/// Gives each message the sizes printed on the lines right around it (`OomMessage::nearby`):
/// the rest of its own first and last lines, then each whole line before it (up to three) and
/// after it (up to two) while the line is next to the last one taken, belongs to no other
/// message, is no traceback line and carries a size. Sizes are read as the reader by principle
/// reads them (`figures::read`).
pub fn mark_nearby(text: &str, found: &mut [OomMessage]) {
    let bytes = text.as_bytes();
    // The line break before `at`, looked for no further back than `floor` nor than
    // `NEARBY_SCAN_BYTES` (a line of many messages, or a huge line, is not scanned again per
    // message): its offset, or `None` when there is none within reach.
    let break_before = |at: usize, floor: usize| {
        let lo = floor.max(at.saturating_sub(NEARBY_SCAN_BYTES)).min(at);
        memchr::memrchr(b'\n', &bytes[lo..at]).map(|i| lo + i)
    };
    let break_after = |at: usize, ceiling: usize| {
        let hi = ceiling.min(at.saturating_add(NEARBY_SCAN_BYTES)).max(at);
        memchr::memchr(b'\n', &bytes[at..hi]).map(|i| at + i)
    };
    let read = |from: usize, to: usize| -> Vec<Figure> {
        let from = cursor::floor_boundary(text, from.max(to.saturating_sub(NEARBY_LINE_BYTES)));
        let to = cursor::floor_boundary(text, to);
        let line = &text[from..to];
        if line.contains("Traceback") || line.trim_start().starts_with("File \"") {
            return Vec::new();
        }
        figures::read(line)
    };
    for i in 0..found.len() {
        let (start, end) = (found[i].span.start_byte, found[i].span.end_byte);
        let before_limit = if i > 0 { found[i - 1].span.end_byte } else { 0 };
        let after_limit = found.get(i + 1).map_or(text.len(), |m| m.span.start_byte);
        // The rest of its first line, then whole lines before it.
        let first_break = break_before(start, before_limit);
        let first = first_break.map_or(
            before_limit.max(start.saturating_sub(NEARBY_LINE_BYTES)),
            |b| b + 1,
        );
        let mut before: Vec<Vec<Figure>> = vec![read(first, start)];
        let mut line_break = first_break;
        for _ in 0..NEARBY_LINES_BEFORE {
            let Some(b) = line_break else { break };
            let from = match break_before(b, before_limit) {
                Some(p) => p + 1,
                // The text's first line.
                None if b <= NEARBY_SCAN_BYTES && before_limit == 0 => 0,
                None => break,
            };
            let f = read(from, b);
            if f.is_empty() {
                break;
            }
            before.push(f);
            line_break = from.checked_sub(1);
        }
        let mut nearby: Vec<Figure> = before.into_iter().rev().flatten().collect();
        // The rest of its last line, then whole lines after it.
        let last_break = break_after(end, after_limit);
        let last = last_break.unwrap_or(after_limit.min(end.saturating_add(NEARBY_LINE_BYTES)));
        nearby.extend(read(end, last.min(end + NEARBY_LINE_BYTES)));
        let mut line_break = last_break;
        for _ in 0..NEARBY_LINES_AFTER {
            let Some(b) = line_break else { break };
            let to = match break_after(b + 1, after_limit) {
                Some(p) => p,
                // The text's last line.
                None if after_limit == text.len() && text.len() - (b + 1) <= NEARBY_SCAN_BYTES => {
                    text.len()
                }
                None => break,
            };
            let f = read(b + 1, (b + 1 + NEARBY_LINE_BYTES).min(to));
            if f.is_empty() {
                break;
            }
            nearby.extend(f);
            line_break = (to < text.len()).then_some(to);
        }
        // Their words name them for their own line, not for the failed allocation: a buffer's
        // "size" on the line before is not the request.
        for f in &mut nearby {
            f.label = None;
        }
        found[i].nearby = nearby;
    }
}

/// Gives the last message of a whole input the figure the input ends in, when the paste cut it
/// before its unit (`figures::cut_at_end`), and stretches the message over it.
pub fn mark_cut_figure(text: &str, found: &mut [OomMessage]) {
    let Some(last) = found.last_mut() else {
        return;
    };
    let end = last.span.end_byte;
    if let Some(mut f) = figures::cut_at_end(&text[end..]) {
        f.at += end;
        f.end += end;
        last.span.end_byte = f.end;
        last.text = text[last.span.start_byte..f.end].to_string();
        last.cut_figure = Some(f);
    }
}

/// A line that mentions running out of memory but belongs to no recognized message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Unrecognized {
    pub line: usize,
    pub text: String,
}

/// `find_all` and `suspicious_lines` at once, the readers run only around the words every
/// message holds (a multi-pattern search first): what a large log needs.
pub fn scan_text(text: &str) -> (Vec<OomMessage>, Vec<Unrecognized>) {
    let (mut found, unrecognized) = scan::scan(text);
    mark_cut_figure(text, &mut found);
    mark_nearby(text, &mut found);
    (found, unrecognized)
}

/// Lines of `text` that speak of out-of-memory and lie outside every message in `found`.
pub fn suspicious_lines(text: &str, found: &[OomMessage]) -> Vec<Unrecognized> {
    scan::suspicious_lines(text, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nearby(text: &str) -> Vec<Vec<String>> {
        find_all(text)
            .iter()
            .map(|m| {
                m.nearby
                    .iter()
                    .map(|f| f.quantity.printed.clone())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn sizes_on_the_lines_around_a_message_are_listed_as_nearby() {
        // A user's print before it, a buffer the runtime allocated on the line before, the
        // device the runtime announced, a status line after it.
        assert_eq!(
            nearby(
                "size=58082304\nsize=522740736\nF0419 19:59:24.1 11075 syncedmem.cpp:53] Check failed: error == cudaSuccess (2 vs. 0)  out of memory\n*** Check failure stack trace: ***\n"
            ),
            [["58082304", "522740736"]]
        );
        assert_eq!(
            nearby(
                "init: compute buffer size =   12.50 MiB\nalloc_buffer: allocating 4507.00 MiB on device 0: cudaMalloc failed: out of memory\n"
            ),
            [["12.50 MiB"]]
        );
        assert_eq!(
            nearby(
                "I gpu_device.cc:1098] Created TensorFlow device (/device:GPU:0 with 3527 MB memory) -> physical GPU (device: 0, compute capability: 6.2)\nW bfc_allocator.cc:215] Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.59GiB. The caller indicates that this is not a failure, but may mean that there could be performance gains if more memory were available.\n"
            ),
            [["3527 MB"]]
        );
        assert_eq!(
            nearby("RuntimeError: CUDA error: out of memory\nSys VRAM: 7.9/8.0 GiB (99%)\n"),
            [["7.9 GiB", "8.0 GiB"]]
        );
        // Not past a line without a size, a blank line, a traceback or another message; the
        // message's own figures are not nearby.
        assert_eq!(
            nearby(
                "size=58082304\nloading the model\nRuntimeError: CUDA error: out of memory\n\nbatch of 4 GiB\n"
            ),
            [Vec::<String>::new()]
        );
        assert_eq!(
            nearby(
                "CUDA out of memory. Tried to allocate 20.00 MiB.\nCUDA out of memory. Tried to allocate 40.00 MiB.\n"
            ),
            [Vec::<String>::new(), Vec::new()]
        );
        assert_eq!(
            nearby(
                "Traceback (most recent call last): x = torch.zeros(1024)\nRuntimeError: CUDA error: out of memory\n"
            ),
            [Vec::<String>::new()]
        );
    }
}
