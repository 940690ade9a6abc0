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

pub use detail::{BfcStats, BufferAssignment, Detail, Format, MemoryKind, ProcessUse, TorchHint};
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
    found
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
    (found, unrecognized)
}

/// Lines of `text` that speak of out-of-memory and lie outside every message in `found`.
pub fn suspicious_lines(text: &str, found: &[OomMessage]) -> Vec<Unrecognized> {
    scan::suspicious_lines(text, found)
}
