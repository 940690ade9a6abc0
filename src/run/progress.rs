//! The progress bar of a run, on stderr: phase, step, elapsed time and device used now.
//!
//! It appears only when stderr is a terminal and the run has taken more than a second (a
//! short run prints its summary and nothing else), and it is cleared before the summary.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::units::Bytes;

/// How long a run goes before its progress bar appears.
const SHOW_AFTER: Duration = Duration::from_secs(1);

pub struct Progress {
    bar: Option<ProgressBar>,
    done: Arc<AtomicBool>,
    reveal: Option<JoinHandle<()>>,
    phase: String,
    device_used_bytes: Option<u64>,
}

impl Progress {
    /// A bar over `total_steps`; without `enabled` or a terminal on stderr, it does nothing.
    pub fn new(enabled: bool, total_steps: u64) -> Progress {
        use std::io::IsTerminal as _;
        let done = Arc::new(AtomicBool::new(false));
        let mut p = Progress {
            bar: None,
            done: done.clone(),
            reveal: None,
            phase: String::new(),
            device_used_bytes: None,
        };
        if !enabled || !std::io::stderr().is_terminal() {
            return p;
        }
        let bar = ProgressBar::with_draw_target(Some(total_steps), ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{bar:24}] {pos}/{len} steps · {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        let shown = bar.clone();
        let started = Instant::now();
        p.reveal = Some(std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                let waited = started.elapsed();
                if waited >= SHOW_AFTER {
                    shown.set_draw_target(ProgressDrawTarget::stderr());
                    shown.enable_steady_tick(Duration::from_millis(120));
                    return;
                }
                std::thread::park_timeout(SHOW_AFTER - waited);
            }
        }));
        p.bar = Some(bar);
        p
    }

    /// The run is at step `label` of phase `phase` (index `index` of `count`), with `done`
    /// steps behind it.
    pub fn step(&mut self, index: usize, count: usize, phase: &str, label: &str, done: u64) {
        let Some(bar) = &self.bar else { return };
        self.phase = format!("phase {}/{count} {phase} · step {label}", index + 1);
        bar.set_position(done);
        bar.set_message(self.message());
    }

    /// The device-used reading just taken.
    pub fn device_used(&mut self, bytes: u64) {
        self.device_used_bytes = Some(bytes);
        if let Some(bar) = &self.bar {
            bar.set_message(self.message());
        }
    }

    fn message(&self) -> String {
        match self.device_used_bytes {
            Some(b) => format!("{} · device used {}", self.phase, Bytes(b)),
            None => self.phase.clone(),
        }
    }

    /// Removes the bar (before the summary is printed).
    pub fn finish(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.reveal.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disabled_bar_is_silent_and_finishes() {
        let mut p = Progress::new(false, 3);
        p.step(0, 1, "p", "1", 0);
        p.device_used(1 << 30);
        p.finish();
        assert!(p.bar.is_none());
    }
}
