//! The pickle's memo, compact: a long snapshot memoizes tens of millions of objects (every
//! trace entry, its `"N/A"`, its `(0, 0)`, its frames list) that are never read back, so a
//! slot holds only an index into a table of distinct values, in two bytes while there are
//! fewer than 65,534 of them (four from then on). Short strings are
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
    slots: Slots,
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

/// The slots, two bytes each while every index fits (a snapshot memoizes four objects per
/// trace entry, of a few thousand distinct values), four from the first that does not.
#[derive(Debug)]
enum Slots {
    Short(Vec<u16>),
    Wide(Vec<u32>),
}

impl Default for Slots {
    fn default() -> Slots {
        Slots::Short(Vec::new())
    }
}

impl Slots {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Slots::Short(v) => v.len(),
            Slots::Wide(v) => v.len(),
        }
    }

    /// The slot at `id` (below `len`).
    #[inline]
    fn get(&self, id: u32) -> u32 {
        match self {
            Slots::Short(v) => v[id as usize] as u32,
            Slots::Wide(v) => v[id as usize],
        }
    }

    #[inline]
    fn push(&mut self, x: u32) {
        match self {
            Slots::Short(v) if x <= u16::MAX as u32 => v.push(x as u16),
            Slots::Short(_) => {
                self.widen();
                self.push(x);
            }
            Slots::Wide(v) => v.push(x),
        }
    }

    /// The slot at `id` (below `len`) holds `x`.
    fn set(&mut self, id: u32, x: u32) {
        match self {
            Slots::Short(v) if x <= u16::MAX as u32 => v[id as usize] = x as u16,
            Slots::Short(_) => {
                self.widen();
                self.set(id, x);
            }
            Slots::Wide(v) => v[id as usize] = x,
        }
    }

    /// Up to `n` slots, the new ones not defined.
    fn resize(&mut self, n: usize) {
        match self {
            Slots::Short(v) => v.resize(n, 0),
            Slots::Wide(v) => v.resize(n, 0),
        }
    }

    #[cold]
    fn widen(&mut self) {
        if let Slots::Short(v) = self {
            let mut wide = Vec::with_capacity(v.capacity().max(v.len() + 1));
            wide.extend(v.iter().map(|&x| x as u32));
            *self = Slots::Wide(wide);
        }
    }
}

impl Memo {
    /// Distinct ids defined so far (Python's `len(memo)`, the id `MEMOIZE` uses next, for a
    /// stream that defines ids in order, as Python's pickler does).
    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Slot `id` holds `v` (an index as `slots` keeps them).
    #[inline]
    fn set(&mut self, id: u32, v: u32) -> Result<(), String> {
        if id as usize == self.slots.len() {
            // The next id, as `MEMOIZE` defines them: nothing defined there before.
            self.slots.push(v);
            return Ok(());
        }
        self.set_at(id, v)
    }

    fn set_at(&mut self, id: u32, v: u32) -> Result<(), String> {
        let len = self.slots.len() as u32;
        if id < len && self.slots.get(id) != 0 {
            self.redefined = self.redefined.wrapping_add(1);
        }
        if id > len {
            if id - len > MAX_GAP {
                return Err(format!(
                    "memo id {id} is far past the {len} ids defined so far"
                ));
            }
            self.slots.resize(id as usize + 1);
        }
        if id as usize == self.slots.len() {
            self.slots.push(v);
        } else {
            self.slots.set(id, v);
        }
        Ok(())
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
        self.set(id, i)
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
    #[inline]
    pub fn put_stored(&mut self, id: u32, index: u32) -> Result<(), String> {
        if index < 2 || index as usize - 2 >= self.values.len() {
            return Err(format!("memo value {index} is not stored"));
        }
        self.set(id, index)
    }

    /// Slot `id` is defined, but its object was taken by a sink (reading it back is an
    /// error).
    #[inline]
    pub fn put_taken(&mut self, id: u32) -> Result<(), String> {
        self.set(id, TAKEN)
    }

    /// What the memo takes on the heap: its slots, its table of values and the maps that
    /// find them (each entry and its control byte), at their capacity.
    pub fn held_bytes(&self) -> u64 {
        use std::mem::size_of;
        let slots = match &self.slots {
            Slots::Short(v) => v.capacity() * 2,
            Slots::Wide(v) => v.capacity() * 4,
        };
        (slots
            + self.values.capacity() * size_of::<Value>()
            + self.shorts.capacity() * (size_of::<(Short, u32)>() + 1)
            + self.strs.capacity() * (size_of::<(Rc<str>, u32)>() + 1)
            + self.shared.capacity() * (size_of::<(usize, u32)>() + 1)) as u64
    }

    /// How many times a defined slot was written again (a cache keyed by memo id is stale
    /// when this changed).
    pub fn generation(&self) -> u32 {
        self.redefined
    }

    /// The value of slot `id`.
    pub fn get(&self, id: u32) -> Result<&Value, String> {
        let slot = if id < self.len() {
            self.slots.get(id)
        } else {
            0
        };
        match slot {
            0 => Err(format!("memo slot {id} is read before it is written")),
            TAKEN => Err(format!(
                "memo slot {id} refers to a trace entry already taken (a snapshot never shares one)"
            )),
            i => Ok(&self.values[i as usize - 2]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Memo;
    use crate::import::pickle::Value;

    #[test]
    fn slots_read_back_before_and_after_they_widen() {
        let mut m = Memo::default();
        m.put_taken(0).unwrap();
        // Ints are never shared: each is a value of its own, past 16 bits of indexes.
        for id in 1..70_000u32 {
            m.put(id, Value::Int(id as i64 * 3)).unwrap();
        }
        m.put(70_005, Value::Int(-1)).unwrap();
        assert!(m.get(0).unwrap_err().contains("already taken"));
        for id in 1..70_000u32 {
            assert!(
                matches!(m.get(id), Ok(Value::Int(v)) if *v == id as i64 * 3),
                "{id}"
            );
        }
        assert!(m.get(70_001).unwrap_err().contains("before it is written"));
        assert!(matches!(m.get(70_005), Ok(Value::Int(-1))));
        assert!(m.get(70_006).is_err());
        assert_eq!((m.len(), m.generation()), (70_006, 0));
        m.put(5, Value::Int(7)).unwrap();
        assert!(matches!(m.get(5), Ok(Value::Int(7))));
        assert_eq!(m.generation(), 1);
        assert!(m.put(70_006 + (1 << 20) + 1, Value::None).is_err());
    }
}
