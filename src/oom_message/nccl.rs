//! NCCL's and cuBLAS's allocation failures.
//!
//! - NCCL `src/include/alloc.h` `ncclCudaCallocDebug`: `WARN("Failed to CUDA calloc %ld bytes",
//!   …)` (`ncclCudaCallocAsync`: "Failed to CUDA calloc async %ld bytes"); `src/include/checks.h`
//!   `CUDACHECK`: `WARN("Cuda failure '%s'", cudaGetErrorString(err))` and, for driver calls,
//!   `CUCHECK`: `WARN("Cuda failure %d '%s'", err, errStr)`. `WARN` prefixes
//!   `host:pid:tid [cudaDev] NCCL WARN `. PyTorch repeats the last one in its
//!   `DistBackendError` ("Last error: Cuda failure 'out of memory'").
//! - PyTorch `aten/src/ATen/cuda/Exceptions.h` `TORCH_CUDABLAS_CHECK`: `"CUDA error: ",
//!   _cublasGetErrorEnum(status), " when calling `" #EXPR "`"`; TensorFlow's `cuda_blas.cc`:
//!   "failed to create cublas handle: CUBLAS_STATUS_ALLOC_FAILED"; CNTK's `CUBLAS_CALL`:
//!   "CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED ; GPU=0 ; …".

use super::Detail;
use super::cursor::Cursor;
use super::scan::{Found, Reader, back_from, raised_as};

const WARN: &str = "NCCL WARN ";

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    ("Failed to CUDA calloc ", read_calloc),
    ("Cuda failure ", read_failure),
    ("CUBLAS_STATUS_ALLOC_FAILED", read_cublas),
];

/// Where a message preceded by NCCL's `NCCL WARN ` starts, and the device in the line's
/// `host:pid:tid [dev] file:line NCCL WARN` prefix (the three words before).
fn nccl_prefix(text: &str, at: usize) -> (usize, Option<u32>) {
    let Some(before) = text[..at].strip_suffix(WARN) else {
        return (at, None);
    };
    let line = &before[back_from(text, before.len())..];
    let device = line
        .split_whitespace()
        .rev()
        .take(3)
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']')?.parse().ok());
    (before.len(), device)
}

fn read_calloc(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 64);
    c.lit("async ");
    let requested_bytes = c.attempt(|c| {
        let n = c.uint()?;
        c.lit(" bytes").then_some(n)
    })?;
    let (start, device_index) = nccl_prefix(text, at);
    Some(Found {
        start,
        end: c.pos,
        raised_as: None,
        detail: Detail::NcclCalloc {
            device_index,
            requested_bytes,
        },
    })
}

fn read_failure(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 64);
    let error_code = c.attempt(|c| {
        let n = c.int()?;
        c.lit(" ").then_some(n)
    });
    c.lit_loose("'out of memory'").then_some(())?;
    let (start, device_index) = nccl_prefix(text, at);
    Some(Found {
        start,
        end: c.pos,
        raised_as: None,
        detail: Detail::NcclCudaFailure {
            device_index,
            error_code,
        },
    })
}

fn read_cublas(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let before = &text[back_from(text, at)..at];
    let lead = ["CUDA error: ", "failed to create cublas handle: "]
        .into_iter()
        .find(|l| before.ends_with(l))
        .map(str::len)
        .or_else(|| {
            // CNTK: "CUBLAS failure 3: ".
            let i = before.rfind("CUBLAS failure ")?;
            before[i..].ends_with(": ").then(|| before.len() - i)
        })
        .unwrap_or(0);
    let start = at - lead;
    let mut c = Cursor::new(text, anchor_end, anchor_end + 512);
    let call = c.attempt(|c| {
        c.lit(" when calling `").then_some(())?;
        let call = c.until_on_line(b'`')?;
        c.lit_loose("`").then_some(call.to_string())
    });
    let device_index = c.attempt(|c| {
        c.lit_loose(" ; GPU=").then_some(())?;
        let n = u32::try_from(c.uint()?).ok()?;
        c.lit_loose(" ;");
        Some(n)
    });
    Some(Found {
        start,
        end: c.pos,
        raised_as: raised_as(text, start),
        detail: Detail::CublasAllocFailed { call, device_index },
    })
}
