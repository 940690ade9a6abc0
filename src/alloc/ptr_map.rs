//! A hash map keyed by device address, with a hasher cheap enough for the allocate/free path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::device::DevPtr;

/// A multiply-xorshift hasher for device addresses (aligned, so the low bits carry little).
/// Much cheaper than SipHash; addresses come from the driver, not from an adversary.
#[derive(Debug, Default, Clone, Copy)]
pub struct PtrHasher(u64);

impl Hasher for PtrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        let x = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

/// Device address → `V`.
pub type PtrMap<V> = HashMap<DevPtr, V, BuildHasherDefault<PtrHasher>>;
