//! Worker processes: one `headroom … --device N` child per GPU, all started at once, each in
//! its own process group with its output in a log file.
//!
//! A terminal signals the node's parent alone (the workers are in their own process groups); a
//! scheduler (Slurm's `scancel` and time limit, Kubernetes, systemd) signals every process of
//! the job at once. Either way the parent's first Ctrl-C or SIGTERM is forwarded to every worker
//! as SIGINT, once: each stops after its current step, releases its memory and writes its
//! results, and a worker that hears the scheduler's signal and the forwarded one takes them as
//! one request (`crate::signals`). Only a deliberate second Ctrl-C at the terminal kills them. A
//! worker whose parent disappears stops as if interrupted (`watch_parent`), so nothing is
//! orphaned.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Set in each worker's environment: the node parent's pid, watched by the worker.
pub const NODE_PARENT_ENV: &str = "HEADROOM_NODE_PARENT_PID";
pub use crate::workload::rank::{RANK_COUNT_ENV, RANK_ENV};

/// How often the parent looks at its workers.
const POLL: Duration = Duration::from_millis(20);

/// Live workers by pid, so a second Ctrl-C at the terminal can kill them all (`kill_all`).
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// One worker to start.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The arguments after the executable.
    pub args: Vec<OsString>,
    pub rank: u32,
    pub rank_count: u32,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// `CUDA_VISIBLE_DEVICES` for it, when its GPU is chosen by UUID (a MIG instance).
    pub cuda_visible_devices: Option<String>,
}

/// How a worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerExit {
    pub pid: u32,
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    pub elapsed_ns: u64,
}

/// Starts every worker at once and waits for all of them. `started(i, pid)` and
/// `ended(i, exit)` are called as each starts and ends. A worker that cannot be started is an
/// error only if none can.
pub fn run_all(
    specs: &[WorkerSpec],
    interrupted: &AtomicBool,
    mut started: impl FnMut(usize, u32),
    mut ended: impl FnMut(usize, &WorkerExit),
) -> anyhow::Result<Vec<Result<WorkerExit, String>>> {
    let exe = std::env::current_exe().context("cannot find the headroom executable")?;
    crate::signals::on_quit_now(kill_all);
    let t0 = Instant::now();
    let mut children: Vec<Option<Child>> = Vec::new();
    let mut results: Vec<Option<Result<WorkerExit, String>>> = vec![None; specs.len()];
    for (i, s) in specs.iter().enumerate() {
        match spawn(&exe, s) {
            Ok(c) => {
                live().push(c.id());
                started(i, c.id());
                children.push(Some(c));
            }
            Err(e) => {
                results[i] = Some(Err(format!("{e:#}")));
                children.push(None);
            }
        }
    }
    let mut forwarded = false;
    while children.iter().any(Option::is_some) {
        if interrupted.load(Ordering::SeqCst) && !forwarded {
            forwarded = true;
            for c in children.iter().flatten() {
                signal(c.id(), libc::SIGINT);
            }
        }
        for (i, slot) in children.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            let status = match c.try_wait() {
                Ok(Some(status)) => status,
                Ok(None) => continue,
                Err(e) => {
                    results[i] = Some(Err(format!("cannot wait for worker {}: {e}", c.id())));
                    live().retain(|p| *p != c.id());
                    *slot = None;
                    continue;
                }
            };
            let exit = exit_of(c.id(), status, t0.elapsed());
            live().retain(|p| *p != exit.pid);
            ended(i, &exit);
            results[i] = Some(Ok(exit));
            *slot = None;
        }
        std::thread::sleep(POLL);
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("never started".into())))
        .collect())
}

fn spawn(exe: &std::path::Path, s: &WorkerSpec) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create_new(&s.log)
        .with_context(|| format!("cannot create {}", s.log.display()))?;
    let err = log.try_clone()?;
    let mut cmd = Command::new(exe);
    if let Some(v) = &s.cuda_visible_devices {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    cmd.args(&s.args)
        .env(NODE_PARENT_ENV, std::process::id().to_string())
        .env(RANK_ENV, s.rank.to_string())
        .env(RANK_COUNT_ENV, s.rank_count.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err))
        // Its own process group: a terminal's Ctrl-C reaches the parent alone, which forwards
        // it once.
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))
}

fn exit_of(pid: u32, status: ExitStatus, elapsed: Duration) -> WorkerExit {
    use std::os::unix::process::ExitStatusExt;
    WorkerExit {
        pid,
        code: status.code(),
        signal: status.signal(),
        elapsed_ns: elapsed.as_nanos() as u64,
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory effects; `pid` is a child this process started and has not
    // reaped yet (reaped ones leave `LIVE` first), so the pid cannot name another process.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Kills every live worker at once (a second Ctrl-C at the terminal: the driver reclaims
/// their memory).
pub fn kill_all() {
    for pid in live().iter() {
        signal(*pid, libc::SIGKILL);
    }
}

/// In a worker: sets `interrupted` when the node's parent process is gone (killed, crashed),
/// so the worker stops after its step, releases its memory and writes what it has.
pub fn watch_parent(interrupted: Arc<AtomicBool>) {
    let Some(parent) = std::env::var(NODE_PARENT_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    else {
        return;
    };
    std::thread::spawn(move || {
        loop {
            if std::os::unix::process::parent_id() != parent {
                crate::errln!(
                    "the node process (pid {parent}) is gone: stopping after this step and \
                     releasing device memory"
                );
                interrupted.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}
