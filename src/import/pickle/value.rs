//! The data a pickle can build here: Python's plain values, with lists and dicts shared by
//! reference (a pickle's memo lets one object appear in many places, as PyTorch's snapshots
//! do with stack frames).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

#[derive(Debug, Clone)]
pub enum Value {
    None,
    Bool(bool),
    /// Python `int` within 64 bits (wider ones are refused).
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    /// A str of at most 22 bytes, held inline (no allocation: most of a snapshot's strings).
    Short(Short),
    Bytes(Rc<[u8]>),
    /// A list, or a set (a snapshot has none; kept as a list).
    List(Rc<List>),
    Dict(Rc<Dict>),
    /// A tuple, or a frozenset, with its nesting depth (`Value::depth`).
    Tuple(Rc<[Value]>, u16),
    /// A list item a `Sink` already took as the pickle was read (it is not in the list).
    Taken,
}

/// A short str held inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Short {
    len: u8,
    bytes: [u8; 22],
}

impl Short {
    pub const MAX: usize = 22;

    /// `s` inline, if it is short enough.
    pub fn new(s: &str) -> Option<Short> {
        let b = s.as_bytes();
        if b.len() > Self::MAX {
            return None;
        }
        let mut bytes = [0u8; 22];
        bytes[..b.len()].copy_from_slice(b);
        Some(Short {
            len: b.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        // Built only from a `&str` (`new`), so always UTF-8.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// How deep values may nest (a list in a dict in a list ... counts one per level). A memory
/// snapshot nests six deep (snapshot → `device_traces` → a device's list → an entry →
/// `frames` → a frame); the bound keeps every walk over a value, and its drop, shallow.
pub const MAX_DEPTH: u16 = 100;

/// A list being built or built.
#[derive(Debug, Default)]
pub struct List {
    pub items: RefCell<Vec<Value>>,
    /// Free for whoever consumes the pickle (e.g. where this list's items went).
    pub aux: Cell<u64>,
    /// The deepest item's depth plus one, as far as items were added through the machine.
    pub depth: Cell<u16>,
}

/// A dict, its items in insertion order (keys compared by value on lookup).
#[derive(Debug, Default)]
pub struct Dict {
    pub items: RefCell<Vec<(Value, Value)>>,
    /// Free for whoever consumes the pickle (e.g. an id given to this dict).
    pub aux: Cell<u64>,
    /// As `List::depth`.
    pub depth: Cell<u16>,
}

/// Lists and dicts are dropped without recursion: a crafted pickle can nest them (or fill
/// one after it was put in another, past the depth the machine checks) far deeper than the
/// thread's stack would hold a recursive drop.
fn drop_iteratively(mut pending: Vec<Value>) {
    while let Some(v) = pending.pop() {
        match v {
            Value::List(l) => {
                if let Ok(l) = Rc::try_unwrap(l) {
                    pending.append(&mut l.items.take());
                }
            }
            Value::Dict(d) => {
                if let Ok(d) = Rc::try_unwrap(d) {
                    for (k, v) in d.items.take() {
                        pending.push(k);
                        pending.push(v);
                    }
                }
            }
            Value::Tuple(mut t, _) => {
                if let Some(items) = Rc::get_mut(&mut t) {
                    pending.extend(items.iter_mut().map(|x| std::mem::replace(x, Value::None)));
                }
            }
            _ => {}
        }
    }
}

impl Drop for List {
    fn drop(&mut self) {
        let items = self.items.take();
        if items.iter().any(Value::is_container) {
            drop_iteratively(items);
        }
    }
}

impl Drop for Dict {
    fn drop(&mut self) {
        let items = self.items.take();
        if items
            .iter()
            .any(|(k, v)| k.is_container() || v.is_container())
        {
            drop_iteratively(items.into_iter().flat_map(|(k, v)| [k, v]).collect());
        }
    }
}

impl Dict {
    /// The value under the string key `key`.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.items
            .borrow()
            .iter()
            .rev()
            .find(|(k, _)| k.str_bytes() == Some(key.as_bytes()))
            .map(|(_, v)| v.clone())
    }

    /// Whether the dict has the string key `key`.
    pub fn has(&self, key: &str) -> bool {
        self.items
            .borrow()
            .iter()
            .any(|(k, _)| k.str_bytes() == Some(key.as_bytes()))
    }

    /// The first `max` keys joined for a message, and how many there are past them: a
    /// hostile dict may hold millions.
    pub fn keys_brief(&self, max: usize) -> String {
        let keys = self.keys_upto(max);
        let n = self.items.borrow().len();
        if n > max {
            format!("{}, … ({n} keys in all)", keys.join(", "))
        } else {
            keys.join(", ")
        }
    }

    /// The string keys, for messages.
    pub fn keys(&self) -> Vec<String> {
        self.keys_upto(usize::MAX)
    }

    /// The first `max` keys, for messages.
    pub fn keys_upto(&self, max: usize) -> Vec<String> {
        self.items
            .borrow()
            .iter()
            .take(max)
            .map(|(k, _)| match k.as_str() {
                Some(s) => s.to_string(),
                None => format!("<{}>", k.type_name()),
            })
            .collect()
    }
}

impl Value {
    /// Python's name for the type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) | Value::Short(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Tuple(..) => "tuple",
            Value::Taken => "item already taken",
        }
    }

    /// How deeply the value nests: 0 for a scalar, one more than its deepest item for a
    /// container (as far as the machine saw items added).
    #[inline]
    pub fn depth(&self) -> u16 {
        match self {
            Value::List(l) => l.depth.get(),
            Value::Dict(d) => d.depth.get(),
            Value::Tuple(_, d) => *d,
            _ => 0,
        }
    }

    /// A list, dict or tuple.
    #[inline]
    pub fn is_container(&self) -> bool {
        matches!(self, Value::List(_) | Value::Dict(_) | Value::Tuple(..))
    }

    /// A tuple of `items`, its depth one more than its deepest item's; `Err` past
    /// `MAX_DEPTH`.
    pub fn tuple(items: Rc<[Value]>) -> Result<Value, String> {
        let d = items.iter().map(Value::depth).max().unwrap_or(0) + 1;
        if d > MAX_DEPTH {
            return Err(too_deep());
        }
        Ok(Value::Tuple(items, d))
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            Value::Short(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// The bytes of a str value (no UTF-8 check: for comparing keys).
    #[inline]
    pub fn str_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Str(s) => Some(s.as_bytes()),
            Value::Short(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// A str value, inline when short.
    pub fn str(s: &str) -> Value {
        match Short::new(s) {
            Some(x) => Value::Short(x),
            None => Value::Str(Rc::from(s)),
        }
    }

    pub fn as_dict(&self) -> Option<&Rc<Dict>> {
        match self {
            Value::Dict(d) => Some(d),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&Rc<List>> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// A short rendering for messages (`'alloc'`, `12`, `<dict>`).
    pub fn brief(&self) -> String {
        match self {
            Value::None => "None".into(),
            Value::Bool(b) => if *b { "True" } else { "False" }.into(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(_) | Value::Short(_) => {
                let s = self.as_str().unwrap_or_default();
                if s.len() <= 40 {
                    format!("{s:?}")
                } else {
                    format!("{:?}…", s.chars().take(40).collect::<String>())
                }
            }
            other => format!("<{}>", other.type_name()),
        }
    }
}

/// The message for a value nested past `MAX_DEPTH`.
pub(crate) fn too_deep() -> String {
    format!(
        "values nest more than {MAX_DEPTH} levels deep (a memory snapshot nests 6): refused before building them"
    )
}

/// Records that `item` went into a container of depth `*depth`; `Err` past `MAX_DEPTH`.
#[inline]
pub(crate) fn deepen(depth: &Cell<u16>, item: &Value) -> Result<(), String> {
    let d = item.depth();
    if d >= depth.get() {
        if d >= MAX_DEPTH {
            return Err(too_deep());
        }
        depth.set(d + 1);
    }
    Ok(())
}
