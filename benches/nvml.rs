//! How fast NVML can be read, on whatever NVML is present — the driver's, or the fake one:
//!
//!   scripts/fake-gpu cargo bench --bench nvml
//!
//! Memory info is what `headroom watch` reads at every tick for device used; the process list
//! is what it reads, far less often, for the job's own memory (it takes a global driver lock).
//! After criterion's figures, a plain timing loop prints each call's percentiles and the rate
//! they allow next to the 1 Hz of a typical dashboard, and the process-list interval `watch`
//! would choose. Without NVML it says so and measures nothing.

use std::hint::black_box;
use std::time::Instant;

use criterion::Criterion;
use headroom::device::nvml::{self, NvmlDevice};
use headroom::sampler::LatencyHistogram;
use headroom::units::Nanos;

fn percentiles(mut call: impl FnMut(), n: u32) -> headroom::sampler::Percentiles {
    let mut h = LatencyHistogram::default();
    for _ in 0..n {
        let t0 = Instant::now();
        call();
        h.record(t0.elapsed().as_nanos() as u64);
    }
    h.percentiles()
}

fn main() {
    if let Some(e) = nvml::init_failure() {
        println!(
            "nvml: skipped: NVML is not available ({e}); run this on a GPU machine, or under scripts/fake-gpu"
        );
        return;
    }
    let Some(first) = nvml::gpus().and_then(|g| g.into_iter().next()) else {
        println!("nvml: skipped: NVML sees no device 0");
        return;
    };
    let opened = match NvmlDevice::try_open(&first.uuid) {
        Ok(d) => d,
        Err(e) => {
            println!("nvml: skipped: NVML cannot open device 0 ({e})");
            return;
        }
    };
    let device = match opened.reader(Instant::now()) {
        Ok(d) => d,
        Err(e) => {
            println!("nvml: skipped: NVML lost device 0 ({e})");
            return;
        }
    };
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("nvml");
    g.bench_function("memory_info", |b| {
        b.iter(|| black_box(device.memory().ok()))
    });
    g.bench_function("process_list", |b| {
        b.iter(|| black_box(device.processes().ok()))
    });
    g.finish();
    c.final_summary();

    let memory = percentiles(
        || {
            black_box(device.memory().ok());
        },
        2000,
    );
    let list = percentiles(
        || {
            black_box(device.processes().ok());
        },
        200,
    );
    let processes = device.processes().map_or(0, |p| p.len());
    for (name, p) in [("memory info", memory), ("process list", list)] {
        let rate = 1e9 / p.p50_ns.max(1) as f64;
        println!(
            "nvml {name}: p50 {} p99 {} max {}: at most {rate:.0} readings/s back to back, where a 1 Hz dashboard reads once a second",
            Nanos(p.p50_ns),
            Nanos(p.p99_ns),
            Nanos(p.max_ns)
        );
    }
    let (interval, why) = headroom::watch::sampling::process_interval(None, 1_000_000, list.p50_ns);
    println!(
        "nvml process list ({processes} processes listed): `headroom watch --interval 1ms` would read it every {} ({why})",
        Nanos(interval)
    );
}
