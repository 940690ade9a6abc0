//! One function per subcommand: each returns the process exit code, or an error (exit 2).

mod devices;
mod plan;
mod run;
mod validate;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::cli::{Cli, Command};

/// Runs the parsed command line. `interrupted` is set by Ctrl-C.
pub fn dispatch(cli: Cli, interrupted: Arc<AtomicBool>) -> anyhow::Result<i32> {
    match cli.command {
        Command::Devices { json } => devices::devices(&cli.device, json),
        Command::Run(args) => run::run(&cli.device, &args, interrupted),
        Command::Plan(args) => plan::plan(&cli.device, &args),
        Command::Validate(args) => validate::validate(&cli.device, &args, interrupted),
    }
}
