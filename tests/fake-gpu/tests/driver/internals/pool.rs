//! `pool`'s own rules, checked from outside the library.

use headroom_fake_gpu::abi::*;
use headroom_fake_gpu::pool::*;
use headroom_fake_gpu::stream::{StreamShared, Work};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

const MIB: u64 = 1 << 20;

fn live(bytes: u64) -> Live {
    Live {
        bytes,
        requested: bytes,
        region: 0,
    }
}

#[test]
fn reuse_follows_the_documented_order() {
    let sticky = Arc::new(AtomicU32::new(0));
    let a = StreamShared::spawn(1, 0, sticky.clone()).unwrap();
    let b = StreamShared::spawn(2, 0, sticky).unwrap();
    let mut p = Pool::new(9, 0, 2 * MIB, 0);
    p.grow(0x1000_0000, live(4 * MIB));
    // Pending on `a` (a long operation ahead of the free).
    let seq = a.push(vec![], Duration::from_millis(200), Work::Nothing);
    p.free(0x1000_0000, a.clone(), seq);
    let none = HashMap::new();
    assert_eq!(
        p.take_ready(live(4 * MIB), 2, &none),
        None,
        "pending on another stream"
    );
    let waited: HashMap<u64, u64> = [(1, seq)].into();
    assert_eq!(
        p.take_ready(live(2 * MIB), 2, &waited),
        Some(0x1000_0000),
        "followed event"
    );
    let (ptr, dep) = p.take_waiting(live(2 * MIB)).unwrap();
    assert_eq!((ptr, dep.seq), (0x1000_0000 + 2 * MIB, seq));
    a.drain();
    b.close();
    a.close();
}

#[test]
fn trim_releases_completed_blocks_largest_first() {
    let a = StreamShared::spawn(1, 0, Arc::new(AtomicU32::new(0))).unwrap();
    let mut p = Pool::new(9, 0, 2 * MIB, 0);
    p.grow(0x1000_0000, live(2 * MIB));
    p.grow(0x2000_0000, live(6 * MIB));
    let seq = a.push(vec![], Duration::ZERO, Work::Nothing);
    p.free(0x1000_0000, a.clone(), seq);
    p.free(0x2000_0000, a.clone(), seq);
    a.drain();
    assert_eq!(p.trim_to(4 * MIB, false), 0, "nothing synchronized yet");
    assert_eq!(p.trim_to(4 * MIB, true), 6 * MIB);
    assert_eq!(p.reserved(), 2 * MIB);
    assert_eq!(p.get_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), Ok(8 * MIB));
    p.set_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0).unwrap();
    assert_eq!(p.get_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), Ok(2 * MIB));
    assert!(p.set_attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 5).is_err());
    a.close();
}
