//! Standard output for people and pipes. A reader that goes away (`headroom replay log.csv |
//! head -1`) ends the process quietly with exit 0, as ripgrep does; any other failure to write
//! (`> /dev/full`) is an error naming standard output (exit 2). Results on disk are written
//! before anything is printed, so neither loses them.

use std::io::Write;

/// Writes `text` to standard output and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
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
