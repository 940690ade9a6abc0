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
    ("CUresult", read_status_two),
    ("cudaError_t", read_status_two),
    ("cudaError", read_status_two),
    ("CUDA error", read_status_two),
    ("CUDA Error", read_status_two),
    ("cuda error", read_status_two),
    ("CUDA failure", read_status_two),
    ("hipError_t", read_status_two),
    ("HIP error", read_status_two),
    ("cudaMalloc", read_call_status_two),
    ("cudaMallocAsync", read_call_status_two),
    ("cuMemAlloc", read_call_status_two),
    ("cuMemCreate", read_call_status_two),
    ("hipMalloc", read_call_status_two),
];

/// The same status after the allocation call that returned it ("cudaMalloc failed with error
/// 2", "cuMemCreate returned 2"): a status word must stand between, so "cudaMalloc 2 GiB" is
/// not one.
fn read_call_status_two(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let words = text[anchor_end..super::cursor::floor_boundary(text, anchor_end + 40)]
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|w| !w.is_empty())
        .map(str::to_ascii_lowercase);
    let said = words.is_some_and(|w| {
        matches!(
            w.as_str(),
            "failed" | "returned" | "error" | "status" | "code" | "result" | "err" | "ret"
        )
    });
    if !said {
        return None;
    }
    read_status_two(text, at, anchor_end)
}

/// Words that may stand between a CUDA status's type and its number ("CUresult error
/// result=2", "cudaError_t code = 2", "CUDA error (2)", "CUDA failure: status 2").
const STATUS_WORDS: &[&str] = &[
    "error", "result", "code", "status", "returned", "return", "ret", "err", "value", "is", "was",
    "failed", "with", "t",
];

/// A CUDA status given by its type and its number only: 2 is out of memory in the driver API
/// (`CUDA_ERROR_OUT_OF_MEMORY`), the runtime API (`cudaErrorMemoryAllocation`) and HIP
/// (`hipErrorOutOfMemory`), so "CUresult error result=2" says what "CUDA_ERROR_OUT_OF_MEMORY"
/// does. Only the number 2 right after the type and a few words of no weight counts (not 20,
/// 2.5, "line 2", nor another library's status 2: NCCL's and cuDNN's number other errors).
fn read_status_two(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let b = text.as_bytes();
    // The type as a word: not inside a longer name ("cudaErrorMemoryAllocation" is read as
    // itself).
    if b.get(anchor_end).is_some_and(|c| c.is_ascii_alphabetic())
        || (at > 0 && b[at - 1].is_ascii_alphanumeric())
    {
        return None;
    }
    let mut i = anchor_end;
    let mut words = 0;
    loop {
        while i < b.len() && matches!(b[i], b' ' | b'=' | b':' | b'(' | b'#' | b'_') {
            i += 1;
        }
        let word_end = i + b[i.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic())
            .count();
        if word_end == i {
            break;
        }
        let word = text[i..word_end].to_ascii_lowercase();
        if words >= 3 || !STATUS_WORDS.contains(&word.as_str()) {
            return None;
        }
        words += 1;
        i = word_end;
    }
    if i - anchor_end > 32 || b.get(i) != Some(&b'2') {
        return None;
    }
    let end = i + 1;
    if b.get(end).is_some_and(|c| {
        c.is_ascii_alphanumeric() || *c == b'.' && b.get(end + 1).is_some_and(u8::is_ascii_digit)
    }) {
        return None;
    }
    // "2 GiB", "2 bytes", "2 GPUs": a count or a size, not a status.
    let next_word = text[end..super::cursor::floor_boundary(text, end + 12)]
        .trim_start_matches(' ')
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("");
    if !next_word.is_empty()
        && !matches!(
            next_word.to_ascii_lowercase().as_str(),
            "at" | "in" | "file" | "from" | "on" | "when" | "while" | "out" | "returned" | "func"
        )
    {
        return None;
    }
    let end = if b.get(end) == Some(&b')') {
        end + 1
    } else {
        end
    };
    Some(Found {
        start: at,
        end,
        raised_as: raised_as(text, at),
        detail: Detail::CudaDriver {
            error: text[at..end].to_string(),
            context_creation: context_call(text, at, end),
        },
    })
}

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

#[cfg(test)]
mod tests {
    use super::super::{Detail, find_all};

    fn error(text: &str) -> Option<String> {
        let found = find_all(text);
        assert!(found.len() <= 1, "{found:?}");
        found.into_iter().next().map(|m| match m.detail {
            Detail::CudaDriver { error, .. } => error,
            d => panic!("{d:?}"),
        })
    }

    #[test]
    fn a_cuda_status_given_as_the_number_two_is_out_of_memory() {
        for (text, want) in [
            (
                "[saver.cpp] CUresult error  result=2 file=csrc/saver.cpp func=cu_mem_create line=103",
                // The message's text is the input's; the error as read, folded.
                "CUresult error result=2",
            ),
            (
                "CHECK failed: cudaError_t code = 2 at alloc.cu:88",
                "cudaError_t code = 2",
            ),
            ("fatal: CUDA error (2) in kernel launch", "CUDA error (2)"),
            ("E: hipError_t 2 returned by hipMalloc", "hipError_t 2"),
            ("CUDA Error: status 2", "CUDA Error: status 2"),
            (
                "E alloc.cc:12] cudaMalloc failed with error 2 at alloc.cc:12",
                "cudaMalloc failed with error 2",
            ),
            (
                "cuMemCreate returned 2 while mapping",
                "cuMemCreate returned 2",
            ),
        ] {
            assert_eq!(error(text).as_deref(), Some(want), "{text}");
        }
        // Another number, a version, a line, another library's status 2, or words between
        // that are not a status's: nothing.
        for text in [
            "CUresult error result=20 file=a.cpp",
            "CUDA error 209: no kernel image is available",
            "CUDA error: invalid argument (2 GPUs visible)",
            "cudaError_t at line 2 of main.cu",
            "NCCL error 2: unhandled system error",
            "cuDNN error 2 in conv",
            "CUDA error 2.5 seconds into the run",
            "cudaErrorInvalidValue 2",
            "CUDA error: 2 GPUs visible",
            "cudaMalloc 2 GiB for the cache",
            "cuMemAlloc failed: 2 bytes short",
            "cudaMalloc(&p, 2) returned 0",
        ] {
            assert_eq!(error(text), None, "{text}");
        }
    }
}
