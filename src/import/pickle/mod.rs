//! A reader for Python pickles that builds data and never runs anything.
//!
//! A pickle is a program for a small stack machine; some of its opcodes import and call
//! Python objects, which is how a crafted pickle runs code. This reader accepts only the
//! opcodes that build plain data (`opcodes::OPS` lists each one and why it is accepted or
//! refused) and stops at the first other one with its name and byte offset, before anything
//! is built. Nothing is ever looked up, imported or called: there is nothing here that could.
//!
//! Reading is one pass. The memo keeps four bytes per slot (`memo`), so a snapshot that
//! memoizes tens of millions of objects it never reads back stays small. A `Sink` sees every
//! item appended to a list and may take it instead of the list (a trace entry turned into a
//! compact record, for instance), or read a whole dict straight from the bytes. A reader may
//! bound what the values it builds take against the bytes read (`Budget`, `Machine::bounded`):
//! a hostile pickle is then refused by its shape long before its size matters.

mod budget;
mod input;
mod machine;
mod memo;
pub mod opcodes;
#[cfg(test)]
mod tests;
mod value;

use std::fmt;
use std::fs::File;
use std::path::Path;

pub use budget::Budget;
pub use machine::{Fast, FastDict, Machine, Sink, long8};
pub use value::{Dict, List, Short, Value};

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

/// A multiply-xorshift hasher for small integer keys (memo ids, frame ids): much cheaper
/// than SipHash, and a pickle's memo ids are sequential, not chosen to collide.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        let x = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

/// A hash map with `FastHasher`.
pub type FastMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;

/// A hash set with `FastHasher`.
pub type FastSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<FastHasher>>;

/// Reads the pickle at `path`, feeding list items through `sink`. Returns the top-level
/// value and the protocol.
pub fn load_file<S: Sink>(path: &Path, sink: &mut S) -> Result<(Value, u8), PickleError> {
    let file = File::open(path).map_err(|e| PickleError::io(0, e))?;
    let mut m = Machine::new(sink);
    let v = m.run(file)?;
    Ok((v, m.protocol))
}

/// Reads a pickle held in memory.
pub fn load_bytes<S: Sink>(bytes: &[u8], sink: &mut S) -> Result<(Value, u8), PickleError> {
    let mut m = Machine::new(sink);
    let v = m.run(bytes)?;
    Ok((v, m.protocol))
}

/// A sink that keeps every item in its list.
pub struct KeepAll;

impl Sink for KeepAll {
    fn append(&mut self, _list: &std::rc::Rc<List>, item: Value) -> Result<Option<Value>, String> {
        Ok(Some(item))
    }
}
