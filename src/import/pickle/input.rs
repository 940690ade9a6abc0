//! A buffered byte reader that knows its offset in the file, for messages that say where.

use std::io::{self, Read};

use super::PickleError;

const BUFFER_BYTES: usize = 1 << 20;

pub(super) struct Input<R> {
    inner: R,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// File offset of `buf[start]`.
    offset: u64,
    /// Where the opcode being read started.
    pub op_offset: u64,
}

impl<R: Read> Input<R> {
    pub fn new(inner: R) -> Input<R> {
        Input {
            inner,
            buf: vec![0u8; BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            offset: 0,
            op_offset: 0,
        }
    }

    /// The offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn fill(&mut self) -> Result<bool, PickleError> {
        if self.start < self.end {
            return Ok(true);
        }
        self.start = 0;
        self.end = 0;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(PickleError::io(self.offset, e)),
            }
        }
    }

    /// At least `want` bytes ahead in one slice (fewer only near the end of the file), for
    /// the fast paths that read many opcodes at once; `consume` what they used.
    pub fn window(&mut self, want: usize) -> Result<&[u8], PickleError> {
        if self.end - self.start < want {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            while self.end < self.buf.len() {
                match self.inner.read(&mut self.buf[self.end..]) {
                    Ok(0) => break,
                    Ok(n) => self.end += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(PickleError::io(self.offset, e)),
                }
            }
        }
        Ok(&self.buf[self.start..self.end])
    }

    /// Moves past `n` bytes of the current window.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(self.start + n <= self.end);
        self.start += n;
        self.offset += n as u64;
    }

    /// The next byte, or `None` at the end of the file.
    #[inline]
    pub fn next_byte(&mut self) -> Result<Option<u8>, PickleError> {
        if self.start == self.end && !self.fill()? {
            return Ok(None);
        }
        let b = self.buf[self.start];
        self.start += 1;
        self.offset += 1;
        Ok(Some(b))
    }

    fn truncated(&self, what: &str) -> PickleError {
        PickleError::at(
            self.op_offset,
            format!("the file ends inside {what} (truncated?)"),
        )
    }

    /// Exactly `N` bytes (an opcode's fixed-size argument).
    #[inline]
    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PickleError> {
        let mut out = [0u8; N];
        if self.end - self.start >= N {
            out.copy_from_slice(&self.buf[self.start..self.start + N]);
            self.start += N;
            self.offset += N as u64;
            return Ok(out);
        }
        for b in out.iter_mut() {
            *b = self.next_byte()?.ok_or_else(|| self.truncated(what))?;
        }
        Ok(out)
    }

    /// `n` bytes appended to `out` (cleared first). Memory grows only as bytes arrive, so a
    /// length field claiming more than the file holds costs nothing.
    pub fn bytes_into(&mut self, n: u64, out: &mut Vec<u8>, what: &str) -> Result<(), PickleError> {
        out.clear();
        let mut left = n;
        while left > 0 {
            if self.start == self.end && !self.fill()? {
                return Err(self.truncated(what));
            }
            let take = ((self.end - self.start) as u64).min(left) as usize;
            out.extend_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
            self.offset += take as u64;
            left -= take as u64;
        }
        Ok(())
    }

    /// A protocol-0 text argument up to its newline (without it).
    pub fn line_into(&mut self, out: &mut Vec<u8>, what: &str) -> Result<(), PickleError> {
        out.clear();
        loop {
            match self.next_byte()? {
                Some(b'\n') => return Ok(()),
                Some(b) => out.push(b),
                None => return Err(self.truncated(what)),
            }
            if out.len() > 1 << 16 {
                return Err(PickleError::at(
                    self.op_offset,
                    format!("{what}: a text argument longer than 64 KiB"),
                ));
            }
        }
    }
}
