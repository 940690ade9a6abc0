//! What Ctrl-C (SIGINT, SIGTERM, SIGHUP) does depends on what headroom is doing and on who sent
//! it. While a command only reads and checks its input, nothing is held and nothing written, so
//! the first signal ends the process at once (exit 130). Once a run holds device memory or
//! writes results, the first signal asks it to stop after the current step and release
//! everything.
//!
//! Schedulers signal every process of a job at once (Slurm's `scancel` and time limit,
//! Kubernetes' pod deletion, systemd's stop), and a node worker then hears the same
//! termination twice: from the scheduler and forwarded by its node. So a further signal is the
//! same request, never "quit now" — except a deliberate second Ctrl-C at a terminal: a SIGINT
//! the kernel sent for the terminal (`si_code == SI_KERNEL`) more than [`REPEAT_WINDOW`] after
//! the first signal kills the workers and tenants and exits 130 at once.
//!
//! The handler only writes one byte to a pipe (async-signal-safe); a thread reads it and acts.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static EXIT_AT_ONCE: AtomicBool = AtomicBool::new(false);

/// Set by the first signal this module's handler heard, for work that must stop at any point
/// (the derived reports after the last step).
static HEARD: AtomicBool = AtomicBool::new(false);

/// Whether this module's handler heard a signal.
pub fn heard() -> bool {
    HEARD.load(Ordering::SeqCst)
}

/// Set by a signal handler other than this module's (`watch`'s own), for whoever must see a
/// signal within a bound (the watchdog).
static NOTED: AtomicBool = AtomicBool::new(false);

/// Async-signal-safe: a handler other than this module's saw a signal.
pub fn note_signal() {
    NOTED.store(true, Ordering::SeqCst);
}

/// Whether a handler other than this module's saw a signal (`note_signal`).
pub fn signal_noted() -> bool {
    NOTED.load(Ordering::SeqCst)
}

/// The signals handled.
pub const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// A terminal's Ctrl-C this soon after the first signal is the same request (a key held, or a
/// scheduler's signal and a terminal's crossing).
pub const REPEAT_WINDOW: Duration = Duration::from_millis(1000);

/// What a deliberate second Ctrl-C stops before the process exits, besides tenants: each
/// command that starts processes of its own (a node's workers) adds its own (`on_quit_now`).
static QUIT_NOW_HOOKS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Adds `stop` to what runs when a second Ctrl-C at the terminal quits at once (once per
/// function, however often it is added).
pub fn on_quit_now(stop: fn()) {
    let mut hooks = QUIT_NOW_HOOKS.lock().unwrap_or_else(|e| e.into_inner());
    if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, stop)) {
        hooks.push(stop);
    }
}

/// What the first signal's message says is done about it.
static STOP_WORDS: Mutex<&str> = Mutex::new("stopping after this step and releasing device memory");

/// Says what a command does on the first signal, for its message (`interrupted (SIGTERM): …`),
/// where the run's "after this step, releasing device memory" is not what happens.
pub fn set_stop_words(words: &'static str) {
    *STOP_WORDS.lock().unwrap_or_else(|e| e.into_inner()) = words;
}

/// The pipe's write end, for the handler (-1 before `install`).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

/// Marks the time spent reading and checking input: a signal now exits at once. The guard
/// ends it.
pub fn loading() -> LoadingGuard {
    EXIT_AT_ONCE.store(true, Ordering::SeqCst);
    LoadingGuard
}

/// Whether a signal should end the process at once.
pub fn exit_at_once() -> bool {
    EXIT_AT_ONCE.load(Ordering::SeqCst)
}

/// Ends the loading window when dropped.
pub struct LoadingGuard;

impl Drop for LoadingGuard {
    fn drop(&mut self) {
        EXIT_AT_ONCE.store(false, Ordering::SeqCst);
    }
}

/// One signal as the handler saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    pub signal: libc::c_int,
    /// Sent by the kernel for the terminal (Ctrl-C, a hangup), not by a process.
    pub from_terminal: bool,
}

/// What a signal does to a run that is already stopping or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The first: stop after the current step, release everything, write the results.
    Stop,
    /// The same request again (a scheduler's signal and the node's forwarded one): nothing.
    Same,
    /// A deliberate second Ctrl-C at the terminal: kill the workers and leave now.
    QuitNow,
}

/// The policy, apart from the process: `first` is when the first signal was heard (None: this
/// is the first).
pub fn decide(heard: Heard, first: Option<Instant>, now: Instant) -> Action {
    let Some(first) = first else {
        return Action::Stop;
    };
    let deliberate = heard.signal == libc::SIGINT
        && heard.from_terminal
        && now.saturating_duration_since(first) > REPEAT_WINDOW;
    if deliberate {
        Action::QuitNow
    } else {
        Action::Same
    }
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let Some(i) = HANDLED.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let from_terminal = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
    let byte = [(i as u8) | (u8::from(from_terminal) << 4)];
    let fd = PIPE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; `byte` is a valid one-byte buffer.
        unsafe { libc::write(fd, byte.as_ptr().cast(), 1) };
    }
}

/// Installs the handlers for SIGINT, SIGTERM and SIGHUP and the thread that acts on them:
/// `interrupted` is set by the first, as [`decide`] says for the others.
pub fn install(interrupted: Arc<AtomicBool>) -> std::io::Result<()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    PIPE_WRITE.store(fds[1], Ordering::SeqCst);
    let read_fd = fds[0];
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || listen(read_fd, &interrupted))?;
    set_handlers(on_signal)
}

/// An `SA_SIGINFO` handler: the signal, what the kernel says of its sender, the context.
pub(crate) type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Makes `handler` (async-signal-safe) the action of every signal in [`HANDLED`].
pub(crate) fn set_handlers(handler: Handler) -> std::io::Result<()> {
    for sig in HANDLED {
        // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = handler as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: `sa.sa_mask` is a valid sigset_t to fill.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: a valid signal number and sigaction; the old action is not needed.
        if unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn listen(fd: libc::c_int, interrupted: &AtomicBool) {
    let mut first: Option<Instant> = None;
    let mut noted = false;
    loop {
        let mut byte = [0u8; 1];
        // SAFETY: `byte` is a valid one-byte buffer; `fd` is this thread's read end.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) };
        if n != 1 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let heard = Heard {
            signal: HANDLED[usize::from(byte[0] & 0x0f).min(HANDLED.len() - 1)],
            from_terminal: byte[0] & 0x10 != 0,
        };
        if exit_at_once() {
            std::process::exit(130);
        }
        let now = Instant::now();
        match decide(heard, first, now) {
            Action::Stop => {
                first = Some(now);
                interrupted.store(true, Ordering::SeqCst);
                HEARD.store(true, Ordering::SeqCst);
                let words = *STOP_WORDS.lock().unwrap_or_else(|e| e.into_inner());
                crate::errln!(
                    "\ninterrupted ({}): {words} (Ctrl-C again at the terminal to quit now)",
                    name(heard.signal)
                );
            }
            Action::Same => {
                if !noted {
                    noted = true;
                    crate::errln!(
                        "{} again: already stopping (a repeated termination is the same request)",
                        name(heard.signal)
                    );
                }
            }
            Action::QuitNow => {
                crate::tenant::stop_all();
                let hooks = QUIT_NOW_HOOKS.lock().unwrap_or_else(|e| e.into_inner());
                for stop in hooks.iter() {
                    stop();
                }
                std::process::exit(130);
            }
        }
    }
}

/// The signal's name (`SIGINT`), or its number.
pub fn name(signal: libc::c_int) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        s => format!("signal {s}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heard(signal: libc::c_int, from_terminal: bool) -> Heard {
        Heard {
            signal,
            from_terminal,
        }
    }

    #[test]
    fn the_first_signal_stops_whoever_sent_it() {
        let now = Instant::now();
        for h in [
            heard(libc::SIGTERM, false),
            heard(libc::SIGINT, true),
            heard(libc::SIGHUP, true),
        ] {
            assert_eq!(decide(h, None, now), Action::Stop);
        }
    }

    #[test]
    fn a_repeated_termination_from_a_process_is_the_same_request() {
        let first = Instant::now();
        for later in [Duration::ZERO, REPEAT_WINDOW * 10] {
            for sig in HANDLED {
                assert_eq!(
                    decide(heard(sig, false), Some(first), first + later),
                    Action::Same
                );
            }
        }
    }

    #[test]
    fn only_a_second_terminal_ctrl_c_after_the_window_quits_now() {
        let first = Instant::now();
        let within = first + REPEAT_WINDOW;
        let after = first + REPEAT_WINDOW + Duration::from_millis(1);
        assert_eq!(
            decide(heard(libc::SIGINT, true), Some(first), within),
            Action::Same
        );
        assert_eq!(
            decide(heard(libc::SIGINT, true), Some(first), after),
            Action::QuitNow
        );
        assert_eq!(
            decide(heard(libc::SIGHUP, true), Some(first), after),
            Action::Same
        );
    }
}
