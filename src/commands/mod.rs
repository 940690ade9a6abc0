//! One function per subcommand: each returns the process exit code, or an error (exit 2).

mod bandwidth;
mod calibrate;
mod compare;
pub mod completions;
mod crosscheck;
pub(crate) mod devices;
mod diff;
mod explain;
mod exporter;
mod hold;
pub(crate) mod import;
mod merge;
pub(crate) mod plan;
pub(crate) mod plan_model;
mod replay;
pub(crate) mod replay_torch;
mod report;
mod run;
mod validate;
pub(crate) mod validate_engine;
pub(crate) mod validate_model;
mod watch;
mod workloads;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::cli::{Cli, Command};

/// Runs the parsed command line. `interrupted` is set by Ctrl-C.
pub fn dispatch(cli: Cli, interrupted: Arc<AtomicBool>) -> anyhow::Result<i32> {
    // A node's worker stops, as if interrupted, when the node's process is gone.
    crate::node::workers::watch_parent(interrupted.clone());
    crate::output::set_color(cli.device.color);
    crate::output::set_quiet(match &cli.command {
        Command::Run(a) => a.quiet,
        Command::Watch(a) => a.quiet,
        Command::Validate(a) => a.quiet,
        _ => false,
    });
    // A first signal is honoured within the watchdog's bound even inside a stuck driver call.
    crate::run::watchdog::watch_signal(interrupted.clone());
    // The device crate's driver calls are watched, and its notices printed, as headroom's own.
    crate::device::watch::install(crate::device::watch::Hook {
        open: crate::run::watchdog::open_call,
        close: crate::run::watchdog::close_call,
    });
    crate::device::notice::install(|n| match n {
        crate::device::notice::Notice::Note(t) => crate::output::note(t),
        crate::device::notice::Notice::Warning(t) => crate::errln!("warning: {t}"),
    });
    match cli.command {
        Command::Devices { json } => devices::devices(&cli.device, json),
        Command::Run(args) => run::run(&cli.device, &args, interrupted),
        Command::Bandwidth(args) => bandwidth::bandwidth(&cli.device, &args, interrupted),
        Command::Hold(args) => hold::hold(&cli.device, &args, interrupted),
        Command::Calibrate(args) => calibrate::calibrate(&cli.device, &args, interrupted),
        Command::Crosscheck(args) => crosscheck::crosscheck(&args),
        Command::Replay(args) => replay::replay(&cli.device, &args),
        Command::Import(args) => import::import(&cli.device, &args),
        Command::Plan(args) => plan::plan(&cli.device, &args),
        Command::Validate(args) => validate::validate(&cli.device, &args, interrupted),
        Command::Report(args) => report::report(&args),
        Command::Compare(args) => compare::compare(&args),
        Command::Merge(args) => merge::merge(&args),
        Command::Diff(args) => diff::diff(&args),
        Command::Explain(args) => explain::explain(&args),
        Command::Watch(args) => watch::watch(&cli.device, &args, &interrupted),
        Command::Exporter(args) => exporter::exporter(&args, &interrupted),
        Command::Workloads(args) => workloads::workloads(&args),
        Command::Completions { shell } => completions::completions(shell),
        Command::Man { command } => completions::man(command.as_deref()),
    }
}
