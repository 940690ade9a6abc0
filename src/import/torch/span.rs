//! The span of a frames list in a trace entry's bytes — its `GET`s of frame dicts, read back
//! from the memo — found, hashed and compared a word at a time: the fast path looks each
//! entry's stack up by these bytes.

/// Where the items of a frames list starting at `i` end, when they are only `GET`s (between
/// `MARK` and `APPENDS`, or one and `APPEND`); `i` otherwise.
pub(super) fn span_end(b: &[u8], i: usize) -> usize {
    let get_len = |op: u8| match op {
        b'h' => Some(2),
        b'j' => Some(5),
        _ => None,
    };
    match b.get(i) {
        Some(b'(') => {
            let mut k = i + 1;
            // Four `BINGET`s, or four `LONG_BINGET`s, at a time (what the loop below does
            // for them, in one test).
            while let Some(w) = b.get(k..k + 8) {
                let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                if w & 0x00ff_00ff_00ff_00ff != 0x0068_0068_0068_0068 {
                    break;
                }
                k += 8;
            }
            while let Some(w) = b.get(k..k + 16) {
                let w = u128::from_le_bytes(w.try_into().unwrap_or([0; 16]));
                const MASK: u128 = 0xff << 120 | 0xff << 80 | 0xff << 40 | 0xff;
                const JS: u128 = 0x6a << 120 | 0x6a << 80 | 0x6a << 40 | 0x6a;
                if w & MASK != JS {
                    break;
                }
                k += 20;
            }
            loop {
                match b.get(k) {
                    Some(b'e') => return k + 1,
                    Some(&op) => match get_len(op) {
                        Some(n) => k += n,
                        None => return i,
                    },
                    None => return i,
                }
            }
        }
        Some(&op) => match get_len(op) {
            Some(n) if b.get(i + n) == Some(&b'a') => i + n + 1,
            _ => i,
        },
        None => i,
    }
}

/// The hash of a span's bytes, eight at a time, the last (partial) eight read overlapping
/// the ones before (`Hash for [u8]` feeds a hasher one byte per call, and a copy of a
/// variable-length tail is a call to memcpy).
#[inline]
pub(super) fn span_hash(b: &[u8]) -> u64 {
    let word = |k: usize| u64::from_le_bytes(b[k..k + 8].try_into().unwrap_or([0; 8]));
    let mix = |h: u64, w: u64| {
        let x = (h.rotate_left(5) ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 29)
    };
    let n = b.len();
    let mut h = n as u64;
    if n < 8 {
        for &x in b {
            h = mix(h, x as u64);
        }
        return h;
    }
    let mut k = 0;
    while k + 8 <= n {
        h = mix(h, word(k));
        k += 8;
    }
    if k < n {
        h = mix(h, word(n - 8));
    }
    h
}

/// `a == b`, sixteen bytes at a time (the spans compared are a few dozen bytes: a call to
/// memcmp costs more than the comparison).
#[inline]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 16 {
        let word =
            |s: &[u8], k: usize| u64::from_le_bytes(s[k..k + 8].try_into().unwrap_or([0; 8]));
        return if n < 8 {
            a == b
        } else {
            word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
        };
    }
    let word = |s: &[u8], k: usize| u128::from_le_bytes(s[k..k + 16].try_into().unwrap_or([0; 16]));
    let mut k = 0;
    while k + 16 <= n {
        if word(a, k) != word(b, k) {
            return false;
        }
        k += 16;
    }
    k == n || word(a, n - 16) == word(b, n - 16)
}

#[cfg(test)]
mod tests {
    use super::{same_bytes, span_end, span_hash};

    /// `span_end` as it reads one opcode at a time.
    fn reference(b: &[u8], i: usize) -> usize {
        let get_len = |op: u8| match op {
            b'h' => Some(2),
            b'j' => Some(5),
            _ => None,
        };
        match b.get(i) {
            Some(b'(') => {
                let mut k = i + 1;
                loop {
                    match b.get(k) {
                        Some(b'e') => return k + 1,
                        Some(&op) => match get_len(op) {
                            Some(n) => k += n,
                            None => return i,
                        },
                        None => return i,
                    }
                }
            }
            Some(&op) => match get_len(op) {
                Some(n) if b.get(i + n) == Some(&b'a') => i + n + 1,
                _ => i,
            },
            None => i,
        }
    }

    #[test]
    fn spans_end_where_one_opcode_at_a_time_says() {
        let mut seed = 7u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut b = vec![b'('];
            let gets = next() % 24;
            let wide = next() % 3;
            for _ in 0..gets {
                let j = match wide {
                    0 => false,
                    1 => true,
                    _ => next() % 2 == 0,
                };
                if j {
                    b.extend_from_slice(&[b'j', b'e', b'h', 0, 0]);
                } else {
                    b.extend_from_slice(&[b'h', [b'e', b'j', b'h', 9][next() as usize % 4]]);
                }
            }
            match next() % 4 {
                0 => {}
                1 => b.push(b'u'),
                _ => b.push(b'e'),
            }
            b.extend_from_slice(&[b'h', 1, b'e', b'a']);
            let cut = b.len() - (next() % 6) as usize;
            let b = &b[..cut];
            for i in [0, 1, 2] {
                assert_eq!(span_end(b, i), reference(b, i), "{b:?} at {i}");
            }
        }
    }

    #[test]
    fn equal_spans_hash_alike_and_compare_equal() {
        let a: Vec<u8> = (0..100u8).collect();
        for n in 0..a.len() {
            let b = a[..n].to_vec();
            assert!(same_bytes(&a[..n], &b));
            assert_eq!(span_hash(&a[..n]), span_hash(&b));
            if n > 0 {
                let mut c = b.clone();
                c[n - 1] ^= 1;
                assert!(!same_bytes(&a[..n], &c), "{n}");
                c[n - 1] ^= 1;
                c[0] ^= 0x80;
                assert!(!same_bytes(&a[..n], &c), "{n}");
                assert!(!same_bytes(&a[..n], &a[..n - 1]));
            }
        }
    }
}
