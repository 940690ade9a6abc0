//! `content`'s own rules, checked from outside the library.

use headroom_fake_gpu::content::*;

const BASE: u64 = 0x7000_0000_0000;

#[test]
fn fill_is_symbolic_and_verify_counts_exactly() {
    let mut c = Content::default();
    let words = (3 * CHUNK + 40) / 4;
    c.fill(BASE + 8, words, 7);
    assert_eq!(c.verify(BASE + 8, words, 7), (0, u64::MAX));
    assert_eq!(c.word(BASE + 12), fill_pattern(BASE + 12, 7));
    assert!(
        c.backed_bytes() <= 2 * CHUNK,
        "only the two edge chunks are bytes"
    );
    c.write(BASE + CHUNK + 100, &[1, 2, 3, 4]);
    assert_eq!(c.verify(BASE + 8, words, 7), (1, BASE + CHUNK + 100));
    let (bad, first) = c.verify(BASE + 8, words, 8);
    assert_eq!((bad, first), (words, BASE + 8));
    c.forget(BASE, 4 * CHUNK);
    assert_eq!(c.word(BASE + 12), 0);
    assert_eq!(c.backed_bytes(), 0);
}

#[test]
fn copies_of_patterns_stay_symbolic_at_any_word_offset() {
    let mut c = Content::default();
    c.fill(BASE, 4 * CHUNK / 4, 3);
    let dst = BASE + 64 * CHUNK + 12;
    c.copy(dst, BASE, 2 * CHUNK);
    for i in 0..(2 * CHUNK / 4) {
        let a = dst + 4 * i;
        assert_eq!(c.word(a), fill_pattern(a - (dst - BASE), 3));
    }
    assert!(c.backed_bytes() <= 2 * CHUNK);
    // A verify of the destination against its own addresses sees every word differ.
    assert_eq!(c.verify(dst, 4, 3).0, 4);
}

#[test]
fn memset_and_triad() {
    let mut c = Content::default();
    c.memset(BASE, 16, 0x3f80_0000); // 1.0f32
    c.memset(BASE + CHUNK, 16, 0x4000_0000); // 2.0f32
    c.triad(BASE + 2 * CHUNK, BASE, BASE + CHUNK, 4, 3.0);
    assert_eq!(f32::from_bits(c.word(BASE + 2 * CHUNK + 12)), 7.0);
    // Symbolic operands give a symbolic result, word for word the same.
    c.fill(BASE + 4 * CHUNK, CHUNK / 4, 1);
    c.fill(BASE + 5 * CHUNK, CHUNK / 4, 2);
    c.triad(
        BASE + 6 * CHUNK,
        BASE + 4 * CHUNK,
        BASE + 5 * CHUNK,
        CHUNK / 4,
        0.5,
    );
    assert_eq!(
        c.backed_bytes(),
        3 * CHUNK,
        "only the partly written chunks are bytes"
    );
    let (x, y) = (
        fill_pattern(BASE + 4 * CHUNK + 8, 1),
        fill_pattern(BASE + 5 * CHUNK + 8, 2),
    );
    let want = 0.5f32
        .mul_add(f32::from_bits(y), f32::from_bits(x))
        .to_bits();
    assert_eq!(c.word(BASE + 6 * CHUNK + 8), want);
    c.copy(BASE + 7 * CHUNK, BASE + 6 * CHUNK, CHUNK);
    assert_eq!(c.word(BASE + 7 * CHUNK + 8), want);
    assert_eq!(c.backed_bytes(), 3 * CHUNK);
    let mut b = [0u8; 6];
    c.memset(BASE + 3 * CHUNK + 1, 4, 0xABAB_ABAB);
    c.read(BASE + 3 * CHUNK, &mut b);
    assert_eq!(b, [0, 0xAB, 0xAB, 0xAB, 0xAB, 0]);
}
