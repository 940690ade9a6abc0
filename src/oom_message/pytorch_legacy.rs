//! PyTorch's older messages: the parenthesis form of 1.0–2.0 (and of torch_npu today), and
//! THC's `cuda runtime error` of 0.4 and before.
//!
//! - `c10/cuda/CUDACachingAllocator.cpp` before 2.1: `"CUDA out of memory. Tried to
//!   allocate " + format_size(alloc_size) + " (GPU " + device + "; " + format_size(total) +
//!   " total capacity; " + format_size(allocated) + " already allocated; " +
//!   format_size(free) + " free; " [+ format_size(allowed) + " allowed; "] +
//!   format_size(reserved) + " reserved in total by PyTorch)"`. The releases before the
//!   memory-statistics rewrite (1.4) printed `format_size(stats.amount_cached -
//!   stats.amount_allocated) + " cached)"` instead: what the allocator held *beyond* the
//!   allocated bytes, not its total (a "cached" figure smaller than "already allocated" is
//!   normal there). torch_npu adds "X current active; " after the allocated figure and says
//!   "NPU".
//! - `aten/src/THC/THCGeneral.cpp` (`__THCudaCheck`): `"THCudaCheck FAIL file=%s line=%i
//!   error=%i : %s"` on stderr, then `THError("cuda runtime error (%d) : %s at %s:%d")`.

use super::cursor::Cursor;
use super::scan::{Found, Reader, context_call, raised_as};
use super::{Detail, Quantity};

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    ("cuda runtime error", read_thc),
    ("THCudaCheck FAIL file=", read_thc_check),
];

/// The parenthesis after "Tried to allocate X"; `None` unless it opens with "(GPU N;".
pub(super) fn read(
    c: &mut Cursor,
    device_kind: &Option<String>,
    requested: &Quantity,
) -> Option<Detail> {
    c.lit(" (").then_some(())?;
    c.skip_ws();
    let device_word = c.token(b"0123456789;")?;
    if !matches!(device_word, "GPU" | "NPU" | "XPU" | "Device") {
        return None;
    }
    c.skip_ws();
    let device_index = u32::try_from(c.uint()?).ok()?;
    c.lit_loose(";").then_some(())?;
    let field = |c: &mut Cursor, label: &str| {
        c.attempt(|c| {
            c.skip_ws();
            let q = c.torch_size()?;
            c.lit(label).then_some(q)
        })
    };
    let device_total = field(c, " total capacity;");
    let allocated = device_total
        .as_ref()
        .and_then(|_| field(c, " already allocated;"));
    let active = allocated
        .as_ref()
        .and_then(|_| field(c, " current active;"));
    let device_free = allocated.as_ref().and_then(|_| field(c, " free;"));
    let allowed = device_free.as_ref().and_then(|_| field(c, " allowed;"));
    let mut reserved = None;
    let mut cached = None;
    if device_free.is_some() {
        c.attempt(|c| {
            c.skip_ws();
            let q = c.torch_size()?;
            if c.lit(" reserved in total by PyTorch") {
                reserved = Some(q);
            } else if c.lit(" cached") {
                cached = Some(q);
                // A development build printed "X cached; X inactive".
                c.attempt(|c| {
                    c.lit_loose(";").then_some(())?;
                    c.skip_ws();
                    c.torch_size()?;
                    c.lit(" inactive").then_some(())
                });
            } else {
                return None;
            }
            Some(())
        });
    }
    let whole = reserved.is_some() || cached.is_some();
    if whole {
        c.lit_loose(")");
        c.lit_loose(".");
        c.attempt(|c| {
            c.lit(" If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
                .then_some(())?;
            c.attempt(|c| {
                c.lit(" See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
                    .then_some(())
            });
            Some(())
        });
    }
    Some(Detail::PytorchCachingLegacy {
        device_kind: device_kind.clone(),
        requested: requested.clone(),
        device_index: Some(device_index),
        device_total,
        allocated,
        active,
        device_free,
        allowed,
        reserved,
        cached,
        truncated: !whole,
    })
}

/// "cuda runtime error (2) : out of memory at FILE:LINE" (also unspaced, as users retype it).
fn read_thc(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 1024);
    c.skip_ws();
    c.lit_loose("(").then_some(())?;
    let error_code = c.int()?;
    c.lit_loose(")").then_some(())?;
    c.skip_ws();
    c.lit_loose(":").then_some(())?;
    c.skip_ws();
    c.lit("out of memory").then_some(())?;
    let location = c.attempt(|c| {
        c.lit(" at ").then_some(())?;
        let t = c.token(b"`'\"")?;
        Some(t.trim_end_matches(['.', ',']).to_string())
    });
    Some(Found {
        start: at,
        end: c.pos,
        raised_as: raised_as(text, at),
        detail: Detail::ThcRuntimeError {
            error_code,
            location: location.clone(),
            context_creation: context_call(text, at, c.pos).or_else(|| thc_init(location)),
        },
    })
}

/// "THCudaCheck FAIL file=F line=L error=2 : out of memory".
fn read_thc_check(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 1024);
    let file = c.token(b"")?;
    c.lit(" line=").then_some(())?;
    let line = c.uint()?;
    c.lit(" error=").then_some(())?;
    let error_code = c.int()?;
    c.lit(" : out of memory").then_some(())?;
    let location = format!("{file}:{line}");
    Some(Found {
        start: at,
        end: c.pos,
        raised_as: None,
        detail: Detail::ThcRuntimeError {
            error_code,
            location: Some(location.clone()),
            context_creation: context_call(text, at, c.pos).or_else(|| thc_init(Some(location))),
        },
    })
}

/// THC's random-number state is created right after the context (`initializeGenerator` in
/// `THCTensorRandom.cu`): a failure there is a failure at start.
fn thc_init(location: Option<String>) -> Option<String> {
    location.filter(|l| l.contains("THCTensorRandom.cu"))
}
