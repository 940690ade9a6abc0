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

mod record;

pub use record::{early_record, run_record, watch_record};

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    next_id: u64,
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

/// The budget for a driver call outside a step: `--watchdog`, else `HEADROOM_WATCHDOG`, else
/// the default; `None` when turned off.
pub fn budget_ns() -> Option<u64> {
    let set = BUDGET_NS.load(Ordering::SeqCst);
    let ns = if set != u64::MAX {
        set
    } else {
        std::env::var(WATCHDOG_ENV)
            .ok()
            .and_then(|v| crate::units::parse_duration_ns(v.trim()).ok())
            .unwrap_or(DEFAULT_WATCHDOG_NS)
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

thread_local! {
    /// The windows this thread has open, innermost last.
    static OPEN: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn open(
    scope: Scope<'_>,
    now_t_ns: u64,
    budget_ns: Option<u64>,
    call: Option<&'static str>,
) -> u64 {
    let now = Instant::now();
    let mut st = lock();
    st.next_id += 1;
    let id = st.next_id;
    st.slots.push(Slot {
        id,
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
    });
    drop(st);
    shared().1.notify_all();
    OPEN.with(|o| o.borrow_mut().push(id));
    id
}

fn close(id: u64) {
    lock().slots.retain(|s| s.id != id);
    shared().1.notify_all();
    OPEN.with(|o| o.borrow_mut().retain(|x| *x != id));
}

/// A run's windows: one per step and one around the release.
pub(crate) struct Watchdog {
    /// Added to every window's own waiting time; `None`: no budget, only signals.
    slack_ns: Option<u64>,
    armed: Option<u64>,
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
            self.armed = Some(open(scope, now_t_ns, budget, None));
        }
    }

    pub(crate) fn disarm(&mut self) {
        if let Some(id) = self.armed.take() {
            close(id);
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
/// its own with the watchdog's budget.
#[must_use = "the call is watched until the guard is dropped"]
pub struct CallGuard {
    own: Option<u64>,
    outer: Option<(u64, Option<&'static str>)>,
}

/// Watches `call` (a driver or NVML entry point's name) until the guard is dropped.
pub fn call(call: &'static str) -> CallGuard {
    let innermost = OPEN.with(|o| o.borrow().last().copied());
    if let Some(id) = innermost {
        let mut st = lock();
        if let Some(s) = st.slots.iter_mut().find(|s| s.id == id) {
            let before = s.call.replace(call);
            return CallGuard {
                own: None,
                outer: Some((id, before)),
            };
        }
    }
    let scope = Scope {
        phase: "",
        step: "",
        op: "",
        name: "",
        stream: "",
    };
    CallGuard {
        own: Some(open(scope, 0, budget_ns(), Some(call))),
        outer: None,
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(id) = self.own {
            close(id);
        }
        if let Some((id, before)) = self.outer {
            if let Some(s) = lock().slots.iter_mut().find(|s| s.id == id) {
                s.call = before;
            }
        }
    }
}

fn signalled(st: &State) -> bool {
    SIGNALLED.load(Ordering::SeqCst)
        || crate::signals::signal_noted()
        || st.flag.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
}

fn watch(shared: &'static Shared) {
    let (lock, cv) = shared;
    let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        if st.signal_at.is_none() && signalled(&st) {
            st.signal_at = Some(now);
        }
        let due = |s: &Slot| s.deadline.is_some_and(|d| d <= now);
        let fired = if let Some(s) = st.slots.iter().find(|s| due(s)) {
            Some((s.clone(), Cause::Wedged))
        } else {
            // Open since the signal (or since it was armed, if later) for the whole bound: a
            // call that comes and goes (a sampler's reading) never fires.
            let bound = Duration::from_nanos(SIGNAL_BOUND_NS);
            st.signal_at.and_then(|at| {
                st.slots
                    .iter()
                    .find(|s| now.duration_since(s.armed_at.max(at)) >= bound)
                    .map(|s| (s.clone(), Cause::Interrupted))
            })
        };
        if let Some((slot, cause)) = fired {
            let on_fire = st.on_fire.take();
            drop(st);
            fire(&slot, cause, on_fire);
        }
        // Wake at the next deadline, or to look at the signal flags.
        let next = st.slots.iter().filter_map(|s| s.deadline).min().map_or(
            Duration::from_nanos(LOOK_NS),
            |d| {
                d.saturating_duration_since(now)
                    .min(Duration::from_nanos(LOOK_NS))
            },
        );
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
