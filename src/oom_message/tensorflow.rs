//! TensorFlow's messages: tsl's BFC allocator log (with its statistics), "OOM when allocating
//! tensor", and the GPU device's "Ran out of GPU memory when allocating".
//!
//! - `xla/tsl/framework/bfc_allocator.cc` (openxla/xla commit 00df9eef; TensorFlow's
//!   `core/common_runtime/bfc_allocator.cc` before): `"Allocator (" << Name() << ") ran out of
//!   memory trying to allocate " << HumanReadableNumBytes(num_bytes) << " (rounded to " <<
//!   rounded_bytes << ")"` then `" from the … end"` (newest) and `"requested by op …"`, or,
//!   when the caller retries, `" with freed_by_count=N. The caller indicates that this is not a
//!   failure, …"`. TensorFlow 1.0 wrote `"Ran out of memory trying to allocate X.  See logs for
//!   memory state."` without the allocator's name. The name is `GPU_N_bfc` for device N, and
//!   `cuda_host_bfc`, `gpu_host_bfc` or `xla_gpu_host_bfc` for pinned host memory.
//!   `DumpMemoryLog` ends with `"Stats: \n" << AllocatorStats::DebugString()`: `Limit:`,
//!   `InUse:`, `MaxInUse:`, … `LargestFreeBlock:` with exact byte counts.
//! - `tensorflow/core/framework/op_kernel.cc` `OpKernelContext::allocate_tensor`:
//!   `ResourceExhausted("OOM when allocating tensor with shape", shape.DebugString(),
//!   " and type ", DataTypeString(type), " on ", device->name(), " by allocator ", a->Name())`
//!   ("of shape [N]" in TensorFlow before 1.4). Pasted in an issue's title it is often retyped
//!   in lower case ("resource exhausted: oom when allocating tensor …"): read the same.
//! - `tensorflow/core/common_runtime/gpu/gpu_device.cc`: `"Ran out of GPU memory when
//!   allocating " << bytes << " bytes for " << op`, and TensorFlow 1.x's `"EigenAllocator for GPU
//!   ran out of memory when allocating " << num_bytes`.

use super::cursor::Cursor;
use super::scan::{Found, Reader, back_from, raised_as};
use super::{BfcStats, Detail};

const WINDOW: usize = 4096;
/// How far after a BFC message its `Stats:` block may be (the chunk dump comes first).
const STATS_REACH: usize = 16 << 20;

const BFC_ANCHOR: &str = ") ran out of memory trying to allocate ";

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    ("OOM when allocating tensor ", read_tensor),
    // The same wording retyped in lower case (an issue title, a search query).
    ("oom when allocating tensor ", read_tensor),
    (BFC_ANCHOR, read_bfc),
    ("Ran out of memory trying to allocate ", read_bfc_unnamed),
    ("Ran out of GPU memory when allocating ", read_gpu_bytes),
    (
        "EigenAllocator for GPU ran out of memory when allocating ",
        read_gpu_bytes,
    ),
];

fn read_bfc(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    const LEAD: &str = "Allocator (";
    let before = &text[back_from(text, at)..at];
    let lead_at = before.rfind(LEAD)?;
    let allocator = before[lead_at + LEAD.len()..].to_string();
    let start = at - before.len() + lead_at;
    read_bfc_rest(text, start, anchor_end, Some(allocator))
}

fn read_bfc_unnamed(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    read_bfc_rest(text, at, anchor_end, None)
}

fn read_bfc_rest(
    text: &str,
    start: usize,
    anchor_end: usize,
    allocator: Option<String>,
) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    let requested = c.tsl_size()?;
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
    let freed_by_count = c.attempt(|c| {
        c.lit(" with freed_by_count=").then_some(())?;
        let n = c.uint()?;
        c.lit_loose(".").then_some(n)
    });
    c.lit_loose(".");
    let ahead = &text[c.pos..super::cursor::floor_boundary(text, c.pos + 200)];
    let not_a_failure = ahead.contains("The caller indicates that this is not a failure");
    if not_a_failure {
        c.attempt(|c| {
            c.lit(" The caller indicates that this is not a failure, but")
                .then_some(())?;
            let rest = &text[c.pos..super::cursor::floor_boundary(text, c.pos + 160)];
            let end = rest.find("available.")? + "available.".len();
            c.pos += end;
            Some(())
        });
    }
    c.lit(" See logs for memory state.");
    c.lit(" If this is caused by memory fragmentation, the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' may improve the situation.");
    c.lit(" Current allocation summary follows.");
    let reach = super::cursor::floor_boundary(text, c.pos + STATS_REACH);
    let next = text[c.pos..reach]
        .find(BFC_ANCHOR)
        .map_or(reach, |i| c.pos + i);
    let stats = find_stats(text, c.pos, next);
    let device_index = allocator.as_deref().and_then(|a| {
        let n = a.strip_prefix("GPU_")?.strip_suffix("_bfc")?;
        n.parse().ok()
    });
    let host_memory = allocator.as_deref().is_some_and(|a| a.contains("host"));
    Some(Found {
        start,
        end: c.pos,
        raised_as: None,
        detail: Detail::TfBfcAllocator {
            allocator,
            device_index,
            host_memory,
            requested,
            rounded_bytes,
            op: op.flatten(),
            freed_by_count,
            not_a_failure,
            stats,
        },
    })
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

fn read_tensor(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    (c.lit_loose("with shape") || c.lit_loose("of shape")).then_some(())?;
    let shape = c.attempt(|c| {
        c.skip_blanks();
        c.lit_loose("[").then_some(())?;
        let dims = c.until_on_line(b']')?;
        c.lit_loose("]").then_some(format!("[{dims}]"))
    })?;
    let field = |c: &mut Cursor, label: &str| {
        c.attempt(|c| {
            c.lit(label).then_some(())?;
            c.token(b"[`").map(str::to_string)
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
        let (_, index) = d.rsplit_once("GPU:").or_else(|| d.rsplit_once("gpu:"))?;
        index.parse().ok()
    });
    let tensor_bytes = tensor_bytes(&shape, dtype.as_deref());
    Some(Found {
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
    })
}

fn read_gpu_bytes(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 512);
    let requested_bytes = c.uint()?;
    let op = c.attempt(|c| {
        c.lit(" bytes for").then_some(())?;
        c.skip_ws();
        Some(c.token(b"[").map(str::to_string))
    });
    c.lit_loose(".");
    c.lit(" See error logs for more detailed info.");
    Some(Found {
        start: at,
        end: c.pos,
        raised_as: raised_as(text, at),
        detail: Detail::TfGpuOomBytes {
            requested_bytes,
            op: op.flatten(),
        },
    })
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
