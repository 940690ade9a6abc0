//! PyTorch's caching allocator messages, read as `c10/cuda/CUDACachingAllocator.cpp` writes
//! them (commits eb42ad6e and 001074d2 of pytorch/pytorch), and the `cudaMallocAsync`
//! backend's (`c10/cuda/CUDAMallocAsyncAllocator.cpp`).
//!
//! The sentence form (PyTorch 2.1 on) is built in `DeviceCachingAllocator::malloc` as
//! `"CUDA out of memory. Tried to allocate " + format_size(alloc_size) + ". GPU " + device +
//! " has a total capacity of " + … + " is free. " + proc_info + allowed_info +
//! "Of the allocated memory " + format_size(allocated + private pools) +
//! " is allocated by PyTorch, " + private_pool_msg + "and " + format_size(reserved −
//! allocated − private pools) + " is reserved by PyTorch but unallocated." + hint`, where
//! `proc_info` lists NVML's compute processes ("Process P has X memory in use. ", or
//! "Including non-PyTorch memory, this process has X memory in use. " for its own PID),
//! `allowed_info` is `"X allowed; "` under `set_per_process_memory_fraction`, and
//! `private_pool_msg` is `"with X allocated in private pools (e.g., CUDA Graphs), "`.
//! The sentence form came with pytorch/pytorch#99699 (April 2023, so PyTorch 2.1), whose first
//! releases spelled "capacty" and suggested `max_split_size_mb`; the private-pool clause
//! followed pytorch/pytorch#121932. ROCm builds say "HIP" and "HIP Graphs". Before 2.1 the
//! numbers sat in one parenthesis ("(GPU 0; X total capacity; …)"). Every part after the
//! request is optional here, because quoted messages are often cut short; what is missing is
//! marked, never filled in.

use super::cursor::Cursor;
use super::scan::{Found, raised_as};
use super::{Detail, ProcessUse, Quantity, TorchHint};

/// How far past the anchor a message may reach (dozens of processes fit).
const WINDOW: usize = 8192;

pub(super) fn find(text: &str, out: &mut Vec<Found>) {
    for anchor in [
        "out of memory. Tried to allocate ",
        "Out of memory. Tried to allocate ",
    ] {
        for (at, _) in text.match_indices(anchor) {
            out.extend(read_caching(text, at, anchor.len()));
        }
    }
    for (at, _) in text.match_indices(" would exceed allowed memory. (out of memory)") {
        out.extend(read_async(text, at));
    }
}

/// The device word before "out of memory" (`CUDA`, `HIP`), and where the message starts.
fn device_prefix(text: &str, at: usize) -> (Option<String>, usize) {
    let Some(before) = text[..at].strip_suffix(' ') else {
        return (None, at);
    };
    let word_start = before
        .char_indices()
        .rev()
        .find(|&(_, c)| !c.is_ascii_uppercase())
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &before[word_start..];
    if (2..=8).contains(&word.len()) {
        (Some(word.to_string()), word_start)
    } else {
        (None, at)
    }
}

fn read_caching(text: &str, at: usize, anchor_len: usize) -> Option<Found> {
    let (device_kind, start) = if text[at..].starts_with('O') {
        (None, at)
    } else {
        device_prefix(text, at)
    };
    let mut c = Cursor::new(text, at + anchor_len, at + anchor_len + WINDOW);
    let requested = c.torch_size()?;
    if let Some(legacy) = c.attempt(|c| legacy(c, &device_kind, &requested)) {
        return Some(found(text, start, c.pos, legacy));
    }
    let mut detail = Sentences::new(requested);
    let complete = detail.read(&mut c);
    if !complete {
        // A cut-off quote still ends at its last full sentence.
        c.lit_loose(".");
    }
    Some(found(
        text,
        start,
        c.pos,
        detail.into_detail(device_kind, !complete),
    ))
}

fn found(text: &str, start: usize, end: usize, detail: Detail) -> Found {
    Found {
        start,
        end,
        raised_as: raised_as(text, start),
        detail,
    }
}

struct Sentences {
    requested: Quantity,
    device_index: Option<u32>,
    device_total: Option<Quantity>,
    device_free: Option<Quantity>,
    processes: Vec<ProcessUse>,
    this_process: Option<Quantity>,
    allowed: Option<Quantity>,
    allocated: Option<Quantity>,
    private_pools: Option<Quantity>,
    reserved_unallocated: Option<Quantity>,
    hint: Option<TorchHint>,
}

impl Sentences {
    fn new(requested: Quantity) -> Sentences {
        Sentences {
            requested,
            device_index: None,
            device_total: None,
            device_free: None,
            processes: Vec::new(),
            this_process: None,
            allowed: None,
            allocated: None,
            private_pools: None,
            reserved_unallocated: None,
            hint: None,
        }
    }

    /// Reads the sentences after the request; `true` when it got to "…but unallocated.".
    fn read(&mut self, c: &mut Cursor) -> bool {
        let Some((index, total, free)) = c.attempt(|c| {
            c.lit(". GPU ").then_some(())?;
            let index = u32::try_from(c.uint()?).ok()?;
            (c.lit(" has a total capacity of ") || c.lit(" has a total capacty of "))
                .then_some(())?;
            let total = c.torch_size()?;
            c.lit(" of which ").then_some(())?;
            let free = c.torch_size()?;
            c.lit(" is free.").then_some((index, total, free))
        }) else {
            return false;
        };
        self.device_index = Some(index);
        self.device_total = Some(total);
        self.device_free = Some(free);
        for _ in 0..256 {
            if let Some(p) = c.attempt(|c| {
                c.lit(" Process ").then_some(())?;
                let pid = c.uint()?;
                c.lit(" has ").then_some(())?;
                let used = c.torch_size()?;
                c.lit(" memory in use.").then_some(ProcessUse { pid, used })
            }) {
                self.processes.push(p);
            } else if let Some(q) = c.attempt(|c| {
                c.lit(" Including non-PyTorch memory, this process has ")
                    .then_some(())?;
                let q = c.torch_size()?;
                c.lit(" memory in use.").then_some(q)
            }) {
                self.this_process = Some(q);
            } else if let Some(q) = c.attempt(|c| {
                c.skip_ws();
                let q = c.torch_size()?;
                c.lit(" allowed;").then_some(q)
            }) {
                self.allowed = Some(q);
            } else {
                break;
            }
        }
        let Some(allocated) = c.attempt(|c| {
            c.lit(" Of the allocated memory ").then_some(())?;
            let q = c.torch_size()?;
            c.lit(" is allocated by PyTorch,").then_some(q)
        }) else {
            return false;
        };
        self.allocated = Some(allocated);
        self.private_pools = c.attempt(|c| {
            c.lit(" with ").then_some(())?;
            let q = c.torch_size()?;
            c.lit(" allocated in private pools (e.g.,").then_some(())?;
            c.skip_ws();
            c.token(b")")?;
            c.lit(" Graphs),").then_some(q)
        });
        let Some(unallocated) = c.attempt(|c| {
            c.lit(" and ").then_some(())?;
            let q = c.torch_size()?;
            c.lit(" is reserved by PyTorch but unallocated.")
                .then_some(q)
        }) else {
            return false;
        };
        self.reserved_unallocated = Some(unallocated);
        self.hint = read_hint(c);
        true
    }

    fn into_detail(self, device_kind: Option<String>, truncated: bool) -> Detail {
        Detail::PytorchCaching {
            device_kind,
            requested: self.requested,
            device_index: self.device_index,
            device_total: self.device_total,
            device_free: self.device_free,
            processes: self.processes,
            this_process: self.this_process,
            allowed: self.allowed,
            allocated: self.allocated,
            private_pools: self.private_pools,
            reserved_unallocated: self.reserved_unallocated,
            hint: self.hint,
            truncated,
        }
    }
}

/// "If reserved but unallocated memory is large try setting …" and the documentation pointer.
fn read_hint(c: &mut Cursor) -> Option<TorchHint> {
    c.attempt(|c| {
        c.lit(" If reserved but unallocated memory is large try setting")
            .then_some(())?;
        let hint = if c.lit(" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
            || c.lit(" PYTORCH_ALLOC_CONF=expandable_segments:True")
        {
            TorchHint::ExpandableSegments
        } else if c.lit(" max_split_size_mb") {
            TorchHint::MaxSplitSizeMb
        } else {
            return None;
        };
        c.lit(" to avoid fragmentation.").then_some(())?;
        read_documentation_pointer(c);
        Some(hint)
    })
}

/// " See documentation for Memory Management (URL)" or "… and PYTORCH_CUDA_ALLOC_CONF".
fn read_documentation_pointer(c: &mut Cursor) {
    c.attempt(|c| {
        c.lit(" See documentation for Memory Management")
            .then_some(())?;
        if c.lit(" and PYTORCH_CUDA_ALLOC_CONF") {
            return Some(());
        }
        c.lit(" (").then_some(())?;
        c.until_on_line(b')')?;
        c.lit_loose(")").then_some(())
    });
}

/// "(GPU 0; 7.93 GiB total capacity; 130.35 MiB already allocated; 47.06 MiB free;
/// [X allowed; ]188.00 MiB reserved in total by PyTorch)" and its hint.
fn legacy(c: &mut Cursor, device_kind: &Option<String>, requested: &Quantity) -> Option<Detail> {
    c.lit(" (GPU ").then_some(())?;
    let device_index = u32::try_from(c.uint()?).ok()?;
    c.lit_loose("; ").then_some(())?;
    let device_total = c.torch_size()?;
    c.lit(" total capacity; ").then_some(())?;
    let allocated = c.torch_size()?;
    c.lit(" already allocated; ").then_some(())?;
    let device_free = c.torch_size()?;
    c.lit(" free; ").then_some(())?;
    let allowed = c.attempt(|c| {
        let q = c.torch_size()?;
        c.lit(" allowed; ").then_some(q)
    });
    let reserved = c.torch_size()?;
    (c.lit(" reserved in total by PyTorch)") || c.lit(" cached)")).then_some(())?;
    c.attempt(|c| {
        c.lit(" If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
            .then_some(())?;
        read_documentation_pointer(c);
        Some(())
    });
    Some(Detail::PytorchCachingLegacy {
        device_kind: device_kind.clone(),
        requested: requested.clone(),
        device_index,
        device_total,
        allocated,
        device_free,
        allowed,
        reserved,
    })
}

/// "Allocation on device N would exceed allowed memory. (out of memory)" and its table.
fn read_async(text: &str, at: usize) -> Option<Found> {
    const LEAD: &str = "Allocation on device ";
    let line_before = &text[super::scan::line_start(text, at)..at];
    let lead_at = line_before.rfind(LEAD)?;
    let index_text = &line_before[lead_at + LEAD.len()..];
    let device_index: u32 = index_text.parse().ok()?;
    let start = at - line_before.len() + lead_at;
    let anchor_end = at + " would exceed allowed memory. (out of memory)".len();
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    let row = |c: &mut Cursor, label: &str| {
        c.attempt(|c| {
            c.lit(label).then_some(())?;
            c.skip_ws();
            c.torch_size()
        })
    };
    let allocated = row(&mut c, " Currently allocated :");
    let requested = row(&mut c, " Requested :");
    let device_total = row(&mut c, " Device limit :");
    let device_free = row(&mut c, " Free (according to CUDA):");
    let limit = row(
        &mut c,
        " PyTorch limit (set by user-supplied memory fraction) :",
    );
    Some(found(
        text,
        start,
        c.pos,
        Detail::PytorchCudaMallocAsync {
            device_index,
            allocated,
            requested,
            device_total,
            device_free,
            limit,
        },
    ))
}
