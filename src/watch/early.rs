//! A watch's record before its folder is begun: what is known so far (the device's facts,
//! the idle reading once taken), from which the watchdog makes the folder when a driver call
//! made before it never returns — so a hang at NVML's open, the idle readings or the process
//! list's measured cost still leaves a `failed` folder naming the call.

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use anyhow::Context;

use crate::device::DeviceInfo;
use crate::folder::{LateWrite, Record};
use crate::record::{NO_PHASE, Reading, Source, ViewSet};
use crate::report::summary::{Idle, IdleReading, Summary, SummaryStart, WorkloadInfo};
use crate::units::{utc_folder_stamp, utc_timestamp};

use super::{Target, WatchOptions, job_name, start};

/// What a watch knows before its folder exists.
#[derive(Clone)]
pub struct Pending {
    out_dir: Option<PathBuf>,
    results_root: PathBuf,
    target: Target,
    interval_ns: u64,
    origin: Instant,
    origin_wall: SystemTime,
    info: DeviceInfo,
    /// The idle reading, once taken: `(t_ns, device free, device total)`.
    idle: Option<(u64, u64, u64)>,
}

impl Pending {
    pub fn new(
        opts: &WatchOptions,
        (origin, origin_wall): (Instant, SystemTime),
        info: &DeviceInfo,
    ) -> Pending {
        Pending {
            out_dir: opts.out_dir.clone(),
            results_root: opts.results_root.clone(),
            target: opts.target.clone(),
            interval_ns: opts.interval_ns,
            origin,
            origin_wall,
            info: info.clone(),
            idle: None,
        }
    }

    /// The same, with the idle reading taken.
    pub fn with_idle(&self, t_ns: u64, free_bytes: u64, total_bytes: u64) -> Pending {
        Pending {
            idle: Some((t_ns, free_bytes, total_bytes)),
            ..self.clone()
        }
    }

    /// The same, its folder made (empty) by the watch.
    pub fn in_dir(&self, dir: &std::path::Path) -> Pending {
        Pending {
            out_dir: Some(dir.to_path_buf()),
            ..self.clone()
        }
    }

    /// Makes the folder as it stands: `summary.json` `running` with the device and the idle
    /// reading when taken, `timeline.csv` with that reading, `events.csv`; a late write
    /// (with the watch's clock origin) to end it with.
    pub fn begin(&self) -> anyhow::Result<(LateWrite, Instant)> {
        let dir = crate::outdir::create(
            self.out_dir.as_deref(),
            &self.results_root,
            &utc_folder_stamp(self.origin_wall),
            &job_name(&self.target),
        )?;
        let total_bytes = self.idle.map_or(self.info.total_bytes, |i| i.2);
        let mut record = Record::create(&dir, Vec::new(), total_bytes, 0)?;
        record.set_flush_each_row(true);
        if let Some((t_ns, free, _)) = self.idle {
            record.reading(Reading {
                t_ns,
                phase: NO_PHASE,
                source: Source::Idle,
                device_free_bytes: free,
                views: ViewSet::default(),
            });
        }
        record
            .flush_timeline()
            .with_context(|| format!("cannot write {}", dir.join("timeline.csv").display()))?;
        let command = start::command_words(&self.target);
        let summary = Summary::begin(SummaryStart {
            workload: WorkloadInfo {
                name: job_name(&self.target),
                file: command.as_deref().map_or(
                    "the process attached to".into(),
                    crate::report::watch_markdown::shell_words,
                ),
                description: "headroom watch that ended before its job started".into(),
                allocator: crate::alloc::AllocatorKind::Direct,
                allocator_settings: serde_json::json!({
                    "watch": "headroom allocated nothing: the job's memory is whatever its own allocator took from the driver"
                }),
                sample_interval_ns: self.interval_ns,
                keep_free_bytes: 0,
                allow_oom: true,
            },
            device: DeviceInfo {
                total_bytes,
                ..self.info.clone()
            },
            started_utc: utc_timestamp(self.origin_wall),
            start_ns: self.idle.map_or(0, |i| i.0),
            idle_basis: self
                .idle
                .is_none()
                .then(|| "not read: the watch ended before its idle reading".to_string()),
            idle: self.idle.map(|(t_ns, free, total)| Idle {
                before_context: None,
                after_context: IdleReading {
                    t_ns,
                    device_free_bytes: free,
                    device_used_bytes: total.saturating_sub(free),
                    device_total_bytes: total,
                    nvml: None,
                },
                context_overhead_bytes: None,
                kernels: None,
                processes: None,
                processes_doubt: None,
                processes_unavailable: None,
            }),
            phases: Vec::new(),
            sampler_perturbation: None,
            plan: None,
        });
        let mut folder = record.with_summary(summary);
        let late = folder.late_write();
        folder
            .write_summary()
            .with_context(|| format!("cannot write {}", dir.join("summary.json").display()))?;
        Ok((late, self.origin))
    }
}
