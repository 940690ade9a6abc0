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
//! marked, never filled in. A paste that starts at "Tried to allocate" (its lead-in lost) is
//! read from there, and the "more than 1EB" `format_size` prints for 2^60 bytes and up is read
//! as that open interval.

use super::cursor::Cursor;
use super::scan::{Found, Reader, back_from, raised_as};
use super::size::more_than_one_eib;
use super::{Detail, ProcessUse, Quantity, TorchHint};

/// How far past the anchor a message may reach (dozens of processes fit).
const WINDOW: usize = 8192;

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    ("Tried to allocate ", read_caching),
    ("would exceed allowed memory. (out of memory)", read_async),
    ("Allocation on device", read_async_cut),
];

/// The lead-in before "Tried to allocate": "CUDA out of memory. " (or `HIP`, `NPU`…, or
/// "Out of memory. "), and where the message starts; `None` when the paste starts at "Tried".
fn lead_in(text: &str, at: usize) -> Option<(Option<String>, usize)> {
    let from = back_from(text, at);
    let before = &text[from..at];
    let before = before.strip_suffix(' ').unwrap_or(before);
    let before = before.strip_suffix('.')?;
    if let Some(b) = before.strip_suffix("Out of memory") {
        return Some((None, from + b.len()));
    }
    let b = before.strip_suffix("out of memory")?;
    let Some(word) = b.strip_suffix(' ') else {
        return Some((None, from + b.len()));
    };
    let word_start = word
        .char_indices()
        .rev()
        .find(|&(_, c)| !c.is_ascii_uppercase())
        .map_or(0, |(i, c)| i + c.len_utf8());
    if (2..=8).contains(&(word.len() - word_start)) {
        Some((Some(word[word_start..].to_string()), from + word_start))
    } else {
        Some((None, from + b.len()))
    }
}

fn read_caching(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let (device_kind, start) = lead_in(text, at).unwrap_or((None, at));
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    if c.lit("more than 1EB memory") {
        c.lit_loose(".");
        let requested = Quantity {
            printed: "more than 1EB".into(),
            bytes: more_than_one_eib(),
        };
        let detail = Sentences::new(requested).into_detail(device_kind, true);
        return Some(found(text, start, c.pos, detail));
    }
    let requested = c.torch_size()?;
    // MPS says "Tried to allocate X on private pool": its own reader takes it.
    if c.clone().lit(" on private pool") || c.clone().lit(" on shared pool") {
        return None;
    }
    if let Some(legacy) = c.attempt(|c| super::pytorch_legacy::read(c, &device_kind, &requested)) {
        return Some(found(text, start, c.pos, legacy));
    }
    let mut detail = Sentences::new(requested);
    let complete = detail.read(&mut c);
    if !complete && !detail.cut_at_device {
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
    cut_at_device: bool,
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
            cut_at_device: false,
        }
    }

    /// Reads the sentences after the request; `true` when it got to "…but unallocated.".
    fn read(&mut self, c: &mut Cursor) -> bool {
        let Some((index, total, free)) = c.attempt(|c| {
            c.lit(". GPU ").then_some(())?;
            let index = c.device_index()?;
            c.skip_ws();
            (c.lit("has a total capacity of ") || c.lit("has a total capacty of ")).then_some(())?;
            let total = c.torch_size()?;
            c.lit(" of which ").then_some(())?;
            let free = c.torch_size()?;
            c.lit(" is free.").then_some((index, total, free))
        }) else {
            // "… GPU " and then no number: PyTorch printed GPU 0's index as the NUL character,
            // which ended the text there.
            if c.attempt(|c| {
                c.lit(". GPU").then_some(())?;
                let after = c.pos;
                c.skip_ws();
                let cut = c.at_end_or_not_digit();
                c.pos = after;
                cut.then_some(())
            })
            .is_some()
            {
                self.cut_at_device = true;
                self.device_index = Some(0);
            }
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
            cut_at_device: self.cut_at_device,
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

/// "Allocation on device N would exceed allowed memory. (out of memory)" and its table.
fn read_async(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    const LEAD: &str = "Allocation on device ";
    let line_before = &text[back_from(text, at)..at];
    let lead_at = line_before.rfind(LEAD)?;
    let index_text = line_before[lead_at + LEAD.len()..].trim_end();
    let device_index = Cursor::new(index_text, 0, index_text.len())
        .device_index()
        .filter(|_| index_text.len() <= 20)?;
    let start = at - line_before.len() + lead_at;
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
            cut_at_device: false,
        },
    ))
}

/// "Allocation on device " and nothing after it: the `cudaMallocAsync` message cut where
/// PyTorch printed device 0's index as the NUL character (pytorch/pytorch#168369), as
/// ComfyUI, which turns that backend on, reports it. Taken only where the text says it is an
/// exception's message: after `…OutOfMemoryError:`, ComfyUI's `!!! Exception during
/// processing !!!` or its error report's `Exception Message:`.
fn read_async_cut(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + 64);
    c.skip_ws();
    let mut ahead = c.clone();
    ahead.device_index();
    ahead.skip_ws();
    if ahead.lit("would exceed") {
        // The whole message: `read_async` reads it.
        return None;
    }
    let before = text[back_from(text, at)..at].trim_end();
    let raised = raised_as(text, at);
    let is_message = raised
        .as_deref()
        .is_some_and(|r| r.ends_with("OutOfMemoryError"))
        || before.ends_with("!!! Exception during processing !!!")
        || before.ends_with("!!! Exception during processing!!!")
        || before.ends_with("Exception Message:**")
        || before.ends_with("Exception Message:");
    if !is_message {
        return None;
    }
    Some(Found {
        start: at,
        end: anchor_end,
        raised_as: raised,
        detail: Detail::PytorchCudaMallocAsync {
            device_index: 0,
            allocated: None,
            requested: None,
            device_total: None,
            device_free: None,
            limit: None,
            cut_at_device: true,
        },
    })
}
