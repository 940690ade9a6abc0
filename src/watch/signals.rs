//! Signals sent to headroom while it watches a job (SIGINT, SIGTERM, SIGHUP): counted by an
//! async-signal-safe handler, acted on by the watch loop.
//!
//! Ctrl-C at a terminal reaches the whole foreground process group, the job included: passing
//! it on again would interrupt the job twice (a second KeyboardInterrupt inside PyTorch's own
//! cleanup). So a signal the kernel sent for the terminal (`si_code == SI_KERNEL`) is passed on
//! only when the job is in another process group; one sent to headroom alone (`kill`, a
//! scheduler's SIGTERM) always is.

use std::sync::atomic::{AtomicU32, Ordering};

/// The signals handled, in the order of the counters.
pub use crate::signals::HANDLED;

/// Per signal: [sent to this process, sent by the kernel for the terminal].
static COUNTS: [[AtomicU32; 2]; 3] = [
    [AtomicU32::new(0), AtomicU32::new(0)],
    [AtomicU32::new(0), AtomicU32::new(0)],
    [AtomicU32::new(0), AtomicU32::new(0)],
];

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let Some(i) = HANDLED.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let from_terminal = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
    COUNTS[i][usize::from(from_terminal)].fetch_add(1, Ordering::SeqCst);
    crate::signals::note_signal();
}

/// Installs the handler for every signal in `HANDLED` (replacing the default Ctrl-C handler:
/// from now on the watch loop decides what a signal does).
pub fn install() -> std::io::Result<()> {
    crate::signals::set_handlers(on_signal)
}

/// One signal received since the last `take`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub signal: libc::c_int,
    /// Sent by the kernel for the terminal (Ctrl-C, a hangup), to the whole process group.
    pub from_terminal: bool,
}

/// Every signal received since the last call, oldest kind first.
pub fn take() -> Vec<Received> {
    let mut out = Vec::new();
    for (i, sig) in HANDLED.iter().enumerate() {
        for (from_terminal, counter) in [(false, &COUNTS[i][0]), (true, &COUNTS[i][1])] {
            for _ in 0..counter.swap(0, Ordering::SeqCst) {
                out.push(Received {
                    signal: *sig,
                    from_terminal,
                });
            }
        }
    }
    out
}

/// Whether a received signal must be sent on to the job: always when it was sent to headroom
/// alone; for a terminal's, only when the job is not in headroom's process group (so the
/// terminal did not reach it).
pub fn must_forward(r: Received, job_pgid: Option<libc::pid_t>, own_pgid: libc::pid_t) -> bool {
    !r.from_terminal || job_pgid.is_some_and(|g| g != own_pgid)
}

/// The job's process group, if it still exists.
pub fn process_group(pid: u32) -> Option<libc::pid_t> {
    // SAFETY: getpgid only reads; a bad pid is an error return.
    let g = unsafe { libc::getpgid(pid as libc::pid_t) };
    (g >= 0).then_some(g)
}

/// headroom's own process group.
pub fn own_process_group() -> libc::pid_t {
    // SAFETY: getpgrp cannot fail.
    unsafe { libc::getpgrp() }
}

/// Sends `signal` to `pid`; false when the process is gone.
pub fn send(pid: u32, signal: libc::c_int) -> bool {
    // SAFETY: kill only sends a signal to the given pid.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// The signal's name (`SIGINT`), or its number.
pub fn name(signal: libc::c_int) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_signals_are_passed_on_only_across_process_groups() {
        let kill = Received {
            signal: libc::SIGINT,
            from_terminal: false,
        };
        let tty = Received {
            from_terminal: true,
            ..kill
        };
        assert!(must_forward(kill, Some(7), 7));
        assert!(must_forward(kill, None, 7));
        assert!(!must_forward(tty, Some(7), 7));
        assert!(must_forward(tty, Some(8), 7));
        assert!(!must_forward(tty, None, 7));
    }

    #[test]
    fn names() {
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
        assert_eq!(name(64), "signal 64");
    }
}
