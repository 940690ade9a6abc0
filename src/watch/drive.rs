//! The watch loop. The samplers, the mark reader and the stderr reader run beside it; it
//! records what they send, passes signals on to the job, ends a job that outlives
//! `--duration`, and notices when the job ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::record::timeline::EventResult;
use crate::report::watch::{EndedBy, JobExit, ReceivedSignal};
use crate::sampler::{LiveViews, Sampler, SamplerStats, StartSampler};
use crate::watch::marks::MarkFifo;
use crate::watch::sampling::{self, LoopContext, Tree};
use crate::watch::session::Session;
use crate::watch::{Inputs, Job, Msg, job_exit, proctree, signals, stderr};

/// A job still running this long after SIGTERM at `--duration` is killed.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// How long the job's stderr may stay open after it exited (a grandchild may hold it).
const STDERR_GRACE: Duration = Duration::from_secs(1);
/// How often the job's orphans are looked for once its own process has exited.
const ORPHANS_EVERY: Duration = Duration::from_millis(50);
/// How often exited orphans of the job are reaped.
const REAP_EVERY: Duration = Duration::from_secs(2);
/// How often `summary.json` is brought up to date while the job runs.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// Signals listed in the summary; more are counted in events.csv only.
const MAX_SIGNALS: usize = 100;

pub struct Plan {
    pub interval_ns: u64,
    /// `None`: the process list is not read (it failed before the job started).
    pub process_interval_ns: Option<u64>,
    pub duration_ns: Option<u64>,
    pub tree: Tree,
    /// `--keep-orphans`: the watch ends when the job's own process exits, and the processes
    /// it left running are named and left alone.
    pub keep_orphans: bool,
}

/// How the watch ended.
pub struct End {
    pub t_ns: u64,
    pub ended_by: EndedBy,
    pub exit: Option<JobExit>,
    pub device_stats: SamplerStats,
    pub process_stats: SamplerStats,
}

/// Runs the samplers and readers, and the loop, until the job ends.
pub fn drive(
    s: &mut Session,
    inputs: &mut Inputs<'_>,
    job: &mut Job,
    mut fifo: Option<MarkFifo>,
    stderr_pipe: Option<std::process::ChildStderr>,
    plan: &Plan,
) -> End {
    let (tx, rx) = mpsc::channel();
    let live = Arc::new(LiveViews::default());
    let (stop_samplers, stop_marks) = (AtomicBool::new(false), AtomicBool::new(false));
    let origin = s.origin;
    let modeled = inputs.modeled();
    match stderr_pipe {
        Some(pipe) => {
            let tx = tx.clone();
            // Not scoped: a grandchild holding the pipe open must not hold the watch up.
            let spawned = std::thread::Builder::new()
                .name("headroom-stderr".into())
                .spawn(move || stderr::pump(pipe, tx, origin));
            if let Err(e) = spawned {
                crate::errln!("warning: cannot read the job's stderr: {e}");
                s.stderr_closed = true;
            }
        }
        None => s.stderr_closed = true,
    }
    let (device, list) = (inputs.device, inputs.list);
    let (live_ref, stop_ref, marks_stop): (&LiveViews, &AtomicBool, &AtomicBool) =
        (&live, &stop_samplers, &stop_marks);
    let cx = |tx: mpsc::Sender<Msg>| LoopContext {
        tx,
        origin,
        live: live_ref,
        stop: stop_ref,
        modeled,
    };
    std::thread::scope(|scope| {
        let device_thread = inputs.cuda.is_none().then(|| {
            let c = cx(tx.clone());
            scope.spawn(move || sampling::device_loop(device, plan.interval_ns, c))
        });
        let process_thread = plan.process_interval_ns.map(|interval| {
            let c = cx(tx.clone());
            scope.spawn(move || sampling::process_loop(list, device, plan.tree, interval, c))
        });
        let marks_thread = fifo.as_mut().map(|f| {
            let tx = tx.clone();
            scope.spawn(move || f.read_until(&tx, live_ref, origin, marks_stop))
        });
        drop(tx);
        let mut cuda = inputs.cuda.as_mut().and_then(|c| {
            let offset = s.now_ns() as i64 - c.device.now_ns() as i64;
            match c.device.start_sampler(plan.interval_ns, live.clone()) {
                Ok(sampler) => Some((sampler, offset)),
                Err(e) => {
                    crate::errln!("warning: cannot start the cuMemGetInfo sampler: {e}");
                    None
                }
            }
        });
        let (t_ns, ended_by, exit) = watch_loop(s, inputs, &mut cuda, job, &rx, plan);
        if let Some(sim) = inputs.sim {
            sim.end();
        }
        stop_samplers.store(true, Ordering::Relaxed);
        // The job's end on disk before the samplers are joined: one stuck in a call never
        // returns, and the watchdog's record starts from this.
        for m in rx.try_iter() {
            s.handle(m);
        }
        s.watch.job.exit = exit;
        s.watch.job.ended_by = ended_by;
        s.checkpoint(true);
        let device_stats = match (device_thread, cuda, &inputs.cuda) {
            (Some(h), _, _) => h.join().unwrap_or_default(),
            (None, Some((sampler, offset)), Some(c)) => {
                let mut buf = Vec::new();
                let stats = sampler.stop(c.device.now_ns(), &mut buf);
                for mut r in buf {
                    r.t_ns = (r.t_ns as i64 + offset).max(0) as u64;
                    s.on_reading(r);
                }
                stats
            }
            _ => SamplerStats::default(),
        };
        let process_stats = process_thread
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        stop_marks.store(true, Ordering::Relaxed);
        if let Some(h) = marks_thread {
            let _ = h.join();
        }
        // The rest of the job's stderr (its last messages), for a short while.
        let grace = Instant::now() + STDERR_GRACE;
        while !s.stderr_closed {
            match rx.recv_timeout(grace.saturating_duration_since(Instant::now())) {
                Ok(m) => s.handle(m),
                Err(_) => break,
            }
        }
        for m in rx.try_iter() {
            s.handle(m);
        }
        End {
            t_ns,
            ended_by,
            exit,
            device_stats,
            process_stats,
        }
    })
}

type CudaSampler = Option<(Box<dyn Sampler>, i64)>;

/// Records what arrives until the job ends; returns when, how, and its exit status.
fn watch_loop(
    s: &mut Session,
    inputs: &Inputs<'_>,
    cuda: &mut CudaSampler,
    job: &mut Job,
    rx: &Receiver<Msg>,
    plan: &Plan,
) -> (u64, EndedBy, Option<JobExit>) {
    let own_pgid = signals::own_process_group();
    let deadline = plan
        .duration_ns
        .map(|d| Instant::now() + Duration::from_nanos(d));
    let (mut kill_at, mut signalled, mut timed_out) = (None::<Instant>, false, false);
    let mut buf = Vec::new();
    let mut next_reap = Instant::now();
    let mut next_checkpoint = Instant::now() + CHECKPOINT_EVERY;
    // The job's own exit while its orphans still run, and when to look at them next.
    let mut child_exit: Option<crate::report::watch::JobExit> = None;
    let mut next_orphans = Instant::now();
    loop {
        if let Ok(m) = rx.recv_timeout(Duration::from_millis(5)) {
            s.handle(m);
        }
        for m in rx.try_iter().take(100_000) {
            s.handle(m);
        }
        if let (Some((sampler, offset)), Some(c)) = (cuda.as_mut(), &inputs.cuda) {
            sampler.drain(c.device.now_ns(), &mut buf);
            for mut r in buf.drain(..) {
                r.t_ns = (r.t_ns as i64 + *offset).max(0) as u64;
                s.on_reading(r);
            }
        }
        s.pump();
        for r in signals::take() {
            signalled = true;
            let t = s.now_ns();
            let name = signals::name(r.signal);
            let (forwarded, detail) = match job {
                Job::Child { .. } if child_exit.is_some() => {
                    let orphans = proctree::live_descendants(std::process::id());
                    let sent = send_all(&orphans, r.signal);
                    (
                        sent,
                        format!("passed on to the job's processes {orphans:?}"),
                    )
                }
                Job::Child { pid, .. } => {
                    if signals::must_forward(r, signals::process_group(*pid), own_pgid) {
                        let sent = signals::send(*pid, r.signal);
                        (sent, format!("passed on to pid {pid}"))
                    } else {
                        (false, "the job got it from the terminal itself".to_string())
                    }
                }
                Job::Attached { pid, .. } => (
                    false,
                    format!("ends the watch; pid {pid}, not headroom's child, is left alone"),
                ),
            };
            record_signal(s, t, &name, r.from_terminal, forwarded, &detail);
            if matches!(job, Job::Attached { .. }) {
                return (t, EndedBy::Signal, None);
            }
        }
        let now = Instant::now();
        if now >= next_checkpoint {
            s.checkpoint(false);
            next_checkpoint = now + CHECKPOINT_EVERY;
        }
        if let Job::Child { pid, .. } = job
            && now >= next_reap
        {
            proctree::reap_orphans(*pid);
            next_reap = now + REAP_EVERY;
        }
        let by = if signalled {
            EndedBy::Signal
        } else if timed_out {
            EndedBy::Duration
        } else {
            EndedBy::Exit
        };
        match job {
            Job::Child { .. } if child_exit.is_some() => {
                if now >= next_orphans {
                    next_orphans = now + ORPHANS_EVERY;
                    proctree::reap_orphans(0);
                    if proctree::live_descendants(std::process::id()).is_empty() {
                        let t = s.now_ns();
                        s.job_event(
                            t,
                            "orphans",
                            &job_name(s),
                            EventResult::Ok,
                            "the job's last process ended",
                        );
                        return (t, by, child_exit);
                    }
                }
            }
            Job::Child { child, pid } => match child.try_wait() {
                Ok(Some(status)) => {
                    let exit = job_exit(status);
                    let orphans = proctree::live_descendants(std::process::id());
                    if orphans.is_empty() {
                        return (s.now_ns(), by, Some(exit));
                    }
                    let t = s.now_ns();
                    let listed = orphans
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ");
                    if plan.keep_orphans {
                        let detail = format!(
                            "pid {pid} exited; its processes {listed} still run and are left \
                             running (--keep-orphans)"
                        );
                        crate::errln!("note: the job's {detail}");
                        s.job_event(t, "orphans", &job_name(s), EventResult::Ok, &detail);
                        return (t, by, Some(exit));
                    }
                    // Ended by a signal: its processes get the same; otherwise they are the
                    // job's work, watched until they end.
                    let detail = match exit.signal {
                        Some(sig) => {
                            send_all(&orphans, sig);
                            kill_at = Some(now + KILL_GRACE);
                            format!(
                                "pid {pid} was killed by {}; its processes {listed} still ran \
                                 and are sent it too",
                                signals::name(sig)
                            )
                        }
                        None => format!(
                            "pid {pid} exited; its processes {listed} still run and are watched \
                             until they end (--keep-orphans leaves them)"
                        ),
                    };
                    crate::errln!("note: the job's {detail}");
                    s.job_event(t, "orphans", &job_name(s), EventResult::Ok, &detail);
                    child_exit = Some(exit);
                }
                Ok(None) => {}
                Err(e) => {
                    crate::errln!("warning: cannot wait for the job: {e}");
                    return (s.now_ns(), EndedBy::Exit, None);
                }
            },
            Job::Attached { pid, start_time } => {
                if !proctree::still_running(*pid, *start_time) {
                    return (s.now_ns(), EndedBy::Exit, None);
                }
            }
        }
        if !timed_out && deadline.is_some_and(|d| now >= d) {
            timed_out = true;
            let t = s.now_ns();
            match job {
                Job::Attached { .. } => return (t, EndedBy::Duration, None),
                Job::Child { pid, .. } => {
                    // A reaped pid may be another process's by now.
                    let sent = child_exit.is_none() && signals::send(*pid, libc::SIGTERM);
                    let orphans = proctree::live_descendants(std::process::id());
                    send_all(&orphans, libc::SIGTERM);
                    record_duration_signal(s, t, "SIGTERM", sent, *pid);
                    kill_at = Some(now + KILL_GRACE);
                }
            }
        }
        if let (Some(k), Job::Child { pid, .. }) = (kill_at, &*job)
            && now >= k
        {
            let sent = child_exit.is_none() && signals::send(*pid, libc::SIGKILL);
            send_all(
                &proctree::live_descendants(std::process::id()),
                libc::SIGKILL,
            );
            record_duration_signal(s, s.now_ns(), "SIGKILL", sent, *pid);
            kill_at = None;
        }
    }
}

/// Sends `signal` to each of `pids`; whether any got it.
fn send_all(pids: &[u32], signal: i32) -> bool {
    // Every one is sent it: no short-circuit.
    pids.iter().filter(|p| signals::send(**p, signal)).count() > 0
}

fn record_signal(
    s: &mut Session,
    t: u64,
    name: &str,
    terminal: bool,
    forwarded: bool,
    detail: &str,
) {
    if s.watch.job.signals.len() < MAX_SIGNALS {
        s.watch.job.signals.push(ReceivedSignal {
            t_ns: t,
            signal: name.to_string(),
            origin: if terminal { "terminal" } else { "process" }.to_string(),
            forwarded,
        });
    }
    s.job_event(t, "signal", name, EventResult::Ok, detail);
}

fn record_duration_signal(s: &mut Session, t: u64, name: &str, sent: bool, pid: u32) {
    if s.watch.job.signals.len() < MAX_SIGNALS {
        s.watch.job.signals.push(ReceivedSignal {
            t_ns: t,
            signal: name.to_string(),
            origin: "duration".to_string(),
            forwarded: sent,
        });
    }
    let detail = format!("--duration ran out: sent to pid {pid}");
    s.job_event(t, "signal", name, EventResult::Ok, &detail);
}

/// The job as `events.csv`'s `name` column gives it on every row of the job's own (its
/// command, as on its `start` row): the pids it concerns go in `detail`.
fn job_name(s: &Session) -> String {
    s.folder.summary().workload().file.clone()
}
