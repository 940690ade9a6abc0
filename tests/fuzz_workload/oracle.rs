//! One case, loaded as `headroom run` loads a workload (read for a rank, checked against an
//! unbounded device, expanded for the device), and what every case must satisfy: a workload
//! or an error naming the file, no panic, within the time limit.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use headroom::workload::expand::MAX_ACTIONS;
use headroom::workload::parse::{self, WorkloadError};
use headroom::workload::{Rank, WorkloadFile};

/// The path every case is "read" from; errors must name it.
pub const CASE_PATH: &str = "fuzz/case.toml";

/// A workload text and the device and rank it is loaded for.
#[derive(Debug, Clone)]
pub struct Case {
    pub text: String,
    pub total_bytes: u64,
    pub rank: Rank,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Parse,
    Check,
    Device,
    Loaded,
}

/// What one case did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Actions of the expanded workload (None: refused with an error).
    pub actions: Option<usize>,
    /// How far it got: refused while parsing, refused by the check before a device is known,
    /// refused for the device, or loaded.
    pub stage: Stage,
    /// The refusal, as shown.
    pub error: Option<String>,
    /// Whether the one-pass reader read it (the `toml` crate's reader agreeing).
    pub one_pass: bool,
    pub elapsed: Duration,
    /// The CPU time it took (what `watchdog::CASE_LIMIT` bounds).
    pub cpu: Duration,
    /// Heap bytes the case held at most, above what was live before it.
    pub heap_bytes: usize,
}

static PANIC: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    static IN_CASE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keeps a case's panic quiet (the failure reports it with the case) and records it; any
/// other panic is reported as usual.
pub fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let usual = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CASE.get() {
                *PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(info.to_string());
            } else {
                usual(info);
            }
        }));
    });
}

/// Runs `f` as one case (`text` is what a hang prints): alone, timed, its heap metered, a
/// panic caught. `Err` says which rule it broke.
pub fn guarded(
    text: &str,
    f: impl FnOnce() -> Result<(), String>,
) -> Result<(Duration, Duration), String> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _running = super::watchdog::enter(text);
    super::meter::reset_peak();
    let start = Instant::now();
    let start_cpu = super::watchdog::cpu_time();
    IN_CASE.set(true);
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_CASE.set(false);
    let elapsed = start.elapsed();
    let cpu = super::watchdog::cpu_time().saturating_sub(start_cpu);
    match result {
        Ok(r) => r?,
        Err(_) => {
            let msg = PANIC.lock().unwrap_or_else(|e| e.into_inner()).take();
            return Err(format!("panicked: {}", msg.unwrap_or_default()));
        }
    }
    within_limits(elapsed, cpu)?;
    Ok((elapsed, cpu))
}

/// A case's time against the limits: `CASE_LIMIT` of CPU, `WALL_LIMIT` of wall time.
fn within_limits(elapsed: Duration, cpu: Duration) -> Result<(), String> {
    use super::watchdog::{CASE_LIMIT, WALL_LIMIT};
    if cpu > CASE_LIMIT || elapsed > WALL_LIMIT {
        return Err(format!(
            "took {cpu:?} of CPU and {elapsed:?} of wall time, more than {CASE_LIMIT:?} or {WALL_LIMIT:?}"
        ));
    }
    Ok(())
}

/// Loads the case; `Err` says which rule it broke.
pub fn run(case: &Case) -> Result<Outcome, String> {
    // One case at a time, so that the timing, the heap peak and the watchdog are its own.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _running = super::watchdog::enter(&case.text);
    let before = super::meter::live();
    super::meter::reset_peak();
    let start = Instant::now();
    let start_cpu = super::watchdog::cpu_time();
    IN_CASE.set(true);
    let result = catch_unwind(AssertUnwindSafe(|| load(case)));
    IN_CASE.set(false);
    let elapsed = start.elapsed();
    let cpu = super::watchdog::cpu_time().saturating_sub(start_cpu);
    let heap_bytes = super::meter::peak().saturating_sub(before);
    let loaded = match result {
        Ok(r) => r,
        Err(_) => {
            let msg = PANIC.lock().unwrap_or_else(|e| e.into_inner()).take();
            return Err(format!("panicked: {}", msg.unwrap_or_default()));
        }
    };
    within_limits(elapsed, cpu)?;
    let mut error = None;
    let mut one_pass = false;
    let (stage, actions) = match loaded {
        Ok((n, read_in_one_pass)) => {
            one_pass = read_in_one_pass;
            if n as u64 > MAX_ACTIONS {
                return Err(format!("expanded to {n} actions, more than {MAX_ACTIONS}"));
            }
            (Stage::Loaded, Some(n))
        }
        Err((stage, e)) => {
            check_error(&e)?;
            error = Some(e.to_string());
            (stage, None)
        }
    };
    let o = Outcome {
        actions,
        stage,
        error,
        one_pass,
        elapsed,
        cpu,
        heap_bytes,
    };
    if let Ok(path) = std::env::var("HEADROOM_FUZZ_LOG") {
        log(&path, &o);
        // A slow case's text beside the log, to look at.
        if o.cpu > Duration::from_millis(500) {
            let _ = std::fs::write(
                format!("{path}.slow-{}ms.toml", o.cpu.as_millis()),
                &case.text,
            );
        }
    }
    Ok(o)
}

/// Accepted workloads of at most this many actions are walked again action by action, which
/// must agree with the check's (which counts what it shows to repeat instead of walking it,
/// and reuses its walk for a device when the total changes nothing).
const WALKED_AGAIN: usize = 10_000;

fn load(case: &Case) -> Result<(usize, bool), (Stage, WorkloadError)> {
    let file = WorkloadFile::from_text(&case.text, Path::new(CASE_PATH), case.rank)
        .map_err(|e| (Stage::Parse, e))?;
    let one_pass = read_alike(case);
    file.check().map_err(|e| (Stage::Check, e))?;
    let w = file
        .expand(case.total_bytes)
        .map_err(|e| (Stage::Device, e))?;
    let n = w.phases.iter().map(|p| p.planned as usize).sum();
    if n <= WALKED_AGAIN {
        let walked = file
            .expand_every_action(case.total_bytes)
            .unwrap_or_else(|e| panic!("walked action by action, the workload is refused: {e}"));
        let seen = |w: &headroom::workload::Workload| {
            let phases: Vec<(String, u64)> = w
                .phases
                .iter()
                .map(|p| (p.name.clone(), p.planned))
                .collect();
            (phases, w.facts.clone())
        };
        assert_eq!(
            seen(&w),
            seen(&walked),
            "the check and a walk of every action differ"
        );
    }
    Ok((n, one_pass))
}

/// Whether the one-pass workload reader read the case; where it did, the `toml` crate's
/// reader must have read the same workload from it.
fn read_alike(case: &Case) -> bool {
    let text = case.rank.substitute(&case.text);
    let path = Path::new(CASE_PATH);
    let Some(one_pass) = parse::parse_one_pass(&text, path) else {
        return false;
    };
    let general = parse::parse_general(&text, path).map(|w| format!("{w:?}"));
    assert_eq!(
        general.map_err(|e| e.to_string()),
        Ok(format!("{one_pass:?}")),
        "the one-pass reader and the toml crate's read the workload differently"
    );
    true
}

/// A refusal names the file (first, as every message of headroom's does) and says something.
fn check_error(e: &WorkloadError) -> Result<(), String> {
    let shown = e.to_string();
    if e.file != Path::new(CASE_PATH) || !shown.starts_with(&format!("{CASE_PATH}: ")) {
        return Err(format!("the error does not name the file first: {shown}"));
    }
    if e.message.trim().is_empty() {
        return Err(format!("the error says nothing: {shown:?}"));
    }
    if shown.contains('\n') {
        return Err(format!("the error spans lines: {shown:?}"));
    }
    Ok(())
}

/// One line per case (`HEADROOM_FUZZ_LOG=FILE`): how far it got, how long it took, the heap it
/// held, and its refusal; to see where a run's cases end and where its time goes.
fn log(path: &str, o: &Outcome) {
    use std::io::Write;
    let line = format!(
        "{:?}\t{:.1} ms\t{:.1} ms CPU\t{} KiB\t{}\t{}\n",
        o.stage,
        o.elapsed.as_secs_f64() * 1e3,
        o.cpu.as_secs_f64() * 1e3,
        o.heap_bytes >> 10,
        o.actions.map_or(String::new(), |n| n.to_string()),
        o.error.as_deref().unwrap_or_default()
    );
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("HEADROOM_FUZZ_LOG names a file that can be written");
    f.write_all(line.as_bytes()).expect("the log is written");
}
