//! The pickle's memo, compact: a long snapshot memoizes tens of millions of objects (every
//! trace entry, its `"N/A"`, its `(0, 0)`, its frames list) that are never read back, so a
//! slot holds only a 4-byte index into a table of distinct values. Short strings are
//! stored once by content and shared objects once by identity; a slot of an item a sink
//! already took holds nothing.

use std::rc::Rc;

use super::FastMap;
use super::value::{Short, Value};

/// Ids beyond the memo's size by more than this are refused (a pickle numbers its memo
/// densely; a huge id would only make the table huge).
const MAX_GAP: u32 = 1 << 20;

#[derive(Debug, Default)]
pub(super) struct Memo {
    /// Per id: 0 = not defined, 1 = defined but taken, n ≥ 2 = `values[n - 2]`.
    slots: Vec<u32>,
    values: Vec<Value>,
    shorts: FastMap<Short, u32>,
    /// Longer strings by content: a fresh copy per entry (a compile context) stays one value.
    strs: FastMap<Rc<str>, u32>,
    shared: FastMap<usize, u32>,
    /// The last short string and shared object stored: a snapshot repeats them entry after
    /// entry (`"N/A"`, `(0, 0)`), so most stores need no hashing.
    last_short: Option<(Short, u32)>,
    last_shared: (usize, u32),
    /// Slots written again after they were defined (`PUT` over an id): caches of what an id
    /// holds compare it before they trust themselves.
    redefined: u32,
}

const TAKEN: u32 = 1;

impl Memo {
    /// Distinct ids defined so far (Python's `len(memo)`, the id `MEMOIZE` uses next, for a
    /// stream that defines ids in order, as Python's pickler does).
    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    fn slot(&mut self, id: u32) -> Result<&mut u32, String> {
        let len = self.slots.len() as u32;
        if id < len && self.slots[id as usize] != 0 {
            self.redefined = self.redefined.wrapping_add(1);
        }
        if id == len {
            self.slots.push(0);
        } else if id > len {
            if id - len > MAX_GAP {
                return Err(format!(
                    "memo id {id} is far past the {len} ids defined so far"
                ));
            }
            self.slots.resize(id as usize + 1, 0);
        }
        Ok(&mut self.slots[id as usize])
    }

    fn index_of(&mut self, v: Value) -> u32 {
        let key_ptr = match &v {
            Value::Short(s) => {
                if let Some((last, i)) = self.last_short
                    && last == *s
                {
                    return i;
                }
                let i = match self.shorts.get(s) {
                    Some(&i) => i,
                    None => {
                        let i = self.values.len() as u32 + 2;
                        self.shorts.insert(*s, i);
                        self.values.push(v.clone());
                        i
                    }
                };
                self.last_short = Some((*s, i));
                return i;
            }
            Value::Str(s) => {
                if let Some(&i) = self.strs.get(s) {
                    return i;
                }
                let i = self.values.len() as u32 + 2;
                self.strs.insert(s.clone(), i);
                self.values.push(v);
                return i;
            }
            Value::Bytes(b) => Some(Rc::as_ptr(b) as *const u8 as usize),
            Value::List(l) => Some(Rc::as_ptr(l) as usize),
            Value::Dict(d) => Some(Rc::as_ptr(d) as usize),
            Value::Tuple(t, _) => Some(Rc::as_ptr(t) as *const Value as usize),
            _ => None,
        };
        if let Some(p) = key_ptr {
            if self.last_shared.0 == p && self.last_shared.1 != 0 {
                return self.last_shared.1;
            }
            if let Some(&i) = self.shared.get(&p) {
                self.last_shared = (p, i);
                return i;
            }
        }
        let i = self.values.len() as u32 + 2;
        if let Some(p) = key_ptr {
            self.shared.insert(p, i);
            self.last_shared = (p, i);
        }
        self.values.push(v);
        i
    }

    /// Slot `id` holds `v`.
    pub fn put(&mut self, id: u32, v: Value) -> Result<(), String> {
        let i = self.index_of(v);
        *self.slot(id)? = i;
        Ok(())
    }

    /// Where `v` is stored already (its index for `put_stored`), looked up without adding it.
    pub fn stored(&self, v: &Value) -> Option<u32> {
        let p = match v {
            Value::Short(s) => return self.shorts.get(s).copied(),
            Value::Str(s) => return self.strs.get(s).copied(),
            Value::Bytes(b) => Rc::as_ptr(b) as *const u8 as usize,
            Value::List(l) => Rc::as_ptr(l) as usize,
            Value::Dict(d) => Rc::as_ptr(d) as usize,
            Value::Tuple(t, _) => Rc::as_ptr(t) as *const Value as usize,
            _ => return None,
        };
        self.shared.get(&p).copied()
    }

    /// Slot `id` holds the value stored at `index` (from `stored`).
    pub fn put_stored(&mut self, id: u32, index: u32) -> Result<(), String> {
        if index < 2 || index as usize - 2 >= self.values.len() {
            return Err(format!("memo value {index} is not stored"));
        }
        *self.slot(id)? = index;
        Ok(())
    }

    /// Slot `id` is defined, but its object was taken by a sink (reading it back is an
    /// error).
    pub fn put_taken(&mut self, id: u32) -> Result<(), String> {
        *self.slot(id)? = TAKEN;
        Ok(())
    }

    /// How many times a defined slot was written again (a cache keyed by memo id is stale
    /// when this changed).
    pub fn generation(&self) -> u32 {
        self.redefined
    }

    /// The value of slot `id`.
    pub fn get(&self, id: u32) -> Result<&Value, String> {
        match self.slots.get(id as usize).copied().unwrap_or(0) {
            0 => Err(format!("memo slot {id} is read before it is written")),
            TAKEN => Err(format!(
                "memo slot {id} refers to a trace entry already taken (a snapshot never shares one)"
            )),
            i => Ok(&self.values[i as usize - 2]),
        }
    }
}
