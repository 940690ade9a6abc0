//! The CUDA driver's and runtime's own out-of-memory errors, and StreamExecutor's log lines.
//!
//! - Driver API: `CUDA_ERROR_OUT_OF_MEMORY` (2), `cuGetErrorString`: "out of memory".
//! - Runtime API: `cudaErrorMemoryAllocation` (2), `cudaGetErrorString`: "out of memory";
//!   PyTorch's `C10_CUDA_CHECK` raises it as "CUDA error: out of memory" (HIP builds: "HIP error:
//!   out of memory", `hipErrorOutOfMemory`); MXNet says "cudaMalloc failed: out of memory",
//!   CUDA.jl "Out of GPU memory", ManagedCuda `ErrorOutOfMemory`.
//! - TensorFlow/XLA `stream_executor/cuda/cuda_driver.cc`: `"failed to allocate " <<
//!   HumanReadableNumBytes(bytes) << " (" << bytes << " bytes) from device: " <<
//!   ToString(res)` (`DeviceAllocate`), `"failed to alloc " << bytes << " bytes unified memory;
//!   result: " << ToString(res)` (`UnifiedMemoryAllocate`), `"failed to alloc " << bytes << "
//!   bytes on host: " << ToString(res)` (`HostAllocate`), and `"failed call to
//!   cuDevicePrimaryCtxRetain: " << ToString(res) << "; total memory reported: " << total`
//!   (`CreateContext`; `cuCtxCreate` in older releases).

use super::cursor::Cursor;
use super::scan::{Found, Reader, back_from, context_call, raised_as};
use super::{Detail, MemoryKind};

pub(super) const SPECIFIC_ANCHORS: &[(&str, Reader)] = &[
    ("failed to allocate ", read_device_alloc),
    ("failed to alloc ", read_alloc),
    ("failed call to cu", read_context),
];

pub(super) const GENERIC_ANCHORS: &[(&str, Reader)] = &[
    ("CUDA_ERROR_OUT_OF_MEMORY", read_generic),
    ("cudaErrorMemoryAllocation", read_generic),
    ("CUDA error: out of memory", read_generic),
    ("CUDA error:out of memory", read_generic),
    ("Cuda Error: out of memory", read_generic),
    ("HIP error: out of memory", read_generic),
    ("hipErrorOutOfMemory", read_generic),
    ("cudaMalloc failed: out of memory", read_generic),
    ("Out of GPU memory", read_generic),
    ("ErrorOutOfMemory", read_generic),
];

fn read_device_alloc(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 256);
    let requested_bytes = c.attempt(|c| {
        c.token(b"(")?;
        c.lit(" (").then_some(())?;
        let n = c.uint()?;
        c.lit(" bytes) from device: CUDA_ERROR_OUT_OF_MEMORY")
            .then_some(n)
    })?;
    c.lit_loose(": out of memory");
    Some(Found {
        start: at,
        end: c.pos,
        raised_as: None,
        detail: Detail::StreamExecutorAlloc {
            requested_bytes,
            memory: MemoryKind::Device,
        },
    })
}

fn read_alloc(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 256);
    let requested_bytes = c.uint()?;
    let memory = if c.lit(" bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY") {
        MemoryKind::Unified
    } else if c.lit(" bytes on host: CUDA_ERROR_OUT_OF_MEMORY") {
        MemoryKind::Host
    } else {
        return None;
    };
    c.lit_loose(": out of memory");
    Some(Found {
        start: at,
        end: c.pos,
        raised_as: None,
        detail: Detail::StreamExecutorAlloc {
            requested_bytes,
            memory,
        },
    })
}

fn read_context(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end - 2, anchor_end + 256);
    let call = c.token(b":")?.to_string();
    c.lit_loose(": CUDA_ERROR_OUT_OF_MEMORY").then_some(())?;
    // Newer releases' `ToString(res)` appends the error string: "…: out of memory".
    c.lit_loose(": out of memory");
    let device_total_bytes = c.attempt(|c| {
        c.lit_loose("; total memory reported: ").then_some(())?;
        c.uint()
    });
    // "failed initializing StreamExecutor for CUDA device ordinal N: Internal: " before it.
    let before = &text[back_from(text, at)..at];
    let lead = before.rfind("failed initializing StreamExecutor for CUDA device ordinal ");
    let (start, device_index) = match lead {
        Some(i) => {
            let mut k = Cursor::new(before, i, before.len());
            k.lit("failed initializing StreamExecutor for CUDA device ordinal ");
            let n = k.uint().and_then(|n| u32::try_from(n).ok());
            (at - before.len() + i, n)
        }
        None => (at, None),
    };
    Some(Found {
        start,
        end: c.pos,
        raised_as: None,
        detail: Detail::StreamExecutorContext {
            call,
            device_index,
            device_total_bytes,
        },
    })
}

fn read_generic(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 32);
    if text[at..anchor_end].starts_with("CUDA_ERROR_OUT_OF_MEMORY") {
        c.lit_loose(": out of memory");
    }
    let error = text[at..c.pos].to_string();
    Some(Found {
        start: at,
        end: c.pos,
        raised_as: raised_as(text, at),
        detail: Detail::CudaDriver {
            error,
            context_creation: context_call(text, at, c.pos),
        },
    })
}
