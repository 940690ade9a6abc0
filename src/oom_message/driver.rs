//! The CUDA driver's and runtime's own out-of-memory errors, and StreamExecutor's log line.
//!
//! - Driver API: `CUDA_ERROR_OUT_OF_MEMORY` (2), `cuGetErrorString`: "out of memory".
//! - Runtime API: `cudaErrorMemoryAllocation` (2), `cudaGetErrorString`: "out of memory";
//!   PyTorch's `C10_CUDA_CHECK` raises it as "CUDA error: out of memory" (HIP builds: "HIP error:
//!   out of memory", `hipErrorOutOfMemory`).
//! - TensorFlow/XLA `stream_executor/cuda/cuda_driver.cc`: "failed to allocate " <<
//!   HumanReadableNumBytes(bytes) << " (" << bytes << " bytes) from device: " << ToString(res),
//!   exact bytes in the parenthesis.

use super::Detail;
use super::cursor::Cursor;
use super::scan::{Found, raised_as};

pub(super) fn find_stream_executor(text: &str, out: &mut Vec<Found>) {
    const ANCHOR: &str = "failed to allocate ";
    for (at, _) in text.match_indices(ANCHOR) {
        let mut c = Cursor::new(text, at + ANCHOR.len(), at + ANCHOR.len() + 256);
        let Some(requested_bytes) = c.attempt(|c| {
            c.token(b"(")?;
            c.lit(" (").then_some(())?;
            let n = c.uint()?;
            c.lit(" bytes) from device: CUDA_ERROR_OUT_OF_MEMORY")
                .then_some(n)
        }) else {
            continue;
        };
        c.lit_loose(": out of memory");
        out.push(Found {
            start: at,
            end: c.pos,
            raised_as: None,
            detail: Detail::StreamExecutorAlloc { requested_bytes },
        });
    }
}

pub(super) fn find(text: &str, out: &mut Vec<Found>) {
    for anchor in [
        "CUDA_ERROR_OUT_OF_MEMORY",
        "cudaErrorMemoryAllocation",
        "CUDA error: out of memory",
        "HIP error: out of memory",
        "hipErrorOutOfMemory",
    ] {
        for (at, _) in text.match_indices(anchor) {
            let mut c = Cursor::new(text, at + anchor.len(), at + anchor.len() + 32);
            if anchor == "CUDA_ERROR_OUT_OF_MEMORY" {
                c.lit_loose(": out of memory");
            }
            out.push(Found {
                start: at,
                end: c.pos,
                raised_as: raised_as(text, at),
                detail: Detail::CudaDriver {
                    error: text[at..c.pos].to_string(),
                },
            });
        }
    }
}
