//! `headroom bandwidth`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

use crate::bandwidth::{measure, render};
use crate::cli::{BandwidthArgs, DeviceArgs};
use crate::device::select;
use crate::node::summary::NodeCommand;
use crate::node::{NodeJob, run_node};
use crate::run::default_keep_free;

pub fn bandwidth(
    dev: &DeviceArgs,
    args: &BandwidthArgs,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    if dev.device.is_node() {
        let job = NodeJob {
            command: NodeCommand::Bandwidth,
            label: "bandwidth".into(),
            input: None,
            workload_check: None,
            worker_args: vec![
                "bandwidth".into(),
                "--size".into(),
                format!("{}B", args.size).into(),
                "--repeats".into(),
                args.repeats.to_string().into(),
            ],
            out: args.out.clone(),
            results_root: "results".into(),
            shared_ok: args.shared_ok,
            json: args.json,
            quiet: false,
        };
        return run_node(dev, &job, interrupted);
    }
    if let Some(out) = &args.out {
        anyhow::ensure!(
            !out.exists(),
            "--out {}: already exists; results are never overwritten",
            out.display()
        );
    }
    let mut opened = select::open_noted(dev.request(), dev.one_gpu("bandwidth")?)?;
    let keep = default_keep_free(opened.device.info().total_bytes);
    let report = measure(opened.device.as_mut(), args.size, args.repeats, keep)?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{json}\n"))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if args.json {
        crate::outln!("{json}")?;
    } else {
        crate::out!("{}", render(&report))?;
    }
    Ok(if report.verify_mismatches == 0 { 0 } else { 1 })
}
