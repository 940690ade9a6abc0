//! Hostile pickles shaped like a snapshot: a dict with one of a snapshot's keys (or another)
//! whose value is a long list of one memo-heavy kind of object — empty dicts or lists, small
//! ints, a long string fetched again and again from the memo, one memo id written over and
//! over, `(0, 0)` tuples, lists nested past the depth bound — with or without one `FRAME` that
//! claims the whole file. None of them is a snapshot, so each must be refused with a message,
//! and within the reader's budget: up to 4 MB each, they would take up to about 300 MB of heap
//! if read whole (77 bytes per byte of empty dicts), against the 1 GiB cap of the run.

use proptest::prelude::*;

use crate::kinds::Extra;

/// The keys a generated dict may use: three of a snapshot's, and one it does not know.
const KEYS: [&[u8]; 4] = [
    b"segments",
    b"device_traces",
    b"external_annotations",
    b"unknown",
];

/// One object of `kind` (its opcodes), after `prelude` has put what it needs in the memo.
fn object(kind: u8) -> (&'static [u8], &'static [u8]) {
    match kind {
        0 => (b"", b"}\x94"),
        1 => (b"", b"]\x94"),
        2 => (b"", b"K\x07"),
        // A 64-byte str in memo id 9, then fetched by `BINGET 9`.
        3 => (
            b"\x8c\x40aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\x94q\x090",
            b"h\x09",
        ),
        // Memo id 1 written again by every object.
        4 => (b"", b"K\x00q\x01"),
        5 => (b"", b"K\x00K\x00\x86\x94"),
        // Nested lists (written by `snapshot_case` itself).
        _ => (b"", b""),
    }
}

/// A snapshot-shaped hostile pickle: `{key: [objects...]}` (`[[objects...]]` for
/// `device_traces`), in batches of 1,000 as Python writes them.
pub fn snapshot_case() -> impl Strategy<Value = Extra> {
    (
        0..7u8,
        prop_oneof![1..2_000usize, 2_000..2_000_000usize],
        0..KEYS.len(),
        any::<bool>(),
    )
        .prop_map(|(kind, count, key, one_frame)| {
            let (prelude, obj) = object(kind);
            let mut body = Vec::with_capacity(count * obj.len() + 64);
            body.extend_from_slice(b"}\x94");
            body.push(0x8c);
            body.push(KEYS[key].len() as u8);
            body.extend_from_slice(KEYS[key]);
            body.extend_from_slice(b"\x94");
            body.extend_from_slice(prelude);
            let traces = KEYS[key] == b"device_traces";
            if traces {
                body.extend_from_slice(b"]\x94");
            }
            body.extend_from_slice(b"]\x94");
            if kind == 6 {
                // Nesting: `count` lists (at most 150) on the stack, then each appended to the
                // one below it.
                let n = count.min(150);
                body.extend(std::iter::repeat_n(b']', n));
                body.extend(std::iter::repeat_n(b'a', n));
            } else {
                let mut left = count;
                while left > 0 {
                    let n = left.min(1000);
                    body.push(b'(');
                    for _ in 0..n {
                        body.extend_from_slice(obj);
                    }
                    body.push(b'e');
                    left -= n;
                }
            }
            if traces {
                body.push(b'a');
            }
            body.extend_from_slice(b"s.");
            let mut bytes = vec![0x80, 4];
            if one_frame {
                bytes.push(0x95);
                bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
            }
            bytes.extend_from_slice(&body);
            let what = format!(
                "pickle: {{{:?}: {count} objects of kind {kind}}}, one frame: {one_frame} ({} bytes)",
                String::from_utf8_lossy(KEYS[key]),
                bytes.len()
            );
            Extra::Pickle { what, bytes }
        })
}
