//! A reader for Python pickles that builds data and never runs anything.
//!
//! A pickle is a program for a small stack machine; some of its opcodes import and call
//! Python objects, which is how a crafted pickle runs code. This reader accepts only the
//! opcodes that build plain data (`opcodes::OPS` lists each one and why it is accepted or
//! refused) and stops at the first other one with its name and byte offset, before anything
//! is built. Nothing is ever looked up, imported or called: there is nothing here that could.
//!
//! Reading takes two passes over the file. The first checks every opcode and notes which memo
//! slots the stream reads back; the second builds values, keeping only those slots, so a
//! snapshot with millions of memoized objects that are never shared again costs no memory
//! for them. A `Sink` sees every item appended to a list and may take it instead of the list
//! (a trace entry turned into a compact record, for instance).

mod input;
mod machine;
pub mod opcodes;
mod scan;
mod value;

use std::fmt;
use std::fs::File;
use std::path::Path;

pub use machine::{Machine, Sink};
pub use scan::{Scan, scan};
pub use value::{Dict, List, Value};

/// Where and why a pickle could not be read.
#[derive(Debug)]
pub struct PickleError {
    /// Byte offset of the opcode (or of the read) that failed.
    pub offset: u64,
    pub message: String,
    /// True when the opcode was refused (it would run code, or is not data).
    pub refused: bool,
}

impl PickleError {
    pub(crate) fn at(offset: u64, message: impl Into<String>) -> PickleError {
        PickleError {
            offset,
            message: message.into(),
            refused: false,
        }
    }

    pub(crate) fn io(offset: u64, e: std::io::Error) -> PickleError {
        PickleError::at(offset, format!("read error: {e}"))
    }
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for PickleError {}

/// A set of memo ids, as bits.
#[derive(Debug, Default, Clone)]
pub struct IdSet(Vec<u64>);

impl IdSet {
    pub fn insert(&mut self, id: u32) {
        let w = id as usize / 64;
        if w >= self.0.len() {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (id % 64);
    }

    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.0
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
}

/// Reads the pickle at `path` in two passes (check, then build), feeding list items through
/// `sink`. Returns the top-level value and what the first pass learned.
pub fn load_file<S: Sink>(path: &Path, sink: &mut S) -> Result<(Value, Scan), PickleError> {
    let open = || File::open(path).map_err(|e| PickleError::io(0, e));
    let info = scan(open()?)?;
    let value = Machine::new(&info, sink).run(open()?)?;
    Ok((value, info))
}

/// Reads a pickle held in memory (two passes over the bytes).
pub fn load_bytes<S: Sink>(bytes: &[u8], sink: &mut S) -> Result<(Value, Scan), PickleError> {
    let info = scan(bytes)?;
    let value = Machine::new(&info, sink).run(bytes)?;
    Ok((value, info))
}

/// A sink that keeps every item in its list.
pub struct KeepAll;

impl Sink for KeepAll {
    fn append(&mut self, _list: &std::rc::Rc<List>, item: Value) -> Result<Option<Value>, String> {
        Ok(Some(item))
    }
}
