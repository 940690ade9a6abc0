//! The job's stderr: passed on to headroom's own stderr byte for byte as it arrives (whatever
//! its encoding), and read line by line for out-of-memory messages with
//! `oom_message::LineScanner`, each stamped with the time its first line arrived.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::sync::mpsc::Sender;
use std::time::Instant;

use crate::oom_message::{LineScanner, OomMessage};
use crate::watch::Msg;

/// A line longer than this is scanned in pieces (a progress bar redrawn with `\r` never ends
/// its line).
const MAX_LINE_BYTES: usize = 64 * 1024;
/// Arrival times kept, by line: more than the scanner's window.
const TIMES_KEPT: usize = 128;
/// After this long without output, messages found so far are reported, whole or not.
const QUIET_MS: i32 = 250;

/// An out-of-memory message in the job's stderr.
#[derive(Debug, Clone)]
pub struct StderrOom {
    /// When the message's first line arrived.
    pub t_ns: u64,
    pub message: OomMessage,
}

/// Splits the stream into lines for the scanner and remembers when each began.
struct Lines {
    scanner: LineScanner,
    partial: Vec<u8>,
    partial_t_ns: u64,
    /// `(1-based line, arrival of its first byte)` of the latest lines.
    times: VecDeque<(usize, u64)>,
    lines: usize,
    /// Lines pushed since the scanner last reported everything.
    unflushed: bool,
}

impl Lines {
    fn new() -> Lines {
        Lines {
            scanner: LineScanner::new(),
            partial: Vec::new(),
            partial_t_ns: 0,
            times: VecDeque::new(),
            lines: 0,
            unflushed: false,
        }
    }

    fn push(&mut self, bytes: &[u8], t_ns: u64, out: &mut Vec<StderrOom>) {
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            if self.partial.is_empty() {
                self.partial_t_ns = t_ns;
            }
            self.partial.extend_from_slice(piece);
            if piece.ends_with(b"\n") || self.partial.len() >= MAX_LINE_BYTES {
                self.line(out);
            }
        }
    }

    fn line(&mut self, out: &mut Vec<StderrOom>) {
        self.lines += 1;
        self.times.push_back((self.lines, self.partial_t_ns));
        if self.times.len() > TIMES_KEPT {
            self.times.pop_front();
        }
        let text = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial.clear();
        let found = self.scanner.push_line(&text);
        self.unflushed = true;
        self.stamp(found, out);
    }

    fn stamp(&self, found: Vec<OomMessage>, out: &mut Vec<StderrOom>) {
        for message in found {
            let t_ns = self
                .times
                .iter()
                .find(|(l, _)| *l == message.span.line)
                .or(self.times.back())
                .map_or(self.partial_t_ns, |(_, t)| *t);
            out.push(StderrOom { t_ns, message });
        }
    }

    /// The stream went quiet: report what is there.
    fn quiet(&mut self, out: &mut Vec<StderrOom>) {
        if std::mem::take(&mut self.unflushed) {
            let found = self.scanner.flush();
            self.stamp(found, out);
        }
    }

    /// The stream ended: a last line without its newline counts.
    fn finish(&mut self, out: &mut Vec<StderrOom>) {
        if !self.partial.is_empty() {
            self.line(out);
        }
        let found = self.scanner.finish();
        self.stamp(found, out);
    }
}

/// Copies `from` to headroom's stderr until it closes, sending each out-of-memory message and,
/// at the end, `StderrClosed`.
pub fn pump(mut from: impl Read + AsRawFd, tx: Sender<Msg>, origin: Instant) {
    let mut lines = Lines::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut found = Vec::new();
    let mut stderr = std::io::stderr();
    loop {
        let mut pfd = libc::pollfd {
            fd: from.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, QUIET_MS) };
        if ready == 0 {
            lines.quiet(&mut found);
        } else if ready > 0 {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    // Passed on first: headroom's scanning never delays the job's output.
                    let _ = stderr.write_all(&buf[..n]);
                    lines.push(&buf[..n], origin.elapsed().as_nanos() as u64, &mut found);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        for m in found.drain(..) {
            if tx.send(Msg::Oom(Box::new(m))).is_err() {
                return;
            }
        }
    }
    lines.finish(&mut found);
    for m in found.drain(..) {
        let _ = tx.send(Msg::Oom(Box::new(m)));
    }
    let _ = tx.send(Msg::StderrClosed);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB is free. Including non-PyTorch memory, this process has 78.96 GiB memory in use. Of the allocated memory 68.83 GiB is allocated by PyTorch, and 331.08 MiB is reserved by PyTorch but unallocated.\n";

    #[test]
    fn a_message_gets_the_time_of_its_first_line() {
        let mut l = Lines::new();
        let mut out = Vec::new();
        l.push(b"step 1\nstep", 10, &mut out);
        l.push(b" 2\n", 20, &mut out);
        l.push(MSG.as_bytes(), 30, &mut out);
        for i in 0..8 {
            l.push(format!("trace {i}\n").as_bytes(), 40 + i, &mut out);
        }
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].t_ns, 30);
        assert_eq!(out[0].message.span.line, 3);
        l.finish(&mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_quiet_stream_reports_and_an_unterminated_line_counts_at_the_end() {
        let mut l = Lines::new();
        let mut out = Vec::new();
        l.push(MSG.as_bytes(), 5, &mut out);
        assert!(out.is_empty());
        l.quiet(&mut out);
        assert_eq!(out.len(), 1);
        l.push(&MSG.as_bytes()[..MSG.len() - 1], 9, &mut out);
        l.finish(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].t_ns, 9);
        assert_eq!(out[1].message.span.line, 2);
    }

    #[test]
    fn invalid_utf8_and_endless_lines_do_not_stop_the_scan() {
        let mut l = Lines::new();
        let mut out = Vec::new();
        l.push(&vec![b'\r'; MAX_LINE_BYTES * 2 + 5], 1, &mut out);
        l.push(b"\xff\xfe\n", 2, &mut out);
        l.push(MSG.as_bytes(), 3, &mut out);
        l.finish(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].t_ns, 3);
    }
}
