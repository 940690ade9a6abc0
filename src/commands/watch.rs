//! `headroom watch [--pid PID] -- CMD…`.

use std::sync::atomic::AtomicBool;

use crate::cli::{DeviceArgs, WatchArgs};
use crate::watch::{Target, WatchOptions};

pub fn watch(dev: &DeviceArgs, args: &WatchArgs, interrupted: &AtomicBool) -> anyhow::Result<i32> {
    let target = match (args.pid, args.command.is_empty()) {
        (Some(pid), true) => Target::Attach(pid),
        (None, false) => Target::Launch(args.command.clone()),
        (Some(_), false) => anyhow::bail!("give a command to run or --pid, not both"),
        (None, true) => anyhow::bail!("no command to watch: give it after -- (or --pid PID)"),
    };
    if args.process_interval == Some(0) {
        anyhow::bail!(
            "--process-interval must be above zero: the process list takes a global driver lock"
        );
    }
    if args.duration == Some(0) {
        anyhow::bail!("--duration must be above zero");
    }
    let torch = if args.torch {
        anyhow::ensure!(
            args.torch_max_entries > 0,
            "--torch-max-entries must be above zero"
        );
        Some(crate::torch_job::Bootstrap::prepare(
            args.torch_max_entries,
        )?)
    } else {
        None
    };
    let opts = WatchOptions {
        target,
        interval_ns: args.interval,
        process_interval_ns: args.process_interval,
        duration_ns: args.duration,
        out_dir: args.out.clone(),
        results_root: args.results.clone(),
        cuda_info: args.cuda_info,
        sim_script: args.sim_script.clone(),
        job_stdout_to_stderr: args.json,
        job_env: torch.as_ref().map(|t| t.job_env()).unwrap_or_default(),
        keep_orphans: args.keep_orphans,
        on_record: arm_watchdog_record,
    };
    let report = crate::watch::watch(dev, &opts, interrupted)?;
    if let Some(t) = &torch {
        // Never the job's outcome: what fails here is said, and the job's status stands.
        if let Err(e) = crate::torch_job::finish(t, &report.dir, &report.summary, &report.watch) {
            crate::errln!("warning: the job's PyTorch snapshots could not be read: {e:#}");
        }
    }
    if args.json {
        let mut v = serde_json::to_value(&report.summary)?;
        v["watch"] = serde_json::to_value(&report.watch)?;
        crate::outln!("{}", serde_json::to_string_pretty(&v)?)?;
    } else if !args.quiet {
        crate::output::eprint_table(&crate::watch::table::render(
            &report.summary,
            &report.watch,
            &report.dir,
        ));
    }
    Ok(report.exit_code)
}

/// What the watchdog writes when a driver call of the watch never returns: the watch's folder,
/// `failed` with the call's row — made then from what is known when the call came before the
/// folder, the folder's own record once it has begun; nothing once the watch has ended.
pub(super) fn arm_watchdog_record(state: crate::watch::Recording) {
    use crate::watch::Recording;
    let record = match state {
        Recording::Pending(pending) => Some(pending_watch_record(pending)),
        Recording::Begun(late, origin) => Some(crate::run::watchdog::watch_record(late, origin)),
        Recording::Ended => None,
    };
    crate::run::watchdog::on_fire(record);
}

/// The record of a watch stopped before its folder was begun: the folder made from what was
/// known (`Pending::begin`), then ended as a begun one is.
fn pending_watch_record(
    pending: Box<crate::watch::early::Pending>,
) -> crate::run::watchdog::OnFire {
    Box::new(
        move |f: &crate::run::watchdog::Fired| match pending.begin() {
            Ok((late, origin)) => crate::run::watchdog::watch_record(late, origin)(f),
            Err(e) => crate::errln!("warning: the watch's folder could not be made: {e:#}"),
        },
    )
}
