//! What headroom's sampler costs over the driver's own call: the run's sampler thread (each
//! reading watched by the watchdog, tagged with the run's views, handed through the backlog)
//! against a bare loop of the same `cuMemGetInfo` on a thread of its own, in one process,
//! rounds alternated (bare then sampler, then sampler then bare, …):
//!
//!   HEADROOM_FAKE_PROFILE=tests/fake-gpu/profiles/zero-latency.toml \
//!     scripts/fake-gpu cargo bench --bench sampler
//!
//! On the fake driver with its modeled latency at zero, what is left is the fake's own call
//! and headroom's cost around it: the ratio of the two interval p50s (time between consecutive
//! readings) is that cost. Prints each round's p50s and ratio, the median of the rounds'
//! ratios (each round's two sides ran under the same load), each side's median and the
//! sampler's readings per second. `SAMPLER_BENCH_ROUNDS` (default 20) and
//! `SAMPLER_BENCH_ROUND_MS` (default 100) size it. Without a driver it says so and measures
//! nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use headroom::device::Device;
use headroom::device::reading::{Reader, Readings};
use headroom::device::select::{self, Backend, Request};
use headroom::record::Reading;
use headroom::sampler::{LatencyHistogram, LiveViews, ThreadSampler};
use headroom::units::Nanos;

/// One side's round: interval p50 and readings per second.
struct Round {
    p50_ns: u64,
    rate_hz: f64,
}

fn reader(dev: &mut dyn Device) -> Box<dyn Reader> {
    match dev.readings() {
        Ok(Readings::Measured(r)) => r,
        Ok(Readings::Modeled { .. }) => panic!("the device is simulated: no driver to measure"),
        Err(e) => panic!("no readings: {e}"),
    }
}

/// `cuMemGetInfo` back to back for `for_ns`, on a thread of its own (bound to the context
/// first, as the sampler's is), nothing else in the loop but the clock.
fn bare(mut r: Box<dyn Reader>, for_ns: u64) -> Round {
    std::thread::spawn(move || {
        r.bind().expect("bind the context");
        let mut h = LatencyHistogram::default();
        let started = Instant::now();
        let mut last = r.read_bare().expect("cuMemGetInfo").t_ns;
        let mut readings = 1u64;
        while started.elapsed() < Duration::from_nanos(for_ns) {
            let t = r.read_bare().expect("cuMemGetInfo").t_ns;
            h.record(t - last);
            last = t;
            readings += 1;
        }
        Round {
            p50_ns: h.percentiles().p50_ns,
            rate_hz: readings as f64 / started.elapsed().as_secs_f64(),
        }
    })
    .join()
    .expect("the bare loop's thread")
}

/// headroom's sampler at full rate for `for_ns`, drained every millisecond as a run's
/// thread drains it between steps.
fn sampler(r: Box<dyn Reader>, for_ns: u64) -> Round {
    let live = Arc::new(LiveViews::default());
    let mut s = ThreadSampler::spawn(0, live, r).expect("start the sampler");
    let mut out: Vec<Reading> = Vec::with_capacity(1 << 16);
    let started = Instant::now();
    while started.elapsed() < Duration::from_nanos(for_ns) {
        std::thread::sleep(Duration::from_millis(1));
        out.clear();
        s.drain(&mut out);
    }
    out.clear();
    let stats = s.stop(&mut out);
    Round {
        p50_ns: stats.interval.p50_ns,
        rate_hz: stats.achieved_rate_hz,
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn main() {
    // Watched as the headroom binary watches every driver call.
    headroom::device::watch::install(headroom::device::watch::Hook {
        open: headroom::run::watchdog::open_call,
        close: headroom::run::watchdog::close_call,
    });
    let req = Request::new(Backend::Cuda, None);
    let mut opened = match select::open(req, 0) {
        Ok(o) => o,
        Err(e) => {
            println!(
                "sampler: skipped: no driver to measure ({e:#}); run this under scripts/fake-gpu or on a GPU"
            );
            return;
        }
    };
    let dev = &mut *opened.device;
    let rounds = env_u64("SAMPLER_BENCH_ROUNDS", 20);
    let round_ns = env_u64("SAMPLER_BENCH_ROUND_MS", 100) * 1_000_000;
    let (mut bare_p50, mut sampler_p50, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    // Each round's ratio: the two sides of a round ran under the same load.
    let mut ratios_milli = Vec::new();
    println!(
        "sampler: {} ({}), {rounds} rounds of {} per side, alternated",
        dev.info().name,
        dev.info().driver_version,
        Nanos(round_ns)
    );
    for i in 0..rounds {
        let (b, s) = if i % 2 == 0 {
            let b = bare(reader(dev), round_ns);
            (b, sampler(reader(dev), round_ns))
        } else {
            let s = sampler(reader(dev), round_ns);
            (bare(reader(dev), round_ns), s)
        };
        println!(
            "round {i:2}: bare p50 {:>6} ({:.0}/s), sampler p50 {:>6} ({:.0}/s), {:.2}×",
            Nanos(b.p50_ns),
            b.rate_hz,
            Nanos(s.p50_ns),
            s.rate_hz,
            s.p50_ns as f64 / b.p50_ns.max(1) as f64
        );
        bare_p50.push(b.p50_ns);
        sampler_p50.push(s.p50_ns);
        rates.push(s.rate_hz as u64);
        ratios_milli.push(s.p50_ns * 1000 / b.p50_ns.max(1));
    }
    let (b, s) = (median(bare_p50), median(sampler_p50));
    println!(
        "sampler interval p50 {:.2}× the bare loop's (the median of {rounds} rounds' ratios; \
         medians: sampler {}, bare loop {}); the sampler read {} times a second (median)",
        median(ratios_milli) as f64 / 1000.0,
        Nanos(s),
        Nanos(b),
        median(rates)
    );
}
