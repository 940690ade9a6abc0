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
    /// A tuple, or a frozenset.
    Tuple(Rc<[Value]>),
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

/// A list being built or built.
#[derive(Debug, Default)]
pub struct List {
    pub items: RefCell<Vec<Value>>,
    /// Free for whoever consumes the pickle (e.g. where this list's items went).
    pub aux: Cell<u64>,
}

/// A dict, its items in insertion order (keys compared by value on lookup).
#[derive(Debug, Default)]
pub struct Dict {
    pub items: RefCell<Vec<(Value, Value)>>,
    /// Free for whoever consumes the pickle (e.g. an id given to this dict).
    pub aux: Cell<u64>,
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

    /// The string keys, for messages.
    pub fn keys(&self) -> Vec<String> {
        self.items
            .borrow()
            .iter()
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
            Value::Tuple(_) => "tuple",
            Value::Taken => "item already taken",
        }
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
