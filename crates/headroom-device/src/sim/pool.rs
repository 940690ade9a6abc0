//! The simulated stream-ordered memory pool (`cuMemAllocAsync` / `cuMemFreeAsync`).
//!
//! Rules modeled from the driver's documentation: a freed block returns to the pool only when
//! its stream reaches the free; until then it is reusable by the same stream (stream order),
//! by another stream once the free has completed (opportunistic reuse), or by another stream
//! that is made to wait for it (internal dependencies), as the pool's attributes allow.
//! Reserved memory above the release threshold goes back to the device at the next
//! synchronize; `trim_to` releases unused memory only, never live allocations.

use std::collections::HashMap;

use crate::{DevPtr, PoolConfig, PoolUsage, StreamId};

/// A free piece of pool memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FreeBlock {
    ptr: DevPtr,
    bytes: u64,
    /// `Some((stream, t))`: freed on `stream`, completes when the stream reaches time `t`.
    pending: Option<(StreamId, u64)>,
}

/// How a reused block may be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Ready for anyone.
    Ready,
    /// Pending on the same stream: stream order makes it safe.
    SameStream,
    /// The free has completed by now; taken opportunistically.
    Opportunistic,
    /// Pending on another stream: the allocating stream must wait until this time.
    WaitUntil(u64),
}

#[derive(Debug, Clone)]
pub struct SimPool {
    pub config: PoolConfig,
    granularity: u64,
    reserved: u64,
    used: u64,
    reserved_high: u64,
    used_high: u64,
    free: Vec<FreeBlock>,
    live: HashMap<DevPtr, u64>,
}

/// Outcome of trying the pool before growing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    Reused {
        ptr: DevPtr,
        reuse: Reuse,
    },
    /// No reusable block: the pool must grow by this many bytes.
    MustGrow(u64),
}

impl SimPool {
    pub fn new(granularity: u64) -> Self {
        SimPool {
            config: PoolConfig::default(),
            granularity,
            reserved: 0,
            used: 0,
            reserved_high: 0,
            used_high: 0,
            free: Vec::new(),
            live: HashMap::new(),
        }
    }

    /// The pool's granularity multiple for `bytes`: `u64::MAX` when that multiple passes
    /// 2^64, so a request that large can neither grow the pool nor reuse a block.
    pub fn rounded(&self, bytes: u64) -> u64 {
        crate::units::round_up(bytes.max(1), self.granularity)
    }

    pub fn reserved_bytes(&self) -> u64 {
        self.reserved
    }

    pub fn usage(&self) -> PoolUsage {
        PoolUsage {
            used_current_bytes: self.used,
            used_high_bytes: self.used_high,
            reserved_current_bytes: self.reserved,
            reserved_high_bytes: self.reserved_high,
        }
    }

    /// Tries to serve `bytes` on `stream` at host time `now` from freed blocks (best fit).
    ///
    /// The order is the CUDA programming guide's: a block freed on the same stream or whose
    /// free has completed first; then, when `can_grow` (the device has room for the rounded
    /// size), growing the pool; only when it cannot, a block still pending on another stream,
    /// with the allocating stream made to wait for it (internal dependencies).
    pub fn take(&mut self, bytes: u64, stream: StreamId, now: u64, can_grow: bool) -> Take {
        let need = self.rounded(bytes);
        let cfg = self.config;
        let mut best: Option<(usize, Reuse)> = None;
        for (i, b) in self.free.iter().enumerate() {
            if b.bytes < need {
                continue;
            }
            let reuse = match b.pending {
                None => Reuse::Ready,
                Some((s, _)) if s == stream => Reuse::SameStream,
                Some((_, t)) if t <= now && cfg.reuse_opportunistic => Reuse::Opportunistic,
                Some((_, t)) if cfg.reuse_internal_dependencies && !can_grow => Reuse::WaitUntil(t),
                Some(_) => continue,
            };
            // Best fit; among equals prefer one that needs no waiting.
            let better = match best {
                None => true,
                Some((j, r)) => {
                    let (bj, wait_j) = (self.free[j].bytes, matches!(r, Reuse::WaitUntil(_)));
                    let wait_i = matches!(reuse, Reuse::WaitUntil(_));
                    (b.bytes, wait_i) < (bj, wait_j)
                }
            };
            if better {
                best = Some((i, reuse));
            }
        }
        let Some((i, reuse)) = best else {
            return Take::MustGrow(need);
        };
        let block = self.free.swap_remove(i);
        if block.bytes > need {
            self.free.push(FreeBlock {
                ptr: block.ptr + need,
                bytes: block.bytes - need,
                pending: block.pending,
            });
        }
        self.add_live(block.ptr, need);
        Take::Reused {
            ptr: block.ptr,
            reuse,
        }
    }

    /// Records a new reservation of `bytes` at `ptr`, handed out at once.
    pub fn grow(&mut self, ptr: DevPtr, bytes: u64) {
        self.reserved = self.reserved.saturating_add(bytes);
        self.reserved_high = self.reserved_high.max(self.reserved);
        self.add_live(ptr, bytes);
    }

    fn add_live(&mut self, ptr: DevPtr, bytes: u64) {
        self.live.insert(ptr, bytes);
        self.used = self.used.saturating_add(bytes);
        self.used_high = self.used_high.max(self.used);
    }

    /// `cuMemFreeAsync`: the block is pending on `stream` until `completes_at`.
    pub fn free_async(&mut self, ptr: DevPtr, stream: StreamId, completes_at: u64) -> Option<u64> {
        let bytes = self.live.remove(&ptr)?;
        self.used -= bytes;
        self.free.push(FreeBlock {
            ptr,
            bytes,
            pending: Some((stream, completes_at)),
        });
        Some(bytes)
    }

    /// A synchronize reached time `now` on `stream` (or on every stream when `None`):
    /// completed frees become ready, then the pool trims to its release threshold.
    /// Returns the bytes released to the device.
    pub fn synchronized(&mut self, stream: Option<StreamId>, now: u64) -> u64 {
        for b in &mut self.free {
            if let Some((s, t)) = b.pending
                && t <= now
                && stream.is_none_or(|x| x == s)
            {
                b.pending = None;
            }
        }
        self.trim_to(self.config.release_threshold_bytes)
    }

    /// Releases ready free blocks, largest first, until reserved ≤ `keep_bytes`.
    /// Returns the bytes released.
    pub fn trim_to(&mut self, keep_bytes: u64) -> u64 {
        let mut released = 0;
        self.free.sort_by_key(|b| (b.pending.is_some(), b.bytes));
        while self.reserved > keep_bytes {
            let Some(pos) = self.free.iter().rposition(|b| b.pending.is_none()) else {
                break;
            };
            let b = self.free.remove(pos);
            self.reserved -= b.bytes;
            released += b.bytes;
        }
        released
    }

    /// Forgets everything (the device released the whole pool).
    pub fn clear(&mut self) -> u64 {
        let r = self.reserved;
        self.free.clear();
        self.live.clear();
        self.reserved = 0;
        self.used = 0;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const A: StreamId = StreamId(1);
    const B: StreamId = StreamId(2);

    #[test]
    fn pending_free_blocks_another_stream_without_internal_dependencies() {
        let mut p = SimPool::new(2 * MIB);
        p.config.reuse_internal_dependencies = false;
        p.grow(0x1000, 64 * MIB);
        p.free_async(0x1000, A, 1_000);
        // Another stream, before the free completes: no reuse.
        assert_eq!(p.take(64 * MIB, B, 500, true), Take::MustGrow(64 * MIB));
        assert_eq!(p.take(64 * MIB, B, 500, false), Take::MustGrow(64 * MIB));
        // The same stream may reuse it in stream order.
        assert_eq!(
            p.take(64 * MIB, A, 500, true),
            Take::Reused {
                ptr: 0x1000,
                reuse: Reuse::SameStream
            }
        );
    }

    #[test]
    fn opportunistic_and_internal_dependency_reuse() {
        let mut p = SimPool::new(2 * MIB);
        p.grow(0x1000, 8 * MIB);
        p.free_async(0x1000, A, 1_000);
        // The device has room: the pool grows rather than wait for the other stream.
        assert_eq!(p.take(8 * MIB, B, 500, true), Take::MustGrow(8 * MIB));
        // It has none: the allocating stream waits for the free (an internal dependency).
        assert_eq!(
            p.take(8 * MIB, B, 500, false),
            Take::Reused {
                ptr: 0x1000,
                reuse: Reuse::WaitUntil(1_000)
            }
        );
        p.free_async(0x1000, A, 2_000);
        assert_eq!(
            p.take(8 * MIB, B, 2_000, true),
            Take::Reused {
                ptr: 0x1000,
                reuse: Reuse::Opportunistic
            }
        );
    }

    #[test]
    fn synchronize_releases_above_threshold_and_trim_keeps_live() {
        let mut p = SimPool::new(2 * MIB);
        p.config.release_threshold_bytes = 4 * MIB;
        p.grow(0x1000, 6 * MIB);
        p.grow(0x10_0000_0000, 2 * MIB);
        p.free_async(0x1000, A, 100);
        assert_eq!(p.reserved_bytes(), 8 * MIB);
        // Not reached yet: nothing to release.
        assert_eq!(p.synchronized(Some(B), 50), 0);
        assert_eq!(p.synchronized(None, 100), 6 * MIB);
        assert_eq!(p.reserved_bytes(), 2 * MIB);
        assert_eq!(p.trim_to(0), 0, "a live allocation is never trimmed");
        let u = p.usage();
        assert_eq!(
            (
                u.used_current_bytes,
                u.reserved_high_bytes,
                u.used_high_bytes
            ),
            (2 * MIB, 8 * MIB, 8 * MIB)
        );
    }

    #[test]
    fn a_request_near_two_to_the_64_neither_reuses_nor_grows_by_nothing() {
        let mut p = SimPool::new(2 * MIB);
        p.grow(0x1000, 8 * MIB);
        p.free_async(0x1000, A, 0);
        let huge = u64::MAX - 3;
        assert_eq!(p.rounded(huge), u64::MAX);
        // Before: the rounding wrapped to 0, so any free block "fit" the request.
        assert_eq!(p.take(huge, A, 0, false), Take::MustGrow(u64::MAX));
    }

    #[test]
    fn best_fit_splits_the_remainder() {
        let mut p = SimPool::new(2 * MIB);
        p.grow(0x1000_0000, 10 * MIB);
        p.free_async(0x1000_0000, A, 0);
        p.synchronized(None, 0);
        assert_eq!(
            p.reserved_bytes(),
            0,
            "threshold 0 releases everything at synchronize"
        );
        p.grow(0x2000_0000, 10 * MIB);
        p.free_async(0x2000_0000, A, 0);
        assert_eq!(
            p.take(3 * MIB, A, 0, true),
            Take::Reused {
                ptr: 0x2000_0000,
                reuse: Reuse::SameStream
            }
        );
        assert_eq!(
            p.take(6 * MIB, A, 0, true),
            Take::Reused {
                ptr: 0x2000_0000 + 4 * MIB,
                reuse: Reuse::SameStream
            }
        );
        assert_eq!(p.take(2 * MIB, A, 0, true), Take::MustGrow(2 * MIB));
    }
}
