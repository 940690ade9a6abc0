//! Exact tests of the caching allocator's rules on the simulated `tiny-4g` device
//! (4 GiB, 256 MiB context, so 3840 MiB free at start; 2 MiB pages).

use super::*;
use crate::alloc::Allocator;
use crate::device::Kernel;
use crate::device::prelude::*;
use crate::device::profile::SimProfile;
use crate::device::sim::SimDevice;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const MAIN: StreamId = StreamId::MAIN;
const CONTEXT: u64 = 256 * MIB;

fn dev() -> SimDevice {
    SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0)
}

fn caching(d: &mut SimDevice, settings: &str) -> CachingAllocator {
    CachingAllocator::new(CachingConfig::parse(settings).unwrap(), d).unwrap()
}

/// Device memory the allocator's segments take (context excluded).
fn device_bytes(d: &mut SimDevice) -> u64 {
    d.mem_info().unwrap().used_bytes() - CONTEXT
}

fn check(a: &CachingAllocator) {
    a.check_consistency().unwrap();
}

#[test]
fn small_requests_round_to_512_and_share_a_2_mib_segment() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let x = a.allocate(&mut d, 100, MAIN).unwrap();
    let y = a.allocate(&mut d, 1000, MAIN).unwrap();
    assert_eq!((x.size_bytes, y.size_bytes), (512, 1024));
    assert_eq!(
        y.ptr,
        x.ptr + 512,
        "split from the same segment, in address order"
    );
    let s = a.stats();
    assert_eq!(
        (s.allocated_bytes, s.reserved_bytes, s.requested_bytes),
        (1536, 2 * MIB, 1100)
    );
    assert_eq!(
        (
            s.segment_count,
            s.inactive_split_count,
            s.inactive_split_bytes
        ),
        (1, 1, 2 * MIB - 1536)
    );
    assert_eq!(device_bytes(&mut d), 2 * MIB);
    assert_eq!(a.memory_stats().reserved_bytes.small_pool.current, 2 * MIB);
    check(&a);
}

#[test]
fn requests_of_1_to_10_mib_share_20_mib_segments() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let x = a.allocate(&mut d, 3 * MIB, MAIN).unwrap();
    let y = a.allocate(&mut d, 3 * MIB, MAIN).unwrap();
    assert_eq!(y.ptr, x.ptr + 3 * MIB);
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.segment_count), (20 * MIB, 1));
    assert_eq!(
        (s.inactive_split_count, s.inactive_split_bytes),
        (1, 14 * MIB)
    );
    assert_eq!(a.memory_stats().reserved_bytes.large_pool.current, 20 * MIB);
    assert_eq!(device_bytes(&mut d), 20 * MIB);
    // A 1 MiB request is small: it gets its own 2 MiB segment from the small pool.
    a.allocate(&mut d, MIB, MAIN).unwrap();
    assert_eq!(a.stats().reserved_bytes, 22 * MIB);
    check(&a);
}

#[test]
fn requests_of_10_mib_or_more_get_their_own_segment_rounded_to_2_mib() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let x = a.allocate(&mut d, 11 * MIB + 1, MAIN).unwrap();
    // 12 MiB segment; the 1 MiB − 512 B remainder is too small to split (needs > 1 MiB).
    assert_eq!(x.size_bytes, 12 * MIB);
    let s = a.stats();
    assert_eq!(
        (s.allocated_bytes, s.requested_bytes, s.reserved_bytes),
        (12 * MIB, 11 * MIB + 1, 12 * MIB)
    );
    assert_eq!(s.inactive_split_count, 0);
    // Exactly 1 MiB left over: still not split.
    let y = a.allocate(&mut d, 19 * MIB, MAIN).unwrap();
    assert_eq!(y.size_bytes, 20 * MIB);
    assert_eq!(device_bytes(&mut d), 32 * MIB);
    check(&a);
}

#[test]
fn small_pool_splits_when_512_bytes_remain() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let x = a.allocate(&mut d, MIB, MAIN).unwrap();
    assert_eq!(
        a.stats().inactive_split_bytes,
        MIB,
        "1 MiB of the 2 MiB segment stays cached"
    );
    let y = a.allocate(&mut d, MIB, MAIN).unwrap();
    assert_eq!(y.ptr, x.ptr + MIB);
    assert_eq!(
        (a.stats().inactive_split_count, a.stats().reserved_bytes),
        (0, 2 * MIB)
    );
    check(&a);
}

#[test]
fn best_fit_within_the_pool_and_stream() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let six = a.allocate(&mut d, 12 * MIB, MAIN).unwrap();
    let four = a.allocate(&mut d, 10 * MIB, MAIN).unwrap();
    let keep = a.allocate(&mut d, 14 * MIB, MAIN).unwrap();
    a.free(&mut d, six.ptr).unwrap();
    a.free(&mut d, four.ptr).unwrap();
    // 10 MiB fits both cached blocks; the smaller one is chosen.
    assert_eq!(a.allocate(&mut d, 10 * MIB, MAIN).unwrap().ptr, four.ptr);
    // Another stream never reuses MAIN's cached blocks: a new segment.
    let s1 = d.create_stream().unwrap();
    let other = a.allocate(&mut d, 12 * MIB, s1).unwrap();
    assert_ne!(other.ptr, six.ptr);
    assert_eq!(a.stats().reserved_bytes, 48 * MIB);
    assert_eq!(a.allocate(&mut d, 11 * MIB, MAIN).unwrap().ptr, six.ptr);
    let _ = keep;
    check(&a);
}

#[test]
fn adjacent_free_blocks_merge() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let p: Vec<Block> = (0..3)
        .map(|_| a.allocate(&mut d, 2 * MIB, MAIN).unwrap())
        .collect();
    a.free(&mut d, p[1].ptr).unwrap();
    a.free(&mut d, p[0].ptr).unwrap();
    let seg = &a.snapshot()[0];
    let sizes: Vec<(u64, BlockState)> =
        seg.blocks.iter().map(|b| (b.size_bytes, b.state)).collect();
    assert_eq!(
        sizes,
        vec![
            (4 * MIB, BlockState::Free),
            (2 * MIB, BlockState::Allocated),
            (14 * MIB, BlockState::Free)
        ]
    );
    assert_eq!(a.stats().inactive_split_count, 2);
    a.free(&mut d, p[2].ptr).unwrap();
    let seg = &a.snapshot()[0];
    assert_eq!(seg.blocks.len(), 1);
    assert_eq!(
        (
            a.stats().inactive_split_count,
            a.stats().inactive_split_bytes
        ),
        (0, 0)
    );
    assert_eq!(a.stats().largest_free_bytes, 20 * MIB);
    check(&a);
}

#[test]
fn oversize_blocks_follow_max_split_size() {
    let mut d = dev();
    let mut a = caching(&mut d, "max_split_size_mb:32");
    let big = a.allocate(&mut d, 40 * MIB, MAIN).unwrap();
    a.free(&mut d, big.ptr).unwrap();
    // Below max_split_size: an oversize cached block is not used.
    let small = a.allocate(&mut d, 12 * MIB, MAIN).unwrap();
    assert_ne!(small.ptr, big.ptr);
    // At least max_split_size and within 20 MiB: reused whole, never split.
    let again = a.allocate(&mut d, 34 * MIB, MAIN).unwrap();
    assert_eq!((again.ptr, again.size_bytes), (big.ptr, 40 * MIB));
    a.free(&mut d, again.ptr).unwrap();
    // Below max_split_size again: a new 20 MiB segment.
    let third = a.allocate(&mut d, 20 * MIB, MAIN).unwrap();
    assert_ne!(third.ptr, big.ptr);
    assert_eq!(a.memory_stats().oversize_segments.current, 1);
    assert_eq!(a.stats().reserved_bytes, 72 * MIB);
    check(&a);
}

#[test]
fn an_oversize_block_is_reused_only_within_20_mib_of_the_request() {
    let mut d = dev();
    let mut a = caching(&mut d, "max_split_size_mb:32");
    let big = a.allocate(&mut d, 60 * MIB, MAIN).unwrap();
    a.free(&mut d, big.ptr).unwrap();
    // 60 MiB ≥ 36 MiB + 20 MiB: not reused.
    let x = a.allocate(&mut d, 36 * MIB, MAIN).unwrap();
    assert_ne!(x.ptr, big.ptr);
    // 60 MiB < 41 MiB + 20 MiB: reused whole.
    let y = a.allocate(&mut d, 41 * MIB, MAIN).unwrap();
    assert_eq!((y.ptr, y.size_bytes), (big.ptr, 60 * MIB));
    assert_eq!(a.memory_stats().oversize_allocations.current, 2);
}

#[test]
fn max_non_split_rounding_widens_the_oversize_window() {
    let mut d = dev();
    let mut a = caching(&mut d, "max_split_size_mb:32,max_non_split_rounding_mb:64");
    let big = a.allocate(&mut d, 100 * MIB, MAIN).unwrap();
    a.free(&mut d, big.ptr).unwrap();
    assert_eq!(a.allocate(&mut d, 40 * MIB, MAIN).unwrap().ptr, big.ptr);
}

#[test]
fn retry_chain_order_then_out_of_memory() {
    let mut d = dev();
    let mut a = caching(&mut d, "max_split_size_mb:32");
    let cached = a.allocate(&mut d, GIB, MAIN).unwrap();
    let _live = a.allocate(&mut d, 2 * GIB, MAIN).unwrap();
    a.free(&mut d, cached.ptr).unwrap();
    // 768 MiB free on the device, 1 GiB cached: 2 GiB cannot fit even after releasing it.
    let e = a.allocate(&mut d, 2 * GIB, MAIN).unwrap_err();
    let AllocError::OutOfMemory(oom) = e else {
        panic!("expected an OOM, got {e}")
    };
    assert_eq!(
        (
            oom.requested_bytes,
            oom.rounded_bytes,
            oom.driver_request_bytes
        ),
        (2 * GIB, 2 * GIB, 2 * GIB)
    );
    assert_eq!((oom.pool.as_str(), oom.stream), ("large", MAIN));
    assert_eq!(
        oom.retries,
        vec![
            "first attempt: cudaMalloc(2147483648) refused".to_string(),
            "release_available_cached_blocks: released 1 oversize cached segments (1073741824 bytes)".into(),
            "release_cached_blocks: waited for 0 pending frees, released 0 segments (0 bytes), unmapped 0 bytes of expandable segments".into(),
            "retry after releasing the cache (num_alloc_retries): cudaMalloc(2147483648) refused".into(),
        ]
    );
    let s = a.stats();
    assert_eq!(
        (s.num_alloc_retries, s.num_ooms, s.reserved_bytes),
        (1, 1, 2 * GIB)
    );
    assert_eq!(device_bytes(&mut d), 2 * GIB);
    check(&a);
}

#[test]
fn releasing_one_oversize_block_is_enough_without_a_counted_retry() {
    let mut d = dev();
    let mut a = caching(&mut d, "max_split_size_mb:32");
    let _live = a.allocate(&mut d, GIB, MAIN).unwrap();
    let cached = a.allocate(&mut d, 2 * GIB, MAIN).unwrap();
    a.free(&mut d, cached.ptr).unwrap();
    // 2 GiB ≥ 1.5 GiB + 20 MiB: not reused; the driver refuses; the cached block goes back.
    let b = a.allocate(&mut d, 1536 * MIB, MAIN).unwrap();
    assert_eq!(b.size_bytes, 1536 * MIB);
    let s = a.stats();
    assert_eq!(
        (s.num_alloc_retries, s.num_ooms, s.reserved_bytes),
        (0, 0, 2560 * MIB)
    );
    check(&a);
}

#[test]
fn without_max_split_size_the_cache_is_emptied_and_the_retry_counted() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let cached = a.allocate(&mut d, 3 * GIB, MAIN).unwrap();
    a.free(&mut d, cached.ptr).unwrap();
    // The cached 3 GiB block could serve 1 GiB by splitting, so no driver call is needed.
    let one = a.allocate(&mut d, GIB, MAIN).unwrap();
    assert_eq!(one.ptr, cached.ptr);
    a.free(&mut d, one.ptr).unwrap();
    let s1 = d.create_stream().unwrap();
    // On another stream it cannot: refused, then the cached segment is released.
    let b = a.allocate(&mut d, GIB, s1).unwrap();
    assert_eq!(b.stream, s1);
    let s = a.stats();
    assert_eq!((s.num_alloc_retries, s.reserved_bytes), (1, GIB));
    check(&a);
}

#[test]
fn empty_cache_releases_only_fully_free_segments() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let small = a.allocate(&mut d, 4096, MAIN).unwrap();
    let small2 = a.allocate(&mut d, 4096, MAIN).unwrap();
    let large = a.allocate(&mut d, 5 * MIB, MAIN).unwrap();
    a.free(&mut d, small.ptr).unwrap();
    a.free(&mut d, large.ptr).unwrap();
    assert_eq!(a.stats().reserved_bytes, 22 * MIB);
    assert_eq!(a.empty_cache(&mut d).unwrap(), 20 * MIB);
    assert_eq!(
        a.stats().reserved_bytes,
        2 * MIB,
        "the small segment still holds a live block"
    );
    assert_eq!(device_bytes(&mut d), 2 * MIB);
    a.free(&mut d, small2.ptr).unwrap();
    assert_eq!(a.empty_cache(&mut d).unwrap(), 2 * MIB);
    assert_eq!((a.stats().reserved_bytes, a.stats().segment_count), (0, 0));
    assert_eq!(device_bytes(&mut d), 0);
    check(&a);
}

#[test]
fn frees_stay_pending_until_the_other_stream_finishes() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let s1 = d.create_stream().unwrap();
    let x = a.allocate(&mut d, 12 * MIB, MAIN).unwrap();
    a.record_stream(&mut d, x.ptr, s1).unwrap();
    d.launch(
        Kernel::Spin {
            duration_ns: 1_000_000,
        },
        s1,
    )
    .unwrap();
    a.free(&mut d, x.ptr).unwrap();
    assert_eq!(a.pending_free_count(), 1);
    let s = a.stats();
    assert_eq!(
        (s.allocated_bytes, s.active_bytes, s.requested_bytes),
        (0, 12 * MIB, 12 * MIB)
    );
    assert_eq!(a.snapshot()[0].blocks[0].state, BlockState::PendingFree);
    // Still running on s1: the same request needs a new segment.
    let y = a.allocate(&mut d, 12 * MIB, MAIN).unwrap();
    assert_ne!(y.ptr, x.ptr);
    assert!(
        a.free(&mut d, x.ptr).is_err(),
        "a pending block is not live"
    );
    d.sleep(2_000_000); // the next malloc processes the events and reuses the block
    assert_eq!(a.allocate(&mut d, 12 * MIB, MAIN).unwrap().ptr, x.ptr);
    assert_eq!(a.pending_free_count(), 0);
    check(&a);
}

#[test]
fn empty_cache_waits_for_pending_frees() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let s1 = d.create_stream().unwrap();
    let x = a.allocate(&mut d, 12 * MIB, MAIN).unwrap();
    a.record_stream(&mut d, x.ptr, s1).unwrap();
    a.record_stream(&mut d, x.ptr, MAIN).unwrap();
    d.launch(
        Kernel::Spin {
            duration_ns: 5_000_000,
        },
        s1,
    )
    .unwrap();
    a.free(&mut d, x.ptr).unwrap();
    assert_eq!(
        a.pending_free_count(),
        1,
        "the allocation stream itself needs no event"
    );
    let before = d.now_ns();
    assert_eq!(a.empty_cache(&mut d).unwrap(), 12 * MIB);
    assert!(d.now_ns() >= before + 4_000_000, "the host waited for s1");
    assert_eq!(a.memory_stats().num_sync_all_streams, 1);
    check(&a);
}

#[test]
fn expandable_segments_map_pages_on_demand_and_unmap_them() {
    let mut d = dev();
    let mut a = caching(&mut d, "expandable_segments:True");
    let x = a.allocate(&mut d, 3 * MIB, MAIN).unwrap();
    assert_eq!(
        (a.stats().reserved_bytes, device_bytes(&mut d)),
        (20 * MIB, 20 * MIB)
    );
    let y = a.allocate(&mut d, 30 * MIB, MAIN).unwrap();
    assert_eq!(y.ptr, x.ptr + 3 * MIB, "the segment grows in place");
    assert_eq!(
        (a.stats().reserved_bytes, device_bytes(&mut d)),
        (40 * MIB, 40 * MIB)
    );
    let z = a.allocate(&mut d, 100, MAIN).unwrap();
    assert_eq!(
        a.stats().reserved_bytes,
        42 * MIB,
        "the small pool maps 2 MiB pages"
    );
    a.free(&mut d, x.ptr).unwrap();
    a.free(&mut d, y.ptr).unwrap();
    let snap = a.snapshot();
    let large = snap.iter().find(|s| s.pool == PoolKind::Large).unwrap();
    assert_eq!(
        (large.blocks.len(), large.total_size_bytes, large.expandable),
        (1, 40 * MIB, true)
    );
    assert_eq!(
        a.stats().inactive_split_bytes,
        0,
        "expandable segments are not counted as split"
    );
    assert_eq!(a.empty_cache(&mut d).unwrap(), 40 * MIB);
    assert_eq!(
        (a.stats().reserved_bytes, device_bytes(&mut d)),
        (2 * MIB, 2 * MIB)
    );
    a.free(&mut d, z.ptr).unwrap();
    a.empty_cache(&mut d).unwrap();
    assert_eq!(
        (
            a.stats().reserved_bytes,
            a.stats().segment_count,
            device_bytes(&mut d)
        ),
        (0, 0, 0)
    );
    check(&a);
}

#[test]
fn expandable_segments_keep_partial_pages_and_fill_holes_first() {
    let mut d = dev();
    let mut a = caching(&mut d, "expandable_segments:True");
    let p: Vec<Block> = (0..3)
        .map(|_| a.allocate(&mut d, 20 * MIB, MAIN).unwrap())
        .collect();
    let tail = a.allocate(&mut d, 10 * MIB, MAIN).unwrap();
    assert_eq!(a.stats().reserved_bytes, 80 * MIB);
    // Free the second page: it is unmapped by empty_cache, leaving a hole.
    a.free(&mut d, p[1].ptr).unwrap();
    assert_eq!(a.empty_cache(&mut d).unwrap(), 20 * MIB);
    assert_eq!(device_bytes(&mut d), 60 * MIB);
    // The next growth fills the hole (the lowest address) rather than the end.
    let again = a.allocate(&mut d, 20 * MIB, MAIN).unwrap();
    assert_eq!(again.ptr, p[1].ptr);
    // The last page is half used: freeing the tail leaves a 10 MiB free block that stays mapped.
    a.free(&mut d, tail.ptr).unwrap();
    assert_eq!(
        a.empty_cache(&mut d).unwrap(),
        20 * MIB,
        "the tail page had nothing live"
    );
    check(&a);
}

#[test]
fn expandable_out_of_memory_unmaps_what_it_mapped() {
    let mut d = dev();
    let mut a = caching(&mut d, "expandable_segments:True");
    let _x = a.allocate(&mut d, 3 * GIB, MAIN).unwrap();
    assert_eq!(a.stats().reserved_bytes, 3080 * MIB, "154 pages of 20 MiB");
    let e = a.allocate(&mut d, GIB, MAIN).unwrap_err();
    let AllocError::OutOfMemory(oom) = e else {
        panic!("expected an OOM")
    };
    assert_eq!(oom.retries.len(), 4);
    let first = &oom.retries[0].text;
    assert!(
        first.contains("expandable segment pages refused"),
        "{first}"
    );
    assert_eq!(
        oom.driver_request_bytes,
        1020 * MIB,
        "51 more pages were needed"
    );
    assert_eq!(
        (a.stats().reserved_bytes, device_bytes(&mut d)),
        (3080 * MIB, 3080 * MIB)
    );
    check(&a);
}

#[test]
fn per_process_memory_fraction_refuses_before_the_driver() {
    let mut d = dev();
    let mut a = caching(&mut d, "per_process_memory_fraction:0.25");
    a.allocate(&mut d, GIB, MAIN).unwrap();
    let e = a.allocate(&mut d, MIB, MAIN).unwrap_err();
    let AllocError::OutOfMemory(oom) = e else {
        panic!("expected an OOM")
    };
    let first = &oom.retries[0].text;
    assert!(
        first.contains("memory fraction (1073741824 bytes allowed"),
        "{first}"
    );
    assert_eq!(device_bytes(&mut d), GIB);
}

#[test]
fn garbage_collection_releases_aged_segments_above_the_threshold() {
    let mut d = dev();
    let mut a = caching(
        &mut d,
        "per_process_memory_fraction:0.5,garbage_collection_threshold:0.5",
    );
    let p: Vec<Block> = (0..3)
        .map(|_| a.allocate(&mut d, 400 * MIB, MAIN).unwrap())
        .collect();
    for b in &p {
        a.free(&mut d, b.ptr).unwrap();
    }
    assert_eq!(a.stats().reserved_bytes, 1200 * MIB);
    // 1200 MiB held is above 0.5 × 2 GiB: the aged segments go before the driver is asked.
    a.allocate(&mut d, 500 * MIB, MAIN).unwrap();
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.num_alloc_retries), (500 * MIB, 0));
    check(&a);
}

#[test]
fn roundup_power2_divisions_change_the_rounding() {
    let mut d = dev();
    let mut a = caching(&mut d, "roundup_power2_divisions:4");
    assert_eq!(
        a.allocate(&mut d, 5 * MIB + 1, MAIN).unwrap().size_bytes,
        6 * MIB
    );
    assert_eq!(a.rounded_size(1200), 1536);
    assert_eq!(a.driver_bytes_for(5 * MIB + 1), 20 * MIB);
}

#[test]
fn bad_calls_are_errors() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    assert!(matches!(
        a.allocate(&mut d, 0, MAIN),
        Err(AllocError::Invalid(_))
    ));
    assert!(matches!(
        a.free(&mut d, 0x1234),
        Err(AllocError::Invalid(_))
    ));
    let x = a.allocate(&mut d, 100, MAIN).unwrap();
    a.free(&mut d, x.ptr).unwrap();
    let e = a.free(&mut d, x.ptr).unwrap_err();
    assert!(e.to_string().contains("not live"), "{e}");
    assert!(a.record_stream(&mut d, x.ptr, MAIN).is_err());
    assert!(a.allocate(&mut d, u64::MAX, MAIN).unwrap_err().is_oom());
    let e = a.allocate(&mut d, 100, StreamId(77)).unwrap_err();
    assert_eq!(e.to_string(), "allocation on stream 77: unknown stream 77");
    assert_eq!(a.stats().num_ooms, 1);
    // An unknown stream fails when the free needs an event on it; the block is still freed.
    let y = a.allocate(&mut d, 100, MAIN).unwrap();
    a.record_stream(&mut d, y.ptr, StreamId(77)).unwrap();
    assert!(matches!(a.free(&mut d, y.ptr), Err(AllocError::Device(_))));
    assert_eq!(a.stats().allocated_bytes, 0);
    check(&a);
}

#[test]
fn largest_free_for_looks_in_the_pool_the_request_would_use() {
    let mut d = dev();
    let mut a = caching(&mut d, "");
    let s = a.allocate(&mut d, 512, MAIN).unwrap();
    let l = a.allocate(&mut d, 12 * MIB, MAIN).unwrap();
    a.free(&mut d, l.ptr).unwrap();
    assert_eq!(a.largest_free_for(100), 2 * MIB - 512);
    assert_eq!(a.largest_free_for(5 * MIB), 12 * MIB);
    assert_eq!(a.stats().largest_free_bytes, 12 * MIB);
    let _ = s;
}

#[test]
fn release_all_returns_everything() {
    let mut d = dev();
    for settings in ["", "expandable_segments:True"] {
        let mut a = caching(&mut d, settings);
        let s1 = d.create_stream().unwrap();
        let x = a.allocate(&mut d, 3 * MIB, MAIN).unwrap();
        a.allocate(&mut d, 100, s1).unwrap();
        a.allocate(&mut d, 50 * MIB, MAIN).unwrap();
        a.record_stream(&mut d, x.ptr, s1).unwrap();
        a.release_all(&mut d).unwrap();
        assert_eq!(a.stats().reserved_bytes, 0, "{settings}");
        assert_eq!(device_bytes(&mut d), 0, "{settings}");
        check(&a);
    }
}
