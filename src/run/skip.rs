//! A run that does not start because the workload does not fit the device (its stated
//! minimum total, a capability the device lacks): recorded as `skipped`, with the reason, in
//! a result folder like any other run's — the idle reading in `timeline.csv`, no events, every
//! phase `skipped`, `report.md` and `junit.xml` saying why — and exit 0. Nothing is allocated
//! and no kernel is loaded.

use std::time::SystemTime;

use anyhow::Context;

use crate::device::{Device, NvmlMemory};
use crate::folder::write_summary;
use crate::folder::{records, reports};
use crate::record::{NO_PHASE, Reading, Source};
use crate::report::summary::{PhaseStatus, RunStatus};
use crate::run::{RunOptions, RunReport, setup};
use crate::units::utc_timestamp;
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
    let mut summary = setup::initial_summary(
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
    for p in &mut summary.phases {
        p.status = PhaseStatus::Skipped;
    }
    let idle = &before.idle.after_context;
    let csv_path = |name: &str| dir.join(name).display().to_string();
    let phase_names = wl.phases.iter().map(|p| p.name.clone()).collect();
    let mut timeline = records::timeline(&dir, phase_names, info.total_bytes, start_ns)?;
    timeline.push(Reading {
        t_ns: idle.t_ns,
        phase: NO_PHASE,
        source: Source::Idle,
        device_free_bytes: idle.device_free_bytes,
        views: crate::record::idle_views(crate::alloc::AllocStats::default().views()),
    });
    timeline
        .flush()
        .with_context(|| format!("cannot write {}", csv_path("timeline.csv")))?;
    records::events(&dir)?
        .flush()
        .with_context(|| format!("cannot write {}", csv_path("events.csv")))?;
    // Like every run's folder: the allocation log, with its header and no call.
    records::empty_alloc_log(&dir)?;
    summary.status = RunStatus::Skipped;
    summary.status_detail = Some(reason);
    summary.end_ns = Some(start_ns);
    summary.timeline_rows = timeline.rows_written;
    summary.finished_utc = Some(utc_timestamp(SystemTime::now()));
    summary.exit_code = Some(0);
    write_summary(&dir, &summary)
        .with_context(|| format!("cannot write {}", csv_path("summary.json")))?;
    if let Err(e) = reports::write(&dir, &summary) {
        crate::errln!("warning: writing the run's reports: {e:#}");
    }
    Ok(RunReport {
        dir,
        summary,
        exit_code: 0,
    })
}
