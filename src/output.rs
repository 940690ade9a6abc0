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

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

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
