//! `pool`: stream-ordered allocation from the driver's memory pool (`cuMemAllocAsync`).
//!
//! Frees are stream-ordered: the block returns to the pool when its stream reaches the free,
//! and the pool gives memory back to the device at synchronize above its release threshold.
//! Reserved and used come from the driver's pool attributes, read after every call.

use std::collections::HashMap;

use crate::alloc::{AllocError, AllocStats, Allocator, Block, device_oom, free_each};
use crate::device::prelude::*;
use crate::device::{DevPtr, PoolUsage, StreamId};

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
}

impl Allocator for PoolAllocator {
    fn kind(&self) -> crate::alloc::AllocatorKind {
        crate::alloc::AllocatorKind::Pool
    }

    fn allocate(
        &mut self,
        dev: &mut dyn Device,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        let ptr = match dev.malloc_async(bytes, stream) {
            Ok(p) => p,
            Err(e) => {
                if e.is_oom() {
                    self.num_ooms += 1;
                }
                let _ = self.refresh(dev);
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
        self.refresh(dev)?;
        Ok(block)
    }

    fn free(&mut self, dev: &mut dyn Device, ptr: DevPtr) -> Result<(), AllocError> {
        let block = self.live.remove(&ptr).ok_or_else(|| {
            AllocError::Invalid(format!(
                "free of {ptr:#x}, which is not live in the pool allocator"
            ))
        })?;
        self.requested -= block.requested_bytes;
        dev.free_async(ptr, block.stream)
            .map_err(AllocError::Device)?;
        self.refresh(dev)
    }

    fn refresh(&mut self, dev: &mut dyn Device) -> Result<(), AllocError> {
        self.usage = dev.pool_usage().map_err(AllocError::Device)?;
        Ok(())
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

    fn release_all(&mut self, dev: &mut dyn Device) -> Result<(), AllocError> {
        let ptrs: Vec<DevPtr> = self.live.keys().copied().collect();
        let freed = free_each(self, dev, ptrs);
        let trimmed = dev
            .synchronize()
            .and_then(|_| dev.pool_trim(0))
            .map_err(AllocError::Device);
        let _ = self.refresh(dev);
        freed.and(trimmed)
    }
}
