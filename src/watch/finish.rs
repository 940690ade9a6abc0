//! The end of a watch: the release check, the true and polled peaks, how each view was read,
//! the status and exit code, then `summary.json` and the reports.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::folder::RunFolder;
use crate::record::timeline::EventResult;
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};
use crate::report::summary::{ExpectationResult, Release, RunStatus};
use crate::report::watch::{EndedBy, WatchSection};
use crate::units::{Bytes, MIB, Nanos};
use crate::watch::drive::End;
use crate::watch::session::Session;
use crate::watch::{Inputs, WatchReport, signals};

/// How long device free may take to come back after the job (the driver frees a dead
/// process's memory late).
const SETTLE: Duration = Duration::from_secs(2);
const SETTLE_POLL: Duration = Duration::from_millis(20);
/// A job that never appears in the process list while device used rises by more than this
/// makes the list doubted.
const UNSEEN_RISE_BYTES: u64 = 64 * MIB;

pub fn finish(
    mut s: Session,
    inputs: &mut Inputs<'_>,
    end: End,
    release_ref: Option<u64>,
) -> anyhow::Result<WatchReport> {
    s.settle_ooms(true);
    s.end_phases(end.t_ns);
    s.folder.set_end_ns(end.t_ns);
    let exit_detail = match end.exit {
        Some(e) => match e.signal {
            Some(sig) => format!("killed by {} (status {})", signals::name(sig), e.status),
            None => format!("exited with status {}", e.status),
        },
        None if s.watch.job.attached => "the watch ended".to_string(),
        None => "its status could not be read".to_string(),
    };
    let ok = end.exit.is_none_or(|e| e.status == 0);
    // The row names the job, as its `start` row does; the pid goes with what became of it.
    let job = s.folder.summary().workload().file.clone();
    let exit_detail = format!("pid {} {exit_detail}", s.watch.job.pid);
    s.job_event(
        end.t_ns,
        "exit",
        &job,
        if ok {
            EventResult::Ok
        } else {
            EventResult::Error
        },
        &exit_detail,
    );
    // An attached process still running has nothing to give back yet.
    let still_running = s.watch.job.attached && end.ended_by != EndedBy::Exit;
    release(&mut s, inputs, release_ref.filter(|_| !still_running));
    s.folder
        .record_mut()
        .flush_timeline()
        .context("flushing timeline.csv")?;
    peaks(&mut s, end.t_ns);
    sampling(&mut s, inputs, &end);
    s.watch.job.exit = end.exit;
    s.watch.job.ended_by = end.ended_by;
    s.watch.job_processes = s.job_processes();
    s.watch.ooms_beyond_limit = s.ooms_beyond_limit;
    s.watch.processes_doubt = doubt(&s);
    let exit_code = outcome(&mut s.folder, &s.watch);
    s.folder.set_exit_code(exit_code);
    s.folder.stamp_finished();
    s.folder
        .record_mut()
        .flush_events()
        .context("flushing events.csv")?;
    s.folder.fill_rows();
    s.folder.set_watch(s.watch.clone());
    let dir = s.folder.dir().to_path_buf();
    s.folder
        .write_summary()
        .with_context(|| format!("cannot write {}", dir.join("summary.json").display()))?;
    // The record is on disk; a report that cannot be written is a warning (`headroom report
    // DIR` writes it again), not another outcome of the job.
    if let Err(e) = s.folder.write_reports(false) {
        crate::errln!("warning: writing the watch's reports: {e:#}");
    }
    Ok(WatchReport {
        dir,
        summary: s.folder.into_summary(),
        watch: s.watch,
        exit_code,
    })
}

/// Waits (at most `SETTLE`) for device free to come back within a page of `reference`, then
/// takes the final reading and checks it.
fn release(s: &mut Session, inputs: &mut Inputs<'_>, reference: Option<u64>) {
    let start = Instant::now();
    let mut last = None;
    if reference.is_none() {
        last = inputs.free_now().ok();
    }
    while reference.is_some() {
        last = inputs.free_now().ok().or(last);
        let back = matches!((last, reference), (Some(f), Some(r)) if f + 2 * MIB >= r);
        if back || start.elapsed() >= SETTLE {
            if back {
                s.watch.release_settle_ns = Some(start.elapsed().as_nanos() as u64);
            }
            break;
        }
        std::thread::sleep(SETTLE_POLL);
    }
    let Some(free) = last else {
        return;
    };
    s.on_reading(Reading {
        t_ns: s.now_ns(),
        phase: NO_PHASE,
        source: Source::Final,
        device_free_bytes: free,
        views: ViewSet::default(),
    });
    let Some(reference) = reference else {
        return;
    };
    let diff = free as i64 - reference as i64;
    let within = diff.unsigned_abs() <= 2 * MIB;
    let mut notes = Vec::new();
    if s.watch.job.attached {
        notes.push(format!(
            "attached to a running process: the reference is device free at attach plus the {} the job held then",
            // A watch always takes its first reading.
            Bytes(reference.saturating_sub(
                s.folder
                    .summary()
                    .idle_after()
                    .map_or(reference, |i| i.device_free_bytes)
            ))
        ));
    }
    if !within {
        notes.push(format!(
            "device free did not come back within {}: the job's processes may still hold memory, or other processes took or gave back some meanwhile",
            Nanos(SETTLE.as_nanos() as u64)
        ));
    }
    if s.folder
        .summary()
        .idle()
        .as_ref()
        .is_some_and(|i| i.context_overhead_bytes.is_some())
    {
        notes.push("headroom's own context (--cuda-info) is in both readings".into());
    }
    s.folder.set_release(Release {
        idle_device_free_bytes: reference,
        final_device_free_bytes: free,
        difference_bytes: diff,
        within_one_page: within,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        tenant_settle_ns: None,
    });
    let detail = format!("device free {free} B, {diff:+} B against the reference");
    s.job_event(
        s.now_ns(),
        "release",
        "",
        if within {
            EventResult::Ok
        } else {
            EventResult::Error
        },
        &detail,
    );
}

/// True peaks of the whole watch and per phase, and the polled replays (`job_used_bytes`
/// from its own readings only).
fn peaks(s: &mut Session, end_ns: u64) {
    s.folder.fill_peaks();
    s.folder.close_pollers_with_job(&mut s.job_pollers, end_ns);
}

/// How each view was read: rates achieved, and what the process list's resolution means.
fn sampling(s: &mut Session, inputs: &Inputs<'_>, end: &End) {
    s.folder.set_sampler(end.device_stats.clone());
    let device_call = match inputs.device_view {
        "cuda" => "mem_get_info",
        "nvml" => "nvml_memory_info",
        _ => "sim_script_device",
    };
    s.folder.set_latency(BTreeMap::from([
        (device_call.to_string(), end.device_stats.query_latency),
        (
            if inputs.modeled() {
                "sim_script_processes"
            } else {
                "nvml_process_list"
            }
            .to_string(),
            end.process_stats.query_latency,
        ),
    ]));
    let pl = &mut s.watch.sampling.process_list;
    pl.stats = end.process_stats.clone();
    pl.changes = s.job_changes;
    pl.shortest_change_interval_ns = s.shortest_change_ns;
    let watched_ns = end
        .t_ns
        .saturating_sub(s.folder.summary().start_ns())
        .max(1);
    let lock_share = end.process_stats.query_latency.mean_ns
        * end.process_stats.query_latency.count as f64
        / watched_ns as f64;
    pl.lock_share = Some(lock_share);
    let device_hz = end.device_stats.achieved_rate_hz;
    let list_hz = end.process_stats.achieved_rate_hz;
    let coarser = pl.interval_ns > s.watch.sampling.device_interval_ns || list_hz < device_hz;
    pl.resolution_note = (pl.stats.readings > 0 && coarser).then(|| {
            format!(
                "job_used_bytes was read every {} ({list_hz:.1} readings/s), device_used_bytes every {} ({device_hz:.1}/s): the job's peak and its polled replays have the process list's resolution, not the {} asked with --interval; a spike of the job shorter than that shows in device_used_bytes only",
                Nanos(pl.interval_ns),
                Nanos(s.watch.sampling.device_interval_ns),
                Nanos(s.watch.sampling.device_interval_ns)
            )
        });
}

/// Why `job_used_bytes` may miss part of the job.
fn doubt(s: &Session) -> Option<String> {
    if !s.unseen.is_empty() {
        let pids: Vec<String> = s.unseen.iter().map(u32::to_string).collect();
        return Some(format!(
            "NVML listed pid {} that this machine's /proc does not show (another PID namespace, as in a container): if they are the job's, job_used_bytes leaves them out",
            pids.join(", ")
        ));
    }
    let job_peak = s
        .folder
        .summary()
        .peaks()
        .run
        .get(View::JobUsed.key())
        .map_or(0, |p| p.bytes);
    let used_peak = s
        .folder
        .summary()
        .peaks()
        .run
        .get(View::DeviceUsed.key())
        .map_or(0, |p| p.bytes);
    let rise = s
        .folder
        .summary()
        .idle_after()
        .map_or(0, |i| used_peak.saturating_sub(i.device_used_bytes));
    (job_peak == 0 && rise > UNSEEN_RISE_BYTES).then(|| {
        format!(
            "the job never appeared in NVML's process list, yet device used rose by {}: if that was the job, NVML does not list it here (a PID namespace), and job_used_bytes stays at 0",
            Bytes(rise)
        )
    })
}

/// Status, detail, expectations and headroom's exit code.
fn outcome(folder: &mut RunFolder, w: &WatchSection) -> i32 {
    let ooms = w.ooms.len() as u64 + w.ooms_beyond_limit;
    let pid = w.job.pid;
    let exit_text = w.job.exit.map(|e| match e.signal {
        Some(sig) => format!("was killed by {} (status {})", signals::name(sig), e.status),
        None => format!("exited with status {}", e.status),
    });
    let ended = match (w.job.attached, w.job.ended_by) {
        (true, EndedBy::Exit) => format!("pid {pid} exited"),
        (true, EndedBy::Duration) => format!("--duration ran out; pid {pid} is still running"),
        (true, EndedBy::Signal) => format!("interrupted; pid {pid} is left running"),
        (false, by) => format!(
            "the job {}{}",
            exit_text.clone().unwrap_or_else(|| "ended".into()),
            match by {
                EndedBy::Duration => " after --duration ran out and it was sent SIGTERM",
                EndedBy::Signal => " after headroom was interrupted",
                EndedBy::Exit => "",
            }
        ),
    };
    let status_code = w.job.exit.map(|e| e.status);
    let status = if ooms > 0 {
        RunStatus::Oom
    } else if w.job.ended_by == EndedBy::Signal {
        RunStatus::Interrupted
    } else if status_code.is_some_and(|c| c != 0) {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    folder.set_status(
        status,
        Some(if ooms > 0 {
            format!("{ooms} out-of-memory message(s) in the job's stderr; {ended}")
        } else {
            ended
        }),
    );
    if !w.job.attached {
        folder.set_expectations(vec![
            ExpectationResult {
                name: "the job exits with status 0".into(),
                expected: "0".into(),
                actual: status_code.map_or("unknown".into(), |c| c.to_string()),
                held: status_code == Some(0),
            },
            ExpectationResult {
                name: "no out-of-memory message in the job's stderr".into(),
                expected: "none".into(),
                actual: if ooms == 0 {
                    "none".into()
                } else {
                    w.ooms
                        .iter()
                        .map(|o| format!("{} at stderr line {}", o.format, o.stderr_line))
                        .collect::<Vec<_>>()
                        .join("; ")
                },
                held: ooms == 0,
            },
        ]);
    }
    if w.job.attached {
        0
    } else {
        status_code.unwrap_or(2)
    }
}
