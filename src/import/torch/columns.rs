//! A snapshot's trace entries in narrow columns: seventeen bytes an entry where the values
//! are the usual ones (sizes below 4 GiB, addresses below 2^48, times a few seconds apart
//! within a block of entries, the default stream, pool and no metadata), the exact value
//! kept aside for each entry where they are not. Ten million entries are touched memory
//! the kernel has to zero first, so every byte per entry counts.

use super::model::{Action, Entry};

/// A `u64` column held in 32 bits: the value itself below `BIG`, otherwise `BIG` and the
/// value in `big` (by entry index, in push order).
#[derive(Debug, Default)]
struct Narrow {
    lo: Vec<u32>,
    big: Vec<(u32, u64)>,
}

/// The low word that says "the value is in `big`".
const BIG: u32 = u32::MAX;

impl Narrow {
    fn with_capacity(n: usize) -> Narrow {
        Narrow {
            lo: Vec::with_capacity(n),
            big: Vec::new(),
        }
    }

    #[inline]
    fn push(&mut self, v: u64) {
        if v < BIG as u64 {
            self.lo.push(v as u32);
        } else {
            self.big.push((self.lo.len() as u32, v));
            self.lo.push(BIG);
        }
    }

    #[inline]
    fn get(&self, i: usize) -> u64 {
        match self.lo[i] {
            BIG => self.big_at(i),
            v => v as u64,
        }
    }

    #[cold]
    fn big_at(&self, i: usize) -> u64 {
        self.big
            .binary_search_by_key(&(i as u32), |b| b.0)
            .map_or(0, |k| self.big[k].1)
    }

    fn heap_bytes(&self) -> usize {
        self.lo.capacity() * 4 + self.big.capacity() * 16
    }
}

/// A small-integer column that holds nothing while every value is 0 (the default stream,
/// pool, no metadata), and one `T` per entry from the first other value on.
#[derive(Debug, Default)]
struct Sparse<T> {
    values: Vec<T>,
}

impl<T: Copy + Default + PartialEq> Sparse<T> {
    /// `v` for entry `len` (the entries before it are all pushed).
    #[inline]
    fn push(&mut self, len: usize, v: T, capacity: usize) {
        if self.values.is_empty() && v == T::default() {
            return;
        }
        if self.values.len() < len {
            self.values
                .reserve(capacity.max(len + 1) - self.values.len());
            self.values.resize(len, T::default());
        }
        self.values.push(v);
    }

    #[inline]
    fn get(&self, i: usize) -> T {
        self.values.get(i).copied().unwrap_or_default()
    }

    fn heap_bytes(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<T>()
    }
}

/// Stack ids: 16 bits while every id fits, 32 from the first that does not.
#[derive(Debug)]
enum Stacks {
    Short(Vec<u16>),
    Wide(Vec<u32>),
}

impl Default for Stacks {
    fn default() -> Stacks {
        Stacks::Short(Vec::new())
    }
}

/// Entries per `time_base`.
const TIME_BLOCK: usize = 1 << 10;

/// `time_lo` of an entry without `time_us`.
const NO_TIME: u32 = u32::MAX - 1;

/// Every trace entry of the snapshot, one column per field.
#[derive(Debug, Default)]
pub struct Entries {
    action: Vec<u8>,
    /// `addr` below 2^48: its low 32 bits, and the 16 above (`u16::MAX` and the whole
    /// address in `addr_big` from 2^48 − 2^32 on).
    addr_lo: Vec<u32>,
    addr_hi: Vec<u16>,
    addr_big: Vec<(u32, u64)>,
    size: Narrow,
    /// `time_us` less its block's `time_base`, `NO_TIME`, or `BIG` (the time in
    /// `time_big`).
    time_lo: Vec<u32>,
    time_base: Vec<i64>,
    time_big: Vec<(u32, i64)>,
    stream: Sparse<u16>,
    pool: Sparse<u16>,
    meta: Sparse<u32>,
    stack: Stacks,
    /// The capacity asked for (a sparse column reserves it when it starts).
    capacity: usize,
}

impl Entries {
    pub fn with_capacity(n: usize) -> Entries {
        Entries {
            action: Vec::with_capacity(n),
            addr_lo: Vec::with_capacity(n),
            addr_hi: Vec::with_capacity(n),
            size: Narrow::with_capacity(n),
            time_lo: Vec::with_capacity(n),
            stack: Stacks::Short(Vec::with_capacity(n)),
            capacity: n,
            ..Entries::default()
        }
    }

    pub fn len(&self) -> usize {
        self.action.len()
    }

    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    pub fn push(&mut self, e: Entry) {
        let i = self.action.len();
        self.action.push(e.action as u8);
        let hi = e.addr >> 32;
        if hi < u16::MAX as u64 {
            self.addr_hi.push(hi as u16);
            self.addr_lo.push(e.addr as u32);
        } else {
            self.addr_big.push((i as u32, e.addr));
            self.addr_hi.push(u16::MAX);
            self.addr_lo.push(0);
        }
        self.size.push(e.size);
        self.push_time(i, e.time_us);
        self.stream.push(i, e.stream, self.capacity);
        self.pool.push(i, e.pool, self.capacity);
        self.meta.push(i, e.meta, self.capacity);
        match &mut self.stack {
            Stacks::Short(v) if e.stack < u16::MAX as u32 => v.push(e.stack as u16),
            Stacks::Short(v) => {
                let mut wide = Vec::with_capacity(self.capacity.max(v.len() + 1));
                wide.extend(v.iter().map(|&s| s as u32));
                wide.push(e.stack);
                self.stack = Stacks::Wide(wide);
            }
            Stacks::Wide(v) => v.push(e.stack),
        }
    }

    #[inline]
    fn push_time(&mut self, i: usize, t: Option<i64>) {
        if i % TIME_BLOCK == 0 {
            // The block's base: its first time, or the last block's while it has none.
            let base = t.or(self.time_base.last().copied()).unwrap_or(0);
            self.time_base.push(base);
        }
        let Some(t) = t else {
            self.time_lo.push(NO_TIME);
            return;
        };
        let base = self.time_base[i / TIME_BLOCK];
        match t.checked_sub(base) {
            Some(d) if (0..NO_TIME as i64).contains(&d) => self.time_lo.push(d as u32),
            _ => {
                self.time_big.push((i as u32, t));
                self.time_lo.push(BIG);
            }
        }
    }

    /// `time_us` of entry `i`.
    #[inline]
    pub fn time_us(&self, i: usize) -> Option<i64> {
        match self.time_lo[i] {
            NO_TIME => None,
            BIG => Some(self.time_big_at(i)),
            d => Some(self.time_base[i / TIME_BLOCK] + d as i64),
        }
    }

    #[cold]
    fn time_big_at(&self, i: usize) -> i64 {
        self.time_big
            .binary_search_by_key(&(i as u32), |b| b.0)
            .map_or(0, |k| self.time_big[k].1)
    }

    /// `size` of entry `i`.
    #[inline]
    pub fn size(&self, i: usize) -> u64 {
        self.size.get(i)
    }

    #[inline(always)]
    pub fn get(&self, i: usize) -> Entry {
        Entry {
            action: self.action(i),
            addr: self.addr(i),
            size: self.size.get(i),
            stream: self.stream.get(i),
            pool: self.pool.get(i),
            time_us: self.time_us(i),
            stack: match &self.stack {
                Stacks::Short(v) => v[i] as u32,
                Stacks::Wide(v) => v[i],
            },
            meta: self.meta.get(i),
        }
    }

    #[inline]
    pub fn action(&self, i: usize) -> Action {
        Action::ALL[self.action[i] as usize]
    }

    #[inline]
    pub fn addr(&self, i: usize) -> u64 {
        match self.addr_hi[i] {
            u16::MAX => self.addr_big_at(i),
            hi => (hi as u64) << 32 | self.addr_lo[i] as u64,
        }
    }

    #[cold]
    fn addr_big_at(&self, i: usize) -> u64 {
        self.addr_big
            .binary_search_by_key(&(i as u32), |b| b.0)
            .map_or(0, |k| self.addr_big[k].1)
    }

    /// Bytes held, for the memory figure of a benchmark.
    pub fn heap_bytes(&self) -> usize {
        self.action.capacity()
            + self.addr_lo.capacity() * 4
            + self.addr_hi.capacity() * 2
            + self.addr_big.capacity() * 16
            + self.size.heap_bytes()
            + self.time_lo.capacity() * 4
            + self.time_base.capacity() * 8
            + self.time_big.capacity() * 16
            + self.stream.heap_bytes()
            + self.pool.heap_bytes()
            + self.meta.heap_bytes()
            + match &self.stack {
                Stacks::Short(v) => v.capacity() * 2,
                Stacks::Wide(v) => v.capacity() * 4,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::{Entries, TIME_BLOCK};
    use crate::import::torch::model::{Action, Entry};

    fn entry(k: u64) -> Entry {
        Entry {
            action: Action::ALL[(k % 11) as usize],
            addr: 0x7f00_0000_0000 + k * 512,
            size: 512 * (k % 7 + 1),
            stream: 0,
            pool: 0,
            time_us: Some(1_700_000_000_000_000 + k as i64 * 3),
            stack: (k % 5) as u32,
            meta: 0,
        }
    }

    #[test]
    fn every_value_reads_back_as_pushed() {
        let mut odd = vec![
            Entry {
                addr: u64::MAX,
                size: u64::MAX,
                time_us: Some(i64::MIN + 1),
                ..entry(1)
            },
            Entry {
                addr: (1 << 48) - (1 << 32),
                size: u32::MAX as u64,
                time_us: None,
                stream: 3,
                ..entry(2)
            },
            Entry {
                addr: (1 << 48) - (1 << 32) - 1,
                size: u32::MAX as u64 - 1,
                time_us: Some(0),
                pool: 2,
                meta: 9,
                ..entry(3)
            },
            Entry {
                time_us: Some(i64::MAX),
                stack: u16::MAX as u32,
                ..entry(4)
            },
            Entry {
                time_us: Some(-5),
                ..entry(5)
            },
        ];
        // Ordinary entries around them, some blocks without any time.
        let mut all: Vec<Entry> = (0..3 * TIME_BLOCK as u64).map(entry).collect();
        for e in all.iter_mut().skip(TIME_BLOCK).take(TIME_BLOCK + 7) {
            e.time_us = None;
        }
        for (k, e) in odd.drain(..).enumerate() {
            all.insert(300 + k * 600, e);
        }
        all.push(Entry {
            stack: u32::MAX,
            ..entry(9)
        });
        for cap in [0, 10, all.len() + 5] {
            let mut cols = Entries::with_capacity(cap);
            for e in &all {
                cols.push(*e);
            }
            assert_eq!(cols.len(), all.len());
            for (i, e) in all.iter().enumerate() {
                assert_eq!(cols.get(i), *e, "entry {i}");
                assert_eq!((cols.action(i), cols.addr(i)), (e.action, e.addr));
            }
        }
    }

    #[test]
    fn ordinary_entries_take_seventeen_bytes() {
        let n = 100_000;
        let mut cols = Entries::with_capacity(n);
        for k in 0..n as u64 {
            cols.push(entry(k));
        }
        let per_entry = cols.heap_bytes() as f64 / n as f64;
        assert!(
            (17.0..17.1).contains(&per_entry),
            "{per_entry} bytes per entry"
        );
    }
}
