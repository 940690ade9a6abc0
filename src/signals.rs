//! What Ctrl-C (SIGINT, SIGTERM, SIGHUP) does depends on what headroom is doing: while a
//! command only reads and checks its input, nothing is held and nothing written, so the first
//! signal ends the process at once (exit 130); once a run holds device memory or writes
//! results, the first signal asks it to stop after the current step and release everything,
//! and a second ends it.

use std::sync::atomic::{AtomicBool, Ordering};

static EXIT_AT_ONCE: AtomicBool = AtomicBool::new(false);

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
