//! The `headroom` binary: parse, dispatch, print `error: …`, exit with the command's code.

// Every print goes through `headroom::output` (see `src/lib.rs`).
#![deny(clippy::print_stdout)]
#![deny(clippy::print_stderr)]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;

fn main() -> ExitCode {
    let cli = headroom::cli::Cli::parse();
    let interrupted = Arc::new(AtomicBool::new(false));
    // First signal: stop after the current step, release everything, write results; only a
    // deliberate second Ctrl-C at the terminal leaves at once (src/signals.rs).
    if let Err(e) = headroom::signals::install(interrupted.clone()) {
        headroom::errln!("warning: cannot install the signal handlers: {e}");
    }
    match headroom::commands::dispatch(cli, interrupted) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            headroom::errln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
