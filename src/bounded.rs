//! Readers whose look-ahead is bounded by the input's shape, not its size: a line longer than
//! its bound is an error naming the line and quoting its first printable bytes, never a buffer
//! the size of the line.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// A line of an allocation log (headroom's or RMM's) and of `timeline.csv`: a few hundred
/// bytes in any file headroom or RMM writes.
pub const TABLE_LINE_MAX_BYTES: usize = 64 * 1024;

/// A line of `events.csv`, whose `detail` column holds the driver's and the allocator's
/// messages.
pub const EVENTS_LINE_MAX_BYTES: usize = 1024 * 1024;

/// How much of an over-long line its error quotes.
const QUOTED_BYTES: usize = 100;

/// `inner`, passed through unchanged until a line runs past `max_line_bytes` (newline not
/// counted): then an `InvalidData` error carrying [`LineTooLong`].
pub struct BoundedLines<R> {
    inner: R,
    max_line_bytes: usize,
    /// The line being read, from 1.
    line: u64,
    bytes_in_line: usize,
    head: Vec<u8>,
}

impl<R: Read> BoundedLines<R> {
    pub fn new(inner: R, max_line_bytes: usize) -> Self {
        BoundedLines {
            inner,
            max_line_bytes,
            line: 1,
            bytes_in_line: 0,
            head: Vec::with_capacity(QUOTED_BYTES),
        }
    }

    fn take(&mut self, part: &[u8]) -> io::Result<()> {
        let room = QUOTED_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&part[..room.min(part.len())]);
        self.bytes_in_line += part.len();
        if self.bytes_in_line > self.max_line_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                LineTooLong {
                    line: self.line,
                    max_bytes: self.max_line_bytes,
                    head: quote(&self.head),
                },
            ));
        }
        Ok(())
    }
}

impl<R: Read> Read for BoundedLines<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut rest = &buf[..n];
        while let Some(i) = memchr::memchr(b'\n', rest) {
            self.take(&rest[..i])?;
            self.line += 1;
            self.bytes_in_line = 0;
            self.head.clear();
            rest = &rest[i + 1..];
        }
        self.take(rest)?;
        Ok(n)
    }
}

/// A line past its bound.
#[derive(Debug)]
pub struct LineTooLong {
    pub line: u64,
    pub max_bytes: usize,
    /// Its first bytes, escaped to printable ASCII.
    pub head: String,
}

impl fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} is longer than {} bytes (it starts \"{}…\"): not a file of this kind",
            self.line, self.max_bytes, self.head
        )
    }
}

impl std::error::Error for LineTooLong {}

/// `bytes` as printable ASCII (`\n`, `\x00`, … for the rest), cut after about `QUOTED_BYTES`
/// characters.
pub fn quote(bytes: &[u8]) -> String {
    let mut out = String::new();
    for b in bytes {
        if out.len() >= QUOTED_BYTES {
            break;
        }
        out.extend(std::ascii::escape_default(*b).map(char::from));
    }
    out
}

/// A name from a file (a key, a header field) for a message: its first `QUOTED_BYTES`
/// characters, control characters escaped, `…` where it was cut.
pub fn quote_str(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(QUOTED_BYTES)
        .flat_map(char::escape_debug)
        .collect();
    if s.chars().nth(QUOTED_BYTES).is_some() {
        out.push('…');
    }
    out
}

/// A CSV reader of `path` whose every line is bounded by `max_line_bytes`.
pub fn csv_reader(
    path: &Path,
    max_line_bytes: usize,
    builder: &csv::ReaderBuilder,
) -> io::Result<csv::Reader<BoundedLines<File>>> {
    let file = File::open(path)?;
    Ok(builder.from_reader(BoundedLines::new(file, max_line_bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(input: &[u8], max: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        // A small buffer: lines cross reads.
        let mut r = BoundedLines::new(input, max);
        let mut buf = [0u8; 7];
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn lines_up_to_the_bound_pass_unchanged() {
        let text = b"0123456789\n0123456789\r\n\n012";
        assert_eq!(read_all(text, 11).unwrap(), text);
    }

    #[test]
    fn a_line_past_the_bound_is_named_and_quoted_printably() {
        let mut text = b"a,b\n".to_vec();
        text.extend_from_slice(b"\x1b[31m");
        text.extend(std::iter::repeat_n(b'x', 300));
        let e = read_all(&text, 64).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let inner = e.get_ref().unwrap().downcast_ref::<LineTooLong>().unwrap();
        assert_eq!(inner.line, 2);
        assert!(inner.head.starts_with("\\x1b[31mxxx"), "{}", inner.head);
        assert!(inner.head.len() <= QUOTED_BYTES + 4, "{}", inner.head);
        assert_eq!(
            e.to_string(),
            format!(
                "line 2 is longer than 64 bytes (it starts \"{}…\"): not a file of this kind",
                inner.head
            )
        );
    }
}

/// A small file whose whole text is parsed at once (a `config.json`, a usage script, a
/// summary): read whole when it is at most `max_bytes`, else refused before any of it is held
/// — an `InvalidData` error saying its size and the bound (`/dev/zero` and growing files
/// included: at most `max_bytes + 1` bytes are read).
pub fn read_small_text(path: &Path, max_bytes: u64) -> io::Result<String> {
    let too_big = |len: Option<u64>| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            match len {
                Some(len) => {
                    format!("it is {len} bytes, more than the {max_bytes} such a file may be")
                }
                None => format!("it holds more than the {max_bytes} bytes such a file may be"),
            },
        )
    };
    let file = File::open(path)?;
    if let Ok(m) = file.metadata()
        && m.is_file()
        && m.len() > max_bytes
    {
        return Err(too_big(Some(m.len())));
    }
    let mut bytes = Vec::new();
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_big(None));
    }
    String::from_utf8(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

#[cfg(test)]
mod small_text_tests {
    use super::*;

    #[test]
    fn a_file_over_the_bound_is_refused_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        let f = File::create(&path).unwrap();
        f.set_len(1 << 30).unwrap();
        let e = read_small_text(&path, 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is 1073741824 bytes, more than the 1048576 such a file may be"
        );
        let e = read_small_text(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it holds more than the 1048576 bytes such a file may be"
        );
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(read_small_text(&path, 1 << 20).unwrap(), "{}");
    }
}
