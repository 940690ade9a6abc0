//! A run that does not start because the workload does not fit the device (its stated
//! minimum total, a capability the device lacks): recorded as `skipped`, with the reason, in
//! a result folder like any other run's — the idle reading in `timeline.csv`, no events, every
//! phase `skipped`, `report.md` and `junit.xml` saying why — and exit 0. Nothing is allocated
//! and no kernel is loaded.

use std::time::SystemTime;

use anyhow::Context;

use crate::device::{Device, NvmlMemory};
use crate::folder::{RunFolder, records};
use crate::record::{NO_PHASE, Reading, Source};
use crate::report::summary::{PhaseStatus, RunStatus};
use crate::run::{RunOptions, RunReport, setup};
use crate::workload::Workload;

/// Records `wl` as skipped on `device` because of `reason`.
pub fn record_skipped(
    wl: &Workload,
    device: &mut dyn Device,
    before_context: Option<NvmlMemory>,
    opts: &RunOptions,
    reason: String,
) -> anyhow::Result<RunReport> {
    let started = SystemTime::now();
    let dir = opts.create_folder(wl, started)?;
    let info = device.info().clone();
    let mut before = setup::idle_reading(device, before_context, None)?;
    let start_ns = device.now_ns();
    let summary = setup::initial_summary(
        setup::SummaryStart {
            wl,
            device: info.clone(),
            started,
            start_ns,
            sample_interval_ns: opts.sample_interval_ns_for(wl),
            keep_free_bytes: opts.keep_free_bytes_for(wl, info.total_bytes),
            allow_oom: opts.allow_oom_for(wl),
            plan: opts.plan.clone(),
        },
        &mut before,
    );
    let idle = &before.idle.after_context;
    let csv_path = |name: &str| dir.join(name).display().to_string();
    let phase_names = wl.phases.iter().map(|p| p.name.clone()).collect();
    let mut folder = RunFolder::create(&dir, summary, phase_names, start_ns)?;
    folder.phases_from(0, PhaseStatus::Skipped);
    let record = folder.record_mut();
    record.reading(Reading {
        t_ns: idle.t_ns,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle.device_free_bytes,
        views: crate::record::idle_views(crate::alloc::AllocStats::default().views()),
    });
    record
        .flush_timeline()
        .with_context(|| format!("cannot write {}", csv_path("timeline.csv")))?;
    record
        .flush_events()
        .with_context(|| format!("cannot write {}", csv_path("events.csv")))?;
    // Like every run's folder: the allocation log, with its header and no call.
    records::empty_alloc_log(&dir)?;
    folder.set_status(RunStatus::Skipped, Some(reason));
    folder.set_end_ns(start_ns);
    folder.fill_rows();
    folder.stamp_finished();
    folder.set_exit_code(0);
    folder
        .write_summary()
        .with_context(|| format!("cannot write {}", csv_path("summary.json")))?;
    if let Err(e) = folder.write_reports(false) {
        crate::errln!("warning: writing the run's reports: {e:#}");
    }
    let summary = folder.into_summary();
    Ok(RunReport {
        dir,
        summary,
        exit_code: 0,
    })
}
