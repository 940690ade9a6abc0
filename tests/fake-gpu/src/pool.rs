//! Stream-ordered memory pools (`cuMemAllocAsync`, `cuMemFreeAsync`, `cuMemPool*`).
//!
//! The documented rules: a pool reserves device memory in `pool_granularity_bytes` units; a
//! freed block is pending until its stream reaches the free. An allocation reuses, in order:
//! a block freed earlier on the same stream (or known complete: synchronized, or ordered
//! before through an event the stream waited for); then, with `REUSE_ALLOW_OPPORTUNISTIC`, a
//! block whose free has already run; then the pool grows; and only if growing fails, with
//! `REUSE_ALLOW_INTERNAL_DEPENDENCIES`, a block still pending on another stream, making the
//! allocating stream wait for that stream (the CUDA programming guide's order). At every
//! synchronize, reserved memory above the release threshold goes back to the device;
//! `cuMemPoolTrimTo` releases unused memory down to a size. Out of memory changes nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::abi::*;
use crate::errors::*;
use crate::memory::round_up;
use crate::state::Driver;
use crate::stream::{Dep, StreamShared, Work};

#[derive(Debug, Clone, Copy)]
pub struct Attrs {
    pub release_threshold: u64,
    pub follow_events: bool,
    pub opportunistic: bool,
    pub internal: bool,
}

#[derive(Debug)]
struct FreeBlock {
    ptr: u64,
    bytes: u64,
    stream: Arc<StreamShared>,
    seq: u64,
    /// Known complete by a synchronize.
    ready: bool,
}

impl FreeBlock {
    fn completed(&self) -> bool {
        self.ready || self.stream.completed() >= self.seq
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Live {
    /// Rounded to the granularity.
    pub bytes: u64,
    pub requested: u64,
    pub region: u64,
}

#[derive(Debug)]
pub struct Pool {
    pub id: u64,
    pub device: u32,
    pub attrs: Attrs,
    /// `cuMemPoolDestroy` was called while allocations were outstanding.
    pub destroyed: bool,
    granularity: u64,
    max_size: u64,
    reserved: u64,
    reserved_high: u64,
    used: u64,
    used_high: u64,
    free: Vec<FreeBlock>,
    live: HashMap<u64, Live>,
}

impl Pool {
    pub fn new(id: u64, device: u32, granularity: u64, max_size: u64) -> Pool {
        Pool {
            id,
            device,
            attrs: Attrs {
                release_threshold: 0,
                follow_events: true,
                opportunistic: true,
                internal: true,
            },
            destroyed: false,
            granularity,
            max_size,
            reserved: 0,
            reserved_high: 0,
            used: 0,
            used_high: 0,
            free: Vec::new(),
            live: HashMap::new(),
        }
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    pub fn rounded(&self, bytes: u64) -> u64 {
        round_up(bytes.max(1), self.granularity)
    }

    pub fn live(&self, ptr: u64) -> Option<Live> {
        self.live.get(&ptr).copied()
    }

    pub fn has_outstanding(&self) -> bool {
        !self.live.is_empty() || self.free.iter().any(|b| !b.completed())
    }

    /// Best fit among free blocks passing `ok`; hands it out (the rest stays free).
    fn take_if(
        &mut self,
        need: u64,
        live: Live,
        ok: impl Fn(&FreeBlock) -> bool,
    ) -> Option<(u64, Dep)> {
        let i = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.bytes >= need && ok(b))
            .min_by_key(|(_, b)| (b.bytes, b.ptr))
            .map(|(i, _)| i)?;
        let b = self.free.swap_remove(i);
        if b.bytes > need {
            self.free.push(FreeBlock {
                ptr: b.ptr + need,
                bytes: b.bytes - need,
                stream: b.stream.clone(),
                seq: b.seq,
                ready: b.ready,
            });
        }
        self.add_live(b.ptr, live);
        Some((
            b.ptr,
            Dep {
                stream: b.stream,
                seq: b.seq,
            },
        ))
    }

    fn add_live(&mut self, ptr: u64, live: Live) {
        self.live.insert(ptr, live);
        self.used += live.bytes;
        self.used_high = self.used_high.max(self.used);
    }

    /// Reuse that needs neither new memory nor waiting, in the documented order.
    pub fn take_ready(
        &mut self,
        live: Live,
        stream: u64,
        waited: &HashMap<u64, u64>,
    ) -> Option<u64> {
        let follow = self.attrs.follow_events;
        let known = |b: &FreeBlock| {
            b.ready
                || b.stream.id == stream
                || (follow && waited.get(&b.stream.id).is_some_and(|s| *s >= b.seq))
        };
        if let Some((p, _)) = self.take_if(live.bytes, live, known) {
            return Some(p);
        }
        if self.attrs.opportunistic {
            return self
                .take_if(live.bytes, live, FreeBlock::completed)
                .map(|(p, _)| p);
        }
        None
    }

    /// After growing failed: a block pending on another stream, and what to wait for.
    pub fn take_waiting(&mut self, live: Live) -> Option<(u64, Dep)> {
        if !self.attrs.internal {
            return None;
        }
        self.take_if(live.bytes, live, |_| true)
    }

    /// Whether the pool may reserve `bytes` more (its `maxSize`).
    pub fn may_grow(&self, bytes: u64) -> bool {
        self.max_size == 0 || self.reserved + bytes <= self.max_size
    }

    pub fn grow(&mut self, ptr: u64, live: Live) {
        self.reserved += live.bytes;
        self.reserved_high = self.reserved_high.max(self.reserved);
        self.add_live(ptr, live);
    }

    /// `cuMemFreeAsync` (host side): the block is in use until `seq` on `stream` has run.
    pub fn free(&mut self, ptr: u64, stream: Arc<StreamShared>, seq: u64) -> Option<Live> {
        let live = self.live.remove(&ptr)?;
        self.used -= live.bytes;
        self.free.push(FreeBlock {
            ptr,
            bytes: live.bytes,
            stream,
            seq,
            ready: false,
        });
        Some(live)
    }

    /// A synchronize saw these frees complete.
    fn mark_ready(&mut self, seen: &impl Fn(&Arc<StreamShared>, u64) -> bool) {
        for b in &mut self.free {
            if !b.ready && b.stream.completed() >= b.seq && seen(&b.stream, b.seq) {
                b.ready = true;
            }
        }
    }

    /// Releases free blocks, largest first, until reserved ≤ `keep`: those known complete,
    /// and with `completed_too` those whose free has run. Returns the bytes released.
    pub fn trim_to(&mut self, keep: u64, completed_too: bool) -> u64 {
        let mut released = 0;
        while self.reserved > keep {
            let Some(i) = self
                .free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.ready || (completed_too && b.completed()))
                .max_by_key(|(_, b)| (b.bytes, std::cmp::Reverse(b.ptr)))
                .map(|(i, _)| i)
            else {
                break;
            };
            let b = self.free.swap_remove(i);
            self.reserved -= b.bytes;
            released += b.bytes;
        }
        released
    }

    pub fn get_attr(&self, attr: u32) -> Result<u64, CUresult> {
        let a = &self.attrs;
        Ok(match attr {
            CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES => a.follow_events as u64,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC => a.opportunistic as u64,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => a.internal as u64,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => a.release_threshold,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => self.reserved,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => self.reserved_high,
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT => self.used,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH => self.used_high,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        })
    }

    /// Sets an attribute; a high-water mark may only be reset (to the current value, by 0).
    pub fn set_attr(&mut self, attr: u32, v: u64) -> Result<(), CUresult> {
        let a = &mut self.attrs;
        match attr {
            CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES => a.follow_events = v != 0,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC => a.opportunistic = v != 0,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => a.internal = v != 0,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => a.release_threshold = v,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH if v == 0 => self.reserved_high = self.reserved,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH if v == 0 => self.used_high = self.used,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    }

    /// Whether an attribute is a `cuuint64_t` (the others are `int`).
    pub fn attr_is_u64(attr: u32) -> bool {
        attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    }
}

impl Driver {
    /// The pool `id` of the current device.
    pub fn pool_mut(&mut self, device: u32, id: u64) -> Result<&mut Pool, CUresult> {
        self.dev(device)
            .pools
            .get_mut(&id)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    }

    /// `cuMemAllocFromPoolAsync` outside a capture.
    pub fn pool_alloc(
        &mut self,
        device: u32,
        pool: u64,
        bytes: u64,
        stream: u64,
    ) -> Result<u64, CUresult> {
        let region = self.next_id();
        let waited = self.streams[&stream].waited.clone();
        let p = self.pool_mut(device, pool)?;
        let live = Live {
            bytes: p.rounded(bytes),
            requested: bytes,
            region,
        };
        let ptr = if let Some(ptr) = p.take_ready(live, stream, &waited) {
            ptr
        } else if p.may_grow(live.bytes) && self.reserve(device, live.bytes).is_ok() {
            let ptr = self.va.take(live.bytes, 0);
            self.pool_mut(device, pool)?.grow(ptr, live);
            ptr
        } else if let Some((ptr, dep)) = self.pool_mut(device, pool)?.take_waiting(live) {
            // The allocating stream now waits for the freeing stream's work.
            self.streams[&stream]
                .shared
                .push(vec![dep], Duration::ZERO, Work::Nothing);
            ptr
        } else {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        };
        self.dev(device).regions.add(ptr, bytes, region);
        self.publish(device);
        Ok(ptr)
    }

    /// The pool holding live allocation `ptr` on `device`.
    pub fn pool_of(&self, device: u32, ptr: u64) -> Option<u64> {
        self.devices[device as usize]
            .pools
            .values()
            .find(|p| p.live.contains_key(&ptr))
            .map(|p| p.id)
    }

    /// `cuMemFreeAsync` of a pool allocation outside a capture.
    pub fn pool_free(
        &mut self,
        device: u32,
        pool: u64,
        ptr: u64,
        stream: u64,
    ) -> Result<(), CUresult> {
        let live = self
            .pool_mut(device, pool)?
            .live(ptr)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let work = Work::UnmapRange {
            ptr,
            bytes: live.bytes,
            id: live.region,
        };
        let (shared, seq) = self
            .submit(stream, work, Duration::ZERO)?
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        self.pool_mut(device, pool)?.free(ptr, shared, seq);
        Ok(())
    }

    /// A synchronize completed: frees it saw become reusable by anyone, and every pool of the
    /// device gives back what it holds above its release threshold.
    pub fn pools_synchronized(
        &mut self,
        device: u32,
        seen: impl Fn(&Arc<StreamShared>, u64) -> bool,
    ) {
        for p in self.dev(device).pools.values_mut() {
            p.mark_ready(&seen);
            p.trim_to(p.attrs.release_threshold, false);
        }
        self.publish(device);
    }
}
