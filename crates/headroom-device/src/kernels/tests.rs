//! Tests of `crate::kernels`: CPU mirrors of the `.cu` index arithmetic (every word visited once,
//! aligned accesses, grid-stride coverage) and an emulated fill and verify.

use super::*;
use crate::fill_pattern;

// ---- CPU mirrors of the .cu index arithmetic (keep in step with kernels/*.cu) ----

/// `head_words` of the split block.
fn head_words(addr: u64, words: u64) -> u64 {
    let head = ((16 - (addr & 15)) & 15) >> 2;
    head.min(words)
}

/// Every word index thread `tid` of `nthreads` touches in fill/verify/copy/triad (vector
/// path), in the order the loops run, with `true` where it is part of a 16-byte vector.
fn vector_kernel_thread(
    addr: u64,
    words: u64,
    tid: u64,
    nthreads: u64,
    out: &mut Vec<(u64, bool)>,
) {
    let head = head_words(addr, words);
    let vecs = (words - head) >> 2;
    let tail_start = head + (vecs << 2);
    let mut i = tid;
    while i < head {
        out.push((i, false));
        i += nthreads;
    }
    let mut i = tail_start + tid;
    while i < words {
        out.push((i, false));
        i += nthreads;
    }
    let mut v = tid;
    while v < vecs {
        for u in 0..UNROLL {
            let j = v + u * nthreads;
            if j < vecs {
                for w in 0..4 {
                    out.push((head + 4 * j + w, true));
                }
            }
        }
        v += nthreads * UNROLL;
    }
}

/// The scalar fallback of copy and triad (pointers not aligned alike modulo 16).
fn scalar_kernel_thread(words: u64, tid: u64, nthreads: u64, out: &mut Vec<(u64, bool)>) {
    let mut i = tid;
    while i < words {
        out.push((i, false));
        i += nthreads;
    }
}

/// How often each word is visited by a whole grid of `nthreads`.
fn visits(
    words: u64,
    nthreads: u64,
    mut thread: impl FnMut(u64, &mut Vec<(u64, bool)>),
) -> Vec<u32> {
    let mut counts = vec![0u32; words as usize];
    let mut seen = Vec::new();
    for tid in 0..nthreads {
        seen.clear();
        thread(tid, &mut seen);
        for (i, _) in &seen {
            assert!(*i < words, "word {i} is outside the {words} words");
            counts[*i as usize] += 1;
        }
    }
    counts
}

fn assert_exactly_once(counts: &[u32], what: &str) {
    if let Some(i) = counts.iter().position(|c| *c != 1) {
        panic!("{what}: word {i} visited {} times", counts[i]);
    }
}

#[test]
fn vector_loops_visit_every_word_once_for_any_size_and_alignment() {
    for misalign in [0u64, 4, 8, 12] {
        let addr = 0x7f00_0000_0000 + misalign;
        for words in (0..=96).chain([255, 256, 257, 1023, 1024, 1025, 4099]) {
            for nthreads in [1u64, 2, 3, 32, 33, 256, 512, 777] {
                let counts = visits(words, nthreads, |tid, out| {
                    vector_kernel_thread(addr, words, tid, nthreads, out)
                });
                assert_exactly_once(
                    &counts,
                    &format!("addr {addr:#x} words {words} threads {nthreads}"),
                );
            }
        }
    }
}

#[test]
fn vector_accesses_are_aligned_and_head_tail_at_most_three_words() {
    for misalign in [0u64, 4, 8, 12] {
        let addr = 0x1000 + misalign;
        for words in 0..64 {
            let mut all = Vec::new();
            vector_kernel_thread(addr, words, 0, 1, &mut all);
            let scalars = all.iter().filter(|(_, v)| !v).count() as u64;
            assert!(scalars <= 6, "{scalars} scalar words for {words} words");
            for (i, vector) in all {
                let word_addr = addr + 4 * i;
                if vector {
                    // The uint4 holding this word lies inside the buffer.
                    let start = word_addr & !15;
                    assert!(
                        start >= addr,
                        "vector at {start:#x} starts before the buffer"
                    );
                    assert!(
                        start + 16 <= addr + 4 * words,
                        "vector at {start:#x} ends past it"
                    );
                } else {
                    // A scalar word is one whose aligned 16 bytes are not all in the buffer.
                    let start = word_addr & !15;
                    assert!(
                        start < addr || start + 16 > addr + 4 * words,
                        "word {i} could be a vector"
                    );
                }
            }
        }
    }
}

#[test]
fn grid_stride_loops_cover_large_sizes_with_the_planned_grid() {
    // A small device (2 SMs x 1 block) makes the loops run many rounds.
    for (misalign, words) in [(0u64, 100_003u64), (4, 65_536), (8, 131_071), (12, 262_147)] {
        let addr = 0x2_0000_0000 + misalign;
        let call = plan(
            &Kernel::Fill {
                ptr: addr,
                bytes: 4 * words,
                seed: 1,
            },
            0,
        )
        .unwrap()
        .unwrap();
        for (sms, resident) in [(2u32, 1u32), (132, 8), (1, 1)] {
            let g = geometry(call.work, sms, resident);
            let n = g.threads();
            let counts = visits(words, n, |tid, out| {
                vector_kernel_thread(addr, words, tid, n, out)
            });
            assert_exactly_once(&counts, &format!("{words} words on {n} threads"));
        }
    }
}

#[test]
fn copy_and_triad_fallback_covers_every_word_once() {
    for words in (0..70).chain([1000, 4097]) {
        for nthreads in [1u64, 7, 256, 1024] {
            let counts = visits(words, nthreads, |tid, out| {
                scalar_kernel_thread(words, tid, nthreads, out)
            });
            assert_exactly_once(&counts, "scalar path");
        }
    }
}

#[test]
fn touch_writes_one_word_per_stride_inside_the_buffer() {
    let stride = 64 * 1024;
    for bytes in [
        0u64,
        3,
        4,
        5,
        stride - 1,
        stride,
        stride + 3,
        stride + 4,
        10 * stride,
        10 * stride + 8,
    ] {
        let touches = touch_count(bytes, stride);
        let call = plan(
            &Kernel::Touch {
                ptr: 0x1000,
                bytes,
                stride_bytes: stride,
            },
            0,
        )
        .unwrap()
        .unwrap();
        assert_eq!(call.args[1], Arg::U64(touches));
        let g = geometry(call.work, 4, 2);
        let n = g.threads();
        let mut offsets = Vec::new();
        for tid in 0..n {
            // for (i = tid; i < touches; i += nthreads) touch(base + i * stride_bytes)
            let mut i = tid;
            while i < touches {
                offsets.push(i * stride);
                i += n;
            }
        }
        offsets.sort_unstable();
        let expected: Vec<u64> = (0..touches).map(|i| i * stride).collect();
        assert_eq!(offsets, expected, "{bytes} bytes");
        assert!(offsets.iter().all(|o| o + 4 <= bytes));
        // Every whole stride-sized window of the buffer holds one touched word.
        assert_eq!(
            touches,
            if bytes < 4 {
                0
            } else {
                (bytes - 4) / stride + 1
            }
        );
        assert!(touches >= bytes / stride);
    }
    assert_eq!(touch_count(2 * 1024 * 1024, 64 * 1024), 32);
}

/// fill.cu's vector path: one key per aligned vector, word i gets mix(key ^ i).
fn pattern_key(addr: u64, seed: u32) -> u32 {
    let lo = (addr >> 2) as u32;
    let hi = (addr >> 34) as u32;
    lo ^ hi.wrapping_mul(0x9E37_79B1) ^ seed
}

fn pattern_mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85EB_CA6B);
    x ^= x >> 13;
    x = x.wrapping_mul(0xC2B2_AE35);
    x ^= x >> 16;
    x
}

#[test]
fn the_vector_pattern_is_fill_pattern() {
    let mut addr: u64 = 0x7f12_3456_7890 & !15;
    let bases = [0u64, 16, (1 << 34) - 16, 1 << 34, (1 << 40) + 48, !15];
    for seed in [0u32, 1, 0xDEAD_BEEF] {
        for base in bases.iter().copied().chain((0..1000).map(|_| {
            addr = addr
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                & !15;
            addr
        })) {
            let key = pattern_key(base, seed);
            for i in 0..4u32 {
                let word = base.wrapping_add(4 * i as u64);
                assert_eq!(
                    pattern_mix(key ^ i),
                    fill_pattern(word, seed),
                    "{word:#x} seed {seed}"
                );
                assert_eq!(
                    pattern_mix(pattern_key(word, seed)),
                    fill_pattern(word, seed)
                );
            }
        }
    }
}

/// fill.cu on a CPU model of device memory: `memory[k]` is the word at `base + 4 * k`. Each
/// thread writes what the kernel writes: `mix(key(addr))` on head and tail, and for the word at
/// offset `w` of an aligned vector, `mix(key(vector address) ^ w)`.
fn emulate_fill(memory: &mut [u32], base: u64, call: &Call, nthreads: u64) {
    let [Arg::U64(ptr), Arg::U64(words), Arg::U32(seed)] = call.args[..] else {
        panic!("not a fill: {call:?}");
    };
    let mut seen = Vec::new();
    for tid in 0..nthreads {
        seen.clear();
        vector_kernel_thread(ptr, words, tid, nthreads, &mut seen);
        for (i, vector) in &seen {
            let addr = ptr + 4 * i;
            memory[((addr - base) / 4) as usize] = if *vector {
                pattern_mix(pattern_key(addr & !15, seed) ^ ((addr & 15) / 4) as u32)
            } else {
                pattern_mix(pattern_key(addr, seed))
            };
        }
    }
}

/// verify.cu on the same model: per-thread count and lowest address, then the warp and grid
/// reduction (a sum and a minimum, so the order does not matter), into the result buffer.
fn emulate_verify(memory: &[u32], base: u64, call: &Call, nthreads: u64) -> [u64; 2] {
    let [Arg::U64(ptr), Arg::U64(words), Arg::U32(seed), Arg::U64(_)] = call.args[..] else {
        panic!("not a verify: {call:?}");
    };
    let mut result = VERIFY_RESULT_INIT;
    let mut seen = Vec::new();
    for tid in 0..nthreads {
        seen.clear();
        vector_kernel_thread(ptr, words, tid, nthreads, &mut seen);
        let (mut bad, mut first) = (0u64, u64::MAX);
        for (i, _) in &seen {
            let addr = ptr + 4 * i;
            if memory[((addr - base) / 4) as usize] != pattern_mix(pattern_key(addr, seed)) {
                bad += 1;
                first = first.min(addr);
            }
        }
        if bad != 0 {
            result[0] += bad;
            result[1] = result[1].min(first);
        }
    }
    result
}

#[test]
fn emulated_fill_then_verify_finds_exactly_the_planted_corruptions() {
    let base = 0x7f55_0000_0000u64;
    let seed = 0x5EED;
    for misalign in [0u64, 4, 8, 12] {
        for words in [1u64, 3, 5, 17, 64, 1001] {
            let ptr = base + 64 + misalign;
            let bytes = 4 * words + 2; // a partial trailing word is left alone
            let mut memory = vec![0xCAFE_F00Du32; (64 + misalign + bytes + 64) as usize / 4 + 1];
            let fill = plan(&Kernel::Fill { ptr, bytes, seed }, 0)
                .unwrap()
                .unwrap();
            let verify = plan(&Kernel::Verify { ptr, bytes, seed }, 0xAB00)
                .unwrap()
                .unwrap();
            let n = geometry(fill.work, 2, 1).threads().min(97);
            emulate_fill(&mut memory, base, &fill, n);
            // Every word of the range holds fill_pattern; the words around it are untouched.
            for (k, value) in memory.iter().enumerate() {
                let addr = base + 4 * k as u64;
                if addr >= ptr && addr < ptr + 4 * words {
                    assert_eq!(*value, fill_pattern(addr, seed), "{addr:#x}");
                } else {
                    assert_eq!(
                        *value, 0xCAFE_F00D,
                        "{addr:#x} outside the range was written"
                    );
                }
            }
            assert_eq!(
                decode_verify(emulate_verify(&memory, base, &verify, n), ptr, bytes).unwrap(),
                None
            );
            // Corrupt the last word, then also the first: count and lowest address follow.
            let last = ptr + 4 * (words - 1);
            memory[((last - base) / 4) as usize] ^= 1;
            let raw = emulate_verify(&memory, base, &verify, n);
            assert_eq!(decode_verify(raw, ptr, bytes).unwrap(), Some((1, last)));
            if words > 1 {
                memory[((ptr - base) / 4) as usize] ^= 0x8000_0000;
                let raw = emulate_verify(&memory, base, &verify, 3);
                assert_eq!(decode_verify(raw, ptr, bytes).unwrap(), Some((2, ptr)));
            }
            // Another seed is wrong everywhere.
            let other = plan(
                &Kernel::Verify {
                    ptr,
                    bytes,
                    seed: seed + 1,
                },
                0,
            )
            .unwrap()
            .unwrap();
            let raw = emulate_verify(&memory, base, &other, n);
            assert_eq!(raw, [words, ptr]);
        }
    }
}

#[test]
fn fill_pattern_depends_on_address_and_seed() {
    // Values computed apart from this crate, from kernels/fill.cu's pattern_key and
    // pattern_mix (32-bit arithmetic in Python); 0x514E28B7 is MurmurHash3's fmix32(1).
    for (addr, seed, want) in [
        (0u64, 0u32, 0u32),
        (4, 0, 0x514E_28B7),
        (0x1000, 1, 0x8E38_13F8),
        (0x1004, 1, 0x66CC_183D),
        (0x1000, 2, 0xD8D1_F55D),
        (0x1000 + (1 << 34), 1, 0x9FC8_A65D),
        (0x7F12_3456_7890, 0xDEAD_BEEF, 0x9FE2_38F5),
    ] {
        assert_eq!(fill_pattern(addr, seed), want, "{addr:#x} seed {seed:#x}");
    }
}

// ---- geometry ----

#[test]
fn geometry_is_one_wave_at_most_and_never_empty() {
    let h200 = 132;
    // 1 GiB fill: 2^28 words, 2^26 vectors, 2^24 threads wanted -> capped at one wave.
    let big = Work::GridStride {
        threads: vector_threads(1 << 28),
    };
    assert_eq!(big, Work::GridStride { threads: 1 << 24 });
    assert_eq!(
        geometry(big, h200, 8),
        Geometry {
            grid_blocks: 1056,
            block_threads: 256
        }
    );
    assert_eq!(geometry(big, h200, 6).grid_blocks, 792);
    // 64 KiB: 4096 vectors, 1024 threads, 4 blocks.
    let small = Work::GridStride {
        threads: vector_threads(16 * 1024),
    };
    assert_eq!(geometry(small, h200, 8).grid_blocks, 4);
    // Nothing to do still launches one block; a zero occupancy answer still gives a grid.
    assert_eq!(
        geometry(Work::GridStride { threads: 0 }, h200, 8).grid_blocks,
        1
    );
    assert_eq!(geometry(big, 0, 0).grid_blocks, 1);
    assert_eq!(
        geometry(Work::OneBlock { threads: 32 }, h200, 8),
        Geometry {
            grid_blocks: 1,
            block_threads: 32
        }
    );
    // A full wave: 132 SMs × 8 resident blocks of 256 threads = 2048 threads on each SM.
    assert_eq!(
        geometry(Work::FullWave { block_threads: 256 }, h200, 8),
        Geometry {
            grid_blocks: 1056,
            block_threads: 256
        }
    );
}

#[test]
fn vector_threads_rounds_up() {
    assert_eq!(vector_threads(0), 0);
    assert_eq!(vector_threads(1), 1);
    assert_eq!(vector_threads(16), 1);
    assert_eq!(vector_threads(17), 2);
    assert_eq!(vector_threads(35_000_000_000), 2_187_500_000);
}
