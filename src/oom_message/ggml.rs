//! ggml's messages (llama.cpp, ollama, koboldcpp, jan), read as
//! `ggml/src/ggml-cuda/ggml-cuda.cu` writes them (ggml-org/llama.cpp commit 00108827):
//!
//! - `ggml_backend_cuda_buffer_type_alloc_buffer`: `"%s: allocating %.2f MiB on device %d:
//!   cudaMalloc failed: %s\n"` with `size / 1024.0 / 1024.0`, then from `ggml-alloc.c` the
//!   caller's `"%s: failed to allocate %s buffer of size %zu\n"` with the exact bytes;
//! - `ggml_cuda_error`: `GGML_CUDA_NAME " error: %s\n"`, `"  current device: %d, in function
//!   %s at %s:%d\n"`, `"  %s\n"` (the failing statement); before 2024
//!   `"CUDA error %d at %s:%d: %s\n"` and `"current device: %d\n"`.

use super::Detail;
use super::cursor::Cursor;
use super::scan::{Found, Reader, back_from, context_call, raised_as};

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    (": cudaMalloc failed: out of memory", read_alloc),
    (" error: out of memory", read_error),
    (" at ggml", read_old_error),
    ("ggml-cuda.cu:", read_old_error),
];

/// "… allocating X MiB on device N: cudaMalloc failed: out of memory".
fn read_alloc(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    const LEAD: &str = "allocating ";
    let before = &text[back_from(text, at)..at];
    let lead_at = before.rfind(LEAD)?;
    let mut c = Cursor::new(before, lead_at + LEAD.len(), before.len());
    let requested = c.ggml_mib()?;
    c.lit(" on device ").then_some(())?;
    let device_index = u32::try_from(c.uint()?).ok()?;
    if c.pos != before.len() {
        return None;
    }
    // The function name before "allocating" is part of the line.
    let fn_start = before[..lead_at]
        .trim_end()
        .strip_suffix(':')
        .and_then(|b| b.rfind(' ').map(|i| i + 1).or(Some(0)))
        .unwrap_or(lead_at);
    let start = at - before.len() + fn_start;
    let mut c = Cursor::new(text, anchor_end, anchor_end + 512);
    let (buffer, buffer_bytes) = c
        .attempt(|c| {
            // The next line: "[prefix] alloc_tensor_range: failed to allocate CUDA0 buffer of size N".
            let rest = &text[c.pos..(c.pos + 256).min(text.len())];
            let lead = rest.find("failed to allocate ")?;
            c.pos += lead + "failed to allocate ".len();
            let name = c.token(b"")?.to_string();
            c.lit(" buffer of size ").then_some(())?;
            let n = c.uint()?;
            Some((Some(name), Some(n)))
        })
        .unwrap_or((None, None));
    Some(Found {
        start,
        end: c.pos,
        raised_as: None,
        detail: Detail::GgmlCudaAlloc {
            requested,
            device_index,
            buffer,
            buffer_bytes,
        },
    })
}

/// "CUDA error: out of memory current device: N, in function F at FILE:LINE STMT".
fn read_error(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let before = &text[back_from(text, at)..at];
    let backend = ["CUDA", "ROCm", "MUSA"]
        .into_iter()
        .find(|b| before.ends_with(b))?;
    let start = at - backend.len();
    let mut c = Cursor::new(text, anchor_end, anchor_end + 1024);
    let (device_index, function) = c.attempt(|c| {
        c.lit(" current device: ").then_some(())?;
        let device = u32::try_from(c.uint()?).ok()?;
        let function = c.attempt(|c| {
            c.lit(", in function ").then_some(())?;
            let f = c.token(b"")?.to_string();
            c.lit(" at ").then_some(())?;
            c.token(b"")?;
            Some(f)
        });
        Some((Some(device), function))
    })?;
    let call = c.attempt(|c| {
        c.skip_ws();
        let open = text[c.pos..].find('(')?;
        let close = text[c.pos..].find(')')?;
        (open < 64 && close > open && close < 400).then(|| {
            let s = &text[c.pos..c.pos + close + 1];
            c.pos += close + 1;
            s.to_string()
        })
    });
    let context_creation = call
        .as_deref()
        .filter(|s| s.starts_with("cudaSetDevice") || s.starts_with("cuDevicePrimaryCtxRetain"))
        .map(|s| s.split('(').next().unwrap_or(s).to_string())
        .or_else(|| context_call(text, start, c.pos));
    Some(Found {
        start,
        end: c.pos,
        raised_as: raised_as(text, start),
        detail: Detail::GgmlCudaError {
            backend: backend.to_string(),
            error_code: None,
            device_index,
            function,
            call,
            context_creation,
        },
    })
}

/// Before 2024: "CUDA error 2 at FILE:LINE: out of memory" and "current device: N".
fn read_old_error(text: &str, at: usize, _anchor_end: usize) -> Option<Found> {
    // Anchored on the file name; the message starts at "CUDA error N at ".
    let before = &text[back_from(text, at)..at];
    let lead_at = before.rfind(" error ")?;
    let backend_start = before[..lead_at]
        .rfind(|c: char| !c.is_ascii_alphabetic())
        .map_or(0, |i| i + 1);
    let backend = &before[backend_start..lead_at];
    if !matches!(backend, "CUDA" | "ROCm") {
        return None;
    }
    let start = at - before.len() + backend_start;
    let mut c = Cursor::new(text, start + backend.len(), start + 1024);
    c.lit(" error ").then_some(())?;
    let error_code = c.int()?;
    c.lit(" at ").then_some(())?;
    let file = c.until_on_line(b':')?;
    if !file.contains("ggml") {
        return None;
    }
    c.lit_loose(":").then_some(())?;
    c.uint()?;
    c.lit(": out of memory").then_some(())?;
    let device_index = c.attempt(|c| {
        c.lit(" current device: ").then_some(())?;
        u32::try_from(c.uint()?).ok()
    });
    let context_creation = context_call(text, start, c.pos);
    Some(Found {
        start,
        end: c.pos,
        raised_as: raised_as(text, start),
        detail: Detail::GgmlCudaError {
            backend: backend.to_string(),
            error_code: Some(error_code),
            device_index,
            function: None,
            call: None,
            context_creation,
        },
    })
}
