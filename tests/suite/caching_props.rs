//! Property tests of the caching allocator on random allocate/free sequences (with streams,
//! `record_stream` and pending frees), under several settings, on the simulated device.
//!
//! After every step: allocated ≤ reserved, reserved = the sum of segment sizes = what the
//! device lost, no two free blocks sit next to each other in a segment, and the allocator's
//! own consistency check passes. `empty_cache` releases exactly the fully free segments and
//! nothing else (with expandable segments: every free whole page, and nothing in use).

use proptest::prelude::*;

use headroom::alloc::Allocator;
use headroom::alloc::caching::{BlockState, CachingAllocator, CachingConfig, SegmentSnapshot};
use headroom::device::prelude::*;
use headroom::device::profile::SimProfile;
use headroom::device::sim::SimDevice;
use headroom::device::{Kernel, StreamId};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        bytes: u64,
        stream: usize,
    },
    Free {
        pick: usize,
    },
    RecordStream {
        pick: usize,
        stream: usize,
        spin_us: u64,
    },
    EmptyCache,
    Sleep {
        us: u64,
    },
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1..=4096u64,
        3 => 4096..=MIB,
        3 => MIB..=12 * MIB,
        1 => 12 * MIB..=300 * MIB,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (size(), 0..3usize).prop_map(|(bytes, stream)| Op::Alloc { bytes, stream }),
        7 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (any::<usize>(), 0..3usize, 0..500u64).prop_map(|(pick, stream, spin_us)| Op::RecordStream { pick, stream, spin_us }),
        1 => Just(Op::EmptyCache),
        1 => (0..400u64).prop_map(|us| Op::Sleep { us }),
    ]
}

fn settings() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just(""),
        Just("max_split_size_mb:64"),
        Just("expandable_segments:True"),
        Just("roundup_power2_divisions:4"),
        Just("max_split_size_mb:40,roundup_power2_divisions:[1:2,>:4]"),
    ]
}

/// Checks the properties that hold after every step.
fn check_step(a: &CachingAllocator, d: &mut SimDevice, baseline: u64) -> Result<(), TestCaseError> {
    a.check_consistency().map_err(TestCaseError::fail)?;
    let s = a.stats();
    prop_assert!(s.allocated_bytes <= s.reserved_bytes);
    let snap = a.snapshot();
    let segment_sum: u64 = snap.iter().map(|g| g.total_size_bytes).sum();
    prop_assert_eq!(
        s.reserved_bytes,
        segment_sum,
        "reserved = sum of segment sizes"
    );
    prop_assert_eq!(
        d.mem_info().unwrap().used_bytes() - baseline,
        s.reserved_bytes,
        "device used = reserved"
    );
    for g in &snap {
        for w in g.blocks.windows(2) {
            prop_assert!(
                !(w[0].state == BlockState::Free && w[1].state == BlockState::Free),
                "adjacent free blocks at {:#x} and {:#x} were not merged",
                w[0].address,
                w[1].address
            );
            prop_assert_eq!(w[0].address + w[0].size_bytes, w[1].address);
        }
    }
    Ok(())
}

/// `empty_cache` after every stream has finished: it completes the pending frees first, then
/// exactly the segments that are free once they have completed go.
fn check_empty_cache(
    a: &mut CachingAllocator,
    d: &mut SimDevice,
    expandable: bool,
) -> Result<(), TestCaseError> {
    d.synchronize().unwrap();
    a.refresh(d).unwrap();
    let before = a.snapshot();
    // A synchronize completes no pending free: PyTorch processes their events in malloc and
    // empty_cache only.
    let free_once_done =
        |g: &SegmentSnapshot| g.blocks.iter().all(|b| b.state != BlockState::Allocated);
    let reserved = a.stats().reserved_bytes;
    let released = a.empty_cache(d).unwrap();
    let after = a.snapshot();
    prop_assert_eq!(a.stats().reserved_bytes, reserved - released);
    if expandable {
        // Every page still mapped holds part of a live block.
        let page = |g: &SegmentSnapshot| {
            if g.pool == headroom::alloc::caching::PoolKind::Small {
                2 * MIB
            } else {
                20 * MIB
            }
        };
        for g in &after {
            for b in g.blocks.iter().filter(|b| b.state == BlockState::Free) {
                // A mapped range starts on a page boundary of its segment.
                let p = page(g);
                let first_whole = g.address + (b.address - g.address).div_ceil(p) * p;
                prop_assert!(
                    first_whole + p > b.address + b.size_bytes,
                    "a free whole page at {:#x} survived",
                    first_whole
                );
            }
        }
        let live_before: u64 = before.iter().map(|g| g.allocated_bytes()).sum();
        let live_after: u64 = after.iter().map(|g| g.allocated_bytes()).sum();
        prop_assert_eq!(live_before, live_after);
    } else {
        let expect_released: u64 = before
            .iter()
            .filter(|g| free_once_done(g))
            .map(|g| g.total_size_bytes)
            .sum();
        prop_assert_eq!(released, expect_released);
        let kept: Vec<u64> = before
            .iter()
            .filter(|g| !free_once_done(g))
            .map(|g| g.address)
            .collect();
        let now: Vec<u64> = after.iter().map(|g| g.address).collect();
        prop_assert_eq!(kept, now, "only fully free segments are released");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn caching_invariants_hold(settings in settings(), ops in prop::collection::vec(op(), 1..120)) {
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let streams = [StreamId::MAIN, d.create_stream().unwrap(), d.create_stream().unwrap()];
        let baseline = d.mem_info().unwrap().used_bytes();
        let cfg = CachingConfig::parse(settings).unwrap();
        let expandable = cfg.expandable_segments;
        let mut a = CachingAllocator::new(cfg, &mut d).unwrap();
        let mut live: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { bytes, stream } => match a.allocate(&mut d, bytes, streams[stream]) {
                    Ok(b) => live.push(b.ptr),
                    Err(e) => prop_assert!(e.is_oom(), "{}", e),
                },
                Op::Free { pick } if !live.is_empty() => {
                    let p = live.swap_remove(pick % live.len());
                    a.free(&mut d, p).unwrap();
                }
                Op::RecordStream { pick, stream, spin_us } if !live.is_empty() => {
                    let p = live[pick % live.len()];
                    a.record_stream(&mut d, p, streams[stream]).unwrap();
                    d.launch(Kernel::Spin { duration_ns: spin_us * 1000 }, streams[stream]).unwrap();
                }
                Op::EmptyCache => check_empty_cache(&mut a, &mut d, expandable)?,
                Op::Sleep { us } => {
                    d.sleep(us * 1000);
                    a.refresh(&mut d).unwrap();
                }
                _ => {}
            }
            check_step(&a, &mut d, baseline)?;
        }
        check_empty_cache(&mut a, &mut d, expandable)?;
        a.release_all(&mut d).unwrap();
        prop_assert_eq!(d.mem_info().unwrap().used_bytes(), baseline);
    }
}
