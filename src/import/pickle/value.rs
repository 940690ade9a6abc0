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
    Bytes(Rc<[u8]>),
    /// A list, or a set (a snapshot has none; kept as a list).
    List(Rc<List>),
    Dict(Rc<Dict>),
    /// A tuple, or a frozenset.
    Tuple(Rc<[Value]>),
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
            .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
            .map(|(_, v)| v.clone())
    }

    /// The string keys, for messages.
    pub fn keys(&self) -> Vec<String> {
        self.items
            .borrow()
            .iter()
            .map(|(k, _)| match k {
                Value::Str(s) => s.to_string(),
                other => format!("<{}>", other.type_name()),
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
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Tuple(_) => "tuple",
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
            _ => None,
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
            Value::Str(s) if s.len() <= 40 => format!("{s:?}"),
            Value::Str(s) => format!("{:?}…", s.chars().take(40).collect::<String>()),
            other => format!("<{}>", other.type_name()),
        }
    }
}
