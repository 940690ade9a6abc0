//! A point in wall time after which optional work (derived reports after Ctrl-C) is left
//! undone, or a signal that ends it; `none()` never passes.

use std::time::{Duration, Instant};

/// How often a loop over rows looks at the clock.
pub const CHECK_EVERY_ROWS: u64 = 4096;

#[derive(Debug, Clone, Copy, Default)]
pub struct Deadline {
    at: Option<Instant>,
    /// Also passed once a signal was heard (`signals::heard`).
    on_signal: bool,
}

impl Deadline {
    /// No deadline: everything is done.
    pub fn none() -> Deadline {
        Deadline::default()
    }

    /// `budget` from now.
    pub fn after(budget: Duration) -> Deadline {
        Deadline {
            at: Some(Instant::now() + budget),
            on_signal: false,
        }
    }

    /// This deadline, or the first signal, whichever comes first.
    pub fn or_signal(self) -> Deadline {
        Deadline {
            on_signal: true,
            ..self
        }
    }

    pub fn passed(&self) -> bool {
        self.at.is_some_and(|d| Instant::now() >= d) || (self.on_signal && crate::signals::heard())
    }

    /// Fails with `OutOfTime` when passed (checked every `CHECK_EVERY_ROWS` rows of `row`).
    pub fn check(&self, row: u64) -> Result<(), OutOfTime> {
        if row % CHECK_EVERY_ROWS == 0 && self.passed() {
            return Err(OutOfTime);
        }
        Ok(())
    }
}

/// The deadline passed before the work was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("out of time")]
pub struct OutOfTime;
