//! What the device has to tell the person running headroom beyond its results: a note (why
//! the simulator was chosen) or a warning (memory it could not release at exit). The program
//! installs how these are printed; until it does, they go to standard error as plain lines,
//! and a closed or full standard error loses them without a panic.

use std::io::Write;
use std::sync::OnceLock;

/// One line for the person running headroom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice<'a> {
    /// `note: …`, which a quiet run leaves out.
    Note(&'a str),
    /// `warning: …`.
    Warning(&'a str),
}

/// Prints a notice.
pub type Hook = fn(Notice<'_>);

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Installs how notices are printed (the first one installed stays).
pub fn install(hook: Hook) {
    let _ = HOOK.set(hook);
}

/// Says `n` through the installed hook, or on standard error.
pub fn say(n: Notice<'_>) {
    match HOOK.get() {
        Some(hook) => hook(n),
        None => {
            let line = match n {
                Notice::Note(t) => format!("note: {t}\n"),
                Notice::Warning(t) => format!("warning: {t}\n"),
            };
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(line.as_bytes()).and_then(|_| err.flush());
        }
    }
}
