//! A forward-only reader over a window of text, for the format readers.
//!
//! Every step either consumes what it expects or leaves the position where it was, so a
//! reader tries alternatives without backtracking over more than one token. A space in an
//! expected literal matches one or more whitespace characters of any kind: logs and pasted
//! messages wrap lines where the framework printed one space.

use super::size::{
    ByteRange, Quantity, ggml_mib_bytes, mps_bytes, paddle_bytes, torch_bytes, tsl_bytes,
    vllm_gib_bytes,
};

/// The largest char boundary at or below `i`.
pub fn floor_boundary(text: &str, i: usize) -> usize {
    let mut i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    text: &'a str,
    pub pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    /// Reads `text[pos..end]`; `end` is brought down to a char boundary.
    pub fn new(text: &'a str, pos: usize, end: usize) -> Cursor<'a> {
        let end = floor_boundary(text, end);
        Cursor {
            text,
            pos: floor_boundary(text, pos.min(end)),
            end,
        }
    }

    #[cfg(test)]
    pub fn rest(&self) -> &'a str {
        &self.text[self.pos..self.end]
    }

    pub fn skip_ws(&mut self) -> usize {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        while self.pos < self.end && bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Skips spaces and tabs only: stays on the line.
    pub fn skip_blanks(&mut self) {
        let bytes = self.text.as_bytes();
        while self.pos < self.end && matches!(bytes[self.pos], b' ' | b'\t') {
            self.pos += 1;
        }
    }

    /// Consumes `lit`, where each run of spaces matches one or more whitespace characters.
    pub fn lit(&mut self, lit: &str) -> bool {
        self.matches(lit, 1)
    }

    /// As `lit`, but a run of spaces may also match nothing (`"(rounded to 8)requested"`).
    pub fn lit_loose(&mut self, lit: &str) -> bool {
        self.matches(lit, 0)
    }

    fn matches(&mut self, lit: &str, min_ws: usize) -> bool {
        let start = self.pos;
        let want = lit.as_bytes();
        let bytes = self.text.as_bytes();
        let mut i = 0;
        while i < want.len() {
            if want[i] == b' ' {
                while i < want.len() && want[i] == b' ' {
                    i += 1;
                }
                if self.skip_ws() < min_ws {
                    self.pos = start;
                    return false;
                }
            } else if self.pos < self.end && bytes[self.pos] == want[i] {
                self.pos += 1;
                i += 1;
            } else if i > 0
                && want[i - 1] != b' '
                && self.pos + 1 < self.end
                && bytes[self.pos] == b' '
                && bytes[self.pos + 1] == want[i]
            {
                // A terminal's hard wrap inside a word ("KV cach\ne is needed").
                self.pos += 1;
            } else {
                self.pos = start;
                return false;
            }
        }
        true
    }

    /// Runs `f`; when it returns `None`, puts the position back.
    pub fn attempt<T>(&mut self, f: impl FnOnce(&mut Cursor<'a>) -> Option<T>) -> Option<T> {
        let start = self.pos;
        let out = f(self);
        if out.is_none() {
            self.pos = start;
        }
        out
    }

    pub fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        while self.pos < self.end && keep(bytes[self.pos]) {
            self.pos += 1;
        }
        &self.text[start..self.pos]
    }

    /// Digits, at most 20 of them (a u64).
    pub fn uint(&mut self) -> Option<u64> {
        self.attempt(|c| {
            let digits = c.take_while(|b| b.is_ascii_digit());
            if digits.is_empty() || digits.len() > 20 {
                return None;
            }
            digits.parse().ok()
        })
    }

    /// A device index as PyTorch prints it: digits, or one control character where it printed
    /// its 8-bit `DeviceIndex` as a character (device 1 is `\x01`; devices 9 to 13 are
    /// whitespace, which cannot be told from the space around it, and 0 is the NUL that ends
    /// the text).
    pub fn device_index(&mut self) -> Option<u32> {
        if let Some(n) = self.uint() {
            return u32::try_from(n).ok();
        }
        let b = *self
            .text
            .as_bytes()
            .get(self.pos)
            .filter(|_| self.pos < self.end)?;
        if b.is_ascii_control() && !b.is_ascii_whitespace() && b != 0 && b != 0x7f {
            self.pos += 1;
            return Some(u32::from(b));
        }
        None
    }

    /// Whether the window ends here or a digit does not follow.
    pub fn at_end_or_not_digit(&self) -> bool {
        self.pos >= self.end || !self.text.as_bytes()[self.pos].is_ascii_digit()
    }

    /// A signed integer, as NCCL and `%d` print error codes.
    pub fn int(&mut self) -> Option<i64> {
        self.attempt(|c| {
            let negative = c.lit_loose("-");
            let v = i64::try_from(c.uint()?).ok()?;
            Some(if negative { -v } else { v })
        })
    }

    /// A decimal literal as text (`"79.11"`), not yet interpreted; at most 40 characters.
    pub fn number_text(&mut self) -> Option<&'a str> {
        self.attempt(|c| {
            let end = c.end;
            c.end = (c.pos + 40).min(end);
            let t = c.take_while(|b| b.is_ascii_digit() || b == b'.');
            c.end = end;
            (!t.is_empty() && t.bytes().any(|b| b.is_ascii_digit())).then_some(t)
        })
    }

    /// A run of characters up to whitespace or any of `stops`.
    pub fn token(&mut self, stops: &[u8]) -> Option<&'a str> {
        let t = self.take_while(|b| !b.is_ascii_whitespace() && !stops.contains(&b));
        (!t.is_empty()).then_some(t)
    }

    /// Everything up to (not including) `stop`, at most 512 bytes ahead and not past a newline.
    pub fn until_on_line(&mut self, stop: u8) -> Option<&'a str> {
        self.attempt(|c| {
            let end = c.end;
            c.end = floor_boundary(c.text, (c.pos + 512).min(end));
            let t = c.take_while(|b| b != stop && b != b'\n');
            let hit = c.pos < c.end && c.text.as_bytes()[c.pos] == stop;
            c.end = end;
            hit.then_some(t)
        })
    }

    /// A size as PyTorch's `format_size` prints it: `786.00 MiB`, `0 bytes`.
    pub fn torch_size(&mut self) -> Option<Quantity> {
        self.spaced_size(torch_bytes)
    }

    /// A number, white space and a unit word, converted by `bytes` (number, unit).
    fn spaced_size(&mut self, bytes: fn(&str, &str) -> Option<ByteRange>) -> Option<Quantity> {
        self.attempt(|c| {
            let start = c.pos;
            let number = c.number_text()?;
            if c.skip_ws() == 0 {
                return None;
            }
            // Markdown's emphasis ends a unit ("GiB**"), as punctuation does.
            let unit = c.token(b".,;:()\"'`*")?;
            let bytes = bytes(number, unit)?;
            Some(Quantity {
                printed: c.text[start..c.pos].to_string(),
                bytes,
            })
        })
    }

    /// A size as tsl's `HumanReadableNumBytes` prints it: `16.00GiB`, `512B`.
    pub fn tsl_size(&mut self) -> Option<Quantity> {
        self.attempt(|c| {
            let start = c.pos;
            c.number_text()?;
            c.take_while(|b| b.is_ascii_alphabetic());
            let printed = &c.text[start..c.pos];
            Some(Quantity {
                printed: printed.to_string(),
                bytes: tsl_bytes(printed)?,
            })
        })
    }

    /// A size as PaddlePaddle's `HumanReadableSize` prints it: `145.468994MB`, `0.000000B`.
    pub fn paddle_size(&mut self) -> Option<Quantity> {
        self.attempt(|c| {
            let start = c.pos;
            let number = c.number_text()?;
            let unit = c.take_while(|b| b.is_ascii_alphabetic());
            Some(Quantity {
                printed: c.text[start..c.pos].to_string(),
                bytes: paddle_bytes(number, unit)?,
            })
        })
    }

    /// A size as PyTorch's MPS allocator prints it: `9.05 GB`, `292.50 MiB`, `256 bytes`.
    pub fn mps_size(&mut self) -> Option<Quantity> {
        self.spaced_size(mps_bytes)
    }

    /// ggml's `%.2f MiB`: `144817.04 MiB`, or `1900,00 MiB` under a comma locale.
    pub fn ggml_mib(&mut self) -> Option<Quantity> {
        self.attempt(|c| {
            let start = c.pos;
            let number = c.take_while(|b| b.is_ascii_digit() || b == b'.' || b == b',');
            if number.is_empty() || number.len() > 40 {
                return None;
            }
            let bytes = ggml_mib_bytes(number)?;
            c.lit(" MiB").then_some(())?;
            Some(Quantity {
                printed: c.text[start..c.pos].to_string(),
                bytes,
            })
        })
    }

    /// A number vLLM printed with `format_gib` (the ` GiB` after it is the caller's).
    pub fn vllm_gib(&mut self) -> Option<Quantity> {
        self.attempt(|c| {
            let number = c.number_text()?;
            Some(Quantity {
                printed: format!("{number} GiB"),
                bytes: vllm_gib_bytes(number)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_match_any_whitespace_and_failures_rewind() {
        let text = "is reserved by\n   PyTorch but";
        let mut c = Cursor::new(text, 0, text.len());
        assert!(!c.lit("is reserved at"));
        assert_eq!(c.pos, 0);
        assert!(c.lit("is reserved by PyTorch"));
        assert_eq!(c.rest(), " but");
        let text = "KV cach e is needed";
        let mut c = Cursor::new(text, 0, text.len());
        assert!(c.lit("KV cache is needed"));
        let mut c = Cursor::new("8)requested", 0, 11);
        assert_eq!(c.uint(), Some(8));
        assert!(!c.clone().lit(") requested"));
        assert!(c.lit_loose(") requested"));
    }

    #[test]
    fn sizes_keep_their_printed_text() {
        let text = "786.00 MiB. GPU";
        let mut c = Cursor::new(text, 0, text.len());
        let q = c.torch_size().unwrap();
        assert_eq!(q.printed, "786.00 MiB");
        assert_eq!(c.rest(), ". GPU");
        let mut c = Cursor::new("16.00GiB.", 0, 9);
        assert_eq!(c.tsl_size().unwrap().printed, "16.00GiB");
        let mut c = Cursor::new("7.0 GiB", 0, 7);
        assert_eq!(c.vllm_gib().unwrap().printed, "7.0 GiB");
    }

    #[test]
    fn windows_end_on_char_boundaries() {
        let text = "1.00 Mié";
        let c = Cursor::new(text, 0, text.len() - 1);
        assert!(c.rest().is_char_boundary(c.rest().len()));
        let mut c = Cursor::new(text, 0, text.len());
        assert!(c.torch_size().is_none());
        assert_eq!(c.pos, 0);
    }
}
