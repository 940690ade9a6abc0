//! `headroom explain [MESSAGE…|FILE|-] [--file PATH|-] [--json]`.
//!
//! A text that fits in one chunk (4 MiB) is read whole and reported with "message N of M";
//! a longer one (a whole training log) is read a chunk at a time and each explanation is
//! printed as soon as its message is complete, so memory stays bounded whatever the size.

use std::io::{IsTerminal, Read};
use std::path::Path;

use anyhow::{Context, bail};

use crate::cli::ExplainArgs;
use crate::explain::{Explanation, FORMAT_VERSION, Groups, Report, explain_text, render};
use crate::oom_message::{Format, StreamScanner, Unrecognized};

/// The first read: texts up to this size are explained whole.
const WHOLE_BYTES: usize = crate::oom_message::STREAM_CHUNK_BYTES;

/// Each further read.
const READ_BYTES: usize = 1 << 20;

/// NUL and control bytes after which the input is refused as not a text log (`/dev/zero`,
/// `/dev/urandom`, a core dump): counted over everything read, so a binary input is refused
/// within its first few mebibytes, at the latest after the first read past this many.
pub const MAX_BINARY_BYTES: u64 = 1 << 20;

/// The bytes no text log holds: NUL and the C0 controls other than whitespace and ESC, and
/// DEL, as one-byte patterns of a searcher that skips ahead on rare bytes (memory speed, in
/// every build).
fn binary_search() -> &'static aho_corasick::AhoCorasick {
    static SEARCH: std::sync::OnceLock<aho_corasick::AhoCorasick> = std::sync::OnceLock::new();
    SEARCH.get_or_init(|| {
        let bytes: Vec<[u8; 1]> = (0u8..0x20)
            .filter(|b| !matches!(b, b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | 0x1b))
            .chain([0x7f])
            .map(|b| [b])
            .collect();
        aho_corasick::AhoCorasick::new(bytes).expect("single bytes build an automaton")
    })
}

/// How many bytes of `bytes` no text log holds.
fn binary_bytes(bytes: &[u8]) -> u64 {
    binary_search().find_iter(bytes).count() as u64
}

/// Distinct unrecognized lines kept for the report; the rest are counted.
const MAX_UNRECOGNIZED: usize = 1000;

/// Explanations kept for later messages to lean on (a TensorFlow tensor OOM on the BFC
/// allocator's message before it).
const EARLIER_KEPT: usize = 16;

/// Exit 0 when at least one message was explained, 1 when none was recognized.
pub fn explain(args: &ExplainArgs) -> anyhow::Result<i32> {
    // Nothing is held and nothing written but stdout: a signal ends the process at once.
    let _reading = crate::signals::loading();
    let mut input = match source(args) {
        Source::Words(text) => return report_whole(args, &text),
        Source::Stdin => Input::stdin(),
        Source::File(path) => Input::file(path)?,
    };
    let first = input.read_at_most(WHOLE_BYTES)?;
    if input.ended {
        return report_whole(args, &first);
    }
    stream(args, &mut input, first)
}

enum Source<'a> {
    Words(String),
    Stdin,
    File(&'a Path),
}

/// `-` and a lone argument naming an existing file are inputs; anything else is the message.
fn source(args: &ExplainArgs) -> Source<'_> {
    if let Some(path) = args.file.as_deref() {
        return if path.as_os_str() == "-" {
            Source::Stdin
        } else {
            Source::File(path)
        };
    }
    match args.message.as_slice() {
        [] => Source::Stdin,
        [one] if one == "-" => Source::Stdin,
        // A regular file, a pipe (`<(kubectl logs …)`) or a device: anything but a folder.
        [one]
            if !one.contains(char::is_whitespace)
                && Path::new(one).exists()
                && !Path::new(one).is_dir() =>
        {
            Source::File(Path::new(one))
        }
        words => Source::Words(words.join(" ")),
    }
}

struct Input {
    reader: Box<dyn Read>,
    name: String,
    ended: bool,
    read_bytes: u64,
    binary_bytes: u64,
    /// The start of a line (or of a character) cut by the last read.
    carry: Vec<u8>,
}

impl Input {
    fn stdin() -> Input {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            crate::errln!("reading the message from stdin (paste it, then Ctrl-D)");
        }
        Input::new(Box::new(stdin), "stdin".into())
    }

    fn file(path: &Path) -> anyhow::Result<Input> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        Ok(Input::new(Box::new(file), path.display().to_string()))
    }

    fn new(reader: Box<dyn Read>, name: String) -> Input {
        Input {
            reader,
            name,
            ended: false,
            read_bytes: 0,
            binary_bytes: 0,
            carry: Vec::new(),
        }
    }

    /// Up to `limit` more bytes as text, cut after the last newline when there is one (the
    /// rest is kept for the next read). Stray bytes become U+FFFD: an unreadable byte must not
    /// hide the message next to it.
    fn read_at_most(&mut self, limit: usize) -> anyhow::Result<String> {
        let mut buf = std::mem::take(&mut self.carry);
        let start = buf.len();
        buf.resize(start + limit, 0);
        let mut filled = start;
        while filled < buf.len() {
            let n = match self.reader.read(&mut buf[filled..]) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).with_context(|| format!("{}: cannot read", self.name)),
            };
            if n == 0 {
                self.ended = true;
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        let binary = binary_bytes(&buf[start..]);
        self.binary_bytes += binary;
        self.read_bytes += (filled - start) as u64;
        if self.binary_bytes > MAX_BINARY_BYTES {
            bail!(
                "{}: not a text log: {} NUL or control bytes in the first {} bytes (more than \
                 {MAX_BINARY_BYTES} is refused)",
                self.name,
                self.binary_bytes,
                self.read_bytes
            );
        }
        if !self.ended {
            let cut = match buf.iter().rposition(|&b| b == b'\n') {
                Some(i) => i + 1,
                // One very long line: cut it, on a character boundary.
                None => char_boundary(&buf),
            };
            self.carry = buf.split_off(cut);
        }
        // Valid UTF-8 (nearly every log) is taken as it is, without a copy.
        Ok(String::from_utf8(buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

/// The longest prefix of `buf` that does not end inside a UTF-8 sequence.
fn char_boundary(buf: &[u8]) -> usize {
    let mut end = buf.len();
    for back in 1..=3.min(buf.len()) {
        let b = buf[buf.len() - back];
        if b & 0xC0 != 0x80 {
            let width = if b >= 0xF0 {
                4
            } else if b >= 0xE0 {
                3
            } else if b >= 0xC0 {
                2
            } else {
                1
            };
            if width > back {
                end = buf.len() - back;
            }
            break;
        }
    }
    end
}

fn report_whole(args: &ExplainArgs, text: &str) -> anyhow::Result<i32> {
    let report = explain_text(text);
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        crate::out!("{}", render::render_text(&report))?;
    }
    Ok(if report.explanations.is_empty() { 1 } else { 0 })
}

/// Reads chunk by chunk and prints each explanation as its message completes; a repeat of a
/// message already explained is counted, and the counts follow the explanations.
fn stream(args: &ExplainArgs, input: &mut Input, first: String) -> anyhow::Result<i32> {
    let mut scanner = StreamScanner::new();
    let mut earlier: Vec<Explanation> = Vec::new();
    let mut unrecognized: Vec<Unrecognized> = Vec::new();
    let mut left_out = 0u64;
    let mut count = 0usize;
    let (mut messages_seen, mut lines_seen) = (Groups::new(), Groups::new());
    if args.json {
        crate::out!("{{\n  \"format_version\": {FORMAT_VERSION},\n  \"explanations\": [")?;
    }
    let mut piece = first;
    loop {
        let settled = if input.ended {
            let mut s = scanner.push(&piece);
            let rest = scanner.finish();
            s.messages.extend(rest.messages);
            s.unrecognized.extend(rest.unrecognized);
            s
        } else {
            scanner.push(&piece)
        };
        for u in settled.unrecognized {
            if lines_seen.distinct() < MAX_UNRECOGNIZED || lines_seen.knows(&u.text) {
                if lines_seen.see_line(&u) {
                    unrecognized.push(u);
                }
            } else {
                left_out += 1;
            }
        }
        for m in settled.messages {
            if !messages_seen.see_message(&m) {
                continue;
            }
            let e = crate::explain::explain(m, &earlier);
            count += 1;
            if args.json {
                let sep = if count == 1 { "\n" } else { ",\n" };
                crate::out!("{sep}{}", serde_json::to_string_pretty(&e)?)?;
            } else {
                if count > 1 {
                    crate::outln!()?;
                }
                crate::out!("{}", render::render_message(&e, count, None))?;
            }
            earlier.push(e);
            if earlier.len() > EARLIER_KEPT {
                earlier.remove(0);
            }
        }
        if input.ended {
            break;
        }
        piece = input.read_at_most(READ_BYTES)?;
    }
    let tail = Report {
        format_version: FORMAT_VERSION,
        explanations: Vec::new(),
        repeats: messages_seen.repeats(),
        unrecognized,
        unrecognized_repeats: lines_seen.repeats(),
        unrecognized_left_out: left_out,
        known_formats: Format::ALL.iter().map(|f| f.name()).collect(),
    };
    if args.json {
        let v = serde_json::to_value(&tail)?;
        crate::outln!(
            "\n  ],\n  \"repeats\": {},\n  \"unrecognized\": {},\n  \"unrecognized_repeats\": {},\n  \"unrecognized_left_out\": {left_out},\n  \"known_formats\": {}\n}}",
            serde_json::to_string(&v["repeats"])?,
            serde_json::to_string(&v["unrecognized"])?,
            serde_json::to_string(&v["unrecognized_repeats"])?,
            serde_json::to_string(&v["known_formats"])?
        )?;
    } else {
        crate::out!("{}", render::render_tail(&tail, count))?;
    }
    Ok(if count == 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_bytes_are_controls_other_than_whitespace_and_escape() {
        assert_eq!(binary_bytes(b"a\tb\nc\rd\x0b\x0c\x1b[0m"), 0);
        assert_eq!(binary_bytes(b"\0\x01\x08\x0e\x1f\x7f"), 6);
        assert_eq!(binary_bytes(&[0u8; 1000]), 1000);
    }

    #[test]
    fn cuts_never_split_a_character() {
        assert_eq!(char_boundary("abé".as_bytes()), 4);
        assert_eq!(char_boundary(&"abé".as_bytes()[..3]), 2);
        assert_eq!(char_boundary(b"abc"), 3);
        assert_eq!(char_boundary(&"a€".as_bytes()[..3]), 1);
    }
}
