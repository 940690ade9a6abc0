//! `direct`: one driver allocation (`cuMemAlloc`) per request, freed with `cuMemFree`: it
//! calls the device's `Memory` and nothing else.
//!
//! Nothing is cached, so allocated = reserved = the sum of live requests; the driver's own
//! page rounding shows up only in the device view.

use std::collections::HashMap;

use crate::alloc::{AllocError, AllocStats, Allocator, Block, device_oom, free_each};
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};

#[derive(Debug, Default)]
pub struct DirectAllocator {
    live: HashMap<DevPtr, Block>,
    bytes: u64,
    num_ooms: u64,
}

impl Allocator for DirectAllocator {
    fn kind(&self) -> crate::alloc::AllocatorKind {
        crate::alloc::AllocatorKind::Direct
    }

    fn allocate(
        &mut self,
        dev: &mut dyn AllocDevice,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        let dev: &mut dyn Memory = dev;
        let ptr = dev.malloc(bytes).map_err(|e| {
            if e.is_oom() {
                self.num_ooms += 1;
            }
            device_oom(e, bytes, bytes, "direct", stream)
        })?;
        let block = Block {
            ptr,
            requested_bytes: bytes,
            size_bytes: bytes,
            stream,
        };
        self.live.insert(ptr, block);
        self.bytes = self.bytes.saturating_add(bytes);
        Ok(block)
    }

    fn free(&mut self, dev: &mut dyn AllocDevice, ptr: DevPtr) -> Result<(), AllocError> {
        let block = self.live.remove(&ptr).ok_or_else(|| {
            AllocError::Invalid(format!(
                "free of {ptr:#x}, which is not live in the direct allocator"
            ))
        })?;
        self.bytes -= block.size_bytes;
        let dev: &mut dyn Memory = dev;
        dev.free(ptr).map_err(AllocError::Device)
    }

    fn stats(&self) -> AllocStats {
        AllocStats {
            allocated_bytes: self.bytes,
            reserved_bytes: self.bytes,
            active_bytes: self.bytes,
            requested_bytes: self.bytes,
            segment_count: self.live.len() as u64,
            num_ooms: self.num_ooms,
            ..AllocStats::default()
        }
    }

    fn rounded_size(&self, bytes: u64) -> u64 {
        bytes
    }

    fn release_all(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        let ptrs: Vec<DevPtr> = self.live.keys().copied().collect();
        free_each(self, dev, ptrs)
    }
}
