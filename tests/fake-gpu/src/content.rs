//! What device memory holds, backed only where it was written.
//!
//! Memory is cut into 64 KiB chunks. A chunk is a constant word (never written memory reads
//! as zero), headroom's fill pattern (a seed and an address shift, so `fill` and copies of a
//! filled range cost no host memory), a `triad` of two such chunks (computed when read), or
//! real bytes. Partial writes turn a chunk into bytes; a 4 GiB device needs 4 GiB of host
//! memory only if all of it is written word by word.

use crate::addr_map::AddrMap;

pub const CHUNK: u64 = 64 << 10;

/// `fill_pattern` of headroom's `src/device/mod.rs` (and of `kernels/fill.cu`): the value of
/// the word at `addr` for `seed`.
pub fn fill_pattern(addr: u64, seed: u32) -> u32 {
    let lo = (addr >> 2) as u32;
    let hi = (addr >> 34) as u32;
    let mut x = lo ^ hi.wrapping_mul(0x9E37_79B1) ^ seed;
    x ^= x >> 16;
    x = x.wrapping_mul(0x85EB_CA6B);
    x ^= x >> 13;
    x = x.wrapping_mul(0xC2B2_AE35);
    x ^= x >> 16;
    x
}

#[derive(Debug, Clone, PartialEq)]
enum Chunk {
    /// Every word holds this value.
    Const(u32),
    /// The word at `a` holds `fill_pattern(a - shift, seed)`.
    Pattern {
        seed: u32,
        shift: u64,
    },
    /// `fmaf(scalar, c, b)` word by word, of two `Const` or `Pattern` chunks.
    Triad {
        b: Box<Chunk>,
        c: Box<Chunk>,
        scalar: u32,
    },
    Bytes(Box<[u8]>),
}

fn fma_bits(scalar: u32, c: u32, b: u32) -> u32 {
    f32::from_bits(scalar)
        .mul_add(f32::from_bits(c), f32::from_bits(b))
        .to_bits()
}

impl Chunk {
    #[inline]
    fn word(&self, base: u64, addr: u64) -> u32 {
        match self {
            Chunk::Const(v) => *v,
            Chunk::Pattern { seed, shift } => fill_pattern(addr.wrapping_sub(*shift), *seed),
            Chunk::Triad { b, c, scalar } => {
                fma_bits(*scalar, c.word(base, addr), b.word(base, addr))
            }
            Chunk::Bytes(b) => word_at(b, (addr - base) as usize),
        }
    }

    /// The same contents seen `delta` bytes further on (a copy's destination); `None` for
    /// bytes, which do not move symbolically.
    fn shifted(&self, delta: u64) -> Option<Chunk> {
        Some(match self {
            Chunk::Bytes(_) => return None,
            Chunk::Const(v) => Chunk::Const(*v),
            Chunk::Pattern { seed, shift } => Chunk::Pattern {
                seed: *seed,
                shift: shift.wrapping_add(delta),
            },
            Chunk::Triad { b, c, scalar } => Chunk::Triad {
                b: Box::new(b.shifted(delta)?),
                c: Box::new(c.shifted(delta)?),
                scalar: *scalar,
            },
        })
    }

    /// Calls `f(address, value)` for every word of `[s, e)` (inside this chunk at `base`),
    /// with the match on the kind done once.
    #[inline]
    fn each_word(&self, base: u64, s: u64, e: u64, mut f: impl FnMut(u64, u32)) {
        match self {
            Chunk::Const(v) => (s..e).step_by(4).for_each(|a| f(a, *v)),
            Chunk::Pattern { seed, shift } => (s..e)
                .step_by(4)
                .for_each(|a| f(a, fill_pattern(a.wrapping_sub(*shift), *seed))),
            Chunk::Triad { .. } => (s..e).step_by(4).for_each(|a| f(a, self.word(base, a))),
            Chunk::Bytes(b) => {
                let words = b[(s - base) as usize..(e - base) as usize].chunks_exact(4);
                for (i, w) in words.enumerate() {
                    f(
                        s + 4 * i as u64,
                        u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                    );
                }
            }
        }
    }

    fn materialize(&self, base: u64) -> Box<[u8]> {
        if let Chunk::Bytes(b) = self {
            return b.clone();
        }
        let mut out = vec![0u8; CHUNK as usize].into_boxed_slice();
        if *self != Chunk::Const(0) {
            let mut words = out.chunks_exact_mut(4);
            self.each_word(base, base, base + CHUNK, |_, v| {
                if let Some(w) = words.next() {
                    w.copy_from_slice(&v.to_le_bytes());
                }
            });
        }
        out
    }
}

#[inline]
fn word_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

#[derive(Debug, Default)]
pub struct Content {
    chunks: AddrMap<Chunk>,
}

/// The chunks `[ptr, ptr + bytes)` touches: (chunk base, start, end) with start..end inside.
fn pieces(ptr: u64, bytes: u64) -> impl Iterator<Item = (u64, u64, u64)> {
    let end = ptr + bytes;
    let first = ptr / CHUNK * CHUNK;
    (first..end)
        .step_by(CHUNK as usize)
        .map(move |base| (base, ptr.max(base), end.min(base + CHUNK)))
}

impl Content {
    /// Host bytes spent on chunks written word by word.
    pub fn backed_bytes(&self) -> u64 {
        self.chunks
            .values()
            .filter(|c| matches!(c, Chunk::Bytes(_)))
            .count() as u64
            * CHUNK
    }

    fn chunk(&self, base: u64) -> Chunk {
        self.chunks.get(&base).cloned().unwrap_or(Chunk::Const(0))
    }

    fn set(&mut self, base: u64, c: Chunk) {
        if c == Chunk::Const(0) {
            self.chunks.remove(&base);
        } else {
            self.chunks.insert(base, c);
        }
    }

    /// The chunk at `base` as bytes, kept as bytes.
    fn bytes_mut(&mut self, base: u64) -> &mut [u8] {
        let c = self.chunks.entry(base).or_insert(Chunk::Const(0));
        if !matches!(c, Chunk::Bytes(_)) {
            *c = Chunk::Bytes(c.materialize(base));
        }
        match c {
            Chunk::Bytes(b) => b,
            _ => unreachable!("just materialized"),
        }
    }

    /// The 4-byte word at `addr` (4-byte aligned).
    pub fn word(&self, addr: u64) -> u32 {
        let base = addr / CHUNK * CHUNK;
        self.chunks.get(&base).map_or(0, |c| c.word(base, addr))
    }

    pub fn read(&self, ptr: u64, out: &mut [u8]) {
        for (base, s, e) in pieces(ptr, out.len() as u64) {
            let dst = &mut out[(s - ptr) as usize..(e - ptr) as usize];
            match self.chunks.get(&base) {
                None => dst.fill(0),
                Some(Chunk::Bytes(b)) => {
                    dst.copy_from_slice(&b[(s - base) as usize..(e - base) as usize])
                }
                Some(c) => {
                    let full = c.materialize(base);
                    dst.copy_from_slice(&full[(s - base) as usize..(e - base) as usize]);
                }
            }
        }
    }

    pub fn write(&mut self, ptr: u64, data: &[u8]) {
        for (base, s, e) in pieces(ptr, data.len() as u64) {
            let src = &data[(s - ptr) as usize..(e - ptr) as usize];
            self.bytes_mut(base)[(s - base) as usize..(e - base) as usize].copy_from_slice(src);
        }
    }

    /// Sets every chunk of `[ptr, ptr + bytes)` to `whole` where it is covered entirely, and
    /// calls `part` on the bytes of the partly covered ones.
    fn paint(
        &mut self,
        ptr: u64,
        bytes: u64,
        whole: impl Fn(u64) -> Chunk,
        part: impl Fn(u64, &mut [u8]),
    ) {
        for (base, s, e) in pieces(ptr, bytes) {
            if s == base && e == base + CHUNK {
                self.set(base, whole(base));
            } else {
                let b = self.bytes_mut(base);
                part(s, &mut b[(s - base) as usize..(e - base) as usize]);
            }
        }
    }

    /// `fill`: the pattern for `seed` in every word of `[ptr, ptr + 4 * words)`.
    pub fn fill(&mut self, ptr: u64, words: u64, seed: u32) {
        self.paint(
            ptr,
            words * 4,
            |_| Chunk::Pattern { seed, shift: 0 },
            |start, b| {
                for (i, w) in b.chunks_exact_mut(4).enumerate() {
                    w.copy_from_slice(&fill_pattern(start + 4 * i as u64, seed).to_le_bytes());
                }
            },
        );
    }

    /// `cuMemsetD8`/`D32`: `word` (the byte repeated, for D8) over `bytes` bytes from `ptr`.
    pub fn memset(&mut self, ptr: u64, bytes: u64, word: u32) {
        let pattern = word.to_le_bytes();
        self.paint(
            ptr,
            bytes,
            |_| Chunk::Const(word),
            |start, b| {
                for (i, x) in b.iter_mut().enumerate() {
                    *x = pattern[((start + i as u64) % 4) as usize];
                }
            },
        );
    }

    /// Everything is forgotten (the context went away).
    pub fn forget_all(&mut self) {
        self.chunks.clear();
    }

    /// Freed memory's contents are forgotten (read as zero again).
    pub fn forget(&mut self, ptr: u64, bytes: u64) {
        self.memset(ptr, bytes, 0);
    }

    /// The source chunks of `[src, src + CHUNK)` if they all say the same thing about words,
    /// as the chunk that copying them to `dst_base` would make.
    fn uniform_source(&self, src: u64, dst_base: u64) -> Option<Chunk> {
        let mut found: Option<Chunk> = None;
        for (base, _, _) in pieces(src, CHUNK) {
            let shifted = self.chunk(base).shifted(dst_base.wrapping_sub(src))?;
            match &found {
                None => found = Some(shifted),
                Some(f) if *f == shifted => {}
                Some(_) => return None,
            }
        }
        found
    }

    /// A copy of `bytes` from `src` to `dst`; whole destination chunks copied from uniform
    /// source chunks stay symbolic.
    pub fn copy(&mut self, dst: u64, src: u64, bytes: u64) {
        let mut buf = Vec::new();
        for (base, s, e) in pieces(dst, bytes) {
            let from = src + (s - dst);
            if s == base && e == base + CHUNK && (from % 4 == 0) {
                if let Some(c) = self.uniform_source(from, base) {
                    self.set(base, c);
                    continue;
                }
            }
            buf.resize((e - s) as usize, 0);
            self.read(from, &mut buf);
            self.write(s, &buf);
        }
    }

    /// `verify`: how many words of `[ptr, ptr + 4 * words)` differ from the pattern for
    /// `seed`, and the lowest differing address.
    pub fn verify(&self, ptr: u64, words: u64, seed: u32) -> (u64, u64) {
        let (mut bad, mut first) = (0u64, u64::MAX);
        for (base, s, e) in pieces(ptr, words * 4) {
            let c = self.chunks.get(&base).unwrap_or(&Chunk::Const(0));
            if *c == (Chunk::Pattern { seed, shift: 0 }) {
                continue;
            }
            c.each_word(base, s, e, |a, v| {
                if v != fill_pattern(a, seed) {
                    bad += 1;
                    first = first.min(a);
                }
            });
        }
        (bad, first)
    }

    /// `triad`: `a[i] = scalar * c[i] + b[i]` on f32 words (one rounding, as `fmaf`). Whole
    /// destination chunks of symbolic operands stay symbolic.
    pub fn triad(&mut self, a: u64, b: u64, c: u64, words: u64, scalar: f32) {
        let scalar = scalar.to_bits();
        let (mut bv, mut cv) = (Vec::new(), Vec::new());
        for (base, s, e) in pieces(a, words * 4) {
            let (fb, fc) = (b + (s - a), c + (s - a));
            if s == base && e == base + CHUNK && fb % 4 == 0 && fc % 4 == 0 {
                let operand = |x: Option<Chunk>| x.filter(|k| !matches!(k, Chunk::Triad { .. }));
                let ob = operand(self.uniform_source(fb, base));
                let oc = operand(self.uniform_source(fc, base));
                if let (Some(ob), Some(oc)) = (ob, oc) {
                    let chunk = match (&ob, &oc) {
                        (Chunk::Const(x), Chunk::Const(y)) => {
                            Chunk::Const(fma_bits(scalar, *y, *x))
                        }
                        _ => Chunk::Triad {
                            b: Box::new(ob),
                            c: Box::new(oc),
                            scalar,
                        },
                    };
                    self.set(base, chunk);
                    continue;
                }
            }
            let n = (e - s) as usize;
            bv.resize(n, 0);
            cv.resize(n, 0);
            self.read(fb, &mut bv);
            self.read(fc, &mut cv);
            for (x, y) in bv.chunks_exact_mut(4).zip(cv.chunks_exact(4)) {
                let v = fma_bits(scalar, word_at(y, 0), word_at(x, 0));
                x.copy_from_slice(&v.to_le_bytes());
            }
            self.write(s, &bv);
        }
    }
}
