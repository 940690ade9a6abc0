//! The one sample loop: a tick every interval (or back to back), measuring what it achieved.
//! The run's sampler thread and `watch`'s two samplers each run it with a tick of their own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{LatencyHistogram, SamplerError, SamplerStats};

/// What one tick did.
pub enum Tick {
    /// A reading at `t_ns` that took `latency_ns`.
    Read { t_ns: u64, latency_ns: u64 },
    /// A reading that failed.
    Failed {
        t_ns: u64,
        phase: u32,
        error: String,
    },
    /// The receiver is gone: stop.
    Closed,
}

/// How a loop names itself in its one warning, and hears of its first failed reading.
pub struct Failures<'a> {
    /// `warning: {what} failed: …`.
    pub what: &'static str,
    /// Called once, with the first failure, as it happens.
    pub on_first: Option<&'a mut dyn FnMut(&SamplerError)>,
}

/// Runs `tick` every `interval_ns` (0: back to back) until `stop`, and returns what it achieved.
/// The first failed reading is warned about once and kept in the statistics.
pub fn paced(
    interval_ns: u64,
    stop: &AtomicBool,
    modeled: bool,
    mut failures: Failures<'_>,
    mut tick: impl FnMut() -> Tick,
) -> SamplerStats {
    let (mut intervals, mut latency) = (LatencyHistogram::default(), LatencyHistogram::default());
    let (mut readings, mut last_t, mut first_error) = (0u64, None::<u64>, None);
    let started = Instant::now();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match tick() {
            Tick::Read { t_ns, latency_ns } => {
                latency.record(latency_ns);
                if let Some(prev) = last_t {
                    intervals.record(t_ns.saturating_sub(prev));
                }
                last_t = Some(t_ns);
                readings += 1;
            }
            Tick::Failed { t_ns, phase, error } => {
                if first_error.is_none() {
                    crate::errln!("warning: {} failed: {error}", failures.what);
                    let e = SamplerError { t_ns, phase, error };
                    if let Some(f) = failures.on_first.as_mut() {
                        f(&e);
                    }
                    first_error = Some(e);
                }
            }
            Tick::Closed => break,
        }
        if interval_ns == 0 {
            continue;
        }
        next += Duration::from_nanos(interval_ns);
        let now = Instant::now();
        if next <= now {
            // Fell behind: no burst to catch up, as a poller would not either.
            next = now;
            continue;
        }
        // Sleep in short slices so a stop is seen soon even at a long interval.
        while !stop.load(Ordering::Relaxed) {
            let left = next.saturating_duration_since(Instant::now());
            if left <= Duration::from_micros(200) {
                break;
            }
            std::thread::sleep((left - Duration::from_micros(100)).min(Duration::from_millis(20)));
        }
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    }
    let secs = started.elapsed().as_secs_f64();
    SamplerStats {
        interval_ns,
        readings,
        achieved_rate_hz: if secs > 0.0 {
            readings as f64 / secs
        } else {
            0.0
        },
        interval: intervals.percentiles(),
        query_latency: latency.percentiles(),
        modeled,
        first_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_loop_counts_readings_and_stops() {
        let stop = AtomicBool::new(false);
        let mut n = 0u64;
        let failures = Failures {
            what: "a test reading",
            on_first: None,
        };
        let stats = paced(1_000_000, &stop, false, failures, || {
            n += 1;
            if n == 5 {
                stop.store(true, Ordering::Relaxed);
            }
            Tick::Read {
                t_ns: n * 1_000_000,
                latency_ns: 10,
            }
        });
        assert_eq!(stats.readings, 5);
        assert_eq!(stats.interval.count, 4);
        assert_eq!(stats.query_latency.p50_ns, 10);
    }

    #[test]
    fn the_first_failure_is_kept_and_heard_of_once() {
        let stop = AtomicBool::new(false);
        let (mut n, mut heard) = (0u64, Vec::new());
        let failures = Failures {
            what: "a test reading",
            on_first: Some(&mut |e| heard.push(e.t_ns)),
        };
        let stats = paced(0, &stop, true, failures, || {
            n += 1;
            if n == 3 {
                stop.store(true, Ordering::Relaxed);
            }
            Tick::Failed {
                t_ns: n,
                phase: 7,
                error: format!("failure {n}"),
            }
        });
        assert_eq!(heard, vec![1]);
        let first = stats.first_error.unwrap();
        assert_eq!(
            (first.t_ns, first.phase, first.error.as_str()),
            (1, 7, "failure 1")
        );
        assert_eq!(stats.readings, 0);
        assert!(stats.modeled);
    }
}
