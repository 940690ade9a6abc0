//! The `headroom` binary: parse, dispatch, print `error: …`, exit with the command's code.

// Every print goes through `headroom::output` (see `src/lib.rs`).
#![deny(clippy::print_stdout)]
#![deny(clippy::print_stderr)]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match headroom::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // `--help` and `--version` go to standard output through the writer every command
        // uses, so a failed write (a full disk) is exit 2, not a silent 0.
        Err(e) if e.use_stderr() => e.exit(),
        Err(e) => {
            use std::io::IsTerminal;
            let styled = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let text = if styled {
                e.render().ansi().to_string()
            } else {
                e.render().to_string()
            };
            return match headroom::output::print(&text) {
                Ok(()) => ExitCode::SUCCESS,
                Err(w) => {
                    headroom::errln!("error: {w:#}");
                    ExitCode::from(2)
                }
            };
        }
    };
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
