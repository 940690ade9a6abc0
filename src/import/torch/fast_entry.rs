//! Reading a trace entry dict straight from the pickle's bytes, without building it: the
//! entries are nearly all of a long snapshot, and each is the same small shape — keys read
//! back from the memo, integers, a fresh `"N/A"` and `(0, 0)`, and a list of frame dicts
//! read back from the memo.
//!
//! Only that shape is read here; anything else (a frame seen for the first time, a key or
//! value of another kind, the end of the read buffer) returns `None` before anything is
//! taken, and the machine reads the dict the ordinary way.

use std::rc::Rc;

use crate::import::pickle::{Fast, FastDict, FastMap, List, Value};

use super::from_pickle::{STACK_TAG, meta_id};
use super::model::{Action, Entry, Snapshot};

/// One shared object per distinct content, for the memo: frames lists by stack, `(a, b)`
/// tuples by value (the content is all a snapshot's reader needs).
/// A `(a, b)` tuple and its one shared object.
type Pair = ((i64, i64), Rc<[Value]>);

#[derive(Default)]
pub(super) struct Shared {
    lists: FastMap<u32, Rc<List>>,
    pairs: FastMap<(i64, i64), Rc<[Value]>>,
    last_pair: Option<Pair>,
    /// Memo ids of the frames of the list being read.
    frame_ids: Vec<u32>,
}

struct Decoder<'a, 'f> {
    b: &'a [u8],
    i: usize,
    fast: &'a Fast<'f>,
    /// Per `MEMOIZE`, in order: its value (`None`: the entry dict, taken).
    memo: [Option<Value>; FastDict::MEMO_MAX],
    memoized: usize,
}

impl<'a> Decoder<'a, '_> {
    /// Past any `FRAME` opcodes at `i` (Python's pickler starts a new frame about every
    /// 64 KiB, between any two opcodes): the position of the next real opcode.
    #[inline]
    fn past_frames(&self, mut i: usize) -> usize {
        while self.b.get(i) == Some(&0x95) {
            i += 9;
        }
        i
    }

    /// The next byte of an opcode's argument (never a `FRAME`: frames begin between
    /// opcodes only).
    fn byte(&mut self) -> Option<u8> {
        let x = *self.b.get(self.i)?;
        self.i += 1;
        Some(x)
    }

    /// The next opcode, past any `FRAME`s.
    fn op(&mut self) -> Option<u8> {
        self.i = self.past_frames(self.i);
        let x = *self.b.get(self.i)?;
        self.i += 1;
        Some(x)
    }

    fn peek(&mut self) -> Option<u8> {
        self.i = self.past_frames(self.i);
        self.b.get(self.i).copied()
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.i..self.i + n)?;
        self.i += n;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        let s = self.take(4)?;
        Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// A `MEMOIZE` here (consumed) of the value `v` gives: its position in `memo`. More
    /// than `MEMO_MAX` in one dict is not the shape read here: `Err`.
    fn memoize(&mut self, v: impl FnOnce() -> Option<Value>) -> Result<Option<usize>, ()> {
        if self.peek() != Some(0x94) {
            return Ok(None);
        }
        if self.memoized == FastDict::MEMO_MAX {
            return Err(());
        }
        self.i += 1;
        self.memo[self.memoized] = v();
        self.memoized += 1;
        Ok(Some(self.memoized - 1))
    }

    fn get(&mut self, op: u8) -> Option<&'a Value> {
        let id = self.get_id(op)?;
        self.fast.get(id)
    }

    fn get_id(&mut self, op: u8) -> Option<u32> {
        match op {
            b'h' => Some(self.byte()? as u32),
            b'j' => self.u32(),
            _ => None,
        }
    }

    fn int_after(&mut self, op: u8) -> Option<i64> {
        Some(match op {
            b'K' => self.byte()? as i64,
            b'M' => {
                let s = self.take(2)?;
                u16::from_le_bytes([s[0], s[1]]) as i64
            }
            b'J' => self.u32()? as i32 as i64,
            0x8a => {
                let n = self.byte()? as usize;
                let s = self.take(n)?;
                if n == 0 {
                    0
                } else if n <= 8 {
                    let mut w = [if s[n - 1] & 0x80 != 0 { 0xff } else { 0 }; 8];
                    w[..n].copy_from_slice(s);
                    i64::from_le_bytes(w)
                } else {
                    return None;
                }
            }
            _ => return None,
        })
    }

    fn int(&mut self) -> Option<i64> {
        let op = self.op()?;
        self.int_after(op)
    }

    /// A str (new or read back), as bytes; `None` for anything else.
    fn string(&mut self) -> Option<&'a [u8]> {
        let op = self.op()?;
        let bytes = match op {
            0x8c => {
                let n = self.byte()? as usize;
                self.take(n)?
            }
            b'X' => {
                let n = self.u32()? as usize;
                self.take(n)?
            }
            b'h' | b'j' => return self.get(op)?.str_bytes(),
            _ => return None,
        };
        let s = std::str::from_utf8(bytes).ok()?;
        self.memoize(|| Some(Value::str(s))).ok()?;
        Some(bytes)
    }

    /// `(a, b)` of small ints, new or read back.
    fn pair(&mut self, shared: &mut Shared) -> Option<(i64, i64)> {
        let op = self.op()?;
        if let b'h' | b'j' = op {
            let Value::Tuple(t, _) = self.get(op)? else {
                return None;
            };
            return match &t[..] {
                [a, b] => Some((a.as_int()?, b.as_int()?)),
                _ => None,
            };
        }
        let a = self.int_after(op)?;
        let b = self.int()?;
        if self.op()? != 0x86 {
            return None;
        }
        self.memoize(|| {
            if let Some((p, t)) = &shared.last_pair
                && *p == (a, b)
            {
                return Some(Value::Tuple(t.clone(), 1));
            }
            let t = shared
                .pairs
                .entry((a, b))
                .or_insert_with(|| Rc::from(vec![Value::Int(a), Value::Int(b)]))
                .clone();
            shared.last_pair = Some(((a, b), t.clone()));
            Some(Value::Tuple(t, 1))
        })
        .ok()?;
        Some((a, b))
    }
}

/// Reads one trace entry dict (after its `EMPTY_DICT`) and takes it into the snapshot.
pub(super) fn decode(
    snap: &mut Snapshot,
    shared: &mut Shared,
    buf: &mut Vec<u32>,
    fast: &Fast<'_>,
) -> Option<(Entry, FastDict)> {
    let mut d = Decoder {
        b: fast.bytes,
        i: 0,
        fast,
        memo: Default::default(),
        memoized: 0,
    };
    // The dict itself is taken: its memo slot holds nothing (a snapshot never reads an
    // entry back).
    d.memoize(|| None).ok()?;
    if d.op()? != b'(' {
        return None;
    }
    let mut e = Entry {
        action: Action::Other,
        addr: 0,
        size: 0,
        stream: 0,
        pool: 0,
        time_us: None,
        stack: 0,
        meta: 0,
    };
    let (mut action, mut addr, mut size) = (None, None, None);
    let (mut compile, mut user) = (None, None);
    loop {
        if d.peek()? == b'u' {
            d.i += 1;
            break;
        }
        let key = d.string()?;
        match key {
            b"action" => action = Some(d.string()?),
            b"addr" | b"device_free" => addr = Some(u64::try_from(d.int()?).ok()?),
            b"size" => size = Some(u64::try_from(d.int()?).ok()?),
            b"stream" => e.stream = snap.streams.id(d.int()?)?,
            b"time_us" => e.time_us = Some(d.int()?),
            b"compile_context" => compile = Some(d.string()?),
            b"user_metadata" => user = Some(d.string()?),
            b"pool_id" => e.pool = snap.pools.id(d.pair(shared)?)?,
            b"frames" => e.stack = frames(&mut d, snap, shared, buf)?,
            _ => return None,
        }
    }
    e.action = Action::parse_bytes(action?);
    if e.action == Action::Other {
        return None;
    }
    e.addr = addr?;
    e.size = size?;
    let compile = compile
        .and_then(|c| std::str::from_utf8(c).ok())
        .filter(|c| !c.is_empty() && *c != "N/A");
    let user = user
        .and_then(|u| std::str::from_utf8(u).ok())
        .filter(|u| !u.is_empty());
    if compile.is_some() || user.is_some() {
        e.meta = meta_id(snap, compile.map(str::to_string), user.map(str::to_string));
    }
    Some((
        e,
        FastDict {
            consumed: d.i,
            memo: d.memo,
            memoized: d.memoized,
        },
    ))
}

/// A `frames` value: a list read back (its stack known), or a new list of frames read back.
fn frames<'a>(
    d: &mut Decoder<'a, '_>,
    snap: &mut Snapshot,
    shared: &mut Shared,
    buf: &mut Vec<u32>,
) -> Option<u32> {
    let op = d.op()?;
    if let b'h' | b'j' = op {
        let Value::List(l) = d.get(op)? else {
            return None;
        };
        let aux = l.aux.get();
        return (aux & STACK_TAG != 0).then_some((aux & !STACK_TAG) as u32);
    }
    if op != b']' {
        return None;
    }
    // Its memo value is known once the frames are read.
    let slot = d.memoize(|| None).ok()?;
    buf.clear();
    shared.frame_ids.clear();
    let ids = &mut shared.frame_ids;
    let mut frame = |d: &mut Decoder<'a, '_>, op: u8| -> Option<()> {
        let id = d.get_id(op)?;
        let Value::Dict(f) = d.fast.get(id)? else {
            return None;
        };
        let aux = f.aux.get();
        if aux == 0 {
            return None;
        }
        buf.push((aux - 1) as u32);
        ids.push(id);
        Some(())
    };
    match d.peek()? {
        b'(' => {
            d.i += 1;
            loop {
                let op = d.op()?;
                if op == b'e' {
                    break;
                }
                frame(d, op)?;
            }
        }
        op @ (b'h' | b'j') => {
            // One frame: `GET` then `APPEND`; otherwise the list is empty and this `GET`
            // is the next key.
            let append_at = d.past_frames(d.i + if op == b'h' { 2 } else { 5 });
            if d.b.get(append_at) == Some(&b'a') {
                d.i += 1;
                frame(d, op)?;
                d.op()?;
            }
        }
        _ => {}
    }
    let stack = snap.frames.stack_id(buf);
    if let Some(slot) = slot {
        let fast = d.fast;
        let ids = &shared.frame_ids;
        let list = shared
            .lists
            .entry(stack)
            .or_insert_with(|| {
                let l = List::default();
                l.items
                    .borrow_mut()
                    .extend(ids.iter().filter_map(|&id| fast.get(id).cloned()));
                l.aux.set(STACK_TAG | stack as u64);
                Rc::new(l)
            })
            .clone();
        d.memo[slot] = Some(Value::List(list));
    }
    Some(stack)
}
