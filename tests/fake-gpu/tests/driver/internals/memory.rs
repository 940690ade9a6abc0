//! `memory`'s own rules, checked from outside the library.

use headroom_fake_gpu::memory::*;

const MIB: u64 = 1 << 20;

#[test]
fn small_allocations_pack_and_large_ones_take_pages() {
    let mut va = AddressSpace::default();
    let mut h = PlainHeap::new(2 * MIB, MIB, 512);
    assert_eq!(h.need(100), Need::Bytes(2 * MIB));
    let a = h.alloc(100, |b| va.take(b, 0));
    assert_eq!(h.need(1000), Need::Nothing);
    let b = h.alloc(1000, |b| va.take(b, 0));
    let c = h.alloc(512, |b| va.take(b, 0));
    assert_eq!((b - a, c - b), (512, 1024));
    let d = h.alloc(MIB, |b| va.take(b, 0));
    assert_eq!(h.bytes(), 2 * MIB);
    assert_eq!(h.need(MIB), Need::Bytes(2 * MIB), "the first page is full");
    let e = h.alloc(3 * MIB, |b| va.take(b, 0));
    assert_eq!(h.bytes(), 6 * MIB, "3 MiB takes two whole pages");
    h.free(e).unwrap();
    for p in [a, b, c] {
        h.free(p).unwrap();
    }
    assert_eq!(h.bytes(), 2 * MIB);
    h.free(d).unwrap();
    assert_eq!(
        h.bytes(),
        0,
        "the last small allocation gives its page back"
    );
    assert!(h.free(d).is_none());
    assert_eq!(a % (2 * MIB), 0);
}

#[test]
fn regions_cover_across_neighbours_and_overlaps() {
    let mut r = Regions::default();
    r.add(1000, 100, 1);
    r.add(1100, 50, 2);
    r.add(1000, 10, 3);
    assert!(r.covers(1000, 150));
    assert!(!r.covers(1000, 151));
    r.remove(1000, 1);
    assert!(r.covers(1000, 10));
    assert!(!r.covers(1005, 10));
    assert!(r.covers(1100, 0));
}
