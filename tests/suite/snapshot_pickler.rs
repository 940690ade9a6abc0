//! A snapshot written byte for byte as CPython's pickler (`pickle.dump(snapshot, f,
//! protocol=4)`, the C `_pickle` module) writes `torch.cuda.memory._snapshot()`'s dict, for a
//! trace too long to build as Python objects: a `FRAME` opcode opens every frame once the
//! one before reached 64 KiB, committed at the start of an object's save; every dict, list,
//! str and tuple is memoized (`MEMOIZE`), and one already memoized is read back (`BINGET` /
//! `LONG_BINGET`); lists and dicts of more than one item go in batches of 1,000 between
//! `MARK` and `APPENDS`/`SETITEMS`, one of a single item with `APPEND`/`SETITEM`.
//!
//! What is shared follows `THCPModule_memorySnapshot`: the key strings and action names are
//! one object each, and so is each frame dict; each entry has a new frames list, a new
//! `"N/A"` and a new `(0, 0)`. `snapshot_fidelity` checks the bytes against Python's.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Write};

const FRAME_TARGET: usize = 64 * 1024;
const BATCH: usize = 1000;

/// One trace entry.
#[derive(Debug, Clone, Copy)]
pub struct PyEntry {
    pub action: &'static str,
    pub addr: u64,
    pub size: u64,
    pub time_us: i64,
    /// Which stack: its frames are `stack * 3 + d` for `d` below the depth.
    pub stack: u32,
}

/// An object Python would share: by name (a str object) or frame number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Shared {
    Str(String),
    Frame(u32),
}

pub struct PyPickler<W: Write> {
    out: W,
    frame: Vec<u8>,
    next_memo: u32,
    memo: HashMap<Shared, u32>,
}

impl<W: Write> PyPickler<W> {
    pub fn new(out: W) -> PyPickler<W> {
        PyPickler {
            out,
            frame: Vec::with_capacity(FRAME_TARGET + 4096),
            next_memo: 0,
            memo: HashMap::new(),
        }
    }

    /// Writes the frame so far (with its `FRAME` header when it has 4 bytes or more).
    fn commit(&mut self) -> io::Result<()> {
        if self.frame.len() >= 4 {
            self.out.write_all(&[0x95])?;
            self.out
                .write_all(&(self.frame.len() as u64).to_le_bytes())?;
        }
        self.out.write_all(&self.frame)?;
        self.frame.clear();
        Ok(())
    }

    /// The start of an object's save: a full frame is committed here.
    fn save(&mut self) -> io::Result<()> {
        if self.frame.len() >= FRAME_TARGET {
            self.commit()?;
        }
        Ok(())
    }

    fn w(&mut self, b: &[u8]) {
        self.frame.extend_from_slice(b);
    }

    fn memoize(&mut self, key: Option<Shared>) {
        self.w(&[0x94]);
        if let Some(k) = key {
            self.memo.insert(k, self.next_memo);
        }
        self.next_memo += 1;
    }

    /// A save of a shared object: `true` when it was read back from the memo.
    fn got(&mut self, key: &Shared) -> io::Result<bool> {
        self.save()?;
        let Some(&id) = self.memo.get(key) else {
            return Ok(false);
        };
        if id < 256 {
            self.w(&[b'h', id as u8]);
        } else {
            self.w(b"j");
            self.w(&id.to_le_bytes());
        }
        Ok(true)
    }

    fn str_bytes(&mut self, s: &str) {
        let b = s.as_bytes();
        if b.len() < 256 {
            self.w(&[0x8c, b.len() as u8]);
        } else {
            self.w(b"X");
            self.w(&(b.len() as u32).to_le_bytes());
        }
        self.w(b);
    }

    /// A str object shared everywhere it appears (a key, an action name).
    pub fn shared_str(&mut self, s: &str) -> io::Result<()> {
        let key = Shared::Str(s.to_string());
        if self.got(&key)? {
            return Ok(());
        }
        self.str_bytes(s);
        self.memoize(Some(key));
        Ok(())
    }

    /// A new str object.
    pub fn fresh_str(&mut self, s: &str) -> io::Result<()> {
        self.save()?;
        self.str_bytes(s);
        self.memoize(None);
        Ok(())
    }

    pub fn int(&mut self, v: i64) -> io::Result<()> {
        self.save()?;
        if (0..256).contains(&v) {
            self.w(&[b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            self.w(b"M");
            self.w(&(v as u16).to_le_bytes());
        } else if i32::try_from(v).is_ok() {
            self.w(b"J");
            self.w(&(v as i32).to_le_bytes());
        } else {
            // LONG1: the shortest two's complement.
            let bytes = v.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let (top, next_sign) = (bytes[n - 1], bytes[n - 2] & 0x80);
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.w(&[0x8a, n as u8]);
            let b = bytes;
            self.w(&b[..n]);
        }
        Ok(())
    }

    /// A new `(a, b)` tuple of small ints.
    fn pair(&mut self, a: i64, b: i64) -> io::Result<()> {
        self.save()?;
        self.int(a)?;
        self.int(b)?;
        self.w(&[0x86]);
        self.memoize(None);
        Ok(())
    }

    /// A dict's items (`EMPTY_DICT` and its `MEMOIZE` written): `n` pairs, each written
    /// by `item`.
    fn items(
        &mut self,
        n: usize,
        mut item: impl FnMut(&mut Self, usize) -> io::Result<()>,
        (mark_end, one_end): (u8, u8),
    ) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        if n == 1 {
            item(self, 0)?;
            self.w(&[one_end]);
            return Ok(());
        }
        let mut i = 0;
        while i < n {
            self.w(b"(");
            let end = (i + BATCH).min(n);
            while i < end {
                item(self, i)?;
                i += 1;
            }
            self.w(&[mark_end]);
        }
        Ok(())
    }

    /// A frame dict: written the first time, read back after.
    fn frame_dict(&mut self, f: u32) -> io::Result<()> {
        let key = Shared::Frame(f);
        if self.got(&key)? {
            return Ok(());
        }
        self.w(b"}");
        self.memoize(Some(key));
        self.items(
            3,
            |w, i| match i {
                0 => {
                    w.shared_str("name")?;
                    w.fresh_str(&format!("layer_{}", f % 7))
                }
                1 => {
                    w.shared_str("filename")?;
                    if f % 3 == 0 {
                        w.fresh_str("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py")
                    } else {
                        w.fresh_str(&format!("/home/user/model/block{}.py", f % 11))
                    }
                }
                _ => {
                    w.shared_str("line")?;
                    w.int(10 + f as i64)
                }
            },
            (b'u', b's'),
        )
    }

    fn entry(&mut self, e: &PyEntry, depth: u32) -> io::Result<()> {
        self.save()?;
        self.w(b"}");
        self.memoize(None);
        self.items(
            9,
            |w, i| match i {
                0 => {
                    w.shared_str("action")?;
                    w.shared_str(e.action)
                }
                1 => {
                    w.shared_str("addr")?;
                    w.int(e.addr as i64)
                }
                2 => {
                    w.shared_str("size")?;
                    w.int(e.size as i64)
                }
                3 => {
                    w.shared_str("stream")?;
                    w.int(0)
                }
                4 => {
                    w.shared_str("time_us")?;
                    w.int(e.time_us)
                }
                5 => {
                    w.shared_str("compile_context")?;
                    w.fresh_str("N/A")
                }
                6 => {
                    w.shared_str("user_metadata")?;
                    w.shared_str("")
                }
                7 => {
                    w.shared_str("pool_id")?;
                    w.pair(0, 0)
                }
                _ => {
                    w.shared_str("frames")?;
                    w.save()?;
                    w.w(b"]");
                    w.memoize(None);
                    w.items(
                        depth as usize,
                        |w, d| w.frame_dict(e.stack * 3 + d as u32),
                        (b'e', b'a'),
                    )
                }
            },
            (b'u', b's'),
        )
    }

    /// `{"segments": [], "device_traces": [entries]}` (`n` of them), then `STOP`; returns
    /// the writer.
    pub fn snapshot(
        mut self,
        entries: impl Iterator<Item = PyEntry>,
        n: usize,
        depth: u32,
    ) -> io::Result<W> {
        self.out.write_all(&[0x80, 4])?;
        self.save()?;
        self.w(b"}");
        self.memoize(None);
        self.w(b"(");
        self.shared_str("segments")?;
        self.save()?;
        self.w(b"]");
        self.memoize(None);
        self.shared_str("device_traces")?;
        self.save()?;
        self.w(b"]");
        self.memoize(None);
        // The one device's list: `APPEND` after it.
        self.save()?;
        self.w(b"]");
        self.memoize(None);
        let mut it = entries;
        self.items(
            n,
            |w, _| match it.next() {
                Some(e) => w.entry(&e, depth),
                None => Err(io::Error::other("fewer entries than announced")),
            },
            (b'e', b'a'),
        )?;
        self.w(b"a");
        self.w(b"u");
        self.w(b".");
        self.commit()?;
        Ok(self.out)
    }
}

#[test]
fn a_snapshot_whose_last_frame_runs_past_the_end_of_the_file_is_refused() {
    // Many frames (one about every 64 KiB), the entries read by the fast path; the last
    // frame's length is made 1000 bytes longer than what the file holds.
    let n = 4_321usize;
    let entries = (0..n as u64).map(|i| PyEntry {
        action: ["alloc", "free_requested", "free_completed"][(i % 3) as usize],
        addr: 0x7f00_0000_0000 + (i % 97) * (2 << 20),
        size: 512,
        time_us: 1_760_000_000_000_000 + 3 * i as i64,
        stack: (i % 50) as u32,
    });
    let mut bytes = PyPickler::new(Vec::new()).snapshot(entries, n, 4).unwrap();
    assert!(headroom::import::torch::read_pickle_bytes(&bytes, "whole").is_ok());
    let total = bytes.len() as u64;
    let last = (0..bytes.len() - 9)
        .rev()
        .find(|&p| {
            bytes[p] == 0x95
                && p as u64 + 9 + u64::from_le_bytes(bytes[p + 1..p + 9].try_into().unwrap())
                    == total
        })
        .expect("a last frame");
    let len = u64::from_le_bytes(bytes[last + 1..last + 9].try_into().unwrap());
    assert!(len > 1000, "{len}");
    bytes[last + 1..last + 9].copy_from_slice(&(len + 1000).to_le_bytes());
    let e = headroom::import::torch::read_pickle_bytes(&bytes, "long")
        .map(|_| ())
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!(
            "byte {last}: FRAME: its {} bytes run past the end of the file, 1000 bytes short",
            len + 1000
        )),
        "{msg}"
    );
}

/// A protocol-2 pickle of `{"segments": [], "device_traces": [[{"action": "alloc", "addr": 1,
/// "size": 512, "frames": FRAMES}]]}`, `frames` given as its opcodes.
fn one_entry_snapshot(frames: &[u8]) -> Vec<u8> {
    let s = |out: &mut Vec<u8>, text: &str| {
        out.push(b'X');
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    };
    let int = |out: &mut Vec<u8>, v: i32| {
        out.push(b'J');
        out.extend_from_slice(&v.to_le_bytes());
    };
    let mut p = vec![0x80, 2, b'}', b'('];
    s(&mut p, "segments");
    p.push(b']');
    s(&mut p, "device_traces");
    p.extend_from_slice(b"](](}(");
    s(&mut p, "action");
    s(&mut p, "alloc");
    s(&mut p, "addr");
    int(&mut p, 1);
    s(&mut p, "size");
    int(&mut p, 512);
    s(&mut p, "frames");
    p.extend_from_slice(frames);
    p.extend_from_slice(b"ueeu.");
    p
}

/// A frames list of one frame dict with `line` given as its opcodes.
fn one_frame(filename: &[u8], line: &[u8]) -> Vec<u8> {
    let mut f = b"](}(X\x08\x00\x00\x00filename".to_vec();
    f.extend_from_slice(filename);
    f.extend_from_slice(b"X\x04\x00\x00\x00line");
    f.extend_from_slice(line);
    f.extend_from_slice(b"X\x04\x00\x00\x00nameX\x01\x00\x00\x00fue");
    f
}

#[test]
fn wrong_types_in_frames_are_refused_naming_them() {
    let read = |frames: &[u8]| {
        headroom::import::torch::read_pickle_bytes(&one_entry_snapshot(frames), "hand")
            .map(|s| s.entries.len())
            .map_err(|e| format!("{e:#}"))
    };
    let good = one_frame(b"X\x04\x00\x00\x00a.py", b"J\x07\x00\x00\x00");
    assert_eq!(read(&good), Ok(1));
    for (frames, want) in [
        (
            one_frame(b"J\x07\x00\x00\x00", b"J\x07\x00\x00\x00"),
            "a frame's `filename` is a int, not a str",
        ),
        (
            one_frame(b"X\x04\x00\x00\x00a.py", b"X\x01\x00\x00\x007"),
            "a frame's `line` is a str, not an int",
        ),
        (b"J\x07\x00\x00\x00".to_vec(), "`frames` is not a list"),
        (
            b"](J\x07\x00\x00\x00e".to_vec(),
            "a frame is a int, not a dict",
        ),
    ] {
        let e = read(&frames).unwrap_err();
        assert!(e.contains(want), "{e}");
    }
}
