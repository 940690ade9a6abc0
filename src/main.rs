//! The `headroom` binary: parse, dispatch, print `error: …`, exit with the command's code.

// Every print goes through `headroom::output` (see `src/lib.rs`).
#![deny(clippy::print_stdout)]
#![deny(clippy::print_stderr)]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;

fn main() -> ExitCode {
    let cli = headroom::cli::Cli::parse();
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    // First Ctrl-C: stop after the current step, release everything, write results.
    // Second: leave at once (the driver reclaims a dead process's memory).
    let _ = ctrlc::set_handler(move || {
        // Reading input holds nothing: leave at once.
        if headroom::signals::exit_at_once() {
            std::process::exit(130);
        }
        if flag.swap(true, Ordering::SeqCst) {
            headroom::tenant::stop_all();
            headroom::node::workers::kill_all();
            std::process::exit(130);
        }

        headroom::errln!(
            "\ninterrupted: stopping after this step and releasing device memory (Ctrl-C again to quit now)"
        );
    });
    match headroom::commands::dispatch(cli, interrupted) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            headroom::errln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
