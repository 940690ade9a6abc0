//! The pickle's stack machine, restricted to data: every opcode it runs builds or moves plain
//! values, and any other opcode stops it with its name and offset before anything is done
//! with it.

use std::io::Read;
use std::rc::Rc;

use super::PickleError;
use super::budget::{self, Budget, CHECK_EVERY_BYTES, CONTAINER_BYTES, ITEM_BYTES, PAIR_BYTES};
use super::input::Input;
use super::memo::Memo;
use super::opcodes::{Refusal, table};
use super::value::{Dict, List, MAX_DEPTH, Short, Value, deepen};

/// The refusal message for an opcode.
pub(super) fn refusal(name: &str, code: u8, why: Refusal) -> String {
    match why {
        Refusal::Code(why) => format!(
            "opcode {name} (0x{code:02x}) is refused: {why}; a memory snapshot holds only data, and nothing in it is run"
        ),
        Refusal::Unsupported(why) => {
            format!("opcode {name} (0x{code:02x}) is not supported: {why}")
        }
    }
}

/// A decimal memo index written as text (`GET`, `PUT`).
fn text_index(line: &[u8], offset: u64) -> Result<u32, PickleError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .ok_or_else(|| {
            PickleError::at(
                offset,
                format!(
                    "memo index {:?} is not a number",
                    String::from_utf8_lossy(line)
                ),
            )
        })
}

/// Sees every item appended to a list (`APPEND`, `APPENDS`, `LIST`): returns it to keep it in
/// the list, or `None` once it has taken the item itself. An error stops the read.
pub trait Sink {
    fn append(&mut self, list: &Rc<List>, item: Value) -> Result<Option<Value>, String>;

    /// Called at an `EMPTY_DICT` that will be an item of `list` (the list below the current
    /// mark, with nothing before it in this batch left for `append`): the sink may read the
    /// whole dict straight from `fast.bytes` and take it, saying what it used in `out`
    /// (cleared before). `false`: it is read the ordinary way (nothing is consumed or
    /// defined, whatever `out` holds).
    fn fast_dict(&mut self, _list: &Rc<List>, _fast: &Fast<'_>, _out: &mut FastDict) -> bool {
        false
    }
}

/// What a sink reading a dict straight from the bytes can see of the machine.
pub struct Fast<'m> {
    /// The bytes after `EMPTY_DICT`, up to the end of the read buffer.
    pub bytes: &'m [u8],
    memo: &'m Memo,
    /// The id the next `MEMOIZE` defines.
    pub next_memo: u32,
}

impl Fast<'_> {
    /// The value in memo slot `id` (a `GET`).
    #[inline]
    pub fn get(&self, id: u32) -> Option<&Value> {
        self.memo.get(id).ok()
    }

    /// Where the memo stores `v` (an object by identity, a short str by content), if it
    /// stores it: for `FastDict::stored`.
    pub fn stored(&self, v: &Value) -> Option<u32> {
        self.memo.stored(v)
    }

    /// Changes whenever a defined memo slot is written again: what a cache learned about an
    /// id holds while this stays the same.
    #[inline]
    pub fn generation(&self) -> u32 {
        self.memo.generation()
    }
}

/// A dict a sink read and took by itself (one, reused: nothing is moved per dict).
#[derive(Default)]
pub struct FastDict {
    /// Bytes used from `Fast::bytes`.
    pub consumed: usize,
    /// `MEMOIZE`s among them (the first `memoized`), each defining the next id from
    /// `next_memo` on, with its value (`None`: the dict itself, which the sink took).
    pub memo: [Option<Value>; FastDict::MEMO_MAX],
    /// Per `MEMOIZE`: nonzero when its value is one the memo already stores (`Fast::stored`),
    /// which is then used instead of `memo`'s (no lookup by content or identity).
    pub stored: [u32; FastDict::MEMO_MAX],
    pub memoized: usize,
    /// The last `FRAME` passed among the bytes looked at: its position in `Fast::bytes` and
    /// its length, for the check at `STOP` that the file holds it whole.
    pub last_frame: Option<(usize, u64)>,
}

impl FastDict {
    /// The most `MEMOIZE`s one fast dict may hold.
    pub const MEMO_MAX: usize = 8;
}

pub struct Machine<'a, S: Sink> {
    sink: &'a mut S,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Memo,
    /// The `PROTO` byte (0 when the stream has none).
    pub protocol: u8,
    scratch: Vec<u8>,
    /// Reused for the items of `APPENDS`.
    spare: Vec<Value>,
    /// What the sink's last fast dict used.
    fast_out: FastDict,
    /// Where the last `FRAME` ends in the file (0: none yet): at `STOP` the file must hold it
    /// whole, as Python's reader, which reads a frame at once, requires.
    frame_end: u64,
    /// Where that `FRAME` began, for the message.
    frame_at: u64,
    /// Heap bytes of the values built so far (`budget`), never taken back.
    held_bytes: u64,
    /// List items that are neither lists nor dicts, so far (`Budget::scalar_list_items`).
    scalar_list_items: u64,
    budget: Budget,
    /// The first value built must be a dict (a memory snapshot's is): anything else is
    /// refused at the first comparison with `budget` (a small pickle is read to its end, or to
    /// an opcode refused, and said to be no snapshot then).
    first_value_dict: bool,
    /// The input offset of the next comparison with `budget`.
    next_check: u64,
}

impl<'a, S: Sink> Machine<'a, S> {
    pub fn new(sink: &'a mut S) -> Machine<'a, S> {
        Machine {
            sink,
            stack: Vec::with_capacity(4096),
            marks: Vec::new(),
            memo: Memo::default(),
            protocol: 0,
            scratch: Vec::new(),
            spare: Vec::new(),
            fast_out: FastDict::default(),
            frame_end: 0,
            frame_at: 0,
            held_bytes: 0,
            scalar_list_items: 0,
            budget: Budget::NONE,
            first_value_dict: false,
            next_check: u64::MAX,
        }
    }

    /// The values built may take at most `budget` (checked every `CHECK_EVERY_BYTES` of
    /// input), and, with `first_value_dict`, the first value must be a dict.
    pub fn bounded(mut self, budget: Budget, first_value_dict: bool) -> Machine<'a, S> {
        self.budget = budget;
        self.first_value_dict = first_value_dict;
        self.next_check = CHECK_EVERY_BYTES;
        self
    }

    /// What the values built so far take on the heap, as counted: everything built, the
    /// stack and the memo as they are now.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
            + self.stack.capacity() as u64 * ITEM_BYTES
            + self.marks.capacity() as u64 * 8
            + self.memo.held_bytes()
    }

    /// The first value's type, then the budget; `next_check` moved on.
    #[cold]
    fn check_bounds(&mut self, read: u64) -> Result<(), PickleError> {
        if self.first_value_dict
            && let Some(first) = self.stack.first()
        {
            if !matches!(first, Value::Dict(_)) {
                return Err(PickleError::at(
                    read,
                    format!(
                        "the pickle's first value is a {}, not the dict torch.cuda.memory._snapshot() returns: not a PyTorch memory snapshot (refused before reading on)",
                        first.type_name()
                    ),
                ));
            }
            self.first_value_dict = false;
        }
        let held = self.held_bytes();
        let limit = self.budget.limit(read);
        if held > limit {
            return Err(PickleError::at(
                read,
                format!(
                    "the values built from the first {read} bytes take about {held} bytes ({} MiB) in memory, more than the {limit} allowed ({} bytes per byte read, plus {} MiB): a memory snapshot is far more compact; refused before reading on",
                    held >> 20,
                    self.budget.per_file_byte,
                    self.budget.fixed_bytes >> 20,
                ),
            ));
        }
        self.next_check = read.saturating_add(CHECK_EVERY_BYTES);
        Ok(())
    }

    /// At `STOP`: the last `FRAME`'s bytes are all in the file (read through, never kept).
    fn frame_held<R: Read>(&mut self, input: &mut Input<R>) -> Result<(), PickleError> {
        let mut need = self.frame_end.saturating_sub(input.offset());
        while need > 0 {
            let w = input.window(need.min(1 << 20) as usize)?.len();
            if w == 0 {
                return Err(PickleError::at(
                    self.frame_at,
                    format!(
                        "FRAME: its {} bytes run past the end of the file, {need} bytes short \
                         (truncated?)",
                        self.frame_end - self.frame_at - 9
                    ),
                ));
            }
            let take = (w as u64).min(need);
            input.consume(take as usize);
            need -= take;
        }
        Ok(())
    }

    /// Runs the pickle in `input` to its `STOP` and returns the value it built.
    pub fn run<R: Read>(&mut self, input: R) -> Result<Value, PickleError> {
        let ops = table();
        let mut input = Input::new(input);
        let mut first = true;
        loop {
            if input.offset() >= self.next_check {
                self.check_bounds(input.offset())?;
            }
            input.op_offset = input.offset();
            let at = input.op_offset;
            let Some(b) = input.next_byte()? else {
                return Err(PickleError::at(
                    at,
                    if first {
                        "the file is empty"
                    } else {
                        "the file ends before the pickle's STOP opcode (truncated?)"
                    },
                ));
            };
            let op = ops[b as usize].as_ref().ok_or_else(|| {
                PickleError::at(
                    at,
                    if first {
                        format!("0x{b:02x} is not a pickle opcode: this is not a pickle file")
                    } else {
                        format!("0x{b:02x} is not a pickle opcode (a corrupt file?)")
                    },
                )
            })?;
            first = false;
            if let Some(why) = op.refused {
                // Nothing is done with it: the read stops here.
                return Err(PickleError {
                    offset: at,
                    message: refusal(op.name, op.code, why),
                    refused: true,
                });
            }
            let err = |m: String| PickleError::at(at, format!("{}: {m}", op.name));
            match b {
                b'.' => {
                    let value = self
                        .stack
                        .pop()
                        .ok_or_else(|| err("nothing on the stack to return".into()))?;
                    self.frame_held(&mut input)?;
                    return Ok(value);
                }
                0x80 => {
                    let p = input.array::<1>(op.name)?[0];
                    if p > 5 {
                        return Err(err(format!(
                            "protocol {p} is newer than any this reader knows (0–5)"
                        )));
                    }
                    self.protocol = p;
                }
                0x95 => {
                    let n = u64::from_le_bytes(input.array::<8>(op.name)?);
                    self.frame_at = at;
                    self.frame_end = input.offset().saturating_add(n);
                }
                b'(' => {
                    if self.marks.len() >= MAX_DEPTH as usize {
                        return Err(err(format!(
                            "more than {MAX_DEPTH} MARKs open at once (a memory snapshot nests 6 deep): refused"
                        )));
                    }
                    self.marks.push(self.stack.len())
                }
                b'0' => {
                    if self.stack.len() > self.marks.last().copied().unwrap_or(0) {
                        self.stack.pop();
                    } else {
                        let m = self.mark().map_err(err)?;
                        self.stack.truncate(m);
                    }
                }
                b'1' => {
                    let m = self.mark().map_err(err)?;
                    self.stack.truncate(m);
                }
                b'2' => {
                    let top = self.top().map_err(err)?.clone();
                    self.stack.push(top);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => {
                    let v = i32::from_le_bytes(input.array::<4>(op.name)?);
                    self.stack.push(Value::Int(v as i64));
                }
                b'K' => {
                    let v = input.array::<1>(op.name)?[0];
                    self.stack.push(Value::Int(v as i64));
                }
                b'M' => {
                    let v = u16::from_le_bytes(input.array::<2>(op.name)?);
                    self.stack.push(Value::Int(v as i64));
                }
                0x8a | 0x8b => {
                    let n = if b == 0x8a {
                        input.array::<1>(op.name)?[0] as u64
                    } else {
                        i32::from_le_bytes(input.array::<4>(op.name)?).max(0) as u64
                    };
                    if n > 16 {
                        return Err(err(format!(
                            "an integer of {n} bytes does not fit in 64 bits"
                        )));
                    }
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    self.stack
                        .push(Value::Int(long(&self.scratch).map_err(err)?));
                }
                b'G' => {
                    let v = f64::from_be_bytes(input.array::<8>(op.name)?);
                    self.stack.push(Value::Float(v));
                }
                b'U' | b'C' | 0x8c => {
                    let n = input.array::<1>(op.name)?[0] as u64;
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    let v = self.text_or_bytes(b);
                    self.stack.push(v);
                }
                b'T' | b'X' | b'B' => {
                    let n = u32::from_le_bytes(input.array::<4>(op.name)?) as u64;
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    let v = self.text_or_bytes(b);
                    self.stack.push(v);
                }
                0x8d | 0x8e | 0x96 => {
                    let n = u64::from_le_bytes(input.array::<8>(op.name)?);
                    input.bytes_into(n, &mut self.scratch, op.name)?;
                    let v = self.text_or_bytes(b);
                    self.stack.push(v);
                }
                b'}' => {
                    if self.fast_dicts(&mut input)? {
                        continue;
                    }
                    self.held_bytes += CONTAINER_BYTES;
                    self.stack.push(Value::Dict(Rc::new(Dict::default())));
                }
                b']' | 0x8f => {
                    self.held_bytes += CONTAINER_BYTES;
                    self.stack.push(Value::List(Rc::new(List::default())))
                }
                b')' => {
                    self.held_bytes += budget::tuple_bytes(0);
                    self.stack.push(Value::Tuple(Rc::from(Vec::new()), 1))
                }
                b'd' => {
                    let m = self.mark().map_err(err)?;
                    let dict = Rc::new(Dict::default());
                    let grown = set_items(&dict, self.stack.drain(m..)).map_err(err)?;
                    self.held_bytes += CONTAINER_BYTES + grown * PAIR_BYTES;
                    self.stack.push(Value::Dict(dict));
                }
                b's' | b'u' => {
                    let m = if b == b's' {
                        self.stack
                            .len()
                            .checked_sub(2)
                            .ok_or_else(|| err("needs a key and a value".into()))?
                    } else {
                        self.mark().map_err(err)?
                    };
                    let dict = match m.checked_sub(1).map(|t| &self.stack[t]) {
                        Some(Value::Dict(d)) => d.clone(),
                        other => {
                            return Err(err(format!(
                                "the target is {}, not a dict",
                                other.map_or("missing".into(), |v| format!("a {}", v.type_name()))
                            )));
                        }
                    };
                    let grown = set_items(&dict, self.stack.drain(m..)).map_err(err)?;
                    self.held_bytes += grown * PAIR_BYTES;
                }
                b'l' => {
                    let m = self.mark().map_err(err)?;
                    self.held_bytes += CONTAINER_BYTES;
                    let list = Rc::new(List::default());
                    self.stack.push(Value::List(list.clone()));
                    let items: Vec<Value> = self.stack.drain(m..self.stack.len() - 1).collect();
                    self.extend(&list, items).map_err(err)?;
                }
                b'a' | b'e' | 0x90 => {
                    let m = if b == b'a' {
                        self.stack
                            .len()
                            .checked_sub(1)
                            .ok_or_else(|| err("empty stack".into()))?
                    } else {
                        self.mark().map_err(err)?
                    };
                    let list = match m.checked_sub(1).map(|t| &self.stack[t]) {
                        Some(Value::List(l)) => l.clone(),
                        other => {
                            return Err(err(format!(
                                "the target is {}, not a list",
                                other.map_or("missing".into(), |v| format!("a {}", v.type_name()))
                            )));
                        }
                    };
                    if self.stack[m..].iter().all(|v| matches!(v, Value::Taken)) {
                        // Every item was taken by the sink already (a batch of trace
                        // entries): nothing to append.
                        self.stack.truncate(m);
                        continue;
                    }
                    let mut items = std::mem::take(&mut self.spare);
                    items.extend(self.stack.drain(m..));
                    let r = self.extend(&list, items.drain(..));
                    self.spare = items;
                    r.map_err(err)?;
                }
                b't' | 0x91 => {
                    let m = self.mark().map_err(err)?;
                    let t: Rc<[Value]> = self.stack.drain(m..).collect();
                    self.held_bytes += budget::tuple_bytes(t.len());
                    self.stack.push(Value::tuple(t).map_err(err)?);
                }
                0x85..=0x87 => {
                    let n = (b - 0x84) as usize;
                    if self.stack.len() < n {
                        return Err(err(format!("needs {n} items on the stack")));
                    }
                    let t: Rc<[Value]> = self.stack.drain(self.stack.len() - n..).collect();
                    self.held_bytes += budget::tuple_bytes(n);
                    self.stack.push(Value::tuple(t).map_err(err)?);
                }
                b'g' | b'h' | b'j' => {
                    let id = match b {
                        b'g' => {
                            input.line_into(&mut self.scratch, op.name)?;
                            text_index(&self.scratch, at)?
                        }
                        b'h' => input.array::<1>(op.name)?[0] as u32,
                        _ => u32::from_le_bytes(input.array::<4>(op.name)?),
                    };
                    let v = self.memo.get(id).map_err(err)?.clone();
                    self.stack.push(v);
                }
                b'p' | b'q' | b'r' | 0x94 => {
                    let id = match b {
                        b'p' => {
                            input.line_into(&mut self.scratch, op.name)?;
                            text_index(&self.scratch, at)?
                        }
                        b'q' => input.array::<1>(op.name)?[0] as u32,
                        b'r' => u32::from_le_bytes(input.array::<4>(op.name)?),
                        _ => self.memo.len(),
                    };
                    let top = self.top().map_err(err)?.clone();
                    self.memo.put(id, top).map_err(err)?;
                }
                _ => {
                    return Err(err("is not handled by this reader".into()));
                }
            }
        }
    }

    /// Offers the dict starting here to the sink, when it is an item of a list and every
    /// earlier item of this batch was taken already (so the sink keeps the list's order);
    /// then each dict right after a taken one (past any `FRAME`s), while the sink takes
    /// them. `false`: the first was not taken (nothing consumed). A later one not taken is
    /// left as the ordinary `EMPTY_DICT` it is, its opcode consumed.
    fn fast_dicts<R: Read>(&mut self, input: &mut Input<R>) -> Result<bool, PickleError> {
        let Some(&m) = self.marks.last() else {
            return Ok(false);
        };
        let Some(Value::List(list)) = m.checked_sub(1).and_then(|t| self.stack.get(t)) else {
            return Ok(false);
        };
        if self.stack.len() > m && !matches!(self.stack.last(), Some(Value::Taken)) {
            return Ok(false);
        }
        let list = list.clone();
        let mut first = true;
        loop {
            let window_at = input.offset();
            let bytes = input.window(1 << 16)?;
            let fast = Fast {
                bytes,
                memo: &self.memo,
                next_memo: self.memo.len(),
            };
            let out = &mut self.fast_out;
            out.consumed = 0;
            out.memoized = 0;
            out.last_frame = None;
            if !self.sink.fast_dict(&list, &fast, out) {
                if first {
                    return Ok(false);
                }
                self.stack.push(Value::Dict(Rc::new(Dict::default())));
                return Ok(true);
            }
            first = false;
            input.consume(self.fast_out.consumed);
            if let Some((pos, n)) = self.fast_out.last_frame {
                self.frame_at = window_at + pos as u64;
                self.frame_end = self.frame_at.saturating_add(9).saturating_add(n);
            }
            for k in 0..self.fast_out.memoized {
                let id = self.memo.len();
                let v = self.fast_out.memo[k].take();
                match (self.fast_out.stored[k], v) {
                    (0, Some(v)) => self.memo.put(id, v),
                    (0, None) => self.memo.put_taken(id),
                    (stored, _) => self.memo.put_stored(id, stored),
                }
                .map_err(|e| PickleError::at(input.op_offset, format!("EMPTY_DICT: {e}")))?;
            }
            self.stack.push(Value::Taken);
            // The next opcode, past any `FRAME`s: another `EMPTY_DICT` is offered at once.
            let bytes = input.window(64)?;
            let mut i = 0;
            let mut frame = None;
            while bytes.get(i) == Some(&0x95) && bytes.len() >= i + 9 {
                let n = u64::from_le_bytes(bytes[i + 1..i + 9].try_into().expect("8 bytes"));
                frame = Some((i, n));
                i += 9;
            }
            if bytes.get(i) != Some(&b'}') {
                return Ok(true);
            }
            let at = input.offset();
            input.consume(i);
            if let Some((f, n)) = frame {
                self.frame_at = at + f as u64;
                self.frame_end = self.frame_at + 9 + n;
            }
            input.op_offset = input.offset();
            input.consume(1);
        }
    }

    fn top(&self) -> Result<&Value, String> {
        self.stack
            .last()
            .ok_or_else(|| "the stack is empty".to_string())
    }

    /// The stack position of the last mark, which is removed.
    fn mark(&mut self) -> Result<usize, String> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| "no MARK to go back to".to_string())?;
        if m > self.stack.len() {
            return Err("the stack is shorter than its MARK".into());
        }
        Ok(m)
    }

    fn extend(
        &mut self,
        list: &Rc<List>,
        items: impl IntoIterator<Item = Value>,
    ) -> Result<(), String> {
        for item in items {
            if matches!(item, Value::Taken) {
                continue;
            }
            deepen(&list.depth, &item)?;
            if let Some(v) = self.sink.append(list, item)? {
                if !matches!(v, Value::List(_) | Value::Dict(_)) {
                    self.scalar_list_items += 1;
                    if self.scalar_list_items > self.budget.scalar_list_items {
                        return Err(format!(
                            "more than {} list items that are neither dicts nor lists (this one is {}): a memory snapshot's lists hold only dicts and lists; refused before reading on",
                            self.budget.scalar_list_items,
                            v.brief()
                        ));
                    }
                }
                let mut items = list.items.borrow_mut();
                let before = items.capacity();
                items.push(v);
                self.held_bytes += (items.capacity() - before) as u64 * ITEM_BYTES;
            }
        }
        Ok(())
    }

    /// The bytes just read as a `str` (text opcodes) or `bytes`.
    fn text_or_bytes(&mut self, opcode: u8) -> Value {
        if self.scratch.len() > Short::MAX {
            self.held_bytes += budget::text_bytes(self.scratch.len());
        }
        match opcode {
            // Python 3 reads protocol-1/2 byte strings as text too (encoding "ASCII" by
            // default); invalid sequences are replaced rather than refused.
            b'U' | b'T' | b'X' | 0x8c | 0x8d => match std::str::from_utf8(&self.scratch) {
                Ok(s) => Value::str(s),
                Err(_) => Value::Str(Rc::from(String::from_utf8_lossy(&self.scratch).as_ref())),
            },
            _ => Value::Bytes(Rc::from(self.scratch.as_slice())),
        }
    }
}

/// Sets the key/value pairs of `items` in `dict`; returns by how many pairs its room grew.
fn set_items(dict: &Rc<Dict>, items: impl ExactSizeIterator<Item = Value>) -> Result<u64, String> {
    if items.len() % 2 != 0 {
        return Err(format!("{} items do not make key/value pairs", items.len()));
    }
    let mut d = dict.items.borrow_mut();
    let before = d.capacity();
    if before == 0 {
        // Room for these pairs only (a dict is most often filled in one batch).
        d.reserve_exact(items.len() / 2);
    } else {
        d.reserve(items.len() / 2);
    }
    let grown = (d.capacity() - before) as u64;
    let mut it = items;
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        if !matches!(
            k,
            Value::Str(_)
                | Value::Short(_)
                | Value::Int(_)
                | Value::Bool(_)
                | Value::None
                | Value::Tuple(..)
        ) {
            return Err(format!("a {} cannot be a dict key", k.type_name()));
        }
        deepen(&dict.depth, &k)?;
        deepen(&dict.depth, &v)?;
        // A repeated key is kept twice; lookups take the last, as Python keeps the last.
        d.push((k, v));
    }
    Ok(grown)
}

/// A little-endian two's-complement integer (`LONG1`, `LONG4`) that must fit in 64 bits.
fn long(bytes: &[u8]) -> Result<i64, String> {
    let Some(&last) = bytes.last() else {
        return Ok(0);
    };
    if bytes.len() > 16 {
        return Err(format!("an integer of {} bytes", bytes.len()));
    }
    let mut wide = [if last & 0x80 != 0 { 0xff } else { 0 }; 16];
    wide[..bytes.len()].copy_from_slice(bytes);
    let v = i128::from_le_bytes(wide);
    i64::try_from(v).map_err(|_| format!("the integer {v} does not fit in 64 bits"))
}

/// A little-endian two's-complement integer of at most 8 bytes (`LONG1` of an int64), read
/// byte by byte: a copy of a variable length would be a call to memcpy, per entry.
#[inline]
pub fn long8(bytes: &[u8]) -> Option<i64> {
    let n = bytes.len();
    if n == 0 || n > 8 {
        return (n == 0).then_some(0);
    }
    let mut v = 0u64;
    for (k, &x) in bytes.iter().enumerate() {
        v |= (x as u64) << (8 * k);
    }
    let shift = 64 - 8 * n as u32;
    Some(((v << shift) as i64) >> shift)
}

#[cfg(test)]
mod tests {
    use super::{long, long8};

    #[test]
    fn long8_reads_as_long_does() {
        for b in [
            &[][..],
            &[0xff],
            &[0x7f],
            &[0x80],
            &[0x00, 0x01],
            &[0xff, 0x00],
            &[0x00, 0x00, 0x40, 0x1b, 0x43, 0x7f, 0x00],
            &[0x00, 0x00, 0x40, 0x1b, 0x43, 0x8f],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80],
        ] {
            assert_eq!(long8(b), Some(long(b).unwrap()), "{b:?}");
        }
        assert_eq!(
            long8(&[0x00, 0x00, 0x40, 0x1b, 0x43, 0x8f]),
            Some(-0x70bc_e4c0_0000)
        );
        assert_eq!(long8(&[0; 9]), None);
    }

    #[test]
    fn longs_are_twos_complement_little_endian() {
        assert_eq!(long(&[]).unwrap(), 0);
        assert_eq!(long(&[0xff]).unwrap(), -1);
        assert_eq!(long(&[0x00, 0x01]).unwrap(), 256);
        assert_eq!(long(&[0xff, 0x00]).unwrap(), 255);
        assert_eq!(
            long(&[0x00, 0x00, 0x40, 0x1b, 0x43, 0x7f, 0x00]).unwrap(),
            0x7f43_1b40_0000
        );
        assert!(long(&[0, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
    }
}
