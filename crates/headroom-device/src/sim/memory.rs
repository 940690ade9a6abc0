//! The simulated driver's plain and stream-ordered allocations: `cuMemAlloc`/`cuMemFree` with
//! page rounding and packing of small allocations, and `cuMemAllocAsync`/`cuMemFreeAsync` from
//! the stream-ordered pool. A size whose rounding would pass 2^64 bytes fits nowhere.

use crate::prelude::*;
use crate::{Capability, DevPtr, DevResult, DeviceError, PoolConfig, PoolUsage, StreamId};

use super::pool::{Reuse, Take};
use super::{SimDevice, per_gib_ns};

impl Memory for SimDevice {
    fn malloc(&mut self, bytes: u64) -> DevResult<DevPtr> {
        if bytes == 0 {
            return Err(DeviceError::Invalid("cuMemAlloc of 0 bytes".into()));
        }
        let lat = &self.profile.latency;
        self.advance(
            lat.malloc_base
                .0
                .saturating_add(per_gib_ns(lat.malloc_per_gib.0, bytes)),
        );
        let free = self.free_at(self.host_ns);
        let rounding = self.alloc_rounding();
        let ptr = if rounding.shares_a_page(bytes) {
            let page = rounding.page_bytes;
            let may_add = page <= free;
            let mut va = self.next_va;
            let placed = self.small.alloc(bytes, may_add, || {
                let p = va;
                va += page;
                p
            });
            self.next_va = self.next_va.max(va);
            match placed {
                Some(a) => a.ptr,
                None => {
                    return Err(DeviceError::OutOfMemory {
                        requested_bytes: bytes,
                    });
                }
            }
        } else {
            // A size whose page multiple passes 2^64 fits nowhere (`round_up` saturates).
            let rounded = rounding.charged_bytes(bytes);
            if rounded > free {
                return Err(DeviceError::OutOfMemory {
                    requested_bytes: bytes,
                });
            }
            let ptr = self.take_va(rounded)?;
            self.large.insert(ptr, rounded);
            self.large_bytes += rounded;
            ptr
        };
        self.sizes.insert(ptr, bytes);
        Ok(ptr)
    }

    fn free(&mut self, ptr: DevPtr) -> DevResult<()> {
        // cuMemFree may synchronize the device [doc]: the host waits for queued work.
        let busy = self.streams.iter().copied().max().unwrap_or(0);
        self.host_ns = self
            .host_ns
            .max(busy)
            .saturating_add(self.profile.latency.free.0);
        if let Some(rounded) = self.large.remove(&ptr) {
            self.large_bytes -= rounded;
        } else if self.small.free(ptr).is_none() {
            return Err(DeviceError::Invalid(format!(
                "cuMemFree of {ptr:#x}, which is not a live allocation"
            )));
        }
        if let Some(bytes) = self.sizes.remove(&ptr) {
            self.content.forget(ptr, bytes);
        }
        Ok(())
    }
}

impl StreamOrderedPool for SimDevice {
    fn pool_configure(&mut self, config: PoolConfig) -> DevResult<()> {
        self.pool.config = config;
        Ok(())
    }

    fn malloc_async(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr> {
        self.require(Capability::MemoryPools, "cuMemAllocFromPoolAsync")?;
        if bytes == 0 {
            return Err(DeviceError::Invalid("cuMemAllocAsync of 0 bytes".into()));
        }
        let si = self.stream_index(stream)?;
        self.refuse_while_capturing("cuMemAllocFromPoolAsync", Some(stream))?;
        self.advance(self.profile.latency.malloc_async.0);
        let can_grow = self.pool.rounded(bytes) <= self.free_at(self.host_ns);
        let ptr = match self.pool.take(bytes, stream, self.host_ns, can_grow) {
            Take::Reused { ptr, reuse } => {
                if let Reuse::WaitUntil(t) = reuse {
                    self.streams[si] = self.streams[si].max(t);
                }
                ptr
            }
            Take::MustGrow(rounded) => {
                if rounded > self.free_at(self.host_ns) {
                    return Err(DeviceError::OutOfMemory {
                        requested_bytes: bytes,
                    });
                }
                let ptr = self.take_va(rounded)?;
                self.pool.grow(ptr, rounded);
                ptr
            }
        };
        self.sizes.insert(ptr, bytes);
        Ok(ptr)
    }

    fn free_async(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()> {
        self.require(Capability::MemoryPools, "cuMemFreeAsync")?;
        let si = self.stream_index(stream)?;
        self.refuse_while_capturing("cuMemFreeAsync (pool)", Some(stream))?;
        self.advance(self.profile.latency.free_async.0);
        let completes_at = self.streams[si].max(self.host_ns);
        if self.pool.free_async(ptr, stream, completes_at).is_none() {
            return Err(DeviceError::Invalid(format!(
                "cuMemFreeAsync of {ptr:#x}, which is not a live pool allocation"
            )));
        }
        if let Some(bytes) = self.sizes.remove(&ptr) {
            self.content.forget(ptr, bytes);
        }
        Ok(())
    }

    fn pool_trim(&mut self, keep_bytes: u64) -> DevResult<()> {
        self.require(Capability::MemoryPools, "cuMemPoolTrimTo")?;
        self.advance(self.profile.latency.synchronize.0);
        self.pool.trim_to(keep_bytes);
        Ok(())
    }

    fn pool_usage(&mut self) -> DevResult<PoolUsage> {
        self.require(Capability::MemoryPools, "cuMemPoolGetAttribute")?;
        Ok(self.pool.usage())
    }
}
