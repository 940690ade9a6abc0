//! Speed of the caching allocator model and of log replay on the simulated device.
//!
//! Targets: at least 10,000,000 allocate+free pairs per second on one core for a mixed-size
//! trace (`caching/alloc-free pairs`, throughput in pairs); replaying a 1,000,000-event
//! headroom log on the simulator in under 2 s (`replay/1M events`, time per replay).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use headroom::alloc::caching::{CachingAllocator, CachingConfig};
use headroom::alloc::replay::{ReplayOptions, replay_reader};
use headroom::alloc::{Allocator, AllocatorSpec};
use headroom::device::StreamId;
use headroom::device::prelude::*;
use headroom::device::profile::SimProfile;
use headroom::device::sim::SimDevice;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// xorshift64*: the same trace every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Mostly small tensors, some activations, a few large buffers.
    fn size(&mut self) -> u64 {
        match self.below(100) {
            0..50 => 1 + self.below(64 * KIB),
            50..80 => 64 * KIB + self.below(960 * KIB),
            80..95 => MIB + self.below(9 * MIB),
            _ => 10 * MIB + self.below(54 * MIB),
        }
    }
}

/// One step of the trace: free the live allocation in `slot`, allocate `bytes` on `stream`.
#[derive(Clone, Copy)]
struct Step {
    slot: usize,
    bytes: u64,
    stream: usize,
}

fn trace(steps: usize, live: usize) -> Vec<Step> {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    (0..steps)
        .map(|_| Step {
            slot: rng.below(live as u64) as usize,
            bytes: rng.size(),
            stream: (rng.below(8) == 0) as usize,
        })
        .collect()
}

fn alloc_free_pairs(c: &mut Criterion) {
    const LIVE: usize = 256;
    const PAIRS: usize = 100_000;
    let steps = trace(PAIRS, LIVE);
    let mut g = c.benchmark_group("caching");
    g.throughput(Throughput::Elements(PAIRS as u64));
    for (name, settings) in [
        ("alloc-free pairs", ""),
        (
            "alloc-free pairs, max_split_size_mb:128",
            "max_split_size_mb:128",
        ),
        (
            "alloc-free pairs, expandable_segments",
            "expandable_segments:True",
        ),
    ] {
        let mut dev = SimDevice::open(SimProfile::resolve("h200").unwrap(), 0);
        let streams = [StreamId::MAIN, dev.create_stream().unwrap()];
        let mut a =
            CachingAllocator::new(CachingConfig::parse(settings).unwrap(), &mut dev).unwrap();
        let mut live: Vec<u64> = (0..LIVE)
            .map(|i| {
                a.allocate(&mut dev, steps[i].bytes, StreamId::MAIN)
                    .unwrap()
                    .ptr
            })
            .collect();
        g.bench_function(name, |b| {
            b.iter(|| {
                for s in &steps {
                    a.free(&mut dev, live[s.slot]).unwrap();
                    live[s.slot] = a
                        .allocate(&mut dev, s.bytes, streams[s.stream])
                        .unwrap()
                        .ptr;
                }
                black_box(a.stats().allocated_bytes)
            })
        });
    }
    g.finish();
}

/// A headroom log of `events` lines: allocations and frees over a working set of 1024.
fn headroom_log(events: usize) -> Vec<u8> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::with_capacity(events * 40);
    out.extend_from_slice(b"t_ns,action,ptr,bytes,stream,detail\n");
    let mut live: Vec<Option<(u64, u64)>> = vec![None; 1024];
    let mut next_ptr = 0x7f00_0000_0000u64;
    for t in 0..events as u64 {
        let slot = rng.below(1024) as usize;
        let line = match live[slot].take() {
            Some((ptr, bytes)) => format!("{t},free,{ptr:#x},{bytes},0,\n"),
            None => {
                let bytes = rng.size();
                let ptr = next_ptr;
                next_ptr += bytes.div_ceil(512) * 512;
                live[slot] = Some((ptr, bytes));
                format!(
                    "{t},allocate,{ptr:#x},{bytes},{},\n",
                    (rng.below(8) == 0) as u8
                )
            }
        };
        out.extend_from_slice(line.as_bytes());
    }
    out
}

fn replay_million(c: &mut Criterion) {
    // `cargo bench` replays the million events; under `cargo test` (no `--bench` argument) the
    // bench runs once, in a debug build, to check that it works: a tenth of the log does.
    let events = if std::env::args().any(|a| a == "--bench") {
        1_000_000
    } else {
        100_000
    };
    let log = headroom_log(events);
    let spec = AllocatorSpec::Caching(CachingConfig::default());
    let mut g = c.benchmark_group("replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events as u64));
    g.bench_function("1M events", |b| {
        b.iter(|| {
            let mut dev = SimDevice::open(SimProfile::resolve("h200").unwrap(), 0);
            let r = replay_reader(
                "bench.csv",
                log.as_slice(),
                &spec,
                &mut dev,
                &ReplayOptions::default(),
            )
            .unwrap();
            assert!(r.fits && r.events == events as u64);
            black_box(r.peaks.alloc_reserved.bytes)
        })
    });
    g.finish();
}

criterion_group!(benches, alloc_free_pairs, replay_million);
criterion_main!(benches);
