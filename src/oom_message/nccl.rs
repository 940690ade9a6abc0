//! NCCL's and cuBLAS's allocation failures.
//!
//! - NCCL `src/include/alloc.h` `ncclCudaCallocDebug`: `WARN("Failed to CUDA calloc %ld bytes",
//!   …)` (`ncclCudaCallocAsync`: "Failed to CUDA calloc async %ld bytes"); `src/include/checks.h`
//!   `CUDACHECK`: `WARN("Cuda failure '%s'", cudaGetErrorString(err))` and, for driver calls,
//!   `CUCHECK`: `WARN("Cuda failure %d '%s'", err, errStr)`. `WARN` prefixes
//!   `host:pid:tid [cudaDev] NCCL WARN `. PyTorch repeats the last one in its
//!   `DistBackendError` ("Last error: Cuda failure 'out of memory'").
//! - PyTorch `aten/src/ATen/cuda/Exceptions.h` `TORCH_CUDABLAS_CHECK`: `"CUDA error: ",
//!   _cublasGetErrorEnum(status), " when calling `" #EXPR "`"`.

use super::Detail;
use super::cursor::Cursor;
use super::scan::{Found, line_start, raised_as};

const WARN: &str = "NCCL WARN ";

/// Where a message preceded by NCCL's `NCCL WARN ` starts, and the device in the line's
/// `host:pid:tid [dev] file:line NCCL WARN` prefix.
fn nccl_prefix(text: &str, at: usize) -> (usize, Option<u32>) {
    let Some(before) = text[..at].strip_suffix(WARN) else {
        return (at, None);
    };
    let line = &before[line_start(text, before.len())..];
    let device = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']')?.parse().ok());
    (before.len(), device)
}

pub(super) fn find(text: &str, out: &mut Vec<Found>) {
    const CALLOC: &str = "Failed to CUDA calloc ";
    for (at, _) in text.match_indices(CALLOC) {
        let mut c = Cursor::new(text, at + CALLOC.len(), at + CALLOC.len() + 64);
        c.lit("async ");
        let Some(requested_bytes) = c.attempt(|c| {
            let n = c.uint()?;
            c.lit(" bytes").then_some(n)
        }) else {
            continue;
        };
        let (start, device_index) = nccl_prefix(text, at);
        out.push(Found {
            start,
            end: c.pos,
            raised_as: None,
            detail: Detail::NcclCalloc {
                device_index,
                requested_bytes,
            },
        });
    }
    const FAILURE: &str = "Cuda failure ";
    for (at, _) in text.match_indices(FAILURE) {
        let mut c = Cursor::new(text, at + FAILURE.len(), at + FAILURE.len() + 64);
        let error_code = c.attempt(|c| {
            let n = c.int()?;
            c.lit(" ").then_some(n)
        });
        if !c.lit_loose("'out of memory'") {
            continue;
        }
        let (start, device_index) = nccl_prefix(text, at);
        out.push(Found {
            start,
            end: c.pos,
            raised_as: None,
            detail: Detail::NcclCudaFailure {
                device_index,
                error_code,
            },
        });
    }
    const CUBLAS: &str = "CUBLAS_STATUS_ALLOC_FAILED";
    for (at, _) in text.match_indices(CUBLAS) {
        let start = if text[line_start(text, at)..at].ends_with("CUDA error: ") {
            at - "CUDA error: ".len()
        } else {
            at
        };
        let mut c = Cursor::new(text, at + CUBLAS.len(), at + CUBLAS.len() + 512);
        let call = c.attempt(|c| {
            c.lit(" when calling `").then_some(())?;
            let call = c.until_on_line(b'`')?;
            c.lit_loose("`").then_some(call.to_string())
        });
        out.push(Found {
            start,
            end: c.pos,
            raised_as: raised_as(text, start),
            detail: Detail::CublasAllocFailed { call },
        });
    }
}
