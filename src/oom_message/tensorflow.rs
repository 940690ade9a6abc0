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
use super::figures::{Figure, Label, Owner};
use super::generic::MemorySpace;
use super::scan::{Found, Reader, back_from, raised_as};
use super::size::Quantity;
use super::{BfcStats, Detail, TfDeviceProperties};

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
    (DUMP_ANCHOR, read_dump),
];

/// The line of `DumpMemoryLog` that sums the chunks in use.
const DUMP_ANCHOR: &str = "Sum Total of in-use";
/// How far before the sum its "Chunks of size" lines are looked for.
const DUMP_REACH: usize = 64 << 10;

/// The BFC allocator's memory dump without the warning that heads it (a paste cut before it):
/// `DumpMemoryLog` runs only when an allocation failed (`AllocateRawInternal`, right after
/// "Allocator (…) ran out of memory trying to allocate …"), so the dump alone says one did. Read
/// as the reader by principle reads a message: the in-use sum, the `Stats:` block after it
/// (Limit, InUse; the other sizes listed) and the "N Chunks of size S totalling T" lines before
/// it (S a byte count, kept whole where a hard wrap split its digits: the format prints one
/// number there). A dump whose warning is in the text, before it or (TensorFlow before 1.0)
/// right after it, belongs to the BFC message.
fn read_dump(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let back = super::cursor::floor_boundary(text, at.saturating_sub(STATS_REACH));
    if memchr::memmem::rfind(
        &text.as_bytes()[back..at],
        b"an out of memory trying to allocate ",
    )
    .is_some()
    {
        return None;
    }
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    // " chunks: ", a hard wrap's space anywhere in the word.
    let word = c.take_while(|b| b != b':' && b != b'\n');
    (word.len() <= 12 && word.replace(' ', "") == "chunks").then_some(())?;
    c.lit(":").then_some(())?;
    c.skip_ws();
    let sum_at = c.pos;
    let in_use = c.tsl_size()?;
    let mut figures = Vec::new();
    // The chunk lines of this dump (after the previous dump's sum, if any).
    let from = super::cursor::floor_boundary(text, at.saturating_sub(DUMP_REACH));
    let from = memchr::memmem::rfind(&text.as_bytes()[from..at], DUMP_ANCHOR.as_bytes())
        .map_or(from, |i| from + i + DUMP_ANCHOR.len());
    let mut start = at;
    for i in memchr::memmem::find_iter(&text.as_bytes()[from..at], b" Chunks of size ") {
        let size_at = from + i + " Chunks of size ".len();
        let Some((size, totalling)) = chunk_line(text, size_at, at) else {
            continue;
        };
        if figures.is_empty() {
            // From the count before "Chunks".
            let head = &text[..from + i];
            start = head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        }
        figures.push(size);
        figures.push(totalling);
    }
    let sum_end = c.pos;
    figures.push(Figure {
        label: Some(Label::InUse),
        quantity: in_use,
        at: sum_at,
        end: sum_end,
        owner: Owner::Unsaid,
    });
    let mut end = sum_end;
    // The `Stats:` block right after the sum.
    let stats_reach = super::cursor::floor_boundary(text, sum_end + 512);
    if let Some(i) = text[sum_end..stats_reach].find("Stats:") {
        let mut k = Cursor::new(text, sum_end + i + "Stats:".len(), sum_end + WINDOW);
        end = k.pos;
        for _ in 0..12 {
            let Some((key, value_at, value)) = k.attempt(|k| {
                k.skip_ws();
                let key = k.token(b":")?;
                k.lit_loose(":").then_some(())?;
                k.skip_blanks();
                let value_at = k.pos;
                Some((key, value_at, k.uint()?))
            }) else {
                break;
            };
            let label = match key {
                "Limit" => Some(Label::Limit),
                "InUse" => Some(Label::InUse),
                "NumAllocs" => {
                    end = k.pos;
                    continue;
                }
                "MaxInUse" | "LargestFreeBlock" | "MaxAllocSize" => None,
                "Reserved" => Some(Label::Reserved),
                "PeakReserved" => None,
                _ => break,
            };
            figures.push(Figure {
                label,
                quantity: Quantity::exact(&text[value_at..k.pos], value),
                at: value_at,
                end: k.pos,
                owner: Owner::Unsaid,
            });
            end = k.pos;
        }
    }
    // TensorFlow before 1.0 (`GPUBFCAllocator`) dumped first and warned after ("Ran out of
    // memory trying to allocate X.  See logs for memory state"): that warning owns the dump too.
    let ahead = super::cursor::floor_boundary(text, end + WINDOW);
    if memchr::memmem::find(
        &text.as_bytes()[end..ahead],
        b"an out of memory trying to allocate ",
    )
    .is_some()
    {
        return None;
    }
    Some(Found {
        start: start.min(at),
        end,
        raised_as: None,
        detail: Detail::Generic {
            wording: "Sum Total of in-use chunks".into(),
            runtime: Some("TensorFlow".into()),
            memory: MemorySpace::Device,
            figures,
        },
    })
}

/// "S totalling T" of a chunk line, from S's first digit: S's digits (a wrap's space between
/// them joined), "totalling" (a wrap's space inside it allowed), T as tsl prints it.
fn chunk_line(text: &str, at: usize, limit: usize) -> Option<(Figure, Figure)> {
    let b = text.as_bytes();
    let mut j = at;
    let mut digits = String::new();
    while j < limit
        && (b[j].is_ascii_digit()
            || (b[j] == b' ' && b.get(j + 1).is_some_and(u8::is_ascii_digit) && !digits.is_empty()))
    {
        if b[j].is_ascii_digit() {
            digits.push(b[j] as char);
        }
        j += 1;
    }
    let size: u64 = digits.parse().ok()?;
    let size_end = j;
    let word_end = super::cursor::floor_boundary(text, (j + 16).min(limit));
    let squeezed: String = text[j..word_end]
        .chars()
        .filter(|c| *c != ' ')
        .take(9)
        .collect();
    (squeezed == "totalling").then_some(())?;
    // Past "totalling" and the spaces in and after it.
    let mut letters = 0;
    while j < limit && letters < 9 {
        if b[j] != b' ' {
            letters += 1;
        }
        j += 1;
    }
    let mut c = Cursor::new(text, j, limit);
    c.skip_ws();
    let total_at = c.pos;
    let total = c.tsl_size()?;
    Some((
        Figure {
            label: None,
            quantity: Quantity::exact(&text[at..size_end], size),
            at,
            end: size_end,
            owner: Owner::Unsaid,
        },
        Figure {
            label: None,
            quantity: total,
            at: total_at,
            end: c.pos,
            owner: Owner::Unsaid,
        },
    ))
}

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
    let (bins, bins_end) = read_bins(text, c.pos);
    c.pos = bins_end;
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
            bins,
        },
    })
}

/// The sentence newer releases print in the warning before its summary (`AllocateRaw`).
const FRAGMENTATION_HINT: &str = "If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation.";

/// How far the next `Bin (` may be from the end of the line before it: a log header, and
/// before the first the warning's last sentences and the dump's heading.
const BIN_GAP: usize = 512;
/// `DumpMemoryLog` prints one line per bin: 21 in TensorFlow's BFC allocator.
const MAX_BINS: usize = 32;

/// The sizes of the `Bin (S): Total Chunks: N, Chunks in use: N. X allocated for chunks. X in
/// use in bin. X client-requested in use in bin.` lines from `from` on (`DumpMemoryLog`: S an
/// exact byte count, X as `HumanReadableNumBytes` prints it, or exact bytes where a build
/// prints the number; before TensorFlow 1.4 no `.` after the count and an "X client-requested
/// for chunks." more), one list per bin, with only log headers (and the dump's "BFCAllocator
/// dump for NAME", the warning's fragmentation hint and its repeated "Current allocation
/// summary follows.") between them; and where
/// the last one read ends (`from` when none is).
fn read_bins(text: &str, from: usize) -> (Vec<Vec<Figure>>, usize) {
    const WORDS: [&str; 4] = [
        " allocated for chunks.",
        " client-requested for chunks.",
        " in use in bin.",
        " client-requested in use in bin.",
    ];
    let figure = |at: usize, end: usize, quantity: Quantity| Figure {
        label: None,
        quantity,
        at,
        end,
        owner: Owner::Unsaid,
    };
    let mut bins = Vec::new();
    let mut end = from;
    for _ in 0..MAX_BINS {
        let reach = super::cursor::floor_boundary(text, end + BIN_GAP);
        let Some(i) = memchr::memmem::find(&text.as_bytes()[end..reach], b"Bin (") else {
            break;
        };
        let at = end + i;
        // A log header only: no sentence's end between the last bin and this one.
        let gap = text[end..at]
            .replace("Current allocation summary follows.", "")
            .replace(FRAGMENTATION_HINT, "");
        if gap.contains(". ") {
            break;
        }
        let mut c = Cursor::new(text, at + "Bin (".len(), at + WINDOW);
        let Some(bin) = c.attempt(|c| {
            let size_at = c.pos;
            let size = c.uint()?;
            let mut bin = vec![figure(
                size_at,
                c.pos,
                Quantity::exact(&text[size_at..c.pos], size),
            )];
            c.lit_loose("):").then_some(())?;
            c.skip_ws();
            c.lit("Total Chunks: ").then_some(())?;
            c.uint()?;
            c.lit_loose(", Chunks in use: ").then_some(())?;
            c.uint()?;
            c.lit_loose(".");
            for _ in 0..WORDS.len() {
                c.skip_ws();
                let q_at = c.pos;
                let quantity = c.tsl_size().or_else(|| {
                    let n = c.uint()?;
                    Some(Quantity::exact(&text[q_at..c.pos], n))
                })?;
                bin.push(figure(q_at, c.pos, quantity));
                let words = WORDS.iter().find(|w| c.lit_loose(w))?;
                if *words == WORDS[3] {
                    return Some(bin);
                }
            }
            None
        }) else {
            break;
        };
        bins.push(bin);
        end = c.pos;
    }
    (bins, end)
}

/// The `Stats:` block in `text[from..to]`, if any.
fn find_stats(text: &str, from: usize, to: usize) -> Option<BfcStats> {
    let to = super::cursor::floor_boundary(text, to);
    let at = from + text.get(from..to)?.find("Stats:")?;
    read_stats(text, at, to).map(|(stats, _)| stats)
}

/// The `Stats:` block whose word is at `text[at..]` (`AllocatorStats::DebugString`: one
/// `Key: N` a line, exact bytes but for the count `NumAllocs`), and where its last row ends.
fn read_stats(text: &str, at: usize, to: usize) -> Option<(BfcStats, usize)> {
    let mut stats = BfcStats {
        offset: at,
        ..BfcStats::default()
    };
    let mut c = Cursor::new(text, at + "Stats:".len(), to);
    let mut end = c.pos;
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
            "MaxAllocSize" => stats.max_alloc_size_bytes = Some(value),
            "NumAllocs" | "Reserved" | "PeakReserved" => {}
            _ => break,
        }
        end = c.pos;
    }
    (stats.limit_bytes.is_some() || stats.in_use_bytes.is_some()).then_some((stats, end))
}

/// How far before an "OOM when allocating tensor" its allocator's `Stats:` block may start:
/// the block's rows, the memory map and log headers.
const STATS_BEFORE: usize = 2048;
/// How long the log header before the memory map, and the header and lead-in ("OP_REQUIRES
/// failed at …: Resource exhausted: ") after it, may each be.
const MAP_LEAD: usize = 256;

/// The BFC allocator's `Stats:` block printed right before the tensor message at `at`
/// (folded text): `DumpMemoryLog` ends with it, the allocator then logs its memory map
/// (`RenderOccupancy`: one line of `*` in use and `_` free), and the op's "OP_REQUIRES failed
/// … OOM when allocating tensor" follows. Between the block and the message only that map and
/// the log headers and lead-in around it may lie. A block the allocator's dump or warning owns
/// (its "Sum Total of in-use chunks" right before it, or its warning earlier) is theirs.
fn stats_before(text: &str, at: usize) -> Option<(usize, BfcStats)> {
    let from = super::cursor::floor_boundary(text, at.saturating_sub(STATS_BEFORE));
    let stats_at = from + memchr::memmem::rfind(&text.as_bytes()[from..at], b"Stats:")?;
    let (stats, end) = read_stats(text, stats_at, at)?;
    let gap = &text[end..at];
    let (map_at, map_len) = memory_map(gap)?;
    let after = &gap[map_at + map_len..];
    if map_at > MAP_LEAD || after.len() > MAP_LEAD || memory_map(after).is_some() {
        return None;
    }
    let back = super::cursor::floor_boundary(text, stats_at.saturating_sub(DUMP_REACH));
    let near = super::cursor::floor_boundary(text, stats_at.saturating_sub(512));
    let b = text.as_bytes();
    if memchr::memmem::find(&b[near..stats_at], DUMP_ANCHOR.as_bytes()).is_some()
        || memchr::memmem::rfind(&b[back..stats_at], b"an out of memory trying to allocate ")
            .is_some()
    {
        return None;
    }
    Some((stats_at, stats))
}

/// The BFC allocator's memory map in `gap`: its offset and length, the first run of eight or
/// more `*` and `_` with a `*` in it (a hard wrap's spaces inside it allowed), standing alone
/// (a space or the gap's edge on each side).
fn memory_map(gap: &str) -> Option<(usize, usize)> {
    let b = gap.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !matches!(b[i], b'*' | b'_') {
            i += 1;
            continue;
        }
        let start = i;
        // A hard wrap's space inside the map joins its parts.
        while i < b.len()
            && (matches!(b[i], b'*' | b'_')
                || (b[i] == b' ' && b.get(i + 1).is_some_and(|c| matches!(c, b'*' | b'_'))))
        {
            i += 1;
        }
        let run = &gap[start..i];
        let alone = (start == 0 || matches!(b[start - 1], b' ' | b']' | b':'))
            && (i == b.len() || b[i] == b' ');
        if run.len() >= 8 && run.contains('*') && alone {
            return Some((start, run.len()));
        }
    }
    None
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
    let before = stats_before(text, at);
    let device_properties = device_properties_before(text, at, device_index);
    Some(Found {
        start: before.as_ref().map_or(at, |(s, _)| *s),
        end: c.pos,
        raised_as: raised_as(text, at),
        detail: Detail::TfOomTensor {
            shape,
            dtype,
            device,
            device_index,
            allocator,
            tensor_bytes,
            stats: before.map(|(_, stats)| stats),
            device_properties,
        },
    })
}

/// How far before a tensor message TensorFlow's start-up lines for its device are looked for.
const DEVICE_REACH: usize = 16 << 10;
/// How many devices' start-up lines are passed over looking for the message's.
const MAX_DEVICES: usize = 16;

/// The memory of the message's device as TensorFlow announced it at start-up, before `at`:
/// "Found device N with properties:" then, before 1.14, "… totalMemory: X freeMemory: Y" and
/// from 1.14 "… deviceMemorySize: X" (`HumanReadableNumBytes`), within the lines of that one
/// log record. The nearest one of the message's device index (any, when it names none).
fn device_properties_before(
    text: &str,
    at: usize,
    device_index: Option<u32>,
) -> Option<TfDeviceProperties> {
    const LEAD: &str = "Found device ";
    const PROPERTIES: &str = " with properties:";
    let from = super::cursor::floor_boundary(text, at.saturating_sub(DEVICE_REACH));
    let finder = memchr::memmem::FinderRev::new(LEAD);
    let mut to = at;
    for _ in 0..MAX_DEVICES {
        let lead_at = from + finder.rfind(&text.as_bytes()[from..to])?;
        to = lead_at;
        let mut c = Cursor::new(text, lead_at + LEAD.len(), at);
        let Some(index) = c.uint().and_then(|n| u32::try_from(n).ok()) else {
            continue;
        };
        if !c.lit_loose(PROPERTIES) || device_index.is_some_and(|d| d != index) {
            continue;
        }
        // The record's own lines: up to the next log record's "Found device" or the message.
        let reach = super::cursor::floor_boundary(text, (c.pos + 512).min(at));
        let record = &text[c.pos..reach];
        let record = &record[..record.find(LEAD).unwrap_or(record.len())];
        let size_after = |key: &str| {
            let i = record.find(key)?;
            let mut k = Cursor::new(text, c.pos + i + key.len(), c.pos + record.len());
            k.skip_ws();
            k.tsl_size()
        };
        let (total, free) = match size_after("totalMemory:") {
            Some(total) => (total, size_after("freeMemory:")),
            None => match size_after("deviceMemorySize:") {
                Some(total) => (total, None),
                None => continue,
            },
        };
        return Some(TfDeviceProperties {
            line: 0,
            offset: lead_at,
            device_index: index,
            total,
            free_at_startup: free,
        });
    }
    None
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
    fn the_bfc_dump_without_its_warning_is_read_as_a_message() {
        use super::super::{Detail, find_all};
        let sizes = |text: &str| -> Vec<(Option<&'static str>, String)> {
            let found = find_all(text);
            assert_eq!(found.len(), 1, "{found:?}");
            match &found[0].detail {
                Detail::Generic { figures, .. } => figures
                    .iter()
                    .map(|f| (f.label.map(|l| l.as_str()), f.quantity.printed.clone()))
                    .collect(),
                d => panic!("{d:?}"),
            }
        };
        // Cut before the warning, whole lines.
        let got = sizes(
            "I bfc_allocator.cc:696] 12 Chunks of size 1024 totalling 12.0KiB\nI bfc_allocator.cc:696] 2 Chunks of size 268435456 totalling 512.00MiB\nI bfc_allocator.cc:700] Sum Total of in-use chunks: 512.01MiB\nI bfc_allocator.cc:702] Stats: \nLimit:        1073741824\nInUse:         536881152\nMaxInUse:      536881152\nNumAllocs:            14\nMaxAllocSize:  268435456\n",
        );
        assert_eq!(
            got,
            [
                (None, "1024".into()),
                (None, "12.0KiB".into()),
                (None, "268435456".into()),
                (None, "512.00MiB".into()),
                (Some("in_use"), "512.01MiB".into()),
                (Some("limit"), "1073741824".into()),
                (Some("in_use"), "536881152".into()),
                (None, "536881152".into()),
                (None, "268435456".into()),
            ]
        );
        // Hard-wrapped at a fixed width, through a number and through words.
        let got = sizes(
            "2019-01-01 00:00:00.000001: I tensorflow/core/common_runtime/bfc_allocator.cc:696] 3 Chunks of size 13421\n7728 totalling 384.00MiB\n2019-01-01 00:00:00.000002: I tensorflow/core/common_runtime/bfc_allocator.cc:700] Sum Total of in-use chun\nks: 384.00MiB\n",
        );
        assert_eq!(got[0], (None, "13421 7728".into()));
        let found = find_all(
            "bfc_allocator.cc:696] 3 Chunks of size 13421\n7728 totalling 384.00MiB\nbfc_allocator.cc:700] Sum Total of in-use ch\nunks: 384.00MiB\n",
        );
        let Detail::Generic { figures, .. } = &found[0].detail else {
            panic!()
        };
        assert_eq!(figures[0].quantity.bytes.low, 134_217_728);
        assert_eq!(figures[2].label, Some(super::super::Label::InUse));
        // With its warning in the text, the dump is the BFC message's, not a second message.
        let found = find_all(
            "W bfc_allocator.cc:211] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.00GiB.  Current allocation summary follows.\nI bfc_allocator.cc:696] 2 Chunks of size 268435456 totalling 512.00MiB\nI bfc_allocator.cc:700] Sum Total of in-use chunks: 512.01MiB\nI bfc_allocator.cc:702] Stats: \nLimit:        1073741824\nInUse:         536881152\n",
        );
        assert_eq!(found.len(), 1);
        assert!(matches!(found[0].detail, Detail::TfBfcAllocator { .. }));
        // So with the warning after it, as TensorFlow before 1.0 printed it.
        let found = find_all(
            "I gpu_bfc_allocator.cc:689] Sum Total of in-use chunks: 512.01MiB\nI gpu_bfc_allocator.cc:691] Stats: \nLimit:        1073741824\nInUse:         536881152\nW gpu_bfc_allocator.cc:274] Ran out of memory trying to allocate 1.00GiB.  See logs for memory state\n",
        );
        assert_eq!(found.len(), 1);
        assert!(matches!(found[0].detail, Detail::TfBfcAllocator { .. }));
    }

    /// The `Stats:` block a tensor message of `text` carries, or `None`; panics when `text`
    /// holds no tensor message.
    fn tensor_stats(text: &str) -> Option<BfcStats> {
        super::super::find_all(text)
            .into_iter()
            .find_map(|m| match m.detail {
                Detail::TfOomTensor { stats, .. } => Some(stats),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no tensor message in {text:?}"))
    }

    #[test]
    fn the_stats_block_printed_before_a_tensor_message_is_its_own() {
        const OOM: &str = "W op_kernel.cc:1198] OP_REQUIRES failed at conv_ops.cc:446 : Resource exhausted: OOM when allocating tensor with shape[32,64,128,128] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n";
        const MAP: &str = "W bfc_allocator.cc:271] **********_____*******************************************xxxx\n";
        let map = MAP.replace("xxxx", "____");
        // Bare rows, the map with its log header, the message.
        let s = tensor_stats(&format!(
            "Stats: \nLimit:        4294967296\nInUse:        4160749568\nMaxInUse:     4194304000\nNumAllocs:         1234\nMaxAllocSize:  536870912\n{map}{OOM}"
        ))
        .expect("the block before the map");
        assert_eq!(s.limit_bytes, Some(4_294_967_296));
        assert_eq!(s.in_use_bytes, Some(4_160_749_568));
        assert_eq!(s.max_in_use_bytes, Some(4_194_304_000));
        assert_eq!(s.max_alloc_size_bytes, Some(536_870_912));
        assert_eq!(s.line, 1);
        // Its log header, a blank line after it, a sentence before it; the stats' line counted.
        let s = tensor_stats(&format!(
            "it fails like this:\n2020-01-01 10:00:00.000001: I bfc_allocator.cc:812] Stats: \nLimit:   1000000000\nInUse:    999999744\n\n2020-01-01 10:00:00.000002: {map}2020-01-01 10:00:00.000003: {OOM}"
        ))
        .expect("with log headers");
        assert_eq!(
            (s.limit_bytes, s.in_use_bytes, s.line),
            (Some(1_000_000_000), Some(999_999_744), 2)
        );
        // Read as figures: the pool's limit and use.
        let found = super::super::find_all(&format!(
            "Stats: \nLimit: 1000000000\nInUse: 999999744\n{map}{OOM}"
        ));
        assert_eq!(found.len(), 1);
        assert!(found[0].text.starts_with("Stats:"));

        // Not without the memory map between them, nor with other text there, nor with two maps.
        assert_eq!(
            tensor_stats(&format!(
                "Stats: \nLimit: 1000000000\nInUse: 999999744\n{OOM}"
            )),
            None
        );
        assert_eq!(
            tensor_stats(&format!(
                "Stats: \nLimit: 1000000000\nInUse: 999999744\n{map}Epoch 3/10 loss 0.25 and a long line of the user's own program that goes on for a while before anything else is printed by it, the next step of its training loop, the learning rate schedule, the checkpoint it saved, the samples it wrote, the evaluation it ran on the validation set and more words until it is longer than a log header and a lead-in ever are together in a real log of TensorFlow\n{OOM}"
            )),
            None
        );
        assert_eq!(
            tensor_stats(&format!(
                "Stats: \nLimit: 1000000000\nInUse: 999999744\n{map}loss 0.3\n{map}{OOM}"
            )),
            None
        );
        // The map wrapped by a terminal, at a space or inside the run.
        for wrapped in [
            map.replacen("_____", "__\n___", 1),
            map.replacen("_____", "__ \n  ___", 1),
        ] {
            let s = tensor_stats(&format!(
                "Stats: \nLimit: 1000000000\nInUse: 999999744\n{wrapped}{OOM}"
            ));
            assert_eq!(
                s.and_then(|s| s.limit_bytes),
                Some(1_000_000_000),
                "{wrapped:?}"
            );
        }
        // Nor a block without Limit or InUse, nor a line of stars that is no map.
        assert_eq!(
            tensor_stats(&format!("Stats: \nNumAllocs: 12\n{map}{OOM}")),
            None
        );
        assert_eq!(
            tensor_stats(&format!(
                "Stats: \nLimit: 1000000000\nInUse: 999999744\n** note **\n{OOM}"
            )),
            None
        );
        // The dump's or the warning's block is theirs: read once, by them.
        let found = super::super::find_all(&format!(
            "I bfc_allocator.cc:700] Sum Total of in-use chunks: 953.67MiB\nI bfc_allocator.cc:702] Stats: \nLimit: 1000000000\nInUse: 999999744\n{map}{OOM}"
        ));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(matches!(
            found[1].detail,
            Detail::TfOomTensor { stats: None, .. }
        ));
        let found = super::super::find_all(&format!(
            "W bfc_allocator.cc:211] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.00GiB.  Current allocation summary follows.\nI bfc_allocator.cc:702] Stats: \nLimit: 1000000000\nInUse: 999999744\n{map}{OOM}"
        ));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(matches!(
            found[0].detail,
            Detail::TfBfcAllocator { stats: Some(_), .. }
        ));
        assert!(matches!(
            found[1].detail,
            Detail::TfOomTensor { stats: None, .. }
        ));
    }

    /// The printed sizes of the bins of the BFC message in `text`.
    fn bin_sizes(text: &str) -> Vec<String> {
        let found = super::super::find_all(text);
        let Some(Detail::TfBfcAllocator { bins, .. }) = found.first().map(|m| &m.detail) else {
            panic!("{found:?}")
        };
        bins.iter()
            .flatten()
            .map(|f| f.quantity.printed.clone())
            .collect()
    }

    #[test]
    fn the_bin_lines_after_a_bfc_message_are_read() {
        const WARN: &str = "W bfc_allocator.cc:424] Allocator (GPU_1_bfc) ran out of memory trying to allocate 8.00MiB (rounded to 8388608).  Current allocation summary follows.\n";
        // Tabs, mpirun's tag and a glog header on every line; the sizes in order, bin by bin.
        let text = format!(
            "[1,3]<stderr>:{WARN}[1,3]<stderr>:I0101 00:00:01.000002 77 bfc_allocator.cc:870] Bin (256): \tTotal Chunks: 40, Chunks in use: 38. 10.0KiB allocated for chunks. 9.5KiB in use in bin. 1.1KiB client-requested in use in bin.\n[1,3]<stderr>:I0101 00:00:01.000003 77 bfc_allocator.cc:870] Bin (2048): \tTotal Chunks: 1, Chunks in use: 0. 2.0KiB allocated for chunks. 0B in use in bin. 0B client-requested in use in bin.\n[1,3]<stderr>:I0101 00:00:01.000004 77 bfc_allocator.cc:870] Bin (268435456): \tTotal Chunks: 3, Chunks in use: 3. 1.50GiB allocated for chunks. 1.50GiB in use in bin. 1.40GiB client-requested in use in bin.\n"
        );
        assert_eq!(
            bin_sizes(&text),
            [
                "256",
                "10.0KiB",
                "9.5KiB",
                "1.1KiB",
                "2048",
                "2.0KiB",
                "0B",
                "0B",
                "268435456",
                "1.50GiB",
                "1.50GiB",
                "1.40GiB"
            ]
        );
        let found = super::super::find_all(&text);
        let Detail::TfBfcAllocator { bins, stats, .. } = &found[0].detail else {
            panic!()
        };
        assert_eq!(bins[0][0].quantity.bytes.low, 256);
        assert_eq!(bins[2][0].quantity.bytes.low, 268_435_456);
        assert!(bins.iter().flatten().all(|f| f.label.is_none()));
        assert_eq!(*stats, None);
        // The message's span covers them: their sizes are not listed again as nearby.
        assert!(found[0].text.ends_with("client-requested in use in bin."));
        assert!(found[0].nearby.is_empty(), "{:?}", found[0].nearby);
        // The Stats block after the bins is still read.
        let with_stats = format!(
            "{WARN}I bfc_allocator.cc:870] Bin (256): Total Chunks: 1, Chunks in use: 1. 256B allocated for chunks. 256B in use in bin. 4B client-requested in use in bin.\nI bfc_allocator.cc:1044] Stats: \nLimit: 1000000000\nInUse: 999999744\n"
        );
        let found = super::super::find_all(&with_stats);
        let Detail::TfBfcAllocator { bins, stats, .. } = &found[0].detail else {
            panic!()
        };
        assert_eq!((bins.len(), bins[0].len()), (1, 4));
        assert_eq!(
            stats.as_ref().and_then(|s| s.limit_bytes),
            Some(1_000_000_000)
        );

        // Newer releases: the dump's own heading and the repeated "summary follows" first.
        assert_eq!(
            bin_sizes(
                "W bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.00GiB (rounded to 1073741824)requested by op Conv2D\nIf the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. \nCurrent allocation summary follows.\nCurrent allocation summary follows.\nI bfc_allocator.cc:1039] BFCAllocator dump for GPU_0_bfc\nI bfc_allocator.cc:1046] Bin (256): \tTotal Chunks: 2, Chunks in use: 2. 512B allocated for chunks. 512B in use in bin. 8B client-requested in use in bin.\n"
            ),
            ["256", "512B", "512B", "8B"]
        );
        // Before 1.4: no full stop after the count, and the client-requested bytes of all chunks.
        assert_eq!(
            bin_sizes(&format!(
                "{WARN}I bfc_allocator.cc:643] Bin (512):   Total Chunks: 3, Chunks in use: 1 1.5KiB allocated for chunks. 1.0KiB client-requested for chunks. 512B in use in bin. 300B client-requested in use in bin.\n"
            )),
            ["512", "1.5KiB", "1.0KiB", "512B", "300B"]
        );
        // A build that prints the byte counts as numbers.
        assert_eq!(
            bin_sizes(&format!(
                "{WARN}I bfc_allocator.cc:900] Bin (1024): \tTotal Chunks: 2, Chunks in use: 1. 2048 allocated for chunks. 1024 in use in bin. 1000 client-requested in use in bin.\n"
            )),
            ["1024", "2048", "1024", "1000"]
        );

        // Not a line of another shape, nor one after the user's own sentence, nor one far off.
        assert!(bin_sizes(&format!("{WARN}Bin (256): 40 chunks, 10.0KiB\n")).is_empty());
        assert!(
            bin_sizes(&format!(
                "{WARN}I asked about it here. Bin (256): Total Chunks: 1, Chunks in use: 1. 256B allocated for chunks. 256B in use in bin. 4B client-requested in use in bin.\n"
            ))
            .is_empty()
        );
        let far = format!(
            "{WARN}{}\nI bfc_allocator.cc:870] Bin (256): Total Chunks: 1, Chunks in use: 1. 256B allocated for chunks. 256B in use in bin. 4B client-requested in use in bin.\n",
            "x".repeat(600)
        );
        assert!(bin_sizes(&far).is_empty());
        // A line cut before its last size is not read, nor any after it.
        assert_eq!(
            bin_sizes(&format!(
                "{WARN}I] Bin (256): Total Chunks: 1, Chunks in use: 1. 256B allocated for chunks. 256B in use in bin.\nI] Bin (512): Total Chunks: 1, Chunks in use: 1. 512B allocated for chunks. 512B in use in bin. 8B client-requested in use in bin.\n"
            )),
            Vec::<String>::new()
        );
    }

    /// The device total and start-up free the tensor message of `text` carries.
    fn announced(text: &str) -> Option<(u32, String, Option<String>)> {
        super::super::find_all(text)
            .into_iter()
            .find_map(|m| match m.detail {
                Detail::TfOomTensor {
                    device_properties, ..
                } => Some(device_properties.map(|p| {
                    (
                        p.device_index,
                        p.total.printed,
                        p.free_at_startup.map(|q| q.printed),
                    )
                })),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no tensor message in {text:?}"))
    }

    #[test]
    fn the_device_announced_at_start_up_gives_the_tensor_message_its_total() {
        const OOM0: &str = "Resource exhausted: OOM when allocating tensor with shape[64,256,28,28] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n";
        const OOM1: &str = "Resource exhausted: OOM when allocating tensor with shape[64,256,28,28] and type float on /job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc\n";
        let before_1_14 = |n: u32, total: &str, free: &str| {
            format!(
                "I gpu_device.cc:1405] Found device {n} with properties: \nname: Tesla P100-PCIE-16GB major: 6 minor: 0 memoryClockRate(GHz): 1.3285\npciBusID: 0000:0{n}:00.0\ntotalMemory: {total} freeMemory: {free}\n"
            )
        };
        // Before 1.14: total and free; the free is the start-up's, kept apart.
        let log = format!(
            "{}I gpu_device.cc:1484] Adding visible gpu devices: 0\nEpoch 1/5\n{OOM0}",
            before_1_14(0, "15.90GiB", "15.61GiB")
        );
        assert_eq!(
            announced(&log),
            Some((0, "15.90GiB".into(), Some("15.61GiB".into())))
        );
        let found = super::super::find_all(&log);
        let json = serde_json::to_value(&found[0]).unwrap();
        assert_eq!(json["device_properties"]["total"]["printed"], "15.90GiB");
        assert_eq!(json["device_properties"]["line"], 1);
        assert!(json["device_properties"].get("free").is_none());
        // From 1.14: deviceMemorySize, no free.
        let log = format!(
            "I gpu_device.cc:1618] Found device 0 with properties: \npciBusID: 0000:00:04.0 name: Tesla T4 computeCapability: 7.5\ncoreClock: 1.59GHz coreCount: 40 deviceMemorySize: 14.75GiB deviceMemoryBandwidth: 298.08GiB/s\n{OOM0}"
        );
        assert_eq!(announced(&log), Some((0, "14.75GiB".into(), None)));
        // Two devices: the message's own, not the nearest.
        let two = format!(
            "{}{}{OOM0}",
            before_1_14(0, "15.90GiB", "15.61GiB"),
            before_1_14(1, "11.17GiB", "11.10GiB")
        );
        assert_eq!(
            announced(&two),
            Some((0, "15.90GiB".into(), Some("15.61GiB".into())))
        );
        let two = format!(
            "{}{}{OOM1}",
            before_1_14(0, "15.90GiB", "15.61GiB"),
            before_1_14(1, "11.17GiB", "11.10GiB")
        );
        assert_eq!(
            announced(&two),
            Some((1, "11.17GiB".into(), Some("11.10GiB".into())))
        );

        // Not another device's, nor one announced after the message, nor one far before it.
        assert_eq!(
            announced(&format!("{}{OOM1}", before_1_14(0, "15.90GiB", "15.61GiB"))),
            None
        );
        assert_eq!(
            announced(&format!("{OOM0}{}", before_1_14(0, "15.90GiB", "15.61GiB"))),
            None
        );
        let far = format!(
            "{}{}\n{OOM0}",
            before_1_14(0, "15.90GiB", "15.61GiB"),
            "step 1 loss 0.5\n".repeat(1200)
        );
        assert_eq!(announced(&far), None);
        // Nor the size of a record without the properties' words.
        assert_eq!(
            announced(&format!(
                "Found device 0 with properties: name: Tesla T4\nthe batch takes 3.50GiB\n{OOM0}"
            )),
            None
        );
    }

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
