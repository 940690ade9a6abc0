//! Live allocations by address (PyTorch's `allocated_blocks`): an open-addressing table of
//! `(address, block)` pairs with linear probing and backward-shift deletion, kept at most a
//! quarter full: probe runs stay short, so an insert, a lookup and a deletion's shift each
//! touch one or two slots. A free looks its address up here, so this is on every
//! allocate/free pair; it grows only when more blocks are live at once than ever before.

use crate::device::DevPtr;

/// An empty slot (no device address is `u64::MAX`: it would end past the address space).
const EMPTY: DevPtr = DevPtr::MAX;
const MIN_CAPACITY: usize = 64;

#[derive(Debug, Clone)]
pub(super) struct LiveTable {
    slots: Vec<(DevPtr, u32)>,
    /// `slots.len() - 1` (the length is a power of two).
    mask: usize,
    /// `64 - log2(slots.len())`: a hash's top bits pick the home slot.
    shift: u32,
    len: usize,
}

impl Default for LiveTable {
    fn default() -> LiveTable {
        LiveTable {
            slots: vec![(EMPTY, 0); MIN_CAPACITY],
            mask: MIN_CAPACITY - 1,
            shift: 64 - MIN_CAPACITY.trailing_zeros(),
            len: 0,
        }
    }
}

impl LiveTable {
    #[inline]
    fn home(&self, ptr: DevPtr) -> usize {
        // Fibonacci hashing: the top bits of the product depend on every bit of the address.
        (ptr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The block at `ptr`.
    #[inline]
    pub fn get(&self, ptr: DevPtr) -> Option<u32> {
        let mut at = self.home(ptr);
        loop {
            let (k, v) = self.slots[at];
            if k == ptr {
                return Some(v);
            }
            if k == EMPTY {
                return None;
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Adds `ptr` (not already live).
    #[inline]
    pub fn insert(&mut self, ptr: DevPtr, block: u32) {
        debug_assert!(ptr != EMPTY && self.get(ptr).is_none());
        if (self.len + 1) * 4 > self.slots.len() {
            self.grow();
        }
        let mut at = self.home(ptr);
        while self.slots[at].0 != EMPTY {
            at = (at + 1) & self.mask;
        }
        self.slots[at] = (ptr, block);
        self.len += 1;
    }

    /// Takes `ptr` out, returning its block.
    #[inline]
    pub fn remove(&mut self, ptr: DevPtr) -> Option<u32> {
        let mut at = self.home(ptr);
        loop {
            let (k, v) = self.slots[at];
            if k == ptr {
                self.len -= 1;
                self.close_gap(at);
                return Some(v);
            }
            if k == EMPTY {
                return None;
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Backward-shift deletion: moves later entries of the probe run into the hole at `gap`
    /// when their home is not between the hole and them.
    #[inline]
    fn close_gap(&mut self, mut gap: usize) {
        let mut at = gap;
        loop {
            at = (at + 1) & self.mask;
            let (k, _) = self.slots[at];
            if k == EMPTY {
                break;
            }
            let home = self.home(k);
            // Distance from home to `at` versus from the gap to `at`, around the ring.
            if (at.wrapping_sub(home) & self.mask) >= (at.wrapping_sub(gap) & self.mask) {
                self.slots[gap] = self.slots[at];
                gap = at;
            }
        }
        self.slots[gap] = (EMPTY, 0);
    }

    #[cold]
    fn grow(&mut self) {
        let bigger = vec![(EMPTY, 0); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        self.mask = self.slots.len() - 1;
        self.shift = 64 - self.slots.len().trailing_zeros();
        for (k, v) in old {
            if k != EMPTY {
                let mut at = self.home(k);
                while self.slots[at].0 != EMPTY {
                    at = (at + 1) & self.mask;
                }
                self.slots[at] = (k, v);
            }
        }
    }

    /// Every live address, in table order.
    pub fn keys(&self) -> impl Iterator<Item = DevPtr> + '_ {
        self.slots.iter().map(|&(k, _)| k).filter(|&k| k != EMPTY)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn agrees_with_a_hash_map() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut table = LiveTable::default();
        let mut model: HashMap<DevPtr, u32> = HashMap::new();
        for step in 0..50_000u32 {
            let r = next();
            // A few hundred addresses, 512-byte aligned, some far apart.
            let ptr = ((r % 700) << 9) + if r & (1 << 40) != 0 { 1 << 40 } else { 0 };
            match model.remove(&ptr) {
                Some(block) => assert_eq!(table.remove(ptr), Some(block)),
                None if step % 5 != 0 => {
                    table.insert(ptr, step);
                    model.insert(ptr, step);
                }
                None => assert_eq!(table.remove(ptr), None),
            }
            assert_eq!(table.len(), model.len());
            let probe = ((next() % 700) << 9) + if r & 2 != 0 { 1 << 40 } else { 0 };
            assert_eq!(table.get(probe), model.get(&probe).copied());
        }
        let mut keys: Vec<DevPtr> = table.keys().collect();
        let mut want: Vec<DevPtr> = model.keys().copied().collect();
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want);
    }
}
