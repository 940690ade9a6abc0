//! The cached-block index of one pool on one stream, built for best fit by `(size, address)`.
//!
//! PyTorch keeps cached blocks in a `std::set` ordered by `(stream, size, address)`
//! (`BlockComparatorSize`) and takes the first block not below the request. Here the sizes are
//! cut into classes (exact to 512 B up to 2 MiB, which covers the whole small pool, then 256
//! classes per power of two); each class is a doubly linked list sorted by `(size, address)`
//! whose links live in the blocks themselves (`Node::fprev`/`fnext`), and a two-level bitmap
//! finds the first non-empty class at or above the request's in a few word operations.
//! Classes only group keys that are already adjacent, so walking the classes in order and each
//! list in order visits blocks exactly in `(size, address)` order, as the set does. Inserting
//! and removing touch only the block, its list neighbours and the class head: nothing is
//! allocated or moved once the head table has grown to the largest class used.
//!
//! A list's head keeps the list's last block in its `fprev`, so a block larger than every
//! block of its class is appended without a walk; otherwise the insert walks the class from
//! its smallest block (classes are narrow: only blocks of one exact size share a class below
//! 2 MiB, and sizes within 0.4 % above).

use super::arena::{Arena, NIL};

/// Exact classes: one per 512-byte unit below 2^EXACT_BITS units (2 MiB).
const EXACT_BITS: u32 = 12;
/// Sub-classes per power of two above the exact range (2^SUB_BITS).
const SUB_BITS: u32 = 8;
/// Classes for every `u64` size: `class_of(u64::MAX) + 1`.
const CLASSES: usize = (1 << EXACT_BITS) + ((64 - 9 - EXACT_BITS as usize) << SUB_BITS);
/// Words of the class bitmap.
const WORDS: usize = CLASSES / 64;
/// Words of the summary bitmap (one bit per class word).
const SUMMARY: usize = WORDS.div_ceil(64);
const _: () = assert!(CLASSES % 64 == 0, "the class bitmap has whole words");

/// The class of a block of `size` bytes: monotone in `size`, so a smaller size never lands in
/// a later class than a larger one.
#[inline]
fn class_of(size: u64) -> usize {
    let units = size >> 9;
    if units < (1 << EXACT_BITS) {
        return units as usize;
    }
    let e = 63 - units.leading_zeros();
    (1 << EXACT_BITS)
        + (((e - EXACT_BITS) as usize) << SUB_BITS)
        + ((units >> (e - SUB_BITS)) as usize & ((1 << SUB_BITS) - 1))
}

/// Cached blocks by `(size, address)`, linked through the arena.
#[derive(Debug)]
pub(crate) struct SizeIndex {
    /// Bit `c % 64` of `words[c / 64]`: class `c` holds a block.
    words: Box<[u64; WORDS]>,
    /// Bit `w % 64` of `summary[w / 64]`: `words[w]` is not zero.
    summary: [u64; SUMMARY],
    /// Per class, its smallest block (`NIL`: empty); grown up to the largest class used.
    heads: Vec<u32>,
    len: usize,
}

impl Default for SizeIndex {
    fn default() -> SizeIndex {
        SizeIndex {
            words: Box::new([0; WORDS]),
            summary: [0; SUMMARY],
            heads: Vec::new(),
            len: 0,
        }
    }
}

#[inline]
fn key(arena: &Arena, i: u32) -> (u64, u64) {
    let n = &arena[i];
    (n.size, n.ptr)
}

impl SizeIndex {
    /// Blocks in the index.
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn head(&self, c: usize) -> u32 {
        self.heads.get(c).copied().unwrap_or(NIL)
    }

    #[inline]
    fn mark(&mut self, c: usize) {
        let w = c >> 6;
        self.words[w] |= 1 << (c & 63);
        self.summary[w >> 6] |= 1 << (w & 63);
    }

    #[inline]
    fn unmark(&mut self, c: usize) {
        let w = c >> 6;
        self.words[w] &= !(1 << (c & 63));
        if self.words[w] == 0 {
            self.summary[w >> 6] &= !(1 << (w & 63));
        }
    }

    /// The first non-empty class at or after `c`.
    #[inline]
    fn next_class(&self, c: usize) -> Option<usize> {
        let w = c >> 6;
        if w >= WORDS {
            return None;
        }
        let m = self.words[w] & (!0u64 << (c & 63));
        if m != 0 {
            return Some((w << 6) | m.trailing_zeros() as usize);
        }
        let w = w + 1;
        let mut s = w >> 6;
        if s >= SUMMARY {
            return None;
        }
        let mut m = self.summary[s] & (!0u64 << (w & 63));
        loop {
            if m != 0 {
                let w = (s << 6) | m.trailing_zeros() as usize;
                return Some((w << 6) | self.words[w].trailing_zeros() as usize);
            }
            s += 1;
            if s >= SUMMARY {
                return None;
            }
            m = self.summary[s];
        }
    }

    /// The last non-empty class.
    fn last_class(&self) -> Option<usize> {
        let s = (0..SUMMARY).rev().find(|&s| self.summary[s] != 0)?;
        let w = (s << 6) | (63 - self.summary[s].leading_zeros() as usize);
        Some((w << 6) | (63 - self.words[w].leading_zeros() as usize))
    }

    /// Adds block `i` (its `(size, ptr)` must not be in the index).
    #[inline]
    pub fn insert(&mut self, arena: &mut Arena, i: u32) {
        let k = key(arena, i);
        let c = class_of(k.0);
        if c >= self.heads.len() {
            self.heads.resize(c + 1, NIL);
        }
        let head = self.heads[c];
        if head == NIL {
            let n = &mut arena[i];
            n.fprev = i;
            n.fnext = NIL;
            self.heads[c] = i;
            self.mark(c);
        } else {
            let tail = arena[head].fprev;
            if key(arena, tail) < k {
                arena[tail].fnext = i;
                let n = &mut arena[i];
                n.fprev = tail;
                n.fnext = NIL;
                arena[head].fprev = i;
            } else if k < key(arena, head) {
                let n = &mut arena[i];
                n.fprev = tail;
                n.fnext = head;
                arena[head].fprev = i;
                self.heads[c] = i;
            } else {
                // Somewhere after the head and before the tail.
                let mut at = arena[head].fnext;
                while key(arena, at) < k {
                    at = arena[at].fnext;
                }
                debug_assert!(key(arena, at) != k, "a key already in the index");
                let before = arena[at].fprev;
                arena[before].fnext = i;
                arena[at].fprev = i;
                let n = &mut arena[i];
                n.fprev = before;
                n.fnext = at;
            }
        }
        self.len += 1;
    }

    /// Takes block `i` (which must be in the index) out.
    #[inline]
    pub fn remove(&mut self, arena: &mut Arena, i: u32) {
        let c = class_of(arena[i].size);
        let (prev, next) = (arena[i].fprev, arena[i].fnext);
        let head = self.heads[c];
        if head == i {
            self.heads[c] = next;
            if next == NIL {
                self.unmark(c);
            } else {
                // The new head keeps the tail.
                arena[next].fprev = prev;
            }
        } else {
            arena[prev].fnext = next;
            if next == NIL {
                arena[head].fprev = prev;
            } else {
                arena[next].fprev = prev;
            }
        }
        let n = &mut arena[i];
        n.fprev = NIL;
        n.fnext = NIL;
        self.len -= 1;
    }

    /// Whether block `i` is in the index (a walk of its class; for consistency checks).
    pub fn contains(&self, arena: &Arena, i: u32) -> bool {
        let mut at = self.head(class_of(arena[i].size));
        while at != NIL {
            if at == i {
                return true;
            }
            at = arena[at].fnext;
        }
        false
    }

    /// The size of the largest block.
    pub fn last_size(&self, arena: &Arena) -> Option<u64> {
        let c = self.last_class()?;
        Some(arena[arena[self.heads[c]].fprev].size)
    }

    /// Blocks of at least `size` bytes, smallest `(size, address)` first.
    #[inline]
    pub fn at_least<'a>(&'a self, arena: &'a Arena, size: u64) -> Iter<'a> {
        let c = class_of(size);
        let head = self.head(c);
        let first = if head != NIL && arena[arena[head].fprev].size >= size {
            let mut at = head;
            while arena[at].size < size {
                at = arena[at].fnext;
            }
            at
        } else {
            // Nothing here that large: start at the next class.
            self.first_from_class(c + 1)
        };
        Iter {
            index: self,
            arena,
            at: first,
            started: false,
        }
    }

    /// Every block, smallest `(size, address)` first.
    pub fn iter<'a>(&'a self, arena: &'a Arena) -> Iter<'a> {
        Iter {
            index: self,
            arena,
            at: self.first_from_class(0),
            started: false,
        }
    }

    #[inline]
    fn first_from_class(&self, c: usize) -> u32 {
        match self.next_class(c) {
            Some(c) => self.heads[c],
            None => NIL,
        }
    }
}

/// Arena indices in `(size, address)` order.
pub(crate) struct Iter<'a> {
    index: &'a SizeIndex,
    arena: &'a Arena,
    /// The block returned last, or before the first call the first block (`NIL`: done).
    at: u32,
    /// Whether `at` was returned already. The successor is found only when asked for, so
    /// taking the best fit alone costs no search of the following classes.
    started: bool,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.at == NIL {
            return None;
        }
        if self.started {
            let n = &self.arena[self.at];
            self.at = if n.fnext != NIL {
                n.fnext
            } else {
                self.index.first_from_class(class_of(n.size) + 1)
            };
            if self.at == NIL {
                return None;
            }
        }
        self.started = true;
        Some(self.at)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::arena::{Node, NodeState};
    use super::super::sizes::PoolKind;
    use super::*;
    use crate::device::DevPtr;

    #[test]
    fn classes_are_monotone_and_cover_u64() {
        let mut sizes: Vec<u64> = (0..64)
            .flat_map(|shift| [0u64, 1, 511, 512, 4095].map(|d| (1u64 << shift).saturating_add(d)))
            .chain((0..(64u64 << 20)).step_by(512))
            .chain([0, u64::MAX])
            .collect();
        sizes.sort_unstable();
        for w in sizes.windows(2) {
            assert!(class_of(w[0]) <= class_of(w[1]), "{} then {}", w[0], w[1]);
        }
        assert_eq!(class_of(u64::MAX), CLASSES - 1);
        // Exact classes up to 2 MiB, then 256 per power of two.
        assert_eq!(class_of(2 << 20), 1 << EXACT_BITS);
        assert_ne!(class_of((2 << 20) - 512), class_of((2 << 20) - 1024));
        assert_eq!(class_of(4 << 20), (1 << EXACT_BITS) + (1 << SUB_BITS));
    }

    /// xorshift64*.
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    #[test]
    fn agrees_with_an_ordered_map() {
        let mut state = 0x9E37_79B9_7F4A_7C15;
        let mut arena = Arena::default();
        let mut index = SizeIndex::default();
        let mut model: BTreeMap<(u64, DevPtr), u32> = BTreeMap::new();
        for _ in 0..40_000u32 {
            let r = rng(&mut state);
            let size = match r % 6 {
                0 => 512 * (1 + r % 8),
                1 => 512 * (1 + (r >> 8) % 4096),
                2 => (1 + (r >> 8) % (1 << 30)) * 512,
                3 => (r >> 4) | 1,
                4 => (4 << 20) + 512 * ((r >> 8) % 64),
                _ => u64::MAX - (r >> 40),
            };
            let ptr = (rng(&mut state) % 64) << 9;
            if model.contains_key(&(size, ptr)) || rng(&mut state) % 3 == 0 {
                if let Some((&(s, p), &i)) = model.iter().nth((r % 7) as usize) {
                    assert!(index.contains(&arena, i));
                    assert_eq!(key(&arena, i), (s, p));
                    index.remove(&mut arena, i);
                    assert!(!index.contains(&arena, i));
                    arena.remove(i);
                    model.remove(&(s, p));
                }
            } else {
                let node = Node::new(ptr, size, 0, PoolKind::Large, NodeState::Free);
                let i = arena.insert(node);
                index.insert(&mut arena, i);
                model.insert((size, ptr), i);
            }
            assert_eq!(index.len(), model.len());
            let probe = rng(&mut state) >> (r % 64);
            let want: Vec<u32> = model.range((probe, 0)..).map(|(_, &i)| i).take(3).collect();
            let got: Vec<u32> = index.at_least(&arena, probe).take(3).collect();
            assert_eq!(got, want, "at_least({probe})");
            assert_eq!(
                index.last_size(&arena),
                model.last_key_value().map(|((s, _), _)| *s)
            );
        }
        let all: Vec<u32> = model.values().copied().collect();
        assert_eq!(index.iter(&arena).collect::<Vec<_>>(), all);
    }
}
