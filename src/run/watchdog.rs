//! The watchdog: a driver call that never returns ends the run, with what is known on disk.
//!
//! A wedged GPU can block a driver call forever, and a blocked call cannot be unwound from
//! another thread. So the runner arms the watchdog around each step (with that step's own
//! waiting time added) and around the release at the end; if an armed window outlives its
//! budget, the watchdog thread appends a `wedged` row to `events.csv`, marks `summary.json`
//! failed (exit 2) naming the phase, step and call, stops tenant processes and exits the
//! process with code 2. The driver frees a process's memory when it exits.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::record::timeline::EventRow;
use crate::report::summary::{RunStatus, Summary};
use crate::units::{Nanos, utc_timestamp};

/// How long a step may wait for the driver beyond its own sleeps and spins, unless
/// `--watchdog` says otherwise.
pub const DEFAULT_WATCHDOG_NS: u64 = 120_000_000_000;

/// Held while a row is written to `events.csv`, so the watchdog never appends into a row.
pub(crate) static EVENTS_IO: Mutex<()> = Mutex::new(());

pub(crate) fn events_io() -> MutexGuard<'static, ()> {
    EVENTS_IO.lock().unwrap_or_else(|e| e.into_inner())
}

/// What is being waited for, and until when.
#[derive(Debug, Clone, Default)]
struct Window {
    /// Bumped at every arm and disarm, so a late wake-up never fires for an older window.
    generation: u64,
    deadline: Option<Instant>,
    budget_ns: u64,
    /// The device clock when armed (for the row's `t_ns`) and the wall clock then.
    armed_t_ns: u64,
    armed_at: Option<Instant>,
    phase: String,
    step: String,
    op: String,
    name: String,
    stream: String,
    stop: bool,
}

type Shared = Arc<(Mutex<Window>, Condvar)>;

/// The watchdog of one run.
pub(crate) struct Watchdog {
    shared: Shared,
    thread: Option<JoinHandle<()>>,
    /// Added to every window's own waiting time.
    slack_ns: u64,
}

/// The step a window covers, as its `events.csv` row names it.
pub(crate) struct Scope<'a> {
    pub phase: &'a str,
    pub step: &'a str,
    pub op: &'a str,
    pub name: &'a str,
    pub stream: &'a str,
}

impl Watchdog {
    /// Starts the watchdog thread for the run writing into `dir`.
    pub(crate) fn start(dir: PathBuf, slack_ns: u64) -> std::io::Result<Watchdog> {
        let shared: Shared = Arc::new((Mutex::new(Window::default()), Condvar::new()));
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("headroom-watchdog".into())
            .spawn(move || watch(&s, &dir))?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
            slack_ns,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Window> {
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Arms a window for `scope`, which may legitimately wait `expected_ns` (a sleep, a spin).
    pub(crate) fn arm(&self, scope: Scope<'_>, now_t_ns: u64, expected_ns: u64) {
        let budget_ns = expected_ns.saturating_add(self.slack_ns);
        let now = Instant::now();
        let mut w = self.lock();
        w.generation += 1;
        w.deadline = now.checked_add(Duration::from_nanos(budget_ns));
        w.budget_ns = budget_ns;
        w.armed_t_ns = now_t_ns;
        w.armed_at = Some(now);
        w.phase = scope.phase.to_string();
        w.step = scope.step.to_string();
        w.op = scope.op.to_string();
        w.name = scope.name.to_string();
        w.stream = scope.stream.to_string();
        drop(w);
        self.shared.1.notify_all();
    }

    pub(crate) fn disarm(&self) {
        let mut w = self.lock();
        w.generation += 1;
        w.deadline = None;
        drop(w);
        self.shared.1.notify_all();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(shared: &Shared, dir: &std::path::Path) {
    let (lock, cv) = &**shared;
    let mut w = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if w.stop {
            return;
        }
        match w.deadline {
            None => w = cv.wait(w).unwrap_or_else(|e| e.into_inner()),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    let window = w.clone();
                    drop(w);
                    fire(&window, dir);
                }
                let generation = w.generation;
                w = cv
                    .wait_timeout_while(w, deadline - now, |x| {
                        !x.stop && x.generation == generation
                    })
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

/// Records the wedged call and ends the process. Never returns.
fn fire(w: &Window, dir: &std::path::Path) -> ! {
    let waited = w.armed_at.map_or(0, |a| a.elapsed().as_nanos() as u64);
    let what = if w.step.is_empty() {
        w.phase.clone()
    } else {
        format!("phase {:?}, step {} ({})", w.phase, w.step, w.op)
    };
    let detail = format!(
        "wedged: {what} did not return from the driver within {:.1} s (the watchdog's budget); \
         headroom exits and the driver frees this process's memory",
        w.budget_ns as f64 / 1e9
    );
    crate::errln!("error: {detail}");
    crate::tenant::stop_all();
    {
        let _io = events_io();
        let row = EventRow {
            t_ns: w.armed_t_ns.saturating_add(waited),
            phase: &w.phase,
            step: &w.step,
            op: &w.op,
            name: &w.name,
            stream: &w.stream,
            requested_bytes: None,
            size_bytes: None,
            latency_ns: waited,
            result: "wedged",
            device_free_bytes: None,
            detail: &detail,
        };
        if let Err(e) = append_row(&dir.join("events.csv"), &row) {
            crate::errln!("warning: recording the wedged call in events.csv: {e}");
        }
    }
    if let Err(e) = mark_summary(dir, &detail) {
        crate::errln!("warning: recording the wedged call in summary.json: {e:#}");
    }
    crate::errln!(
        "results so far: {} (waited {})",
        dir.display(),
        Nanos(waited)
    );
    std::process::exit(2)
}

fn append_row(path: &std::path::Path, row: &EventRow) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().append(true).open(path)?;
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(file);
    w.serialize(row).map_err(std::io::Error::other)?;
    w.flush()
}

/// Rewrites the last `summary.json` as a failed run with `detail`.
fn mark_summary(dir: &std::path::Path, detail: &str) -> anyhow::Result<()> {
    let path = dir.join("summary.json");
    let text = std::fs::read(&path)?;
    let mut s: Summary = serde_json::from_slice(&text)?;
    s.status = RunStatus::Failed;
    s.status_detail = Some(detail.to_string());
    s.exit_code = Some(2);
    s.finished_utc = Some(utc_timestamp(std::time::SystemTime::now()));
    crate::run::write_summary(dir, &s)?;
    Ok(())
}
