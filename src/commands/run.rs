//! `headroom run WORKLOAD`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::cli::{DeviceArgs, RunArgs};
use crate::device::select::{self, Opened};
use crate::node::summary::NodeCommand;
use crate::node::{NodeJob, run_node};
use crate::report::table;
use crate::run::{RunOptions, TenantLaunch, record_skipped, run as run_workload};
use crate::units::Bytes;
use crate::workload::{Rank, WorkloadFile, fit};

/// Set to 1 to have `tenant` steps start a real `headroom hold` child on the simulator too
/// (it holds no memory there); tests use it to check that children are always reaped.
pub const TENANT_PROCESS_ENV: &str = "HEADROOM_TENANT_PROCESS";

pub fn run(dev: &DeviceArgs, args: &RunArgs, interrupted: Arc<AtomicBool>) -> anyhow::Result<i32> {
    if dev.device.is_node() {
        // Each worker's workload is checked (for its rank) before any of them starts; the
        // node folder is named after the file (a name may carry `{rank}`).
        let stem = args
            .workload
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy();
        return run_node(dev, &node_job(args, &stem), interrupted);
    }
    // The file is read once (for this run's rank); every check that needs no device runs
    // before it is opened. While it is read and expanded nothing is written and no memory
    // taken, so a signal then ends the process at once.
    crate::run::watchdog::set_budget(args.watchdog);
    let loading = crate::signals::loading();
    let file = WorkloadFile::read_ranked(&args.workload, Rank::from_env()?)?;
    file.check()?;
    drop(loading);
    let mut opened = select::open_noted(dev.request(), dev.one_gpu("run")?)?;
    if !args.shared_ok {
        refuse_shared(&mut opened)?;
    }
    let info = opened.device.info().clone();
    let too_small = fit::unfit_total(file.min_total_bytes(), &info);
    if let Some(why) = &too_small {
        refuse_unless_skipping(args, why)?;
    }
    let loading = crate::signals::loading();
    let wl = match (file.expand(info.total_bytes), &too_small) {
        (Ok(wl), _) => wl,
        // A workload too large for the device may not expand for it: the skip records its
        // phases as the file check expanded them.
        (Err(_), Some(_)) => file.expand(u64::MAX)?,
        (Err(e), None) => return Err(e.into()),
    };
    drop(loading);
    let unfit = too_small.or_else(|| fit::unfit_capabilities(&wl, &info));
    if let Some(why) = &unfit {
        refuse_unless_skipping(args, why)?;
    }
    let opts = RunOptions {
        out_dir: args.out.clone(),
        results_root: args.results.clone(),
        allow_oom: args.allow_oom,
        expect_oom: args.expect_oom,
        keep_free_bytes: args.keep_free,
        sample_interval_ns: args.sample_interval,
        fail_on_mismatch: args.fail_on_mismatch,
        tenant_launch: tenant_launch(&opened, dev)?,
        interrupted,
        progress: !args.quiet,
        plan: None,
        watchdog_ns: args.watchdog,
    };
    let report = match unfit {
        Some(why) => {
            if let Some(n) = &opened.notice {
                crate::output::note(n);
            }
            crate::output::info(&format!("skipped: {}: {why}", args.workload.display()));
            record_skipped(
                &wl,
                opened.device.as_mut(),
                opened.before_context,
                &opts,
                why,
            )?
        }
        None => run_workload(&wl, opened, &opts)?,
    };
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report.summary)?)?;
    } else if !args.quiet {
        crate::output::print_table(&table::render(&report.summary, &report.dir))?;
    }
    Ok(report.exit_code)
}

/// A workload that does not fit the device is refused (exit 2) unless `--skip-unfit` asks
/// for a skip.
fn refuse_unless_skipping(args: &RunArgs, why: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.skip_unfit,
        "{}: does not fit this device: {why}; pass --skip-unfit to record the run as skipped \
         (exit 0)",
        args.workload.display()
    );
    Ok(())
}

/// headroom never stresses a GPU that other processes are using unless told so.
fn refuse_shared(opened: &mut Opened) -> anyhow::Result<()> {
    let Some(ps) = opened.device.processes() else {
        return Ok(());
    };
    let nvml_used = opened.device.nvml_memory().map(|m| m.used_bytes);
    if let Some(why) = crate::device::process_list_doubt(&ps, nvml_used) {
        crate::output::note(&format!(
            "the driver's process list cannot be trusted here ({why}); whether other \
             processes use this GPU is not known, and it is not refused on that evidence"
        ));
        return Ok(());
    }
    let others: Vec<String> = ps
        .iter()
        .filter(|p| !p.is_self && p.used_bytes != Some(0))
        .map(|p| {
            format!(
                "pid {} ({})",
                p.pid,
                p.used_bytes
                    .map_or("usage unknown".into(), |b| Bytes(b).to_string())
            )
        })
        .collect();
    if !others.is_empty() {
        let d = opened.device.info();
        anyhow::bail!(
            "GPU {} ({}) is in use by {}; headroom does not put a shared GPU under pressure unless you pass --shared-ok",
            d.index,
            d.name,
            others.join(", ")
        );
    }
    Ok(())
}

fn tenant_launch(opened: &Opened, dev: &DeviceArgs) -> anyhow::Result<Option<TenantLaunch>> {
    let info = opened.device.info();
    let forced = std::env::var(TENANT_PROCESS_ENV).is_ok_and(|v| v == "1");
    if info.is_sim() && !forced {
        return Ok(None);
    }
    let mut device_args = vec![
        "--backend".to_string(),
        info.backend.to_string(),
        "--device".to_string(),
        dev.one_gpu("run")?.to_string(),
    ];
    if let Some(p) = &dev.profile {
        device_args.extend(["--profile".to_string(), p.clone()]);
    }
    Ok(Some(TenantLaunch {
        exe: std::env::current_exe()?,
        device_args,
    }))
}

/// The same run on every GPU of a node: each worker gets these arguments (and its `--out`).
fn node_job(args: &RunArgs, label: &str) -> NodeJob {
    let mut w: Vec<std::ffi::OsString> =
        vec!["run".into(), args.workload.clone().into(), "--quiet".into()];
    let flags = [
        (args.allow_oom, "--allow-oom"),
        (args.expect_oom, "--expect-oom"),
        (args.fail_on_mismatch, "--fail-on-mismatch"),
        (args.shared_ok, "--shared-ok"),
        (args.skip_unfit, "--skip-unfit"),
    ];
    w.extend(flags.iter().filter(|(on, _)| *on).map(|(_, f)| (*f).into()));
    if let Some(b) = args.keep_free {
        w.extend(["--keep-free".into(), format!("{b}B").into()]);
    }
    if let Some(ns) = args.sample_interval {
        w.extend(["--sample-interval".into(), format!("{ns}ns").into()]);
    }
    if let Some(ns) = args.watchdog {
        w.extend(["--watchdog".into(), format!("{ns}ns").into()]);
    }
    NodeJob {
        command: NodeCommand::Run,
        label: label.to_string(),
        input: Some(args.workload.clone()),
        worker_args: w,
        workload_check: Some(args.workload.clone()),
        out: args.out.clone(),
        results_root: args.results.clone(),
        shared_ok: args.shared_ok,
        json: args.json,
        quiet: args.quiet,
    }
}
