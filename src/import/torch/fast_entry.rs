//! Reading a trace entry dict straight from the pickle's bytes, without building it: the
//! entries are nearly all of a long snapshot, and each is the same small shape — keys read
//! back from the memo, integers, a fresh `"N/A"` and `(0, 0)`, and a list of frame dicts
//! read back from the memo.
//!
//! Only that shape is read here; anything else (a frame seen for the first time, a key or
//! value of another kind, the end of the read buffer) returns `None` before anything is
//! taken, and the machine reads the dict the ordinary way.

use std::rc::Rc;

use crate::import::pickle::{Fast, FastDict, FastMap, List, Value, long8};

use super::from_pickle::{STACK_TAG, meta_id};
use super::model::{Action, Entry, Snapshot};
use super::span::{same_bytes, span_end, span_hash};

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
    /// What a memo id read back as a key or an action name holds (`Key` as a byte, 0 not
    /// known yet), for ids below `ID_CACHE`.
    keys: Vec<u8>,
    /// The bytes of a frames list's items (its `GET`s of frame dicts) and the stack and
    /// list they make, by `span_hash` of the bytes: an entry whose stack was seen before is
    /// one lookup (and one comparison of the bytes; a different span of the same hash is a
    /// miss, read the long way).
    spans: FastMap<u64, Span>,
    /// The key in `spans` of the span the entry before used (consecutive entries often
    /// share a stack: compared first, without looking for the span's end or hashing it).
    last_span: Option<u64>,
    /// `Fast::stored` of `last_pair`'s tuple (0: not known yet).
    last_pair_stored: u32,
    /// `Fast::generation` when these caches were filled.
    generation: u32,
    /// `Fast::stored` of a fresh `"N/A"` (PyTorch's compile context when there is none:
    /// one per entry), once the machine stored one (0: not yet).
    na_stored: u32,
    /// The last stream and pool looked up, and their ids: entries repeat them.
    last_stream: Option<(i64, u16)>,
    last_pool: Option<((i64, i64), u16)>,
}

/// A frames list remembered by its bytes: the bytes, its stack, its list and where the memo
/// stores the list (0: not known yet).
struct Span {
    bytes: Box<[u8]>,
    stack: u32,
    list: Rc<List>,
    stored: u32,
}

/// Memo ids cached in `Shared::keys` (keys and action names are defined early on).
const ID_CACHE: u32 = 1 << 16;

/// Frames lists remembered by their bytes.
const SPANS_MAX: usize = 1 << 16;

/// A key of a trace entry, or an action name, read back from the memo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Key {
    Action = 1,
    Addr,
    Size,
    Stream,
    TimeUs,
    CompileContext,
    UserMetadata,
    PoolId,
    Frames,
    /// Another str: an action name (its `Action` in `ACTION_BASE + action`) or anything
    /// else (`Key::Other`).
    Other,
}

/// `Shared::keys` of an id holding an action name: this plus the `Action`.
const ACTION_BASE: u8 = 64;

impl Key {
    fn of(b: &[u8]) -> u8 {
        (match b {
            b"action" => Key::Action,
            b"addr" | b"device_free" => Key::Addr,
            b"size" => Key::Size,
            b"stream" => Key::Stream,
            b"time_us" => Key::TimeUs,
            b"compile_context" => Key::CompileContext,
            b"user_metadata" => Key::UserMetadata,
            b"pool_id" => Key::PoolId,
            b"frames" => Key::Frames,
            _ => match Action::parse_bytes(b) {
                Action::Other => Key::Other,
                a => return ACTION_BASE + a as u8,
            },
        }) as u8
    }
}

/// The codes of `Key`, as `Shared::keys` holds them (a match on them is one jump).
const ACTION: u8 = Key::Action as u8;
const ADDR: u8 = Key::Addr as u8;
const SIZE: u8 = Key::Size as u8;
const STREAM: u8 = Key::Stream as u8;
const TIME_US: u8 = Key::TimeUs as u8;
const COMPILE_CONTEXT: u8 = Key::CompileContext as u8;
const USER_METADATA: u8 = Key::UserMetadata as u8;
const POOL_ID: u8 = Key::PoolId as u8;
const FRAMES: u8 = Key::Frames as u8;

struct Decoder<'a, 'f, 'o> {
    b: &'a [u8],
    i: usize,
    fast: &'a Fast<'f>,
    /// Per `MEMOIZE`, in order: its value (`None`: the entry dict, taken).
    out: &'o mut FastDict,
    /// The last `FRAME` passed (`FastDict::last_frame`).
    frame: std::cell::Cell<Option<(usize, u64)>>,
}

impl<'a> Decoder<'a, '_, '_> {
    /// Past any `FRAME` opcodes at `i` (Python's pickler starts a new frame about every
    /// 64 KiB, between any two opcodes): the position of the next real opcode.
    #[inline]
    fn past_frames(&self, mut i: usize) -> usize {
        while self.b.get(i) == Some(&0x95) {
            if let Some(n) = self.b.get(i + 1..i + 9) {
                let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
                if self.frame.get().is_none_or(|(at, _)| at < i) {
                    self.frame.set(Some((i, n)));
                }
            }
            i += 9;
        }
        i
    }

    /// The next byte of an opcode's argument (never a `FRAME`: frames begin between
    /// opcodes only).
    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        let x = *self.b.get(self.i)?;
        self.i += 1;
        Some(x)
    }

    /// The next opcode, past any `FRAME`s.
    #[inline(always)]
    fn op(&mut self) -> Option<u8> {
        self.i = self.past_frames(self.i);
        let x = *self.b.get(self.i)?;
        self.i += 1;
        Some(x)
    }

    #[inline(always)]
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
        let n = self.out.memoized;
        if n == FastDict::MEMO_MAX {
            return Err(());
        }
        self.i += 1;
        self.out.memo[n] = v();
        self.out.stored[n] = 0;
        self.out.memoized = n + 1;
        Ok(Some(n))
    }

    fn get(&mut self, op: u8) -> Option<&'a Value> {
        let id = self.get_id(op)?;
        self.fast.get(id)
    }

    #[inline(always)]
    fn get_id(&mut self, op: u8) -> Option<u32> {
        match op {
            b'h' => Some(self.byte()? as u32),
            b'j' => self.u32(),
            _ => None,
        }
    }

    #[inline(always)]
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
                // Eight bytes loaded at once where the buffer has them, the `n` of the
                // integer sign-extended (what `long8` does byte by byte).
                match self.b.get(self.i..self.i + 8) {
                    Some(w) if (1..=8).contains(&n) => {
                        let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                        self.i += n;
                        let shift = 64 - 8 * n as u32;
                        ((w << shift) as i64) >> shift
                    }
                    _ => long8(self.take(n)?)?,
                }
            }
            _ => return None,
        })
    }

    #[inline(always)]
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

    /// A compile context: a fresh `"N/A"` (memoized by its stored index, nothing built,
    /// once one was stored) gives `Some(None)`; any other str `Some(Some(bytes))`.
    fn compile_context(&mut self, shared: &mut Shared) -> Option<Option<&'a [u8]>> {
        let i = self.past_frames(self.i);
        if self.b.get(i..i + 5) == Some(&[0x8c, 3, b'N', b'/', b'A'][..]) {
            self.i = i + 5;
            if shared.na_stored != 0 {
                if let Some(slot) = self.memoize(|| None).ok()? {
                    self.out.stored[slot] = shared.na_stored;
                }
            } else if let Some(slot) = self.memoize(|| Some(Value::str("N/A"))).ok()?
                && let Some(v) = &self.out.memo[slot]
            {
                // Known from the next entry on, once the machine stored this one.
                shared.na_stored = self.fast.stored(v).unwrap_or(0);
            }
            return Some(None);
        }
        self.string().map(Some)
    }

    /// A str key or action name, as `Key::of` codes it: read back through the id cache,
    /// or new (memoized as `string` does).
    #[inline(always)]
    fn code(&mut self, shared: &mut Shared) -> Option<u8> {
        let i = self.i;
        let op = self.op()?;
        if let b'h' | b'j' = op {
            let id = self.get_id(op)?;
            if let Some(&c) = shared.keys.get(id as usize)
                && c != 0
            {
                return Some(c);
            }
            let c = Key::of(self.fast.get(id)?.str_bytes()?);
            if id < ID_CACHE {
                if shared.keys.len() <= id as usize {
                    shared.keys.resize(id as usize + 1, 0);
                }
                shared.keys[id as usize] = c;
            }
            return Some(c);
        }
        self.i = i;
        self.string().map(Key::of)
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
        let same = matches!(&shared.last_pair, Some((p, _)) if *p == (a, b));
        if same
            && shared.last_pair_stored != 0
            && let Some(slot) = self.memoize(|| None).ok()?
        {
            self.out.stored[slot] = shared.last_pair_stored;
            return Some((a, b));
        }
        let slot = self
            .memoize(|| {
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
                shared.last_pair_stored = 0;
                Some(Value::Tuple(t, 1))
            })
            .ok()?;
        if let Some(slot) = slot
            && shared.last_pair_stored == 0
            && let Some(v) = &self.out.memo[slot]
        {
            // Known from the next entry on, once the machine stored this one.
            shared.last_pair_stored = self.fast.stored(v).unwrap_or(0);
        }
        Some((a, b))
    }
}

/// Reads one trace entry dict (after its `EMPTY_DICT`) and takes it into the snapshot.
pub(super) fn decode(
    snap: &mut Snapshot,
    shared: &mut Shared,
    buf: &mut Vec<u32>,
    fast: &Fast<'_>,
    out: &mut FastDict,
) -> Option<Entry> {
    let mut d = Decoder {
        b: fast.bytes,
        i: 0,
        fast,
        out,
        frame: std::cell::Cell::new(None),
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
    if fast.generation() != shared.generation {
        shared.keys.clear();
        shared.spans.clear();
        shared.last_span = None;
        shared.generation = fast.generation();
    }
    let (mut action, mut addr, mut size) = (None, None, None);
    let (mut compile, mut user) = (None, None);
    loop {
        if d.peek()? == b'u' {
            d.i += 1;
            break;
        }
        match d.code(shared)? {
            ACTION => action = Some(d.code(shared)?.checked_sub(ACTION_BASE)?),
            ADDR => addr = Some(u64::try_from(d.int()?).ok()?),
            SIZE => size = Some(u64::try_from(d.int()?).ok()?),
            STREAM => {
                let s = d.int()?;
                e.stream = match shared.last_stream {
                    Some((last, id)) if last == s => id,
                    _ => {
                        let id = snap.streams.id(s)?;
                        shared.last_stream = Some((s, id));
                        id
                    }
                };
            }
            TIME_US => e.time_us = Some(d.int()?),
            COMPILE_CONTEXT => compile = d.compile_context(shared)?,
            USER_METADATA => user = Some(d.string()?),
            POOL_ID => {
                let p = d.pair(shared)?;
                e.pool = match shared.last_pool {
                    Some((last, id)) if last == p => id,
                    _ => {
                        let id = snap.pools.id(p)?;
                        shared.last_pool = Some((p, id));
                        id
                    }
                };
            }
            FRAMES => e.stack = frames(&mut d, snap, shared, buf)?,
            // `Key::Other`, an action name, or not known.
            _ => return None,
        }
    }
    e.action = Action::ALL[action? as usize];
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
    d.out.consumed = d.i;
    d.out.last_frame = d.frame.get();
    Some(e)
}

/// A `frames` value: a list read back (its stack known), or a new list of frames read back.
fn frames<'a>(
    d: &mut Decoder<'a, '_, '_>,
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
    let start = d.i;
    // Bytes equal to a span's are that span (where a span ends follows from its bytes), and
    // hash to its key: the last entry's span is tried first.
    if let Some(slot) = slot
        && let Some(last) = shared.last_span
        && let Some(span) = shared.spans.get_mut(&last)
        && let Some(b) = d.b.get(start..start + span.bytes.len())
        && same_bytes(&span.bytes, b)
    {
        d.i = start + span.bytes.len();
        return Some(span_hit(d, span, slot));
    }
    let end = span_end(d.b, start);
    let hash = (end > start).then(|| span_hash(&d.b[start..end]));
    if let Some(slot) = slot
        && let Some(h) = hash
        && let Some(span) = shared.spans.get_mut(&h)
        && same_bytes(&span.bytes, &d.b[start..end])
    {
        d.i = end;
        shared.last_span = Some(h);
        return Some(span_hit(d, span, slot));
    }
    let stack = frames_read(d, snap, shared, buf, slot)?;
    if let Some(Some(Value::List(list))) = slot.map(|s| &d.out.memo[s])
        && let Some(h) = hash
        && d.i == end
        && shared.spans.len() < SPANS_MAX
    {
        shared.spans.entry(h).or_insert_with(|| Span {
            bytes: Box::from(&d.b[start..end]),
            stack,
            list: list.clone(),
            stored: 0,
        });
        shared.last_span = Some(h);
    }
    Some(stack)
}

/// A frames list whose bytes are `span`'s (read up to its end already): its memo slot
/// `slot` holds the span's list; its stack.
fn span_hit(d: &mut Decoder<'_, '_, '_>, span: &mut Span, slot: usize) -> u32 {
    if span.stored == 0 {
        span.stored = d.fast.stored(&Value::List(span.list.clone())).unwrap_or(0);
    }
    if span.stored == 0 {
        d.out.memo[slot] = Some(Value::List(span.list.clone()));
    }
    d.out.stored[slot] = span.stored;
    span.stack
}

/// A new frames list's items, read one by one; its memo value goes in `slot`.
fn frames_read<'a>(
    d: &mut Decoder<'a, '_, '_>,
    snap: &mut Snapshot,
    shared: &mut Shared,
    buf: &mut Vec<u32>,
    slot: Option<usize>,
) -> Option<u32> {
    buf.clear();
    shared.frame_ids.clear();
    let ids = &mut shared.frame_ids;
    let mut frame = |d: &mut Decoder<'a, '_, '_>, op: u8| -> Option<()> {
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
        d.out.memo[slot] = Some(Value::List(list));
    }
    Some(stack)
}
