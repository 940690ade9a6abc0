//! Hangs and runaway memory: a thread that stops the process, printing the case running, if
//! one case works past `CASE_LIMIT` (CPU time), stays unfinished past `WALL_LIMIT`, or the
//! process's resident set passes `RSS_CAP_BYTES`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The longest one case may take (a case is one file loaded as `headroom run` loads it):
/// 10 s in a release build; a debug build runs the same code up to ten times slower, and may
/// take 30 s. Counted in the process's CPU time (cases run one at a time): on a machine
/// shared with other builds, under `nice`, wall time measures the neighbours as much as the
/// case.
pub const CASE_LIMIT: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(30)
} else {
    Duration::from_secs(10)
};

/// The longest one case may stay unfinished in wall time: a case that waits without working
/// (a lost wake-up, a blocked call) is caught here. Generous: a run under `nice -n 19` beside
/// other builds on two cores has seen a case of 5 million actions get a sixth of a core.
pub const WALL_LIMIT: Duration = Duration::from_secs(CASE_LIMIT.as_secs() * 30);

/// CPU time this process has used, all threads, user and system.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The most resident memory the test process may reach: the heap cap, plus the binary, the
/// threads' stacks and what the allocator keeps.
pub const RSS_CAP_BYTES: u64 = (super::meter::HEAP_CAP_BYTES as u64) + (256 << 20);

/// Milliseconds since `epoch()` at which the running case started, plus one (0: none).
static STARTED: AtomicU64 = AtomicU64::new(0);
/// The process's CPU time (ms) when the running case started.
static STARTED_CPU: AtomicU64 = AtomicU64::new(0);
static CASE: Mutex<String> = Mutex::new(String::new());

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// Marks `text` as running until the guard drops; starts the watchdog on first use.
pub fn enter(text: &str) -> Running {
    static DOG: OnceLock<()> = OnceLock::new();
    DOG.get_or_init(|| {
        std::thread::spawn(watch);
    });
    text.clone_into(&mut CASE.lock().unwrap_or_else(|e| e.into_inner()));
    super::meter::set_case(Some(text));
    STARTED_CPU.store(cpu_time().as_millis() as u64, Relaxed);
    STARTED.store(epoch().elapsed().as_millis() as u64 + 1, Relaxed);
    Running
}

pub struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        STARTED.store(0, Relaxed);
        super::meter::set_case(None);
    }
}

fn watch() {
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let started = STARTED.load(Relaxed);
        let cpu = (cpu_time().as_millis() as u64).saturating_sub(STARTED_CPU.load(Relaxed));
        let why = if started > 0 && cpu > CASE_LIMIT.as_millis() as u64 {
            format!("a case worked for more than {} s", CASE_LIMIT.as_secs())
        } else if started > 0
            && epoch().elapsed().as_millis() as u64 + 1 - started > WALL_LIMIT.as_millis() as u64
        {
            format!("a case ran for more than {} s", WALL_LIMIT.as_secs())
        } else if super::meter::rss_bytes() > RSS_CAP_BYTES {
            format!(
                "resident memory passed {} MiB ({} MiB)",
                RSS_CAP_BYTES >> 20,
                super::meter::rss_bytes() >> 20
            )
        } else {
            continue;
        };
        let case = CASE.lock().map(|c| c.clone()).unwrap_or_default();
        let saved =
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-workload-stuck.toml");
        let _ = std::fs::write(&saved, &case);
        eprintln!(
            "fuzz_workload: {why}; the case (also in {}):\n{case}",
            saved.display()
        );
        std::process::exit(1);
    }
}
