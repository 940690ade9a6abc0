//! `addr_map`'s own rules, checked from outside the library.

use std::hash::BuildHasher;

use headroom_fake_gpu::addr_map::*;
use std::hash::BuildHasherDefault;

#[test]
fn aligned_bases_spread_over_the_low_bits() {
    let build = BuildHasherDefault::<AddrHasher>::default();
    let mut seen = std::collections::HashSet::new();
    for i in 0..1024u64 {
        seen.insert(build.hash_one(0x7f00_0000_0000 + (i << 16)) & 1023);
    }
    // 1024 keys into 1024 buckets by the low 10 bits: a uniform hash fills about 63 %.
    assert!(seen.len() > 550, "{} buckets used", seen.len());
    let mut m: AddrMap<u64> = AddrMap::default();
    for i in 0..10_000u64 {
        m.insert(i << 16, i);
    }
    assert!((0..10_000u64).all(|i| m.get(&(i << 16)) == Some(&i)));
    assert_eq!(m.remove(&(5 << 16)), Some(5));
    assert_eq!(m.get(&(5 << 16)), None);
}
