//! What the values a pickle builds may cost, against the bytes read so far: the bound that
//! keeps a hostile pickle (a stream of memoized empty dicts, a list of millions of `None`s)
//! from taking a large multiple of its size before its shape gives it away.
//!
//! The machine counts the bytes each value it builds takes on the heap (a container's
//! header, the room its items take as it grows, each long string or bytes) as it builds it
//! and never takes them back, so the count is at least what is still held; the stack and the memo are counted at
//! their current size. Every `CHECK_EVERY_BYTES` of input the count is compared with
//! `Budget::limit`; a value costs at most a few hundred bytes per byte of the opcodes that
//! build it, so the read stops within a few megabytes of the bound.

use super::value::{Dict, List, Value};

/// How often (in bytes of input) the count is compared with the budget.
pub(super) const CHECK_EVERY_BYTES: u64 = 1 << 16;

/// An `Rc`'s two counts, before its value.
const RC_HEADER_BYTES: u64 = 16;

/// An empty list or dict: its `Rc` and header.
pub(super) const CONTAINER_BYTES: u64 = RC_HEADER_BYTES
    + if std::mem::size_of::<Dict>() > std::mem::size_of::<List>() {
        std::mem::size_of::<Dict>() as u64
    } else {
        std::mem::size_of::<List>() as u64
    };

/// One list or tuple item, or one place on the stack.
pub(super) const ITEM_BYTES: u64 = std::mem::size_of::<Value>() as u64;

/// One dict item (key and value).
pub(super) const PAIR_BYTES: u64 = 2 * ITEM_BYTES;

/// A tuple of `n` items.
#[inline]
pub(super) fn tuple_bytes(n: usize) -> u64 {
    RC_HEADER_BYTES + n as u64 * ITEM_BYTES
}

/// A str or bytes of `n` bytes held apart (a short str is held inline: nothing apart).
#[inline]
pub(super) fn text_bytes(n: usize) -> u64 {
    RC_HEADER_BYTES + n as u64
}

/// The most the values built may take: `per_file_byte` bytes for each byte read so far,
/// plus `fixed_bytes`; and how many list items in all may be other than lists and dicts
/// (a list of millions of small ints takes 12 bytes and more per byte of pickle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub per_file_byte: u64,
    pub fixed_bytes: u64,
    pub scalar_list_items: u64,
}

impl Budget {
    /// No bound (the generic reader's default).
    pub const NONE: Budget = Budget {
        per_file_byte: u64::MAX,
        fixed_bytes: u64::MAX,
        scalar_list_items: u64::MAX,
    };

    /// The bound after `read` bytes of input.
    #[inline]
    pub fn limit(&self, read: u64) -> u64 {
        self.per_file_byte
            .saturating_mul(read)
            .saturating_add(self.fixed_bytes)
    }
}
