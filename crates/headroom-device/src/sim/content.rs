//! What the simulated device's memory holds, as far as `fill` and `verify` can tell.
//!
//! Memory is not stored byte by byte: the model keeps the ranges each `fill` wrote (with its
//! seed) and single words written directly (planted corruptions). `verify` then counts the
//! words in its range that do not hold the pattern, exactly as the kernel would.

use crate::{DevPtr, Mismatch, fill_pattern};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FillRange {
    start: DevPtr,
    end: DevPtr,
    seed: u32,
}

#[derive(Debug, Clone, Default)]
pub struct ContentModel {
    fills: Vec<FillRange>,
    /// Words written directly, in write order: (address, value).
    words: Vec<(DevPtr, u32)>,
}

impl ContentModel {
    pub fn fill(&mut self, ptr: DevPtr, bytes: u64, seed: u32) {
        let end = ptr + bytes / 4 * 4;
        self.words.retain(|(a, _)| *a < ptr || *a >= end);
        self.fills.push(FillRange {
            start: ptr,
            end,
            seed,
        });
    }

    pub fn write_word(&mut self, addr: DevPtr, value: u32) {
        self.words.retain(|(a, _)| *a != addr);
        self.words.push((addr, value));
    }

    /// Forgets what a freed range held.
    pub fn forget(&mut self, ptr: DevPtr, bytes: u64) {
        let end = ptr + bytes;
        self.words.retain(|(a, _)| *a < ptr || *a >= end);
        let mut kept = Vec::with_capacity(self.fills.len());
        for f in self.fills.drain(..) {
            if f.end <= ptr || f.start >= end {
                kept.push(f);
                continue;
            }
            if f.start < ptr {
                kept.push(FillRange { end: ptr, ..f });
            }
            if f.end > end {
                kept.push(FillRange { start: end, ..f });
            }
        }
        self.fills = kept;
    }

    /// The latest directly written value at `addr`, if any.
    fn written(&self, addr: DevPtr) -> Option<u32> {
        self.words
            .iter()
            .rev()
            .find(|(a, _)| *a == addr)
            .map(|(_, v)| *v)
    }

    /// Counts words in `[ptr, ptr + bytes)` that do not hold the pattern for `seed`.
    ///
    /// A stretch filled with another seed, or never written (fresh memory reads as zero in the
    /// model), counts every word as a mismatch: a coincidental match has odds of 2^-32 a word.
    pub fn verify(&self, ptr: DevPtr, bytes: u64, seed: u32) -> Option<Mismatch> {
        let end = ptr + bytes / 4 * 4;
        let mut cuts = vec![ptr, end];
        for f in &self.fills {
            cuts.extend(
                [f.start, f.end]
                    .into_iter()
                    .filter(|x| *x > ptr && *x < end),
            );
        }
        cuts.sort_unstable();
        cuts.dedup();
        let mut count = 0u64;
        let mut first: Option<(DevPtr, u32)> = None;
        let mut see = |addr: DevPtr, actual: u32| {
            if first.is_none_or(|(a, _)| addr < a) {
                first = Some((addr, actual));
            }
        };
        let seed_at = |addr: DevPtr| {
            self.fills
                .iter()
                .rev()
                .find(|f| f.start <= addr && addr < f.end)
                .map(|f| f.seed)
        };
        let fill_value = |addr: DevPtr| seed_at(addr).map_or(0, |s| fill_pattern(addr, s));
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1]);
            if seed_at(a) == Some(seed) {
                continue;
            }
            count += (b - a) / 4;
            // The first word of the stretch that a direct write did not set right.
            let mut addr = a;
            while addr < b && self.written(addr) == Some(fill_pattern(addr, seed)) {
                addr += 4;
            }
            if addr < b {
                see(addr, self.written(addr).unwrap_or_else(|| fill_value(addr)));
            }
        }
        // Direct writes override what the fills left (the latest write per address counts).
        let mut seen: Vec<DevPtr> = Vec::new();
        for (addr, value) in self.words.iter().rev() {
            if *addr < ptr || *addr >= end || seen.contains(addr) {
                continue;
            }
            seen.push(*addr);
            let expected = fill_pattern(*addr, seed);
            let under_ok = fill_value(*addr) == expected;
            match (under_ok, *value == expected) {
                (true, false) => {
                    count += 1;
                    see(*addr, *value);
                }
                (false, true) => count -= 1,
                _ => {}
            }
        }
        first
            .filter(|_| count > 0)
            .map(|(first_address, actual)| Mismatch {
                count,
                first_address,
                expected: fill_pattern(first_address, seed),
                actual,
            })
    }

    pub fn clear(&mut self) {
        self.fills.clear();
        self.words.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_verify_is_clean() {
        let mut c = ContentModel::default();
        c.fill(0x1000, 4096, 7);
        assert_eq!(c.verify(0x1000, 4096, 7), None);
    }

    #[test]
    fn a_planted_word_is_found_at_its_address() {
        let mut c = ContentModel::default();
        c.fill(0x1000, 1 << 20, 7);
        c.write_word(0x1000 + 4096, 0xdead_beef);
        let m = c.verify(0x1000, 1 << 20, 7).unwrap();
        assert_eq!(m.count, 1);
        assert_eq!(m.first_address, 0x1000 + 4096);
        assert_eq!(m.expected, fill_pattern(0x1000 + 4096, 7));
        assert_eq!(m.actual, 0xdead_beef);
        // Refilling heals it.
        c.fill(0x1000, 1 << 20, 7);
        assert_eq!(c.verify(0x1000, 1 << 20, 7), None);
    }

    #[test]
    fn unfilled_and_wrong_seed_ranges_count_every_word() {
        let mut c = ContentModel::default();
        c.fill(0x1000, 400, 1);
        let m = c.verify(0x1000, 800, 1).unwrap();
        assert_eq!(m.count, 100);
        assert_eq!(m.first_address, 0x1000 + 400);
        let m = c.verify(0x1000, 400, 2).unwrap();
        assert_eq!(m.count, 100);
        assert_eq!(m.first_address, 0x1000);
        c.forget(0x1000, 200);
        assert_eq!(c.verify(0x1000 + 200, 200, 1), None);
        assert_eq!(c.verify(0x1000, 200, 1).unwrap().count, 50);
    }
}
