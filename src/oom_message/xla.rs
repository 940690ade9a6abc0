//! XLA's messages (JAX, TensorFlow with XLA): `RESOURCE_EXHAUSTED` with the buffer assignment
//! statistics that may follow it, and the device allocator's "Failed to allocate request".
//!
//! - `xla/stream_executor/integrations/tf_allocator_adapter.cc` `MemoryAllocationError`
//!   (openxla/xla commit 370cfa8d): `ResourceExhaustedError(StrCat("Out of ", host ? "host " :
//!   "", "memory while trying to allocate ", size, " bytes."))`. JAX raises it as
//!   `XlaRuntimeError: RESOURCE_EXHAUSTED: …` (`Resource exhausted: …` before absl status);
//!   some paths print the size with `HumanReadableNumBytes` (`16.00GiB`) instead.
//! - `xla/service/buffer_assignment.cc` `BufferAssignment::StatsString`, printed after
//!   "BufferAssignment OOM Debugging.": one `HumanReadableNumBytes` per kind of allocation
//!   (`parameter`, `constant`, `maybe_live_out`, `preallocated temp`, `total`) and the
//!   fragmentation figures with their percentage.
//! - `xla/stream_executor/device_memory_allocator.cc` `StreamExecutorMemoryAllocator::Allocate`:
//!   `"Failed to allocate request for %s (%uB) on device ordinal %d"` with
//!   `HumanReadableNumBytes(size)` and the exact size.
//! - `xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc` `AllocateRaw` (openxla/xla,
//!   2024; TensorFlow's `core/common_runtime/gpu/gpu_cudamallocasync_allocator.cc` before):
//!   `Name() << " cuMemAllocAsync failed to allocate " << num_bytes << " bytes: " << error <<
//!   "\n Reported by CUDA: Free memory/Total memory: " << free << "/" << total`, then `"Stats: "
//!   << stats.DebugString()`: `Limit:`, `InUse:`, `MaxInUse:`, `NumAllocs:` (a count),
//!   `MaxAllocSize:`, `Reserved:`, `PeakReserved:`, `LargestFreeBlock:`, one a line, exact
//!   bytes (`Limit: 0` when no limit is set).

use super::cursor::Cursor;
use super::scan::{Found, Reader, back_from, raised_as};
use super::{BufferAssignment, Detail, Quantity};

const WINDOW: usize = 4096;

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    ("memory while trying to allocate ", read_resource_exhausted),
    (DEVICE_BUFFER, read_device_buffer),
    ("Failed to allocate request for ", read_allocate_request),
    ("cuMemAllocAsync failed to allocate ", read_malloc_async),
];

/// The PJRT TPU client's refusal of a device buffer.
const DEVICE_BUFFER: &str = "Error allocating device buffer: Attempting to allocate ";

/// The TPU runtime's refusal of a device buffer (PJRT, as JAX and PyTorch/XLA raise it):
/// "Error allocating device buffer: Attempting to allocate X. That was not possible. There are
/// Y free.; (ID_HBMn)", X and Y as the runtime prints them (`129.50M`). The request and the
/// free memory are labelled; the memory space is the one the trailing identifier names (`HBM`:
/// the TPU's HBM), device memory when the text names none.
fn read_device_buffer(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    use super::MemorySpace;
    use super::figures::{Label, size_at};
    let start = status_start(text, at);
    let mut requested = size_at(text, anchor_end)?;
    requested.label = Some(Label::Requested);
    let mut c = Cursor::new(text, requested.end, anchor_end + 512);
    let mut figures = vec![requested];
    c.lit_loose(".");
    c.lit(" That was not possible.");
    let free = c.attempt(|c| {
        c.lit(" There are ").then_some(())?;
        let mut free = size_at(text, c.pos)?;
        c.pos = free.end;
        c.lit(" free").then_some(())?;
        c.lit_loose(".");
        free.label = Some(Label::Free);
        Some(free)
    });
    figures.extend(free);
    // "; (0x0x0_HBM0)": the memory space the buffer was asked of.
    let space = c.attempt(|c| {
        c.lit_loose(";");
        c.lit(" (").then_some(())?;
        let id = c.token(b")")?;
        c.lit_loose(")").then_some(id)
    });
    let memory = match space {
        Some(id) if hbm_suffix(id) => MemorySpace::TpuHbm,
        _ => MemorySpace::Device,
    };
    Some(Found {
        start,
        end: c.pos,
        raised_as: raised_as(text, start),
        detail: Detail::Generic {
            wording: "Error allocating device buffer".into(),
            runtime: Some(
                if memory == MemorySpace::TpuHbm {
                    "XLA (PJRT, TPU)"
                } else {
                    "XLA (PJRT)"
                }
                .into(),
            ),
            memory,
            figures,
        },
    })
}

/// An identifier that ends in `_HBM` and a memory's number (`0x0x0_HBM0`).
fn hbm_suffix(id: &str) -> bool {
    id.rsplit_once("_HBM")
        .is_some_and(|(_, n)| n.bytes().all(|b| b.is_ascii_digit()))
}

/// How far after the request the device figures and the `Stats:` block may be.
const ASYNC_REACH: usize = 1024;

/// The `cuda_malloc_async` allocator's refusal: the request, the driver's free and total, and
/// the allocator's statistics, as labelled figures.
fn read_malloc_async(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    use super::{Figure, Label, MemorySpace};
    let mut figures = Vec::new();
    let exact = |label, at: usize, end: usize, n: u64| Figure {
        label,
        quantity: Quantity::exact(&text[at..end], n),
        at,
        end,
        owner: super::figures::Owner::Unsaid,
    };
    let mut c = Cursor::new(text, anchor_end, anchor_end + ASYNC_REACH);
    let from = c.pos;
    let requested = c.uint()?;
    if !c.lit(" bytes") {
        return None;
    }
    figures.push(exact(Some(Label::Requested), from, c.pos, requested));
    let mut end = c.pos;
    let reach = super::cursor::floor_boundary(text, anchor_end + ASYNC_REACH);
    const DEVICE: &str = "Free memory/Total memory:";
    if let Some(i) = text[end..reach].find(DEVICE) {
        let mut d = Cursor::new(text, end + i + DEVICE.len(), reach);
        d.skip_ws();
        let free_at = d.pos;
        if let Some(free) = d.uint() {
            figures.push(exact(Some(Label::Free), free_at, d.pos, free));
            if d.lit_loose("/") {
                let total_at = d.pos;
                if let Some(total) = d.uint() {
                    figures.push(exact(Some(Label::Total), total_at, d.pos, total));
                }
            }
            end = d.pos;
        }
    }
    if let Some(i) = text[end..reach].find("Stats:") {
        let mut d = Cursor::new(text, end + i + "Stats:".len(), reach);
        loop {
            let row = d.attempt(|d| {
                d.skip_ws();
                let key = d.token(b":")?;
                d.lit_loose(":").then_some(())?;
                d.skip_ws();
                let at = d.pos;
                Some((key, at, d.uint()?, d.pos))
            });
            let Some((key, at, n, row_end)) = row else {
                break;
            };
            let label = match key {
                "Limit" => Some(Label::Limit),
                "InUse" => Some(Label::InUse),
                "Reserved" => Some(Label::Reserved),
                "MaxInUse" | "MaxAllocSize" | "PeakReserved" | "LargestFreeBlock" => None,
                "NumAllocs" => {
                    end = row_end;
                    continue;
                }
                _ => break,
            };
            figures.push(exact(label, at, row_end, n));
            end = row_end;
        }
    }
    Some(Found {
        start: at,
        end,
        raised_as: raised_as(text, at),
        detail: Detail::Generic {
            wording: "cuMemAllocAsync failed to allocate".into(),
            runtime: Some("XLA (cuda_malloc_async)".into()),
            memory: MemorySpace::Device,
            figures,
        },
    })
}

/// The lead-ins XLA's status strings print before the message.
fn status_start(text: &str, start: usize) -> usize {
    let before = &text[back_from(text, start)..start];
    ["RESOURCE_EXHAUSTED: ", "Resource exhausted: "]
        .into_iter()
        .find_map(|lead| {
            before
                .strip_suffix(lead)
                .map(|b| start - (before.len() - b.len()))
        })
        .unwrap_or(start)
}

fn read_resource_exhausted(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let before = &text[back_from(text, at)..at];
    let (host_memory, lead) = if before.ends_with("Out of host ") {
        (true, "Out of host ".len())
    } else if before.ends_with("Out of ") {
        (false, "Out of ".len())
    } else {
        return None;
    };
    let start = status_start(text, at - lead);
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    let requested = c
        .attempt(|c| {
            let start = c.pos;
            let n = c.uint()?;
            c.lit(" bytes").then_some(())?;
            Some(Quantity::exact(&text[start..c.pos], n))
        })
        .or_else(|| c.tsl_size())?;
    c.lit_loose(".");
    let buffer_assignment = c.attempt(|c| {
        c.lit(" BufferAssignment OOM Debugging.").then_some(())?;
        Some(buffer_assignment(c))
    });
    Some(Found {
        start,
        end: c.pos,
        raised_as: raised_as(text, start),
        detail: Detail::XlaResourceExhausted {
            requested,
            host_memory,
            buffer_assignment,
        },
    })
}

/// "BufferAssignment stats: parameter allocation: 6.00MiB constant allocation: 0B …".
fn buffer_assignment(c: &mut Cursor) -> BufferAssignment {
    let mut stats = BufferAssignment::default();
    if !c.lit(" BufferAssignment stats:") {
        return stats;
    }
    for _ in 0..8 {
        let row = c.attempt(|c| {
            c.skip_ws();
            let mut label = String::new();
            for _ in 0..4 {
                let word = c.token(b":")?;
                if !label.is_empty() {
                    label.push(' ');
                }
                label.push_str(word);
                if c.lit_loose(":") {
                    c.skip_ws();
                    let q = c.tsl_size()?;
                    // "(4.60%)" after the fragmentation figures.
                    c.attempt(|c| {
                        c.lit(" (").then_some(())?;
                        c.number_text()?;
                        c.lit_loose("%)").then_some(())
                    });
                    return Some((label, q));
                }
                c.skip_ws();
            }
            None
        });
        let Some((label, q)) = row else { break };
        let slot = match label.as_str() {
            "parameter allocation" => &mut stats.parameter,
            "constant allocation" => &mut stats.constant,
            "maybe_live_out allocation" => &mut stats.maybe_live_out,
            "preallocated temp allocation" => &mut stats.preallocated_temp,
            "preallocated temp fragmentation" => &mut stats.preallocated_temp_fragmentation,
            "total allocation" => &mut stats.total_allocation,
            "total fragmentation" => &mut stats.total_fragmentation,
            _ => break,
        };
        *slot = Some(q);
    }
    stats
}

fn read_allocate_request(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let start = status_start(text, at);
    let mut c = Cursor::new(text, anchor_end, anchor_end + 256);
    let requested = c.tsl_size()?;
    c.lit(" (").then_some(())?;
    let requested_bytes = c.uint()?;
    c.lit_loose("B)").then_some(())?;
    c.lit(" on device ordinal ").then_some(())?;
    let device_index = u32::try_from(c.uint()?).ok()?;
    Some(Found {
        start,
        end: c.pos,
        raised_as: raised_as(text, start),
        detail: Detail::XlaAllocateRequest {
            requested,
            requested_bytes,
            device_index,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Detail, Label, MemorySpace, find_all};

    /// The figures of a message: (label, printed).
    type Figures = Vec<(Option<Label>, String)>;

    /// (memory, runtime, figures) of the one message in `text`.
    fn read(text: &str) -> (MemorySpace, Option<String>, Figures) {
        let found = find_all(text);
        assert_eq!(found.len(), 1, "{found:?}");
        match &found[0].detail {
            Detail::Generic {
                memory,
                runtime,
                figures,
                ..
            } => (
                *memory,
                runtime.clone(),
                figures
                    .iter()
                    .map(|f| (f.label, f.quantity.printed.clone()))
                    .collect(),
            ),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn the_tpu_runtime_s_device_buffer_refusal_is_read() {
        // As PyTorch/XLA raises it, the memory space at the end.
        let (memory, runtime, figures) = read(
            "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 2.00G. That was not possible. There are 1.25G free.; (0x0x1_HBM0)",
        );
        assert_eq!(memory, MemorySpace::TpuHbm);
        assert_eq!(memory.words(), "TPU HBM");
        assert_eq!(runtime.as_deref(), Some("XLA (PJRT, TPU)"));
        assert_eq!(
            figures,
            [
                (Some(Label::Requested), "2.00G".into()),
                (Some(Label::Free), "1.25G".into())
            ]
        );
        // As JAX raises it, wrapped, another core's HBM; sizes in K.
        let (memory, _, figures) = read(
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to\nallocate 512.00K. That was not possible. There are 12.50K free.; (1x0x0_HBM3)\n",
        );
        assert_eq!(memory, MemorySpace::TpuHbm);
        assert_eq!(figures[1], (Some(Label::Free), "12.50K".into()));
        // Without the memory space: device memory, no TPU claimed; cut before the free part.
        let (memory, runtime, figures) = read(
            "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 129.50M. That was not possible. There are 78.17M free.",
        );
        assert_eq!(memory, MemorySpace::Device);
        assert_eq!(runtime.as_deref(), Some("XLA (PJRT)"));
        assert_eq!(figures.len(), 2);
        let (_, _, figures) =
            read("Error allocating device buffer: Attempting to allocate 129.50M. That was");
        assert_eq!(figures, [(Some(Label::Requested), "129.50M".into())]);
        // An identifier that is not an HBM's is not read as one.
        let (memory, _, _) = read(
            "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 129.50M. That was not possible. There are 78.17M free.; (0x0x0_HBMX)",
        );
        assert_eq!(memory, MemorySpace::Device);

        // Not this reader's: the words without the device buffer's lead-in.
        let found = find_all(
            "Attempting to allocate 129.50M. That was not possible. There are 78.17M free.",
        );
        assert!(found.iter().all(|m| !matches!(
            &m.detail,
            Detail::Generic { wording, .. } if wording == "Error allocating device buffer"
        )));
    }
}
