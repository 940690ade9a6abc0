//! Throughput of the simulated device and the cost of background sampling in a simulated run.
//!
//! Targets: at least 1,000,000 allocate/free steps per second on the simulator; the sampler
//! (1 ms, modeled) costs under 1% of a sim run — compare `run/quickstart/sampled-1ms` with
//! `run/quickstart/unsampled` in the same report.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use headroom::device::prelude::*;
use headroom::device::profile::SimProfile;
use headroom::device::select::Opened;
use headroom::device::sim::SimDevice;
use headroom::run::{RunOptions, run};
use headroom::workload::Workload;

const SIZES: [u64; 8] = [
    512,
    4 << 10,
    200 << 10,
    1 << 20,
    (3 << 20) / 2,
    16 << 20,
    256 << 20,
    64 << 10,
];

fn sim_alloc_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    const STEPS: u64 = 10_000;
    g.throughput(Throughput::Elements(STEPS));
    g.bench_function("allocate-free steps", |b| {
        let mut dev = SimDevice::open(SimProfile::resolve("h200").unwrap(), 0);
        let mut live = Vec::with_capacity(64);
        b.iter(|| {
            // Each step pair frees one of 64 live allocations and allocates a new one.
            for i in 0..STEPS as usize / 2 {
                if live.len() == 64 {
                    let p = live.swap_remove((i * 7) % 64);
                    dev.free(p).unwrap();
                }
                live.push(dev.malloc(SIZES[i % SIZES.len()]).unwrap());
            }
            black_box(dev.mem_info().unwrap());
        });
    });
    g.finish();
}

fn run_sampled_vs_unsampled(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wl = Workload::load(&root.join("workloads/quickstart.toml"), u64::MAX).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("run/quickstart");
    for (name, interval) in [
        ("sampled-1ms", 1_000_000u64),
        ("unsampled", 3_600_000_000_000),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let dev = SimDevice::open(SimProfile::resolve("h200").unwrap(), 0);
                let before = Some(dev.before_context());
                let opened = Opened {
                    device: Box::new(dev),
                    before_context: before,
                    notice: None,
                    context_create_ns: 0,
                };
                let opts = RunOptions {
                    results_root: tmp.path().to_path_buf(),
                    sample_interval_ns: Some(interval),
                    ..RunOptions::default()
                };
                black_box(run(&wl, opened, &opts).unwrap().exit_code)
            });
        });
    }
    g.finish();
}

criterion_group!(benches, sim_alloc_free, run_sampled_vs_unsampled);
criterion_main!(benches);
