//! Finding messages in text that arrives in pieces, in bounded memory: `LineScanner` takes a
//! child's output a line at a time (for `watch`), `StreamScanner` takes a file in large chunks
//! (for `explain FILE`).

use super::super::{Detail, OomMessage, Unrecognized};
use super::find_all;

/// Lines kept while waiting for the rest of a message: more than the longest format has.
const WINDOW_LINES: usize = 32;

/// Lines that must follow a message's first line before it is reported: more than the
/// longest message spans (the `cudaMallocAsync` table takes seven).
const HOLD_LINES: usize = 8;

/// Moves a message found in a window to stream offsets and lines.
pub(super) fn rebase(m: &mut OomMessage, base_byte: usize, base_line: usize) {
    m.span.start_byte += base_byte;
    m.span.end_byte += base_byte;
    m.span.line += base_line - 1;
    if let Detail::TfBfcAllocator {
        stats: Some(stats), ..
    } = &mut m.detail
    {
        stats.line += base_line - 1;
    }
}

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
            rebase(&mut m, self.base_byte, self.base_line);
            self.reported_until = m.span.end_byte;
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

/// What a `StreamScanner` settled: messages and unrecognized lines, in stream coordinates.
#[derive(Debug, Default)]
pub struct Settled {
    pub messages: Vec<OomMessage>,
    pub unrecognized: Vec<Unrecognized>,
}

/// Text read before the scanner looks at it: large enough that scanning costs little per byte.
pub const STREAM_CHUNK_BYTES: usize = 4 << 20;

/// Text kept back at the end of each chunk: more than any message (with its BFC statistics
/// or XLA buffer stats) spans, so a message that starts there is read whole next time.
const STREAM_TAIL_BYTES: usize = 256 << 10;

/// Finds messages and unrecognized lines in a large text fed in pieces, holding at most
/// `STREAM_CHUNK_BYTES` plus one piece; each message and line is reported once, in order.
#[derive(Debug)]
pub struct StreamScanner {
    buffer: String,
    base_byte: usize,
    base_line: usize,
    /// Stream offset up to which messages have been reported.
    reported_until: usize,
}

impl Default for StreamScanner {
    fn default() -> StreamScanner {
        StreamScanner::new()
    }
}

impl StreamScanner {
    pub fn new() -> StreamScanner {
        StreamScanner {
            buffer: String::new(),
            base_byte: 0,
            base_line: 1,
            reported_until: 0,
        }
    }

    /// Takes the next piece of text (best cut after a newline); returns what is settled.
    pub fn push(&mut self, piece: &str) -> Settled {
        self.buffer.push_str(piece);
        if self.buffer.len() < STREAM_CHUNK_BYTES {
            return Settled::default();
        }
        // Settle up to the start of a line `STREAM_TAIL_BYTES` before the end.
        let mut cut = super::super::cursor::floor_boundary(
            &self.buffer,
            self.buffer.len() - STREAM_TAIL_BYTES,
        );
        if let Some(i) = self.buffer[..cut].rfind('\n') {
            cut = i + 1;
        }
        self.settle(cut)
    }

    /// Settles everything left (the text has ended).
    pub fn finish(&mut self) -> Settled {
        let end = self.buffer.len();
        self.settle(end)
    }

    fn settle(&mut self, cut: usize) -> Settled {
        let (mut messages, lines) = super::scan(&self.buffer);
        if cut == self.buffer.len() {
            super::super::mark_cut_figure(&self.buffer, &mut messages);
        }
        super::super::mark_nearby(&self.buffer, &mut messages);
        let line_at_cut = 1 + memchr::memchr_iter(b'\n', &self.buffer.as_bytes()[..cut]).count();
        let mut out = Settled::default();
        for mut m in messages {
            let start = self.base_byte + m.span.start_byte;
            if m.span.start_byte >= cut || start < self.reported_until {
                continue;
            }
            rebase(&mut m, self.base_byte, self.base_line);
            self.reported_until = m.span.end_byte;
            out.messages.push(m);
        }
        for mut u in lines {
            if u.line >= line_at_cut && cut < self.buffer.len() {
                break;
            }
            u.line += self.base_line - 1;
            out.unrecognized.push(u);
        }
        self.base_line += line_at_cut - 1;
        self.base_byte += cut;
        self.buffer.drain(..cut);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_reports_each_message_once_with_its_line() {
        let message = "RuntimeError: CUDA error: out of memory\n";
        let filler = "step ok\n".repeat(200_000);
        let mut scanner = StreamScanner::new();
        let mut found = Vec::new();
        let mut unrecognized = Vec::new();
        for i in 0..6 {
            let s = scanner.push(&filler);
            found.extend(s.messages);
            unrecognized.extend(s.unrecognized);
            let s = scanner.push(if i == 3 { "Killed: OOM\n" } else { message });
            found.extend(s.messages);
            unrecognized.extend(s.unrecognized);
        }
        let s = scanner.finish();
        found.extend(s.messages);
        unrecognized.extend(s.unrecognized);
        let lines: Vec<usize> = found.iter().map(|m| m.span.line).collect();
        assert_eq!(lines, [200_001, 400_002, 600_003, 1_000_005, 1_200_006]);
        let raised = "RuntimeError: ".len();
        assert_eq!(
            found[1].span.start_byte,
            2 * 1_600_000 + message.len() + raised
        );
        assert_eq!(unrecognized.len(), 1);
        assert_eq!(unrecognized[0].line, 800_004);
    }
}
