//! The watchdog: one thread over the whole process life. A driver or NVML call that never
//! returns ends the process with what is known on disk, and so does a first SIGINT/SIGTERM that
//! the process cannot act on because it is stuck inside such a call.
//!
//! A wedged GPU can block a driver call forever, and a blocked call cannot be unwound from
//! another thread. So every thread arms a window (a *slot*) around what may block: the runner
//! one per step (with the step's own waiting time added) and one around the release at the
//! end; every driver and NVML call outside those (`cuInit`, the first context, module loads,
//! the idle reading, NVML's process list, `hold`'s allocation, `watch`'s samplers) arms its own
//! through `call`, and inside a step's window `call` names the call the step is in. When a
//! window outlives its budget the watchdog records it (`wedged`, exit 2); when a signal came
//! and a window is still open `SIGNAL_BOUND_NS` later, it records that (`interrupted`, exit
//! 130). Either way the record the command registered (`on_fire`) is written — for a run the
//! `events.csv` row, `summary.json` with its phases as `events.csv` has them — tenant
//! processes are stopped and the process exits; the driver frees a process's memory when it
//! exits. Between windows nothing is stuck: the command itself sees the signal.
//!
//! Watching costs a call next to nothing: a sampler reads device memory hundreds of thousands
//! of times a second, each reading a call. Each thread keeps its windows under a lock of its
//! own, which only the watchdog's look (every 50 ms, or at a deadline) also takes; opening or
//! closing a window takes no lock shared between threads, and wakes the watchdog only when the
//! new deadline comes before the time it already waits for (never, at the usual budgets: it
//! looks at least every 50 ms).

mod record;

pub use record::{early_record, run_record, watch_record};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::units::Nanos;

/// How long a step may wait for the driver beyond its own sleeps and spins, and how long any
/// other driver or NVML call may take, unless `--watchdog` or `HEADROOM_WATCHDOG` says
/// otherwise.
pub const DEFAULT_WATCHDOG_NS: u64 = 120_000_000_000;

/// The watchdog's budget for commands without a `--watchdog` flag (`watch`, `hold`,
/// `calibrate`, `bandwidth`, node workers), as a duration (`30s`; `0s` turns it off).
pub const WATCHDOG_ENV: &str = "HEADROOM_WATCHDOG";

/// How long after the first SIGINT/SIGTERM a call or step still in progress may take before
/// headroom records it and exits (130) without waiting for it: 1.5 s, so that with the record
/// written (tens of milliseconds; a watch's reports too) the process is gone within the 2 s
/// the documentation promises.
pub const SIGNAL_BOUND_NS: u64 = 1_500_000_000;

/// How often the watchdog looks at the signal flags: a step of any length has its signal seen
/// within this.
const LOOK_NS: u64 = 50_000_000;

/// Set by a signal handler that is not the command's flag (`watch`'s own).
static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// The budget from `--watchdog` (u64::MAX: not given).
static BUDGET_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Why the watchdog ended the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A window outlived its budget: exit 2.
    Wedged,
    /// A signal came and the window was still open `SIGNAL_BOUND_NS` later: exit 130.
    Interrupted,
}

/// What the watchdog found, for the record.
#[derive(Debug, Clone)]
pub struct Fired {
    pub cause: Cause,
    /// The device clock when the window was armed, plus the wall time waited since.
    pub t_ns: u64,
    pub waited_ns: u64,
    pub phase: String,
    pub step: String,
    pub op: String,
    pub name: String,
    pub stream: String,
    /// The driver or NVML call in progress, where one was named.
    pub call: Option<&'static str>,
    /// The whole message (also printed).
    pub detail: String,
}

impl Fired {
    pub fn exit_code(&self) -> i32 {
        match self.cause {
            Cause::Wedged => 2,
            Cause::Interrupted => 130,
        }
    }

    pub fn result(&self) -> crate::record::timeline::EventResult {
        match self.cause {
            Cause::Wedged => crate::record::timeline::EventResult::Wedged,
            Cause::Interrupted => crate::record::timeline::EventResult::Interrupted,
        }
    }
}

/// Writes what the command has so far when the watchdog fires.
pub type OnFire = Box<dyn FnOnce(&Fired) + Send>;

/// One open window.
#[derive(Debug, Clone)]
struct Slot {
    /// Unique among its thread's windows.
    id: u64,
    /// `None`: no budget (the simulator, or the watchdog turned off): only a signal ends it.
    deadline: Option<Instant>,
    budget_ns: u64,
    armed_t_ns: u64,
    armed_at: Instant,
    phase: String,
    step: String,
    op: String,
    name: String,
    stream: String,
    call: Option<&'static str>,
}

/// One thread's open windows, innermost last, and the call names to restore when a call
/// named inside a window ends (calls end in the reverse order they began). Only that thread
/// changes them; the watchdog reads them when it wakes. The lock is the thread's own, so a
/// call never waits for another thread's.
#[derive(Default)]
struct Windows {
    inner: Mutex<Open>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Open {
    slots: Vec<Slot>,
    restore: Vec<Option<&'static str>>,
}

impl Windows {
    fn lock(&self) -> MutexGuard<'_, Open> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
struct State {
    /// Every thread that has opened a window, registered at its first one.
    threads: Vec<Arc<Windows>>,
    flag: Option<Arc<AtomicBool>>,
    signal_at: Option<Instant>,
    on_fire: Option<OnFire>,
}

type Shared = (Mutex<State>, Condvar);

fn shared() -> &'static Shared {
    static SHARED: OnceLock<&'static Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let s: &'static Shared = Box::leak(Box::new((Mutex::default(), Condvar::new())));
        if let Err(e) = std::thread::Builder::new()
            .name("headroom-watchdog".into())
            .spawn(move || watch(s))
        {
            crate::errln!("warning: cannot start the watchdog: {e}");
        }
        s
    })
}

fn lock() -> MutexGuard<'static, State> {
    shared().0.lock().unwrap_or_else(|e| e.into_inner())
}

/// The clock deadlines are kept on, as nanoseconds since this instant.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn since_epoch(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_nanos() as u64
}

/// When the waiting watchdog wakes next (nanoseconds since `epoch`); `u64::MAX` while it is
/// awake and looking. A window whose deadline is not earlier needs no wake-up: the watchdog
/// looks at it then, or sooner.
static NEXT_WAKE_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// How many times a window woke the watchdog.
static WAKES: AtomicU64 = AtomicU64::new(0);

/// Wakes the watchdog when the deadline of a window armed at `armed_at` with `budget_ns`
/// comes before the time it is waiting for. The window is already in its thread's list: with
/// the fence here and the one in `watch`, either this sees the watchdog's wake time, or the
/// watchdog's look sees the window.
fn wake_for(armed_at: Instant, budget_ns: Option<u64>) {
    let Some(budget_ns) = budget_ns else {
        // No budget: only a signal ends it, and the watchdog looks at signals as it waits.
        return;
    };
    if budget_ns >= LOOK_NS {
        // The watchdog looks at least every LOOK_NS: it sees this window before its deadline.
        return;
    }
    let deadline = armed_at + Duration::from_nanos(budget_ns);
    fence(Ordering::SeqCst);
    if since_epoch(deadline) < NEXT_WAKE_NS.load(Ordering::SeqCst) {
        let _st = lock();
        WAKES.fetch_add(1, Ordering::Relaxed);
        shared().1.notify_all();
    }
}

/// The flag a signal sets (the command's Ctrl-C flag): watched from now on.
pub fn watch_signal(flag: Arc<AtomicBool>) {
    lock().flag = Some(flag);
}

/// Async-signal-safe: a handler other than the command's flag saw a signal (also what
/// `signals::note_signal`, which `watch`'s handler calls, tells the watchdog).
pub fn note_signal() {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// The record to write when the watchdog fires (`None`: nothing to write).
pub fn on_fire(f: Option<OnFire>) {
    lock().on_fire = f;
}

/// Sets the budget from `--watchdog` (0: off).
pub fn set_budget(ns: Option<u64>) {
    if let Some(ns) = ns {
        BUDGET_NS.store(ns, Ordering::SeqCst);
    }
}

/// The budget for a driver call outside a step: `--watchdog`, else `HEADROOM_WATCHDOG` (read
/// once), else the default; `None` when turned off.
pub fn budget_ns() -> Option<u64> {
    static FROM_ENV: OnceLock<u64> = OnceLock::new();
    let set = BUDGET_NS.load(Ordering::Relaxed);
    let ns = if set != u64::MAX {
        set
    } else {
        *FROM_ENV.get_or_init(|| {
            std::env::var(WATCHDOG_ENV)
                .ok()
                .and_then(|v| crate::units::parse_duration_ns(v.trim()).ok())
                .unwrap_or(DEFAULT_WATCHDOG_NS)
        })
    };
    (ns > 0).then_some(ns)
}

/// The step a window covers, as its `events.csv` row names it.
pub(crate) struct Scope<'a> {
    pub phase: &'a str,
    pub step: &'a str,
    pub op: &'a str,
    pub name: &'a str,
    pub stream: &'a str,
}

/// Unregisters its thread's windows when the thread ends.
struct Registered(Arc<Windows>);

impl Drop for Registered {
    fn drop(&mut self) {
        lock().threads.retain(|w| !Arc::ptr_eq(w, &self.0));
    }
}

thread_local! {
    /// This thread's windows, registered with the watchdog at the first one.
    static OWN: Registered = {
        let w = Arc::new(Windows::default());
        lock().threads.push(w.clone());
        Registered(w)
    };
}

/// This thread's windows; `None` only while the thread is ending (its registration gone).
fn own() -> Option<Arc<Windows>> {
    OWN.try_with(|r| r.0.clone()).ok()
}

/// A window for `scope`, armed now.
fn slot(
    windows: &Windows,
    scope: Scope<'_>,
    now_t_ns: u64,
    budget_ns: Option<u64>,
    call: Option<&'static str>,
) -> Slot {
    let now = Instant::now();
    Slot {
        id: windows.next_id.fetch_add(1, Ordering::Relaxed),
        deadline: budget_ns.and_then(|b| now.checked_add(Duration::from_nanos(b))),
        budget_ns: budget_ns.unwrap_or(0),
        armed_t_ns: now_t_ns,
        armed_at: now,
        phase: scope.phase.to_string(),
        step: scope.step.to_string(),
        op: scope.op.to_string(),
        name: scope.name.to_string(),
        stream: scope.stream.to_string(),
        call,
    }
}

/// Opens a window in `windows` (the calling thread's); returns its id.
fn open(windows: &Windows, scope: Scope<'_>, now_t_ns: u64, budget_ns: Option<u64>) -> u64 {
    let s = slot(windows, scope, now_t_ns, budget_ns, None);
    let (id, armed_at) = (s.id, s.armed_at);
    windows.lock().slots.push(s);
    wake_for(armed_at, budget_ns);
    id
}

/// Closes a window: nothing to wake, the watchdog only ever waits for the earliest deadline.
fn close(windows: &Windows, id: u64) {
    windows.lock().slots.retain(|s| s.id != id);
}

/// A run's windows: one per step and one around the release.
pub(crate) struct Watchdog {
    /// Added to every window's own waiting time; `None`: no budget, only signals.
    slack_ns: Option<u64>,
    armed: Option<(Arc<Windows>, u64)>,
}

impl Watchdog {
    /// The run's windows, with `slack_ns` beyond each step's own waiting (`None`: no budget,
    /// the simulator's calls cannot hang; a signal is still bounded).
    pub(crate) fn new(slack_ns: Option<u64>) -> Watchdog {
        Watchdog {
            slack_ns,
            armed: None,
        }
    }

    /// Arms a window for `scope`, which may legitimately wait `expected_ns` (a sleep, a spin).
    /// Without a budget (the simulator) nothing is armed: its calls cannot hang.
    pub(crate) fn arm(&mut self, scope: Scope<'_>, now_t_ns: u64, expected_ns: u64) {
        self.disarm();
        if let Some(slack) = self.slack_ns {
            let budget = Some(slack.saturating_add(expected_ns));
            self.armed = own().map(|w| {
                let id = open(&w, scope, now_t_ns, budget);
                (w, id)
            });
        }
    }

    pub(crate) fn disarm(&mut self) {
        if let Some((windows, id)) = self.armed.take() {
            close(&windows, id);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// Names the driver or NVML call this thread is about to make, until dropped. Inside a
/// window of this thread it names the call in that window; outside any, it opens a window of
/// its own with the watchdog's budget. Either way it takes only this thread's lock, and wakes
/// the watchdog only for a deadline earlier than its next look.
#[must_use = "the call is watched until the guard is dropped"]
pub struct CallGuard(u64);

/// Watches `call` (a driver or NVML entry point's name) until the guard is dropped.
pub fn call(call: &'static str) -> CallGuard {
    CallGuard(open_call(call))
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        close_call(self.0);
    }
}

/// A call named inside an outer window: its token is that window's id with this bit.
const NAMED: u64 = 1 << 63;
/// Nothing to close (the thread is ending).
const NOTHING: u64 = u64::MAX;

/// `call`'s opening half, for the device crate's hook: returns the token `close_call` takes.
pub fn open_call(call: &'static str) -> u64 {
    OWN.try_with(|r| {
        let windows = &r.0;
        let mut guard = windows.lock();
        let open = &mut *guard;
        if let Some(s) = open.slots.last_mut() {
            open.restore.push(s.call.replace(call));
            return s.id | NAMED;
        }
        let scope = Scope {
            phase: "",
            step: "",
            op: "",
            name: "",
            stream: "",
        };
        let budget_ns = budget_ns();
        let s = slot(windows, scope, 0, budget_ns, Some(call));
        let (id, armed_at) = (s.id, s.armed_at);
        open.slots.push(s);
        // Never the watchdog's lock under this thread's: the watchdog takes them the other
        // way round.
        drop(guard);
        wake_for(armed_at, budget_ns);
        id
    })
    .unwrap_or(NOTHING)
}

/// Ends the watch `open_call` began.
pub fn close_call(token: u64) {
    if token == NOTHING {
        return;
    }
    let _ = OWN.try_with(|r| {
        let mut open = r.0.lock();
        if token & NAMED == 0 {
            // Calls end innermost first: almost always the last window.
            if open.slots.last().is_some_and(|s| s.id == token) {
                open.slots.pop();
            } else {
                open.slots.retain(|s| s.id != token);
            }
            return;
        }
        let before = open.restore.pop().flatten();
        if let Some(s) = open.slots.iter_mut().find(|s| s.id == token & !NAMED) {
            s.call = before;
        }
    });
}

fn signalled(st: &State) -> bool {
    SIGNALLED.load(Ordering::SeqCst)
        || crate::signals::signal_noted()
        || st.flag.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
}

/// What fires now, if anything: a window past its deadline, else one open for the whole
/// signal bound since the signal (or since it was armed, if later) — a call that comes and
/// goes (a sampler's reading) never fires. Also the earliest deadline among the windows.
fn look(st: &State, now: Instant) -> (Option<(Slot, Cause)>, Option<Instant>) {
    let bound = Duration::from_nanos(SIGNAL_BOUND_NS);
    let (mut wedged, mut interrupted, mut earliest) = (None, None, None::<Instant>);
    for windows in &st.threads {
        for s in windows.lock().slots.iter() {
            if let Some(d) = s.deadline {
                earliest = Some(earliest.map_or(d, |e| e.min(d)));
                if d <= now && wedged.is_none() {
                    wedged = Some(s.clone());
                }
            }
            if interrupted.is_none()
                && st
                    .signal_at
                    .is_some_and(|at| now.duration_since(s.armed_at.max(at)) >= bound)
            {
                interrupted = Some(s.clone());
            }
        }
    }
    let fired = wedged
        .map(|s| (s, Cause::Wedged))
        .or(interrupted.map(|s| (s, Cause::Interrupted)));
    (fired, earliest)
}

fn watch(shared: &'static Shared) {
    let (lock, cv) = shared;
    let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        // Awake: a window opened from here on wakes nobody, the look below sees it (the
        // fence pairs with the one in `wake_for`).
        NEXT_WAKE_NS.store(u64::MAX, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let now = Instant::now();
        if st.signal_at.is_none() && signalled(&st) {
            st.signal_at = Some(now);
        }
        let (fired, earliest) = look(&st, now);
        if let Some((slot, cause)) = fired {
            let on_fire = st.on_fire.take();
            drop(st);
            fire(&slot, cause, on_fire);
        }
        // Wake at the next deadline, or to look at the signal flags.
        let next = earliest.map_or(Duration::from_nanos(LOOK_NS), |d| {
            d.saturating_duration_since(now)
                .min(Duration::from_nanos(LOOK_NS))
        });
        NEXT_WAKE_NS.store(since_epoch(now + next), Ordering::SeqCst);
        st = cv
            .wait_timeout(st, next)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// What was in progress, in words.
fn what(s: &Slot) -> String {
    let call = s.call.map(|c| format!(" in {c}")).unwrap_or_default();
    if !s.step.is_empty() {
        format!("phase {:?}, step {} ({}){call}", s.phase, s.step, s.op)
    } else if !s.phase.is_empty() {
        format!("the {}{call}", s.phase)
    } else {
        format!("the driver call {}", s.call.unwrap_or("(unnamed)"))
    }
}

/// Records what was stuck and ends the process. Never returns.
fn fire(s: &Slot, cause: Cause, on_fire: Option<OnFire>) -> ! {
    let waited_ns = s.armed_at.elapsed().as_nanos() as u64;
    let detail = match cause {
        Cause::Wedged => format!(
            "wedged: {} did not return within {:.1} s (the watchdog's budget); headroom exits \
             and the driver frees this process's memory",
            what(s),
            s.budget_ns as f64 / 1e9
        ),
        Cause::Interrupted => format!(
            "interrupted: {} had not returned {:.1} s after the signal; headroom exits without \
             waiting for it and the driver frees this process's memory",
            what(s),
            SIGNAL_BOUND_NS as f64 / 1e9
        ),
    };
    crate::errln!("error: {detail}");
    crate::tenant::stop_all();
    let fired = Fired {
        cause,
        t_ns: s.armed_t_ns.saturating_add(waited_ns),
        waited_ns,
        phase: s.phase.clone(),
        step: s.step.clone(),
        op: s.op.clone(),
        name: s.name.clone(),
        stream: s.stream.clone(),
        call: s.call,
        detail,
    };
    if let Some(f) = on_fire {
        f(&fired);
    }
    crate::errln!("(waited {})", Nanos(waited_ns));
    std::process::exit(fired.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The windows are the process's: one test at a time opens them.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// A watched call at the usual budget opens and closes its window without waking the
    /// watchdog (it wakes for the call only while it happens to be looking); a deadline before
    /// its next look wakes it.
    #[test]
    fn a_call_wakes_the_watchdog_only_for_an_earlier_deadline() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let _ = shared();
        std::thread::sleep(Duration::from_millis(20));
        let before = WAKES.load(Ordering::Relaxed);
        for _ in 0..10_000 {
            let _watched = call("cuMemGetInfo");
        }
        let woken = WAKES.load(Ordering::Relaxed) - before;
        assert!(woken < 100, "{woken} wake-ups for 10,000 calls");
        let before = WAKES.load(Ordering::Relaxed);
        wake_for(epoch(), Some(0));
        assert!(WAKES.load(Ordering::Relaxed) > before);
    }

    /// The window a call opens is the watchdog's to see while the call lasts: past its
    /// deadline it fires wedged, naming the call (and the call inside a call); once the guard
    /// is dropped, nothing is open.
    #[test]
    fn the_watchdog_sees_a_calls_window_until_the_guard_drops() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let later =
            || Instant::now() + Duration::from_secs(DEFAULT_WATCHDOG_NS / 1_000_000_000 * 2);
        let outer = call("cuCtxSynchronize");
        let inner = call("cuMemGetInfo");
        let (fired, earliest) = look(&lock(), later());
        let (slot, cause) = fired.expect("the open window fires past its deadline");
        assert_eq!((slot.call, cause), (Some("cuMemGetInfo"), Cause::Wedged));
        assert!(earliest.is_some());
        drop(inner);
        let (fired, _) = look(&lock(), later());
        assert_eq!(fired.unwrap().0.call, Some("cuCtxSynchronize"));
        drop(outer);
        let mine = own().unwrap();
        assert!(mine.lock().slots.is_empty());
        assert!(mine.lock().restore.is_empty());
    }
}
