//! XLA's and TensorFlow's messages: XLA's `RESOURCE_EXHAUSTED`, tsl's BFC allocator log, and
//! TensorFlow's "OOM when allocating tensor".
//!
//! - `xla/stream_executor/integrations/tf_allocator_adapter.cc` `MemoryAllocationError`
//!   (openxla/xla commit 370cfa8d): `ResourceExhaustedError(StrCat("Out of ", host ? "host " :
//!   "", "memory while trying to allocate ", size, " bytes."))`. JAX raises it as
//!   `XlaRuntimeError: RESOURCE_EXHAUSTED: …`; some paths print the size with
//!   `HumanReadableNumBytes` (`16.00GiB`) instead.
//! - `xla/tsl/framework/bfc_allocator.cc` (commit 00df9eef; TensorFlow's
//!   `core/common_runtime/bfc_allocator.cc` before): `"Allocator (" << Name() << ") ran out of
//!   memory trying to allocate " << HumanReadableNumBytes(num_bytes) << " (rounded to " <<
//!   rounded_bytes << ")"` then `" from the … end"` (newest) and `"requested by op …"`, or,
//!   when the caller retries, `" with freed_by_count=N. The caller indicates that this is not a
//!   failure, …"`. `DumpMemoryLog` ends with `"Stats: \n" << AllocatorStats::DebugString()`:
//!   `Limit:`, `InUse:`, `MaxInUse:`, … `LargestFreeBlock:` with exact byte counts.
//! - `tensorflow/core/framework/op_kernel.cc` `OpKernelContext::allocate_tensor`:
//!   `ResourceExhausted("OOM when allocating tensor with shape", shape.DebugString(),
//!   " and type ", DataTypeString(type), " on ", device->name(), " by allocator ", a->Name())`.

use super::cursor::Cursor;
use super::scan::{Found, line_start, raised_as};
use super::{BfcStats, Detail};

const WINDOW: usize = 4096;
/// How far after a BFC message its `Stats:` block may be (the chunk dump comes first).
const STATS_REACH: usize = 16 << 20;

pub(super) fn find_xla(text: &str, out: &mut Vec<Found>) {
    const ANCHOR: &str = "memory while trying to allocate ";
    for (at, _) in text.match_indices(ANCHOR) {
        let (host_memory, lead) = if text[..at].ends_with("Out of host ") {
            (true, "Out of host ")
        } else if text[..at].ends_with("Out of ") {
            (false, "Out of ")
        } else {
            continue;
        };
        let mut start = at - lead.len();
        if text[..start].ends_with("RESOURCE_EXHAUSTED: ") {
            start -= "RESOURCE_EXHAUSTED: ".len();
        }
        let mut c = Cursor::new(text, at + ANCHOR.len(), at + ANCHOR.len() + WINDOW);
        let requested = c
            .attempt(|c| {
                let start = c.pos;
                let n = c.uint()?;
                c.lit(" bytes").then_some(())?;
                Some(super::Quantity::exact(&text[start..c.pos], n))
            })
            .or_else(|| c.tsl_size());
        let Some(requested) = requested else { continue };
        c.lit_loose(".");
        out.push(Found {
            start,
            end: c.pos,
            raised_as: raised_as(text, start),
            detail: Detail::XlaResourceExhausted {
                requested,
                host_memory,
            },
        });
    }
}

pub(super) fn find_bfc(text: &str, out: &mut Vec<Found>) {
    const ANCHOR: &str = ") ran out of memory trying to allocate ";
    const LEAD: &str = "Allocator (";
    let anchors: Vec<usize> = text.match_indices(ANCHOR).map(|(at, _)| at).collect();
    for (i, &at) in anchors.iter().enumerate() {
        let line_before = &text[line_start(text, at)..at];
        let Some(lead_at) = line_before.rfind(LEAD) else {
            continue;
        };
        let allocator = line_before[lead_at + LEAD.len()..].to_string();
        let start = at - line_before.len() + lead_at;
        let mut c = Cursor::new(text, at + ANCHOR.len(), at + ANCHOR.len() + WINDOW);
        let Some(requested) = c.tsl_size() else {
            continue;
        };
        let rounded_bytes = c.attempt(|c| {
            c.lit(" (rounded to ").then_some(())?;
            let n = c.uint()?;
            c.lit_loose(")").then_some(n)
        });
        c.attempt(|c| {
            c.lit(" from the ").then_some(())?;
            c.token(b"")?;
            c.lit(" end").then_some(())
        });
        let op = c.attempt(|c| {
            c.lit_loose(" requested by op ").then_some(())?;
            c.skip_blanks();
            Some(c.token(b"").map(str::to_string))
        });
        c.attempt(|c| {
            c.lit(" with freed_by_count=").then_some(())?;
            c.uint()?;
            c.lit_loose(".").then_some(())
        });
        c.lit_loose(".");
        let not_a_failure = c.attempt(|c| {
            c.rest_of_line()
                .contains("The caller indicates that this is not a failure")
                .then_some(())
        });
        c.lit(" If this is caused by memory fragmentation, the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' may improve the situation.");
        c.lit(" Current allocation summary follows.");
        let next = anchors.get(i + 1).copied().unwrap_or(text.len());
        let stats = find_stats(text, c.pos, next.min(c.pos + STATS_REACH));
        out.push(Found {
            start,
            end: c.pos,
            raised_as: None,
            detail: Detail::TfBfcAllocator {
                allocator,
                requested,
                rounded_bytes,
                op: op.flatten(),
                not_a_failure: not_a_failure.is_some(),
                stats,
            },
        });
    }
}

/// The `Stats:` block in `text[from..to]`, if any.
fn find_stats(text: &str, from: usize, to: usize) -> Option<BfcStats> {
    let to = super::cursor::floor_boundary(text, to);
    let at = from + text.get(from..to)?.find("Stats:")?;
    let mut stats = BfcStats {
        offset: at,
        ..BfcStats::default()
    };
    let mut c = Cursor::new(text, at + "Stats:".len(), to);
    for _ in 0..12 {
        let Some((key, value)) = c.attempt(|c| {
            c.skip_ws();
            let key = c.token(b":")?;
            c.lit_loose(":").then_some(())?;
            c.skip_blanks();
            Some((key, c.uint()?))
        }) else {
            break;
        };
        match key {
            "Limit" => stats.limit_bytes = Some(value),
            "InUse" => stats.in_use_bytes = Some(value),
            "MaxInUse" => stats.max_in_use_bytes = Some(value),
            "LargestFreeBlock" => stats.largest_free_block_bytes = Some(value),
            "NumAllocs" | "MaxAllocSize" | "Reserved" | "PeakReserved" => {}
            _ => break,
        }
    }
    (stats.limit_bytes.is_some() || stats.in_use_bytes.is_some()).then_some(stats)
}

pub(super) fn find_tensorflow(text: &str, out: &mut Vec<Found>) {
    const ANCHOR: &str = "OOM when allocating tensor with shape";
    for (at, _) in text.match_indices(ANCHOR) {
        let mut c = Cursor::new(text, at + ANCHOR.len(), at + ANCHOR.len() + WINDOW);
        let Some(shape) = c.attempt(|c| {
            c.skip_blanks();
            c.lit_loose("[").then_some(())?;
            let dims = c.until_on_line(b']')?;
            c.lit_loose("]").then_some(format!("[{dims}]"))
        }) else {
            continue;
        };
        let field = |c: &mut Cursor, label: &str| {
            c.attempt(|c| {
                c.lit(label).then_some(())?;
                c.token(b"[").map(str::to_string)
            })
        };
        let dtype = field(&mut c, " and type ");
        let device = field(&mut c, " on ");
        let allocator = field(&mut c, " by allocator ");
        c.attempt(|c| {
            c.lit(" [Op:").then_some(())?;
            c.until_on_line(b']')?;
            c.lit_loose("]").then_some(())
        });
        let device_index = device.as_deref().and_then(|d| {
            let (_, index) = d.rsplit_once("GPU:")?;
            index.parse().ok()
        });
        let tensor_bytes = tensor_bytes(&shape, dtype.as_deref());
        out.push(Found {
            start: at,
            end: c.pos,
            raised_as: raised_as(text, at),
            detail: Detail::TfOomTensor {
                shape,
                dtype,
                device,
                device_index,
                allocator,
                tensor_bytes,
            },
        });
    }
}

/// `DataTypeString` names and their sizes in bytes.
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "bool" | "int8" | "uint8" | "qint8" | "quint8" | "float8_e4m3fn" | "float8_e5m2" => 1,
        "half" | "bfloat16" | "int16" | "uint16" | "qint16" | "quint16" => 2,
        "float" | "int32" | "uint32" | "qint32" => 4,
        "double" | "int64" | "uint64" | "complex64" => 8,
        "complex128" => 16,
        _ => return None,
    })
}

/// Elements × element size, when every dimension is known.
fn tensor_bytes(shape: &str, dtype: Option<&str>) -> Option<u64> {
    let element = dtype_bytes(dtype?)?;
    let dims = shape.trim_start_matches('[').trim_end_matches(']');
    if dims.trim().is_empty() {
        return Some(element);
    }
    dims.split(',')
        .map(|d| d.trim().parse::<u64>().ok())
        .try_fold(element, |acc, d| acc.checked_mul(d?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_sizes_need_every_dimension_and_a_known_type() {
        assert_eq!(
            tensor_bytes("[3,3,512,1024]", Some("float")),
            Some(18_874_368)
        );
        assert_eq!(tensor_bytes("[]", Some("double")), Some(8));
        assert_eq!(tensor_bytes("[?,3]", Some("float")), None);
        assert_eq!(tensor_bytes("[-1,3]", Some("float")), None);
        assert_eq!(tensor_bytes("[3]", Some("string")), None);
        assert_eq!(tensor_bytes("[3]", None), None);
        let huge = format!("[{}]", ["4294967296"; 3].join(","));
        assert_eq!(tensor_bytes(&huge, Some("float")), None);
    }
}
