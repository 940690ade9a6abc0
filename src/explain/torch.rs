//! PyTorch's messages: which memory, had it been usable, would have served the request.
//!
//! The caching allocator prints its message after its retry chain has already released every
//! unsplit cached block, so what the message calls "reserved but unallocated" is memory in
//! partly used segments (or cached for another stream). The shortfall (request − free) is then
//! held by someone: split free blocks (fragmentation), free blocks in CUDA-graph private pools
//! (graph-pool), this process outside PyTorch's allocator (outside-allocator), other
//! processes (other-process) — or by live tensors (capacity). A holder whose memory alone
//! covers the shortfall is a cause; the largest is the primary one.

mod holders;

use super::interval::{Iv, Verdict, percent};
use super::{Cause, Diagnosis, cause, nvidia_smi_check, snapshot_checks};
use crate::oom_message::{Detail, Quantity};
use holders::{Holders, holders};

pub(super) fn diagnose(detail: &Detail, d: &mut Diagnosis) {
    match detail {
        Detail::PytorchCaching {
            requested,
            device_total: Some(total),
            device_free: Some(free),
            processes,
            this_process,
            allowed,
            allocated,
            private_pools,
            reserved_unallocated,
            truncated,
            ..
        } => {
            let pools = private_pools.as_ref().map(Iv::of);
            let reserved = match (allocated, reserved_unallocated) {
                (Some(a), Some(u)) => Some(reserved_view(d, Iv::of(a), Iv::of(u), pools)),
                _ => None,
            };
            let e = Evidence {
                request: Iv::of(requested),
                total: Iv::of(total),
                free: Iv::of(free),
                reserved,
                pools,
                allowed: allowed.as_ref().map(Iv::of),
            };
            let holders = holders(d, &e, this_process.as_ref(), processes);
            if *truncated {
                d.findings.push(
                    "The message stops before its last sentence; what it leaves out is not assumed.".into(),
                );
            }
            decide(d, &e, holders);
        }
        Detail::PytorchCaching { requested, .. } => {
            d.summary = format!(
                "A request for {} was refused; the message is cut before the numbers that decide why.",
                requested.printed
            );
            d.undecided(
                "Why was the request refused?".into(),
                vec![cause::CAPACITY, cause::FRAGMENTATION, cause::OTHER_PROCESS],
                "only the request survives in the text; the full message names free, reserved and per-process memory".into(),
            );
            snapshot_checks(d);
            nvidia_smi_check(d);
        }
        Detail::PytorchCachingLegacy {
            requested,
            device_total,
            allocated,
            device_free,
            allowed,
            reserved,
            ..
        } => {
            let (a, r) = (Iv::of(allocated), Iv::of(reserved));
            d.bytes("reserved_bytes", "reserved in total by PyTorch", r);
            let u = d.bytes(
                "reserved_unallocated_bytes",
                "reserved − allocated",
                r.minus(a).non_negative(),
            );
            d.fraction(
                "reserved_unallocated_share",
                "reserved_unallocated / reserved",
                u,
                r,
            );
            let e = Evidence {
                request: Iv::of(requested),
                total: Iv::of(device_total),
                free: Iv::of(device_free),
                reserved: Some(Reserved {
                    total: r,
                    unallocated: u,
                }),
                pools: None,
                allowed: allowed.as_ref().map(Iv::of),
            };
            let holders = holders(d, &e, None, &[]);
            decide(d, &e, holders);
        }
        Detail::PytorchCudaMallocAsync {
            allocated,
            requested: Some(requested),
            device_total: Some(total),
            device_free: Some(free),
            limit,
            ..
        } => malloc_async(
            d,
            allocated.as_ref(),
            requested,
            total,
            free,
            limit.as_ref(),
        ),
        _ => {
            d.summary = "The cudaMallocAsync backend refused a request; the message lacks the figures that decide why.".into();
            snapshot_checks(d);
            nvidia_smi_check(d);
        }
    }
}

struct Reserved {
    total: Iv,
    unallocated: Iv,
}

struct Evidence {
    request: Iv,
    total: Iv,
    free: Iv,
    reserved: Option<Reserved>,
    pools: Option<Iv>,
    allowed: Option<Iv>,
}

fn reserved_view(d: &mut Diagnosis, a: Iv, u: Iv, pools: Option<Iv>) -> Reserved {
    // PyTorch prints allocated + private pools, and reserved − allocated − private pools.
    let total = d.bytes(
        "reserved_bytes",
        "allocated (private pools included) + reserved_unallocated",
        a.plus(u),
    );
    if let Some(g) = pools {
        d.bytes(
            "live_tensor_bytes",
            "allocated − private_pools",
            a.minus(g).non_negative(),
        );
    }
    d.fraction(
        "reserved_unallocated_share",
        "reserved_unallocated / reserved",
        u,
        total,
    );
    Reserved {
        total,
        unallocated: u,
    }
}

/// A holder of memory that might have served the request.
struct Holder {
    causes: Vec<Cause>,
    bytes: Iv,
    /// What it is, for sentences ("this process's memory outside PyTorch's allocator").
    what: String,
    /// Why it is too small, for `ruled_out` ("only 331.08 MiB of … is unallocated").
    too_small: String,
}

fn decide(d: &mut Diagnosis, e: &Evidence, holders: Holders) {
    let (r, f) = (e.request, e.free);
    if let Some(cap) = e.allowed {
        let reserved = e.reserved.as_ref().map_or(Iv::exact(0), |x| x.total);
        let need = d.bytes(
            "reserved_plus_request_bytes",
            "reserved + requested",
            reserved.plus(r),
        );
        match need.gt(cap) {
            Verdict::Yes => {
                d.cause = Some(cause::FRACTION_CAP);
                d.summary = format!(
                    "The per-process cap refused it: PyTorch's {reserved} reserved plus the {r} request is {need}, over the {cap} allowed{}.",
                    if f.ge(r) == Verdict::Yes { format!(", while the device still had {f} free") } else { String::new() }
                );
                d.check(
                    "grep -rn 'set_per_process_memory_fraction\\|per_process_memory_fraction' . ; echo \"$PYTORCH_CUDA_ALLOC_CONF\"",
                    "finds where the cap is set: raise it, or budget the workload under it",
                );
            }
            Verdict::Undecided => d.undecided(
                "Did the per-process cap refuse the request?".into(),
                vec![cause::FRACTION_CAP, cause::CAPACITY],
                format!("reserved + request = {need} against {cap} allowed: the printed precision cannot tell"),
            ),
            Verdict::No => d.ruled_out.push(format!(
                "not the per-process cap: reserved + request = {need}, within the {cap} allowed"
            )),
        }
    }
    let fragmentation = e.reserved.as_ref().map(|x| (x, x.unallocated.ge(r)));
    if f.ge(r) == Verdict::Yes {
        // The device had room: whoever holds the rest is not why this request failed.
        if d.cause.is_none() {
            d.summary = format!(
                "The device reported {f} free, more than the {r} requested, yet the allocation failed."
            );
            d.undecided(
                "Why did the driver refuse a request smaller than free memory?".into(),
                vec![cause::OTHER_PROCESS, cause::FRAGMENTATION],
                "PyTorch reads free memory after the refusal and after releasing its cache: memory another process freed in between, or a limit outside PyTorch (MIG, MPS, a container), gives this picture".into(),
            );
            if let Some((x, Verdict::Yes)) = fragmentation {
                d.findings.push(format!(
                    "PyTorch also held {} reserved but unallocated, more than the request, in blocks it could not use.",
                    x.unallocated
                ));
            }
        }
        finish_checks(d, e);
        return;
    }
    if let Some((x, Verdict::Yes)) = fragmentation {
        fragmented(d, x, r);
    }
    let shortfall = d.bytes(
        "shortfall_bytes",
        "requested − device_free",
        r.minus(f).non_negative(),
    );
    let mut candidates = Vec::new();
    if let Some((x, verdict)) = fragmentation
        && verdict != Verdict::Yes
    {
        let share = x
            .unallocated
            .ratio(x.total)
            .map(percent)
            .unwrap_or_default();
        candidates.push(Holder {
            causes: vec![cause::FRAGMENTATION],
            bytes: x.unallocated,
            what: "reserved but unallocated memory".into(),
            too_small: format!(
                "only {} of the {} reserved is unallocated ({share})",
                x.unallocated, x.total
            ),
        });
    }
    if let Some(g) = e.pools {
        candidates.push(Holder {
            causes: vec![cause::GRAPH_POOL],
            bytes: g,
            what: "free blocks in CUDA-graph private pools".into(),
            too_small: format!("only {g} sits free in CUDA-graph private pools"),
        });
    }
    match holders {
        Holders::Split { outside, others } => {
            candidates.push(Holder {
                causes: vec![cause::OUTSIDE_ALLOCATOR],
                bytes: outside,
                what: "this process's memory outside PyTorch's allocator (CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers)".into(),
                too_small: format!("this process holds only {outside} outside PyTorch's allocator"),
            });
            candidates.push(Holder {
                causes: vec![cause::OTHER_PROCESS],
                bytes: others,
                what: "other processes' memory".into(),
                too_small: format!("other processes hold at most {}", Iv { low: others.high, high: others.high }),
            });
        }
        Holders::Unsplit { outside_pytorch } => candidates.push(Holder {
            causes: vec![cause::OTHER_PROCESS, cause::OUTSIDE_ALLOCATOR],
            bytes: outside_pytorch,
            what: "device memory PyTorch did not reserve (other processes, or this process outside PyTorch's allocator)".into(),
            too_small: format!("only {outside_pytorch} of the device's used memory is outside PyTorch's reserve"),
        }),
        Holders::OthersOnly { others } => candidates.push(Holder {
            causes: vec![cause::OTHER_PROCESS],
            bytes: others,
            what: "other processes' memory".into(),
            too_small: format!(
                "other processes hold at most {}",
                Iv {
                    low: others.high,
                    high: others.high
                }
            ),
        }),
        Holders::None => {}
    }
    attribute(d, r, f, shortfall, candidates, e.reserved.is_some());
    finish_checks(d, e);
}

/// Reserved-but-unallocated memory alone covers the request: no piece of it could.
fn fragmented(d: &mut Diagnosis, x: &Reserved, r: Iv) {
    if d.cause.is_none() {
        d.cause = Some(cause::FRAGMENTATION);
        d.summary = format!(
            "PyTorch held {} reserved but unallocated, more than the {r} requested, yet no free block could take it: the free memory is split across partly used segments.",
            x.unallocated
        );
    } else {
        d.secondary(cause::FRAGMENTATION);
    }
    d.findings.push(
        "Part of the reserved-but-unallocated memory may be blocks cached for another stream or waiting for one (record_stream); a snapshot shows each block's stream.".into(),
    );
}

/// `whole`: the message gave PyTorch's figures, so memory no holder accounts for is in live
/// tensors; without them, nothing is concluded from what is missing.
fn attribute(d: &mut Diagnosis, r: Iv, f: Iv, shortfall: Iv, candidates: Vec<Holder>, whole: bool) {
    let mut sufficient: Vec<Holder> = Vec::new();
    for h in candidates {
        let with = f.plus(h.bytes);
        match with.ge(r) {
            Verdict::Yes => sufficient.push(h),
            Verdict::Undecided => d.undecided(
                format!("Would the {} of {} have covered the {shortfall} shortfall?", h.bytes, h.what),
                h.causes.clone(),
                format!("free + that = {with} against the {r} request: the printed precision cannot tell"),
            ),
            Verdict::No => {
                let name = crate::cause::join(&h.causes, " or ");
                d.ruled_out.push(format!(
                    "not {name}: {}, less than the {shortfall} shortfall",
                    h.too_small
                ))
            }
        }
    }
    sufficient.sort_by_key(|h| std::cmp::Reverse(h.bytes.mid()));
    for (i, h) in sufficient.iter().enumerate() {
        let decided = h.causes.len() == 1;
        if i == 0 && d.cause.is_none() && decided {
            d.cause = Some(h.causes[0]);
            d.summary = format!(
                "{r} was refused with {f} free; {} came to {}, more than the {shortfall} shortfall.",
                h.what, h.bytes
            );
        } else if decided {
            d.secondary(h.causes[0]);
            d.findings.push(format!(
                "{} also: {} came to {}, enough on its own to cover the {shortfall} shortfall.",
                h.causes[0], h.what, h.bytes
            ));
        } else {
            d.undecided(
                format!("Who holds the {} of {}?", h.bytes, h.what),
                h.causes.clone(),
                format!(
                    "it covers the {shortfall} shortfall, but the message does not say whose it is"
                ),
            );
            if d.summary.is_empty() {
                d.summary = format!(
                    "{r} was refused with {f} free; {} of {} would have covered it, and the message does not say whose.",
                    h.bytes, h.what
                );
            }
        }
    }
    if d.cause.is_none() && sufficient.is_empty() && d.undecided.is_empty() && !whole {
        d.summary = format!(
            "{r} was refused with {f} free; the message stops before PyTorch's own figures, which decide whether live tensors or cached memory filled the rest."
        );
        d.undecided(
            "What filled this process's memory?".into(),
            vec![
                cause::CAPACITY,
                cause::FRAGMENTATION,
                cause::OUTSIDE_ALLOCATOR,
            ],
            "the sentence with allocated and reserved-but-unallocated memory is missing".into(),
        );
    } else if d.cause.is_none() && sufficient.is_empty() && d.undecided.is_empty() {
        d.cause = Some(cause::CAPACITY);
        d.summary = format!(
            "{r} was refused with {f} free, and no memory that was not in live tensors would have covered the {shortfall} shortfall: the live set plus this request exceeds the card."
        );
    }
}

fn finish_checks(d: &mut Diagnosis, e: &Evidence) {
    let named: Vec<Cause> = cause::ALL
        .into_iter()
        .filter(|c| {
            d.cause == Some(*c)
                || d.secondary_causes.contains(c)
                || d.undecided.iter().any(|u| u.candidates.contains(c))
        })
        .collect();
    let mentions = |c: Cause| named.contains(&c);
    if mentions(cause::FRAGMENTATION) {
        d.check(
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py",
            "the allocator maps pages on demand and gives back free ones, so split free memory can serve the request",
        );
    }
    if mentions(cause::GRAPH_POOL) {
        d.check_python(
            "print(torch.cuda.memory_summary())",
            "before the failing step: shows the private pools' share; fewer captured sizes or a shared pool (graph_pool_handle) shrinks them",
        );
    }
    if mentions(cause::OUTSIDE_ALLOCATOR) {
        d.check(
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC python train.py",
            "logs every buffer NCCL allocates outside PyTorch; compare torch.cuda.mem_get_info() with torch.cuda.memory_reserved()",
        );
    }
    if mentions(cause::OTHER_PROCESS) || mentions(cause::OUTSIDE_ALLOCATOR) {
        nvidia_smi_check(d);
    }
    if mentions(cause::CAPACITY) {
        d.check(
            format!(
                "headroom plan --capacity {}B --weights WEIGHTS --other-peak PEAK --margin MARGIN --kv-per-request KV",
                e.total.low
            ),
            "the budget against this card's total, category by category: the live set at the peak must fit with a margin",
        );
    }
    snapshot_checks(d);
}

fn malloc_async(
    d: &mut Diagnosis,
    allocated: Option<&Quantity>,
    requested: &Quantity,
    total: &Quantity,
    free: &Quantity,
    limit: Option<&Quantity>,
) {
    let (r, t, f) = (Iv::of(requested), Iv::of(total), Iv::of(free));
    let a = allocated.map_or(Iv::exact(0), Iv::of);
    if let Some(cap) = limit.map(Iv::of) {
        let need = d.bytes(
            "allocated_plus_request_bytes",
            "currently allocated + requested",
            a.plus(r),
        );
        match need.gt(cap) {
            Verdict::Yes => {
                d.cause = Some(cause::FRACTION_CAP);
                d.summary = format!("The per-process limit refused it: {a} allocated plus {r} requested is {need}, over the {cap} limit.");
            }
            Verdict::Undecided => d.undecided(
                "Did the per-process limit refuse the request?".into(),
                vec![cause::FRACTION_CAP, cause::CAPACITY],
                format!("allocated + request = {need} against a {cap} limit: the printed precision cannot tell"),
            ),
            Verdict::No => d.ruled_out.push(format!("not the per-process limit: {need} is within {cap}")),
        }
    }
    let used = d.bytes("device_used_bytes", "device_limit − free", t.minus(f));
    let unexplained = d.bytes(
        "not_allocated_by_pytorch_bytes",
        "device_used − currently_allocated",
        used.minus(a).non_negative(),
    );
    if d.cause.is_none() {
        let shortfall = d.bytes(
            "shortfall_bytes",
            "requested − free",
            r.minus(f).non_negative(),
        );
        match f.plus(unexplained).ge(r) {
            Verdict::No => {
                d.cause = Some(cause::CAPACITY);
                d.summary = format!(
                    "{r} was refused with {f} free; PyTorch's live allocations ({a}) leave too little on the card."
                );
            }
            _ => {
                d.summary = format!(
                    "{r} was refused with {f} free; {unexplained} in use is not PyTorch's live allocations, more than the {shortfall} shortfall."
                );
                d.undecided(
                    format!("Who holds the {unexplained} PyTorch has not allocated?"),
                    vec![cause::PENDING_FREE, cause::OTHER_PROCESS, cause::OUTSIDE_ALLOCATOR],
                    "memory freed into the cudaMallocAsync pool but still pending on another stream, other processes and other libraries all look the same in these figures".into(),
                );
                nvidia_smi_check(d);
            }
        }
    }
    snapshot_checks(d);
}
