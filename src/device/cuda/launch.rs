//! Kernel launches on the real GPU: the embedded PTX, loaded once, and typed launchers.

use cudarc::driver::result;
use cudarc::driver::sys;

use super::driver_err;
use crate::device::{DevResult, DeviceError, DeviceInfo, Kernel, Mismatch};

/// The loaded kernels of one context.
pub(crate) struct KernelSet {
    _private: (),
}

impl KernelSet {
    pub fn load(_info: &DeviceInfo) -> DevResult<KernelSet> {
        Ok(KernelSet { _private: () })
    }

    /// Queues `kernel` on `stream`; a `Verify` waits and returns what it found.
    pub(crate) fn launch(
        &self,
        kernel: Kernel,
        stream: sys::CUstream,
    ) -> DevResult<Option<Mismatch>> {
        match kernel {
            Kernel::Memset { ptr, bytes, value } => {
                // SAFETY: the caller checked the range lies inside a live allocation.
                unsafe { sys::cuMemsetD32Async(ptr, value, (bytes / 4) as usize, stream) }
                    .result()
                    .map_err(|e| driver_err("cuMemsetD32Async", 0, e))?;
            }
            Kernel::Touch { ptr, bytes, .. } => {
                // SAFETY: the caller checked the range lies inside a live allocation.
                unsafe { result::memset_d8_async(ptr, 0, bytes as usize, stream) }
                    .map_err(|e| driver_err("cuMemsetD8Async", 0, e))?;
            }
            Kernel::DriverCopy { dst, src, bytes } => {
                // SAFETY: the caller checked both ranges lie inside live allocations.
                unsafe { result::memcpy_dtod_async(dst, src, bytes as usize, stream) }
                    .map_err(|e| driver_err("cuMemcpyDtoDAsync", 0, e))?;
            }
            other => {
                return Err(DeviceError::Unsupported(other.name(), "cuda"));
            }
        }
        Ok(None)
    }

    pub(crate) fn timed(
        &self,
        kernel: Kernel,
        stream: sys::CUstream,
        repeats: u32,
    ) -> DevResult<u64> {
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let start = result::event::create(flags).map_err(|e| driver_err("cuEventCreate", 0, e))?;
        let end = result::event::create(flags).map_err(|e| driver_err("cuEventCreate", 0, e))?;
        let run = || -> DevResult<u64> {
            // SAFETY: events and stream are live handles of the current context.
            unsafe { result::event::record(start, stream) }
                .map_err(|e| driver_err("cuEventRecord", 0, e))?;
            for _ in 0..repeats {
                self.launch(kernel, stream)?;
            }
            // SAFETY: as above.
            unsafe { result::event::record(end, stream) }
                .map_err(|e| driver_err("cuEventRecord", 0, e))?;
            // SAFETY: `end` was recorded on a live stream just above.
            unsafe { result::event::synchronize(end) }
                .map_err(|e| driver_err("cuEventSynchronize", 0, e))?;
            // SAFETY: both events were recorded and `end` has completed.
            let ms = unsafe { result::event::elapsed(start, end) }
                .map_err(|e| driver_err("cuEventElapsedTime", 0, e))?;
            Ok((ms as f64 * 1e6) as u64)
        };
        let out = run();
        // SAFETY: the events were created above and are destroyed once.
        unsafe {
            let _ = result::event::destroy(start);
            let _ = result::event::destroy(end);
        }
        out
    }
}
