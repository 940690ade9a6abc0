//! The harness's stream-ordered pool on the real GPU (`cuMemPoolCreate`, created on first use
//! with the workload's attributes) and the `StreamOrderedPool` capability over it.

use cudarc::driver::result;
use cudarc::driver::sys;

use super::{CudaDevice, Pool, driver_err};
use crate::prelude::*;
use crate::{DevPtr, DevResult, DeviceError, PoolConfig, PoolUsage, StreamId};

impl CudaDevice {
    /// The harness's pool, created on first use with the configured attributes.
    fn pool(&mut self) -> DevResult<sys::CUmemoryPool> {
        if let Some(p) = self.pool {
            return Ok(p.0);
        }
        // SAFETY: zeroed CUmemPoolProps is the documented "no options" value; fields set below.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = self.info.index as i32;
        // SAFETY: `props` is a valid, fully initialized CUmemPoolProps.
        let pool = unsafe { result::mem_pool::create(&props) }
            .map_err(|e| driver_err("cuMemPoolCreate", 0, e))?;
        self.pool = Some(Pool(pool));
        self.apply_pool_config()?;
        Ok(pool)
    }

    fn apply_pool_config(&mut self) -> DevResult<()> {
        let Some(Pool(pool)) = self.pool else {
            return Ok(());
        };
        use sys::CUmemPool_attribute as A;
        let c = self.pool_config;
        let mut threshold: u64 = c.release_threshold_bytes;
        let mut opportunistic: std::ffi::c_int = c.reuse_opportunistic as _;
        let mut internal: std::ffi::c_int = c.reuse_internal_dependencies as _;
        // SAFETY: the pool is valid; each value has the type its attribute documents (u64, int).
        unsafe {
            result::mem_pool::set_attribute(
                pool,
                A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
            .and_then(|_| {
                result::mem_pool::set_attribute(
                    pool,
                    A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
                    (&mut opportunistic as *mut i32).cast(),
                )
            })
            .and_then(|_| {
                result::mem_pool::set_attribute(
                    pool,
                    A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                    (&mut internal as *mut i32).cast(),
                )
            })
        }
        .map_err(|e| driver_err("cuMemPoolSetAttribute", 0, e))
    }

    fn pool_attr(pool: sys::CUmemoryPool, a: sys::CUmemPool_attribute) -> DevResult<u64> {
        let mut v: u64 = 0;
        // SAFETY: the usage attributes are documented as cuuint64_t; `v` is a valid u64.
        unsafe { result::mem_pool::get_attribute(pool, a, (&mut v as *mut u64).cast()) }
            .map_err(|e| driver_err("cuMemPoolGetAttribute", 0, e))?;
        Ok(v)
    }
}

impl StreamOrderedPool for CudaDevice {
    fn pool_configure(&mut self, config: PoolConfig) -> DevResult<()> {
        self.pool_config = config;
        self.apply_pool_config()
    }

    fn malloc_async(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr> {
        if bytes == 0 {
            return Err(DeviceError::Invalid("cuMemAllocAsync of 0 bytes".into()));
        }
        let s = self.stream(stream)?;
        self.bind()?;
        let pool = self.pool()?;
        // SAFETY: pool and stream are live handles of this context.
        let ptr = unsafe { result::mem_pool::alloc_async(pool, bytes as usize, s) }
            .map_err(|e| driver_err("cuMemAllocFromPoolAsync", bytes, e))?;
        self.pooled.insert(ptr, bytes);
        Ok(ptr)
    }

    fn free_async(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()> {
        let s = self.stream(stream)?;
        if self.pooled.remove(&ptr).is_none() {
            return Err(DeviceError::Invalid(format!(
                "cuMemFreeAsync of {ptr:#x}, which is not a live pool allocation"
            )));
        }
        self.bind()?;
        // SAFETY: `ptr` came from this device's pool and was not freed (checked above).
        unsafe { result::free_async(ptr, s) }.map_err(|e| driver_err("cuMemFreeAsync", 0, e))
    }

    fn pool_trim(&mut self, keep_bytes: u64) -> DevResult<()> {
        let Some(Pool(pool)) = self.pool else {
            return Ok(());
        };
        self.bind()?;
        // SAFETY: the pool is a live handle; trimming never touches outstanding allocations.
        unsafe { result::mem_pool::trim_to(pool, keep_bytes as usize) }
            .map_err(|e| driver_err("cuMemPoolTrimTo", 0, e))
    }

    fn pool_usage(&mut self) -> DevResult<PoolUsage> {
        let Some(Pool(pool)) = self.pool else {
            return Ok(PoolUsage::default());
        };
        use sys::CUmemPool_attribute as A;
        Ok(PoolUsage {
            used_current_bytes: Self::pool_attr(pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            used_high_bytes: Self::pool_attr(pool, A::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
            reserved_current_bytes: Self::pool_attr(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high_bytes: Self::pool_attr(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        })
    }
}
