//! Standard output for people and pipes. A reader that goes away (`headroom replay log.csv |
//! head -1`) ends the output quietly, as ripgrep does, but not the command: what is left to
//! print is dropped, and the process still exits with the command's own code (a failed
//! expectation stays 1 behind `| head -1`). Any other failure to write (`> /dev/full`) is an
//! error naming standard output (exit 2). Results on disk are written before anything is
//! printed, so neither loses them.
//!
//! Standard error (notes, warnings, errors, the terminal's tables of `watch`) goes through
//! `eprint`: a closed or full stderr (`watch … 2>&1 | true`, `2>/dev/full`) drops the text
//! quietly and never changes the exit code. Every print of the crate goes through this module:
//! clippy's `print_stdout` and `print_stderr` are denied everywhere else.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// `--color`: when the tables people read are coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorWhen {
    /// When the stream is a terminal, `NO_COLOR` is unset or empty and `TERM` is not `dumb`.
    #[default]
    Auto,
    /// Always (also through a pipe, and over `NO_COLOR`).
    Always,
    /// Never.
    Never,
}

static COLOR: AtomicU8 = AtomicU8::new(0);
/// `-q`: notes and progress lines are not printed; errors and warnings still are.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Sets `--color` for the whole process.
pub fn set_color(when: ColorWhen) {
    COLOR.store(when as u8, Ordering::Relaxed);
}

/// Sets `-q` for the whole process.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Whether text for a stream that `is_tty` gets colour.
fn coloured(is_tty: bool) -> bool {
    match COLOR.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            is_tty
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    }
}

const RED: &str = "\x1b[1;31m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

/// The colour of a line of a terminal table: red for an OOM, a failed run, expectation or
/// claim, a violated margin; yellow for skipped, stopped and interrupted.
fn line_colour(line: &str) -> Option<&'static str> {
    if line.starts_with("expect ") {
        return line.ends_with("[FAILED]").then_some(RED);
    }
    // An OOM's findings and next checks explain it; the OOM line itself is the one coloured.
    if line.starts_with("  - ") || line.starts_with("  next: ") {
        return None;
    }
    let words: Vec<&str> = line
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'))
        .collect();
    let mut colour = None;
    for (i, w) in words.iter().enumerate() {
        // "OOM allowed" says what a run may do, not what happened.
        let allowed = words.get(i + 1) == Some(&"allowed");
        match *w {
            "OOM" | "oom" | "failed" | "FAILED" | "VIOLATED" | "violated" if !allowed => {
                return Some(RED);
            }
            "skipped" | "stopped" | "stopped_at_floor" | "interrupted" | "wedged" => {
                colour = Some(YELLOW)
            }
            _ => {}
        }
    }
    colour
}

/// `text` with its OOM, failed and skipped lines coloured when `on`.
pub fn highlight(text: &str, on: bool) -> String {
    if !on {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let (body, nl) = line.strip_suffix('\n').map_or((line, ""), |b| (b, "\n"));
        match line_colour(body) {
            Some(c) => {
                out.push_str(c);
                out.push_str(body);
                out.push_str(RESET);
                out.push_str(nl);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Prints a table for people to standard output, coloured as `--color` says.
pub fn print_table(text: &str) -> anyhow::Result<()> {
    print(&highlight(text, coloured(std::io::stdout().is_terminal())))
}

/// Prints a table for people to standard error, coloured as `--color` says.
pub fn eprint_table(text: &str) {
    eprint(&highlight(text, coloured(std::io::stderr().is_terminal())))
}

/// `note: TEXT` on standard error, unless `-q`.
pub fn note(text: &str) {
    info(&format!("note: {text}"));
}

/// A line for the person watching on standard error, unless `-q`.
pub fn info(line: &str) {
    if !quiet() {
        eprint(&format!("{line}\n"));
    }
}

/// Set once a write found the reader gone: nothing more is written.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output and flushes it; once the reader has gone, does nothing.
pub fn print(text: &str) -> anyhow::Result<()> {
    print_bytes(text.as_bytes())
}

/// Writes `bytes` (a CSV as written to a file) to standard output, as `print` does.
pub fn print_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// Standard output as an `io::Write` (a CSV writer's sink), through `print_bytes`: a reader
/// that has gone drops the rest, any other failure is an error.
pub struct StdoutBytes;

impl Write for StdoutBytes {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        print_bytes(bytes).map_err(std::io::Error::other)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `text` to standard error; a closed or full stderr is ignored (there is nowhere
/// left to say so).
pub fn eprint(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
}

/// `eprint!` to standard error, as `output::eprint` handles it: `err!("{x}")`.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::eprint(&format!($($arg)*))
    };
}

/// `eprintln!` to standard error, as `output::eprint` handles it: `errln!("{x}")`.
#[macro_export]
macro_rules! errln {
    () => {
        $crate::output::eprint("\n")
    };
    ($($arg:tt)*) => {
        $crate::output::eprint(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` to standard output, as `output::print` handles it: `out!("{x}")?`.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print(&format!($($arg)*))
    };
}

/// `println!` to standard output, as `output::print` handles it: `outln!("{x}")?`.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::print("\n")
    };
    ($($arg:tt)*) => {
        $crate::output::print(&format!("{}\n", format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_failed_and_skipped_rows_are_coloured_and_nothing_else() {
        for (line, want) in [
            ("headroom · w on tiny · oom (fragmentation)", Some(RED)),
            ("request          oom        65.9 µs    4.00 GiB", Some(RED)),
            (
                "OOM (fragmentation) at request/s1 (allocate big): …",
                Some(RED),
            ),
            ("expect oom: false — true [FAILED]", Some(RED)),
            ("expect oom: false — false [held]", None),
            ("      17 margin violated         3.81 GiB", Some(RED)),
            ("probes (each a run in its folder, OOM allowed; …):", None),
            ("skipped: workloads/serving.toml: too small", Some(YELLOW)),
            ("a     stopped 8.0 µs  256.00 MiB", Some(YELLOW)),
            ("  - release_available_cached_blocks: skipped", None),
            ("view                 idle  true peak", None),
        ] {
            assert_eq!(line_colour(line), want, "{line}");
        }
        let text = "a\nOOM at x\n";
        assert_eq!(highlight(text, false), text);
        assert_eq!(highlight(text, true), format!("a\n{RED}OOM at x{RESET}\n"));
    }
}
