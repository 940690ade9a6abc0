//! Hash maps keyed by device addresses, with a hash made for them: std's SipHash was about a
//! fifth of the fake driver's time in a GPU check, and addresses need no protection from
//! chosen keys. headroom's own `alloc::ptr_map` does the same for the allocator models; the fake
//! driver depends on nothing of headroom's, so it keeps its own.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` from a device address (or a chunk base) to `V`.
pub type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

/// SplitMix64's finalizer over one `u64`: every bit of the key reaches the low bits that pick
/// the bucket, so 64 KiB-aligned chunk bases (low 16 bits zero) spread like any others.
#[derive(Debug, Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[inline]
    fn write_u64(&mut self, k: u64) {
        self.0 = self.0.rotate_left(5) ^ k;
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}
