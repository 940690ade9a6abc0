//! `headroom run WORKLOAD`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::cli::{DeviceArgs, RunArgs};
use crate::device::select;
use crate::report::table;
use crate::run::{RunOptions, run as run_workload};
use crate::workload::Workload;

pub fn run(dev: &DeviceArgs, args: &RunArgs, interrupted: Arc<AtomicBool>) -> anyhow::Result<i32> {
    // Every check that needs no device runs before the device is opened.
    Workload::load(&args.workload, u64::MAX)?;
    let opened = select::open(dev.backend, dev.index, dev.profile.as_deref())?;
    let wl = Workload::load(&args.workload, opened.device.info().total_bytes)?;
    let opts = RunOptions {
        out_dir: args.out.clone(),
        results_root: args.results.clone(),
        allow_oom: args.allow_oom,
        expect_oom: args.expect_oom,
        keep_free_bytes: args.keep_free,
        sample_interval_ns: args.sample_interval,
        fail_on_mismatch: args.fail_on_mismatch,
        interrupted,
        plan: None,
    };
    let report = run_workload(&wl, opened, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.summary)?);
    } else if !args.quiet {
        print!("{}", table::render(&report.summary, &report.dir));
    }
    Ok(report.exit_code)
}
