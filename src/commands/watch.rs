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
        keep_orphans: args.keep_orphans,
        on_record: |late| {
            let record =
                late.map(|(late, origin)| crate::run::watchdog::watch_record(late, origin));
            crate::run::watchdog::on_fire(record);
        },
    };
    let report = crate::watch::watch(dev, &opts, interrupted)?;
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
