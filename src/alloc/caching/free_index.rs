//! The cached-block index of one pool on one stream, built for best fit by `(size, address)`.
//!
//! PyTorch keeps cached blocks in a `std::set` ordered by `(stream, size, address)`
//! (`BlockComparatorSize`) and takes the first block not below the request. Here the sizes are
//! cut into classes (exact to 512 B up to 32 KiB, then 64 classes per power of two); each
//! class is a short run sorted by `(size, address)`, and a two-level bitmap finds the first
//! non-empty class at or above the request's in a few word operations. Classes only group
//! keys that are already adjacent, so walking the classes in order and each run in order
//! visits blocks exactly in `(size, address)` order, as the set does. After warm-up, inserts
//! and removals reuse the runs' buffers: the allocate/free path allocates nothing.

use crate::device::DevPtr;

/// Sub-classes per power of two above the exact range (2^SUB_BITS).
const SUB_BITS: u32 = 6;
/// Classes for every `u64` size: `class_of(u64::MAX) + 1`.
const CLASSES: usize = ((64 - 9 - 1 - SUB_BITS as usize) << SUB_BITS) + (2 << SUB_BITS);
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
    if units < (1 << SUB_BITS) {
        return units as usize;
    }
    let e = 63 - units.leading_zeros();
    (((e - SUB_BITS) as usize) << SUB_BITS) + (units >> (e - SUB_BITS)) as usize
}

/// One cached block: its key and its arena index.
#[derive(Debug, Clone, Copy)]
struct Entry {
    size: u64,
    ptr: DevPtr,
    idx: u32,
}

impl Entry {
    #[inline]
    fn key(&self) -> (u64, DevPtr) {
        (self.size, self.ptr)
    }
}

/// Cached blocks by `(size, address)`, each with its arena index.
#[derive(Debug)]
pub(crate) struct SizeIndex {
    /// Bit `c % 64` of `words[c / 64]`: class `c` holds a block.
    words: Box<[u64; WORDS]>,
    /// Bit `w % 64` of `summary[w / 64]`: `words[w]` is not zero.
    summary: [u64; SUMMARY],
    /// Per class, its blocks sorted by `(size, address)`; grown up to the largest class used.
    classes: Vec<Vec<Entry>>,
    len: usize,
}

impl Default for SizeIndex {
    fn default() -> SizeIndex {
        SizeIndex {
            words: Box::new([0; WORDS]),
            summary: [0; SUMMARY],
            classes: Vec::new(),
            len: 0,
        }
    }
}

impl SizeIndex {
    /// Blocks in the index.
    pub fn len(&self) -> usize {
        self.len
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

    /// Adds a block (its key must not be in the index).
    #[inline]
    pub fn insert(&mut self, size: u64, ptr: DevPtr, idx: u32) {
        let c = class_of(size);
        if c >= self.classes.len() {
            self.classes.resize_with(c + 1, Vec::new);
        }
        let run = &mut self.classes[c];
        let key = (size, ptr);
        // Most runs hold a block or two: the common case appends.
        let at = if run.last().is_none_or(|e| e.key() < key) {
            run.len()
        } else {
            run.partition_point(|e| e.key() < key)
        };
        debug_assert!(run.get(at).is_none_or(|e| e.key() != key));
        run.insert(at, Entry { size, ptr, idx });
        if run.len() == 1 {
            self.mark(c);
        }
        self.len += 1;
    }

    /// Where `(size, ptr)` sits: its class and position in the run.
    #[inline]
    fn find(&self, size: u64, ptr: DevPtr) -> Option<(usize, usize)> {
        let c = class_of(size);
        let run = self.classes.get(c)?;
        let key = (size, ptr);
        let at = if run.len() <= 4 {
            run.iter().position(|e| e.key() == key)?
        } else {
            run.binary_search_by(|e| e.key().cmp(&key)).ok()?
        };
        Some((c, at))
    }

    /// Takes out the block with key `(size, ptr)`, returning its arena index.
    #[inline]
    pub fn remove(&mut self, size: u64, ptr: DevPtr) -> Option<u32> {
        let (c, at) = self.find(size, ptr)?;
        let run = &mut self.classes[c];
        let e = run.remove(at);
        if run.is_empty() {
            self.unmark(c);
        }
        self.len -= 1;
        Some(e.idx)
    }

    /// The arena index of the block with key `(size, ptr)`.
    pub fn get(&self, size: u64, ptr: DevPtr) -> Option<u32> {
        self.find(size, ptr).map(|(c, at)| self.classes[c][at].idx)
    }

    /// The size of the largest block.
    pub fn last_size(&self) -> Option<u64> {
        let c = self.last_class()?;
        self.classes[c].last().map(|e| e.size)
    }

    /// Blocks of at least `size` bytes, smallest `(size, address)` first.
    #[inline]
    pub fn at_least(&self, size: u64) -> Iter<'_> {
        let c = class_of(size);
        let pos = match self.classes.get(c) {
            Some(run) if run.last().is_some_and(|e| e.size >= size) => {
                if run[0].size >= size {
                    0
                } else {
                    run.partition_point(|e| e.size < size)
                }
            }
            // Nothing here that large: start at the next class.
            _ => return self.starting_at_class(c + 1),
        };
        Iter {
            index: self,
            class: c,
            pos,
        }
    }

    /// Every block, smallest `(size, address)` first.
    pub fn iter(&self) -> Iter<'_> {
        self.starting_at_class(0)
    }

    fn starting_at_class(&self, c: usize) -> Iter<'_> {
        Iter {
            index: self,
            class: self.next_class(c).unwrap_or(CLASSES),
            pos: 0,
        }
    }
}

/// Arena indices in `(size, address)` order.
pub(crate) struct Iter<'a> {
    index: &'a SizeIndex,
    /// The class being read (`CLASSES`: done); its run is not empty.
    class: usize,
    pos: usize,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        loop {
            let run = self.index.classes.get(self.class)?;
            if let Some(e) = run.get(self.pos) {
                self.pos += 1;
                return Some(e.idx);
            }
            self.class = self.index.next_class(self.class + 1).unwrap_or(CLASSES);
            self.pos = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

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
        // Exact classes up to 32 KiB.
        assert_eq!(class_of(512 << SUB_BITS), 1 << SUB_BITS);
        assert_ne!(class_of((32 << 10) - 512), class_of((32 << 10) - 1024));
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
        let mut index = SizeIndex::default();
        let mut model: BTreeMap<(u64, DevPtr), u32> = BTreeMap::new();
        for step in 0..40_000u32 {
            let r = rng(&mut state);
            let size = match r % 5 {
                0 => 512 * (1 + r % 8),
                1 => 512 * (1 + (r >> 8) % 4096),
                2 => (1 + (r >> 8) % (1 << 30)) * 512,
                3 => (r >> 4) | 1,
                _ => u64::MAX - (r >> 40),
            };
            let ptr = (rng(&mut state) % 64) << 9;
            if model.contains_key(&(size, ptr)) || rng(&mut state) % 3 == 0 {
                if let Some((&(s, p), &i)) = model.iter().nth((r % 7) as usize) {
                    assert_eq!(index.remove(s, p), Some(i));
                    model.remove(&(s, p));
                }
            } else {
                index.insert(size, ptr, step);
                model.insert((size, ptr), step);
            }
            assert_eq!(index.len(), model.len());
            let probe = rng(&mut state) >> (r % 64);
            let want: Vec<u32> = model.range((probe, 0)..).map(|(_, &i)| i).take(3).collect();
            let got: Vec<u32> = index.at_least(probe).take(3).collect();
            assert_eq!(got, want, "at_least({probe})");
            assert_eq!(
                index.last_size(),
                model.last_key_value().map(|((s, _), _)| *s)
            );
            assert_eq!(index.get(size, ptr), model.get(&(size, ptr)).copied());
        }
        let all: Vec<u32> = model.values().copied().collect();
        assert_eq!(index.iter().collect::<Vec<_>>(), all);
        assert_eq!(index.remove(1, 1), None);
    }
}
