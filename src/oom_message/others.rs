//! PaddlePaddle's, CuPy's, PyTorch MPS's and ONNX Runtime's out-of-memory messages.
//!
//! - PaddlePaddle `paddle/phi/core/memory/allocation/cuda_allocator.cc` (commit 4fd9ccec; before
//!   that `paddle/fluid/memory/allocation/cuda_allocator.cc`): `"Out of memory error on GPU %d.
//!   Cannot allocate %s memory on GPU %d, %s memory has been allocated and available memory is
//!   only %s."` with `string::HumanReadableSize` (`%f` and `B`/`kB`/`MB`/`GB`/`TB`, 1024-based)
//!   of the request, of `total − available` and of `available`; releases of 2020 printed no
//!   allocated figure, those of 2019 "Cannot allocate X GPU memory, available memory is X".
//! - CuPy `cupy/cuda/memory.pyx` (`OutOfMemoryError`, commit 6b6d9563): `'Out of memory
//!   allocating {:,} bytes (allocated so far: {:,} bytes[, limit set to: {:,} bytes]).'`;
//!   before v6 (commit f9d79632) `'out of memory to allocate %d bytes (total %d bytes)'`.
//! - PyTorch `aten/src/ATen/mps/MPSAllocator.mm` (`alloc_buffer_block`, commit 02011e0d):
//!   `"MPS backend out of memory (MPS allocated: " + format_size(total allocated) + ", other
//!   allocations: " + format_size(device allocated − ours) + ", max allowed: " +
//!   format_size(high watermark) + "). Tried to allocate " + format_size(size) + " on " +
//!   private|shared + " pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 …"`, without "max
//!   allowed" when the watermark is off.
//! - ONNX Runtime `onnxruntime/core/framework/bfc_arena.cc` (commit 009aae13): `"Failed to
//!   allocate memory for requested buffer of size " << rounded_bytes`.
//! - Vulkan's `vkAllocateMemory` (the Vulkan specification, `VkResult`): it fails with
//!   `VK_ERROR_OUT_OF_DEVICE_MEMORY` (-2) or `VK_ERROR_OUT_OF_HOST_MEMORY` (-1) — besides two
//!   codes for imported handles and capture addresses — and applications print the call's
//!   name with the result's number or name (ncnn's and Vulkan tools' "vkAllocateMemory failed
//!   -2").

use super::cursor::Cursor;
use super::scan::{Found, Reader, back_from, raised_as};
use super::{Detail, Figure, Label, MemorySpace, Quantity};

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    ("Out of memory error on GPU ", read_paddle),
    (
        "enforce allocating <= available failed, ",
        read_paddle_enforce,
    ),
    ("Out of memory allocating ", read_cupy),
    ("out of memory to allocate ", read_cupy_old),
    ("MPS backend out of memory (", read_mps),
    (
        "Failed to allocate memory for requested buffer of size ",
        read_onnxruntime,
    ),
    ("vkAllocateMemory", read_vulkan),
];

fn found(text: &str, start: usize, end: usize, detail: Detail) -> Option<Found> {
    Some(Found {
        start,
        end,
        raised_as: raised_as(text, start),
        detail,
    })
}

/// PaddlePaddle 0.11–1.x `GpuMaxChunkSize` (`paddle/fluid/platform/gpu_info.cc`): the chunk its
/// buddy allocator reserves, `allocating = FLAGS_fraction_of_gpu_memory_to_use × (total −
/// reserving)`, must fit in what is free, `PADDLE_ENFORCE_LE(allocating, available)`, whose
/// failure `enforce.h` prints as `"enforce allocating <= available failed, A > B"` with both
/// byte counts (later releases add "Insufficient GPU memory to allocation.").
fn read_paddle_enforce(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 64);
    let requested_at = c.pos;
    let requested = c.uint()?;
    let requested_end = c.pos;
    c.lit(" > ").then_some(())?;
    let free_at = c.pos;
    let free = c.uint()?;
    let figure = |label, at: usize, end: usize, n: u64| Figure {
        label: Some(label),
        quantity: Quantity::exact(&text[at..end], n),
        at,
        end,
        owner: super::figures::Owner::Unsaid,
    };
    let figures = vec![
        figure(Label::Requested, requested_at, requested_end, requested),
        figure(Label::Free, free_at, c.pos, free),
    ];
    found(
        text,
        at,
        c.pos,
        Detail::Generic {
            wording: text[at..anchor_end]
                .trim_end_matches([',', ' '])
                .to_string(),
            runtime: Some("PaddlePaddle".into()),
            memory: MemorySpace::Device,
            figures,
        },
    )
}

fn read_paddle(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 4096);
    let device_index = u32::try_from(c.uint()?).ok()?;
    c.lit_loose(".").then_some(())?;
    c.lit(" Cannot allocate ").then_some(())?;
    let requested = c.paddle_size()?;
    let (allocated, device_free) = c
        .attempt(|c| {
            c.lit(" memory on GPU ").then_some(())?;
            c.uint()?;
            let allocated = c.attempt(|c| {
                c.lit_loose(", ").then_some(())?;
                let q = c.paddle_size()?;
                c.lit(" memory has been allocated and").then_some(q)
            });
            if allocated.is_none() {
                c.lit_loose(",").then_some(())?;
            }
            c.lit(" available memory is only ").then_some(())?;
            let free = c.paddle_size()?;
            Some((allocated, free))
        })
        .or_else(|| {
            // 2019: "Cannot allocate X GPU memory, available memory is X."
            c.attempt(|c| {
                c.lit(" GPU memory, available memory is ").then_some(())?;
                Some((None, c.paddle_size()?))
            })
        })?;
    c.lit_loose(".");
    // The advice that follows, up to "(at FILE:LINE)", belongs to the message.
    let tail = &text[c.pos..super::cursor::floor_boundary(text, c.pos + 1200)];
    let memory_limit_mb = tail.find("`FLAGS_gpu_memory_limit_mb` is ").and_then(|i| {
        let mut k = Cursor::new(
            tail,
            i + "`FLAGS_gpu_memory_limit_mb` is ".len(),
            tail.len(),
        );
        k.uint()
    });
    let next = tail
        .find("Out of memory error on GPU")
        .unwrap_or(tail.len());
    if let Some(i) = tail[..next].find("(at ")
        && let Some(j) = tail[i..next].find(')')
    {
        c.pos += i + j + 1;
    }
    let start = at;
    found(
        text,
        start,
        c.pos,
        Detail::PaddleOutOfMemory {
            device_index,
            requested,
            allocated,
            device_free,
            memory_limit_mb,
        },
    )
}

/// A decimal count with thousands separators, as Python's `{:,}` prints it.
fn grouped_uint(c: &mut Cursor) -> Option<u64> {
    c.attempt(|c| {
        let digits = c.take_while(|b| b.is_ascii_digit() || b == b',');
        let plain: String = digits.chars().filter(|&ch| ch != ',').collect();
        if plain.is_empty() || plain.len() > 19 {
            return None;
        }
        plain.parse().ok()
    })
}

fn read_cupy(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 512);
    let requested_bytes = grouped_uint(&mut c)?;
    c.lit(" bytes").then_some(())?;
    let (allocated_bytes, limit_bytes) = c
        .attempt(|c| {
            c.lit(" (allocated so far: ").then_some(())?;
            let allocated = grouped_uint(c)?;
            c.lit(" bytes").then_some(())?;
            let limit = c.attempt(|c| {
                c.lit_loose(", limit set to: ").then_some(())?;
                let n = grouped_uint(c)?;
                c.lit(" bytes").then_some(n)
            });
            c.lit_loose(")").then_some((Some(allocated), limit))
        })
        .unwrap_or((None, None));
    c.lit_loose(".");
    found(
        text,
        at,
        c.pos,
        Detail::CupyOutOfMemory {
            requested_bytes,
            allocated_bytes,
            limit_bytes,
        },
    )
}

fn read_cupy_old(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 256);
    let requested_bytes = c.uint()?;
    c.lit(" bytes").then_some(())?;
    let allocated_bytes = c.attempt(|c| {
        c.lit(" (total ").then_some(())?;
        let n = c.uint()?;
        c.lit(" bytes)").then_some(n)
    });
    found(
        text,
        at,
        c.pos,
        Detail::CupyOutOfMemory {
            requested_bytes,
            allocated_bytes,
            limit_bytes: None,
        },
    )
}

fn read_mps(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 1024);
    c.lit("MPS allocated: ").then_some(())?;
    let allocated = c.mps_size()?;
    c.lit_loose(", other allocations: ").then_some(())?;
    let other_allocations = c.mps_size()?;
    let max_allowed = c.attempt(|c| {
        c.lit_loose(", max allowed: ").then_some(())?;
        c.mps_size()
    });
    c.lit_loose("). Tried to allocate ").then_some(())?;
    let requested = c.mps_size()?;
    c.lit(" on ").then_some(())?;
    let pool = c.token(b"")?.to_string();
    if !matches!(pool.as_str(), "private" | "shared") {
        return None;
    }
    c.lit(" pool").then_some(())?;
    c.lit_loose(".");
    c.lit(" Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure)");
    c.lit_loose(".");
    found(
        text,
        at,
        c.pos,
        Detail::PytorchMps {
            allocated,
            other_allocations,
            max_allowed,
            requested,
            pool,
        },
    )
}

fn read_onnxruntime(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 64);
    let requested_bytes = c.uint()?;
    // The arena's function name is printed right before the sentence.
    let before = &text[back_from(text, at)..at];
    let start = before
        .rfind("BFCArena::")
        .and_then(|i| before[..i].rfind(' ').map(|j| j + 1))
        .map_or(at, |i| at - before.len() + i);
    Some(Found {
        start,
        end: c.pos,
        raised_as: None,
        detail: Detail::OnnxruntimeBfcArena { requested_bytes },
    })
}

/// `vkAllocateMemory` with, on its line, the result it failed with: -2 or
/// `…OUT_OF_DEVICE_MEMORY` the GPU's memory, -1 or `…OUT_OF_HOST_MEMORY` the host's; or a word
/// within one letter of "failed" ("faied", "faild") with no result, the GPU's. A line that
/// names the call and no failure (a trace of calls) is not a message.
fn read_vulkan(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let line_end = text[anchor_end..]
        .find('\n')
        .map_or(text.len(), |i| anchor_end + i)
        .min(super::cursor::floor_boundary(text, anchor_end + 160));
    let rest = &text[anchor_end..line_end];
    let lower = rest.to_ascii_lowercase();
    let number = |n: &str| {
        lower.match_indices(n).any(|(i, _)| {
            let before = lower[..i].chars().next_back();
            let after = lower[i + n.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
                && !after.is_some_and(|c| c.is_ascii_alphanumeric())
        })
    };
    let failed = lower
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|w| super::figures::near(w, "failed") || w == "failure" || w == "fail");
    let memory = if lower.contains("out_of_host_memory")
        || lower.contains("outofhostmemory")
        || number("-1")
    {
        MemorySpace::HostRam
    } else if lower.contains("out_of_device_memory")
        || lower.contains("outofdevicememory")
        || number("-2")
        || failed
    {
        MemorySpace::Device
    } else {
        return None;
    };
    let end = at + text[at..line_end].trim_end().len();
    found(
        text,
        at,
        end,
        Detail::Generic {
            wording: text[at..end].to_string(),
            runtime: Some("Vulkan".to_string()),
            memory,
            figures: super::figures::read(&text[at..end])
                .into_iter()
                .map(|mut f| {
                    f.at += at;
                    f.end += at;
                    f
                })
                .collect(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory_of(text: &str) -> Option<MemorySpace> {
        let found = crate::oom_message::find_all(text);
        assert!(found.len() <= 1, "{found:?}");
        found.first().map(|m| match &m.detail {
            Detail::Generic { memory, .. } => *memory,
            d => panic!("{d:?}"),
        })
    }

    #[test]
    fn vulkan_allocations_by_their_result() {
        for (text, space) in [
            ("vkAllocateMemory Faied -2", MemorySpace::Device),
            ("vkAllocateMemory failed -2", MemorySpace::Device),
            (
                "[0 NVIDIA GeForce RTX 3060] vkAllocateMemory failed -1",
                MemorySpace::HostRam,
            ),
            (
                "vkAllocateMemory returned VK_ERROR_OUT_OF_DEVICE_MEMORY",
                MemorySpace::Device,
            ),
            ("vkAllocateMemory: failure", MemorySpace::Device),
        ] {
            assert_eq!(memory_of(text), Some(space), "{text}");
        }
        // A trace of calls, a result that is not a failure, a number inside another.
        for text in [
            "vkAllocateMemory(device, &info, nullptr, &mem)",
            "vkAllocateMemory returned 0 in 12 ms",
            "vkAllocateMemory size=-24 offset 0",
        ] {
            assert_eq!(memory_of(text), None, "{text}");
        }
    }
}
