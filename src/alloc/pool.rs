//! `pool`: stream-ordered allocation from the driver's memory pool (`cuMemAllocAsync`).
//!
//! Frees are stream-ordered: the block returns to the pool when its stream reaches the free,
//! and the pool gives memory back to the device at synchronize above its release threshold.
//! Reserved and used come from the driver's pool attributes, read after every call.
//!
//! It calls the device's stream-ordered pool and streams (`PoolDevice`) and nothing else,
//! reached through `AllocDevice::pool_device`.

use std::collections::HashMap;

use crate::alloc::{AllocError, AllocStats, Allocator, Block, device_oom, free_each};
use crate::device::prelude::*;
use crate::device::{DevPtr, PoolUsage, StreamId};

/// The device's stream-ordered pool, or the error of a device that lends none.
pub(crate) fn pool_of(dev: &mut dyn AllocDevice) -> Result<&mut dyn PoolDevice, AllocError> {
    dev.pool_device().ok_or_else(|| {
        AllocError::Invalid("the pool allocator needs a device with a stream-ordered pool".into())
    })
}

#[derive(Debug, Default)]
pub struct PoolAllocator {
    live: HashMap<DevPtr, Block>,
    requested: u64,
    usage: PoolUsage,
    num_ooms: u64,
}

impl PoolAllocator {
    pub fn usage(&self) -> PoolUsage {
        self.usage
    }

    fn read_usage(&mut self, dev: &mut dyn PoolDevice) -> Result<(), AllocError> {
        self.usage = dev.pool_usage().map_err(AllocError::Device)?;
        Ok(())
    }
}

impl Allocator for PoolAllocator {
    fn kind(&self) -> crate::alloc::AllocatorKind {
        crate::alloc::AllocatorKind::Pool
    }

    fn allocate(
        &mut self,
        dev: &mut dyn AllocDevice,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        let dev = pool_of(dev)?;
        let ptr = match dev.malloc_async(bytes, stream) {
            Ok(p) => p,
            Err(e) => {
                if e.is_oom() {
                    self.num_ooms += 1;
                }
                let _ = self.read_usage(dev);
                return Err(device_oom(e, bytes, bytes, "pool", stream));
            }
        };
        let block = Block {
            ptr,
            requested_bytes: bytes,
            size_bytes: bytes,
            stream,
        };
        self.live.insert(ptr, block);
        self.requested = self.requested.saturating_add(bytes);
        self.read_usage(dev)?;
        Ok(block)
    }

    fn free(&mut self, dev: &mut dyn AllocDevice, ptr: DevPtr) -> Result<(), AllocError> {
        let dev = pool_of(dev)?;
        let block = self.live.remove(&ptr).ok_or_else(|| {
            AllocError::Invalid(format!(
                "free of {ptr:#x}, which is not live in the pool allocator"
            ))
        })?;
        self.requested -= block.requested_bytes;
        dev.free_async(ptr, block.stream)
            .map_err(AllocError::Device)?;
        self.read_usage(dev)
    }

    fn refresh(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        self.read_usage(pool_of(dev)?)
    }

    fn stats(&self) -> AllocStats {
        AllocStats {
            allocated_bytes: self.usage.used_current_bytes,
            reserved_bytes: self.usage.reserved_current_bytes,
            active_bytes: self.usage.used_current_bytes,
            requested_bytes: self.requested,
            largest_free_bytes: 0,
            segment_count: 0,
            num_ooms: self.num_ooms,
            ..AllocStats::default()
        }
    }

    fn rounded_size(&self, bytes: u64) -> u64 {
        bytes
    }

    fn release_all(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        let ptrs: Vec<DevPtr> = self.live.keys().copied().collect();
        let freed = free_each(self, dev, ptrs);
        let dev = pool_of(dev)?;
        let trimmed = dev
            .synchronize()
            .and_then(|_| dev.pool_trim(0))
            .map_err(AllocError::Device);
        let _ = self.read_usage(dev);
        freed.and(trimmed)
    }
}
