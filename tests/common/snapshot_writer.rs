//! Writes synthetic PyTorch memory snapshots as Python's pickle (protocol 4) writes
//! `torch.cuda.memory._snapshot()`'s dict: memoized keys and action strings, one dict per
//! distinct frame shared through the memo, a new frames list, "N/A" string and (0, 0) tuple
//! per entry. For the scale benchmark and tests; the fixtures of record are built by
//! scripts/build-torch-snapshot-fixtures.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Write};

/// A pickle writer with a memo of strings (by value) and frames (by index).
pub struct PickleWriter<W: Write> {
    out: W,
    next_memo: u32,
    strings: HashMap<String, u32>,
    frames: HashMap<u32, u32>,
}

impl<W: Write> PickleWriter<W> {
    pub fn new(out: W) -> PickleWriter<W> {
        PickleWriter {
            out,
            next_memo: 0,
            strings: HashMap::new(),
            frames: HashMap::new(),
        }
    }

    fn memoize(&mut self) -> io::Result<u32> {
        self.out.write_all(&[0x94])?;
        self.next_memo += 1;
        Ok(self.next_memo - 1)
    }

    fn get(&mut self, id: u32) -> io::Result<()> {
        if id < 256 {
            self.out.write_all(&[b'h', id as u8])
        } else {
            self.out.write_all(b"j")?;
            self.out.write_all(&id.to_le_bytes())
        }
    }

    /// A str, memoized once and read back afterwards (as Python memoizes one str object).
    pub fn shared_str(&mut self, s: &str) -> io::Result<()> {
        if let Some(&id) = self.strings.get(s) {
            return self.get(id);
        }
        self.fresh_str(s)?;
        let id = self.next_memo - 1;
        self.strings.insert(s.to_string(), id);
        Ok(())
    }

    /// A new str object (memoized, never read back).
    pub fn fresh_str(&mut self, s: &str) -> io::Result<()> {
        let b = s.as_bytes();
        if b.len() < 256 {
            self.out.write_all(&[0x8c, b.len() as u8])?;
        } else {
            self.out.write_all(b"X")?;
            self.out.write_all(&(b.len() as u32).to_le_bytes())?;
        }
        self.out.write_all(b)?;
        self.memoize().map(|_| ())
    }

    pub fn int(&mut self, v: i64) -> io::Result<()> {
        if (0..256).contains(&v) {
            self.out.write_all(&[b'K', v as u8])
        } else if (0..65536).contains(&v) {
            self.out.write_all(b"M")?;
            self.out.write_all(&(v as u16).to_le_bytes())
        } else if i32::try_from(v).is_ok() {
            self.out.write_all(b"J")?;
            self.out.write_all(&(v as i32).to_le_bytes())
        } else {
            // LONG1: shortest two's complement.
            let bytes = v.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.write_all(&[0x8a, n as u8])?;
            self.out.write_all(&bytes[..n])
        }
    }

    pub fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)
    }

    pub fn empty_dict(&mut self) -> io::Result<()> {
        self.out.write_all(b"}")?;
        self.memoize().map(|_| ())
    }

    pub fn empty_list(&mut self) -> io::Result<()> {
        self.out.write_all(b"]")?;
        self.memoize().map(|_| ())
    }

    /// `frames`: a new list holding shared frame dicts.
    pub fn frames(&mut self, ids: &[u32]) -> io::Result<()> {
        self.empty_list()?;
        if ids.is_empty() {
            return Ok(());
        }
        self.raw(b"(")?;
        for &f in ids {
            if let Some(&m) = self.frames.get(&f) {
                self.get(m)?;
                continue;
            }
            self.empty_dict()?;
            let id = self.next_memo - 1;
            self.raw(b"(")?;
            self.shared_str("name")?;
            self.fresh_str(&format!("layer_{}", f % 7))?;
            self.shared_str("filename")?;
            if f % 3 == 0 {
                self.fresh_str("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py")?;
            } else {
                self.fresh_str(&format!("/home/user/model/block{}.py", f % 11))?;
            }
            self.shared_str("line")?;
            self.int(10 + f as i64)?;
            self.raw(b"u")?;
            self.frames.insert(f, id);
        }
        self.raw(b"e")
    }

    /// `frames`: a new list holding the given frames, each frame dict shared through the memo
    /// by its id (`NamedFrame::id`), as PyTorch shares one dict per distinct frame.
    pub fn named_frames(&mut self, frames: &[NamedFrame]) -> io::Result<()> {
        self.empty_list()?;
        if frames.is_empty() {
            return Ok(());
        }
        self.raw(b"(")?;
        for f in frames {
            if let Some(&m) = self.frames.get(&f.id) {
                self.get(m)?;
                continue;
            }
            self.empty_dict()?;
            let id = self.next_memo - 1;
            self.raw(b"(")?;
            self.shared_str("name")?;
            self.fresh_str(f.name)?;
            self.shared_str("filename")?;
            self.fresh_str(f.filename)?;
            self.shared_str("line")?;
            self.int(f.line)?;
            self.raw(b"u")?;
            self.frames.insert(f.id, id);
        }
        self.raw(b"e")
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One stack frame, with an id unique per distinct frame.
#[derive(Debug, Clone, Copy)]
pub struct NamedFrame {
    pub id: u32,
    pub name: &'static str,
    pub filename: &'static str,
    pub line: i64,
}

/// One trace entry of a synthetic trace.
#[derive(Debug, Clone, Copy)]
pub struct SynthEntry {
    pub action: &'static str,
    pub addr: u64,
    pub size: u64,
    pub time_us: i64,
    pub stack: u32,
}

/// A steady training-like trace of `n` entries: a working set of live tensors, each step
/// freeing one and allocating another (a `free_requested` + `free_completed` pair and an
/// `alloc`), sizes from a fixed mix.
pub fn synth_trace(n: usize) -> impl Iterator<Item = SynthEntry> {
    const SLOTS: usize = 512;
    const BASE: u64 = 0x7f00_0000_0000;
    let sizes: Vec<u64> = (0..64u64)
        .map(|i| match i % 4 {
            0 => 4096 * (1 + i),
            1 => (1 << 20) + 512 * 37 * i,
            2 => (3 << 20) + 4096 * i,
            _ => (12 << 20) + 2 * (1 << 20) * (i % 8),
        })
        .collect();
    let mut live: Vec<Option<(u64, u64)>> = vec![None; SLOTS];
    let mut t = 1_760_000_000_000_000i64;
    let mut out = Vec::with_capacity(3);
    let mut step = 0u64;
    let mut emitted = 0usize;
    std::iter::from_fn(move || {
        loop {
            if let Some(e) = out.pop() {
                if emitted >= n {
                    return None;
                }
                emitted += 1;
                return Some(e);
            }
            if emitted >= n {
                return None;
            }
            step += 1;
            let slot = (step.wrapping_mul(2654435761) % SLOTS as u64) as usize;
            let stack = (step % 200) as u32;
            t += 3;
            let size = sizes[(step % 64) as usize];
            // Addresses are unique per live slot; a freed address is reused.
            let addr = BASE + slot as u64 * (64 << 20);
            let mut batch = Vec::new();
            if let Some((a, s)) = live[slot].take() {
                batch.push(SynthEntry {
                    action: "free_requested",
                    addr: a,
                    size: s,
                    time_us: t,
                    stack,
                });
                batch.push(SynthEntry {
                    action: "free_completed",
                    addr: a,
                    size: s,
                    time_us: t,
                    stack,
                });
            }
            batch.push(SynthEntry {
                action: "alloc",
                addr,
                size,
                time_us: t + 1,
                stack,
            });
            live[slot] = Some((addr, size));
            batch.reverse();
            out = batch;
        }
    })
}

/// Writes a snapshot whose device 0 trace is `entries`, with `depth` frames per stack.
pub fn write_snapshot<W: Write>(
    out: W,
    entries: impl Iterator<Item = SynthEntry>,
    depth: u32,
) -> io::Result<W> {
    write_with(out, entries, |w, stack| {
        let ids: Vec<u32> = (0..depth).map(|d| stack * 3 + d).collect();
        w.frames(&ids)
    })
}

/// Writes a snapshot whose device 0 trace is `entries`, each entry's `stack` an index into
/// `stacks` (frames innermost first, as PyTorch records them).
pub fn write_snapshot_with_stacks<W: Write>(
    out: W,
    entries: impl Iterator<Item = SynthEntry>,
    stacks: &[Vec<NamedFrame>],
) -> io::Result<W> {
    write_with(out, entries, |w, stack| {
        w.named_frames(&stacks[stack as usize])
    })
}

fn write_with<W: Write>(
    out: W,
    entries: impl Iterator<Item = SynthEntry>,
    mut frames: impl FnMut(&mut PickleWriter<W>, u32) -> io::Result<()>,
) -> io::Result<W> {
    let mut w = PickleWriter::new(out);
    w.raw(&[0x80, 4])?;
    w.empty_dict()?;
    w.raw(b"(")?;
    w.shared_str("segments")?;
    w.empty_list()?;
    w.shared_str("device_traces")?;
    w.empty_list()?;
    w.empty_list()?;
    let mut in_batch = 0;
    for e in entries {
        if in_batch == 0 {
            w.raw(b"(")?;
        }
        w.empty_dict()?;
        w.raw(b"(")?;
        w.shared_str("action")?;
        w.shared_str(e.action)?;
        w.shared_str("addr")?;
        w.int(e.addr as i64)?;
        w.shared_str("size")?;
        w.int(e.size as i64)?;
        w.shared_str("stream")?;
        w.int(0)?;
        w.shared_str("time_us")?;
        w.int(e.time_us)?;
        w.shared_str("compile_context")?;
        w.fresh_str("N/A")?;
        w.shared_str("user_metadata")?;
        w.shared_str("")?;
        w.shared_str("pool_id")?;
        w.raw(&[b'K', 0, b'K', 0, 0x86])?;
        w.memoize()?;
        w.shared_str("frames")?;
        frames(&mut w, e.stack)?;
        w.raw(b"u")?;
        in_batch += 1;
        if in_batch == 1000 {
            w.raw(b"e")?;
            in_batch = 0;
        }
    }
    if in_batch > 0 {
        w.raw(b"e")?;
    }
    // The device list into device_traces, then the top dict's items.
    w.raw(b"a")?;
    w.raw(b"u.")?;
    Ok(w.into_inner())
}
