//! One conformance suite for every allocator — direct, pool, caching, caching with expandable
//! segments — bare and under the logging adaptor, on the simulated device (`tiny-4g`).
//!
//! A fixed pseudo-random trace of allocations (mixed sizes, three streams), frees,
//! `record_stream`, `empty_cache`, waits and synchronizes runs against each; after every step:
//! live ranges never overlap, the allocator's counters equal what its live blocks add up to,
//! the device's used memory matches what the allocator reserved, and peaks never go down.
//! Freeing an unknown or already freed pointer must be an error, and `release_all` must give
//! every byte back.

use headroom::alloc::adaptors::LoggingAdaptor;
use headroom::alloc::caching::CachingConfig;
use headroom::alloc::{Allocator, AllocatorSpec, Block};
use headroom::device::prelude::*;
use headroom::device::profile::SimProfile;
use headroom::device::sim::SimDevice;
use headroom::device::{Kernel, PoolConfig, StreamId};
use headroom::record::peaks::PeakSet;
use headroom::record::{NO_PHASE, Reading, Source, View};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// How exactly an allocator's views match its blocks and the device.
#[derive(Debug, Clone, Copy)]
struct Exact {
    /// `allocated_bytes` is the sum of live blocks' `size_bytes` (the pool rounds internally,
    /// so there it is only at least that).
    allocated: bool,
    /// The device's used memory grew by exactly `reserved_bytes` (plain `cuMemAlloc` takes
    /// whole pages, so for `direct` it is only at least that).
    device: bool,
}

fn build(spec: AllocatorSpec, d: &mut SimDevice) -> Box<dyn Allocator> {
    spec.build(d).expect("the allocator builds")
}

fn direct(d: &mut SimDevice) -> Box<dyn Allocator> {
    build(AllocatorSpec::Direct, d)
}

fn pool(d: &mut SimDevice) -> Box<dyn Allocator> {
    build(AllocatorSpec::Pool(PoolConfig::default()), d)
}

fn caching(d: &mut SimDevice) -> Box<dyn Allocator> {
    build(AllocatorSpec::Caching(CachingConfig::default()), d)
}

fn caching_expandable(d: &mut SimDevice) -> Box<dyn Allocator> {
    let cfg = CachingConfig::parse("expandable_segments:True").unwrap();
    build(AllocatorSpec::Caching(cfg), d)
}

fn bare(a: Box<dyn Allocator>) -> Box<dyn Allocator> {
    a
}

fn logging(a: Box<dyn Allocator>) -> Box<dyn Allocator> {
    Box::new(LoggingAdaptor::new(a, Box::new(std::io::sink())).unwrap())
}

/// xorshift64*: a fixed trace without extra dependencies.
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

    fn size(&mut self) -> u64 {
        match self.below(100) {
            0..40 => 1 + self.below(64 * KIB),
            40..65 => 64 * KIB + self.below(960 * KIB),
            65..88 => MIB + self.below(11 * MIB),
            88..96 => 12 * MIB + self.below(52 * MIB),
            _ => 192 * MIB + self.below(832 * MIB),
        }
    }
}

struct Check {
    baseline_used: u64,
    peaks: PeakSet,
    last_peaks: [u64; View::COUNT],
}

impl Check {
    fn after(
        &mut self,
        step: usize,
        what: &str,
        a: &dyn Allocator,
        d: &mut SimDevice,
        live: &[Block],
        exact: Exact,
    ) {
        let at = format!("step {step} ({what}), {} allocator", a.kind());
        // No two live blocks overlap.
        let mut ranges: Vec<(u64, u64)> =
            live.iter().map(|b| (b.ptr, b.ptr + b.size_bytes)).collect();
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            assert!(w[0].1 <= w[1].0, "{at}: live blocks overlap: {w:x?}");
        }
        // Every byte accounted for.
        let s = a.stats();
        let live_bytes: u64 = live.iter().map(|b| b.size_bytes).sum();
        if exact.allocated {
            assert_eq!(
                s.allocated_bytes, live_bytes,
                "{at}: allocated vs live blocks"
            );
        } else {
            assert!(
                s.allocated_bytes >= live_bytes,
                "{at}: allocated below live blocks"
            );
        }
        assert!(
            s.allocated_bytes <= s.reserved_bytes,
            "{at}: allocated above reserved"
        );
        assert!(
            s.requested_bytes >= live.iter().map(|b| b.requested_bytes).sum::<u64>(),
            "{at}: requested"
        );
        assert!(
            s.largest_free_bytes <= s.reserved_bytes - s.allocated_bytes,
            "{at}: largest free"
        );
        let m = d.mem_info().unwrap();
        let grown = m.used_bytes() - self.baseline_used;
        if exact.device {
            assert_eq!(grown, s.reserved_bytes, "{at}: device used vs reserved");
        } else {
            assert!(
                grown >= s.reserved_bytes,
                "{at}: device used below reserved"
            );
        }
        // Peaks never go down and are never below the current value.
        let views = s.views().with(View::DeviceUsed, m.used_bytes());
        self.peaks.observe(&Reading {
            t_ns: d.now_ns(),
            phase: NO_PHASE,
            source: Source::Event,
            device_free_bytes: m.free_bytes,
            views,
        });
        for (v, now) in views.iter() {
            let p = self.peaks.get(v).expect("observed").bytes;
            assert!(
                p >= now && p >= self.last_peaks[v.index()],
                "{at}: peak of {} went down",
                v.key()
            );
            self.last_peaks[v.index()] = p;
        }
    }
}

fn suite(
    make: fn(&mut SimDevice) -> Box<dyn Allocator>,
    wrap: fn(Box<dyn Allocator>) -> Box<dyn Allocator>,
    exact: Exact,
) {
    let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
    let streams = [
        StreamId::MAIN,
        d.create_stream().unwrap(),
        d.create_stream().unwrap(),
    ];
    let baseline_used = d.mem_info().unwrap().used_bytes();
    let mut a = wrap(make(&mut d));
    let mut check = Check {
        baseline_used,
        peaks: PeakSet::default(),
        last_peaks: [0; View::COUNT],
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut live: Vec<Block> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    let (mut allocations, mut ooms) = (0, 0);
    for step in 0..600 {
        let what = match rng.below(100) {
            0..55 if live.len() < 64 => {
                let stream = streams[rng.below(3) as usize];
                let bytes = rng.size();
                match a.allocate(&mut d, bytes, stream) {
                    Ok(b) => {
                        assert!(
                            b.size_bytes >= bytes
                                && b.requested_bytes == bytes
                                && b.stream == stream
                        );
                        live.push(b);
                        allocations += 1;
                    }
                    Err(e) if e.is_oom() => ooms += 1,
                    Err(e) => panic!("step {step}: allocate {bytes}: {e}"),
                }
                "allocate"
            }
            0..90 if !live.is_empty() => {
                let b = live.swap_remove(rng.below(live.len() as u64) as usize);
                a.free(&mut d, b.ptr).unwrap();
                freed.push(b.ptr);
                "free"
            }
            90..94 if !live.is_empty() => {
                let b = live[rng.below(live.len() as u64) as usize];
                let s = streams[rng.below(3) as usize];
                a.record_stream(&mut d, b.ptr, s).unwrap();
                d.launch(
                    Kernel::Spin {
                        duration_ns: 50_000,
                    },
                    s,
                )
                .unwrap();
                "record_stream"
            }
            94..96 => {
                a.empty_cache(&mut d).unwrap();
                "empty_cache"
            }
            96..98 => {
                d.sleep(100_000);
                a.refresh(&mut d).unwrap();
                "sleep"
            }
            _ => {
                d.synchronize().unwrap();
                a.refresh(&mut d).unwrap();
                "synchronize"
            }
        };
        check.after(step, what, a.as_ref(), &mut d, &live, exact);
    }
    assert!(
        allocations > 150,
        "the trace allocates ({allocations} allocations, {ooms} refused)"
    );
    // Unknown and already freed pointers are errors, and change nothing.
    let before = a.stats();
    assert!(
        a.free(&mut d, 0xdead_0000).is_err(),
        "free of an unknown pointer"
    );
    if let Some(&p) = freed.iter().find(|p| live.iter().all(|b| b.ptr != **p)) {
        assert!(a.free(&mut d, p).is_err(), "a second free of {p:#x}");
    }
    assert_eq!(a.stats(), before);
    a.release_all(&mut d).unwrap();
    let s = a.stats();
    assert_eq!(
        (s.allocated_bytes, s.reserved_bytes),
        (0, 0),
        "release_all returns everything"
    );
    assert_eq!(
        d.mem_info().unwrap().used_bytes(),
        baseline_used,
        "the device is back where it started"
    );
}

const DIRECT: Exact = Exact {
    allocated: true,
    device: false,
};
const POOL: Exact = Exact {
    allocated: false,
    device: true,
};
const CACHING: Exact = Exact {
    allocated: true,
    device: true,
};

macro_rules! conformance {
    ($($name:ident: $make:ident, $exact:ident;)*) => {
        $(
            mod $name {
                use super::*;
                #[test] fn bare() { suite($make, super::bare, $exact) }
                #[test] fn logging() { suite($make, super::logging, $exact) }
            }
        )*
    };
}

conformance! {
    direct_allocator: direct, DIRECT;
    pool_allocator: pool, POOL;
    caching_allocator: caching, CACHING;
    caching_expandable_allocator: caching_expandable, CACHING;
}
