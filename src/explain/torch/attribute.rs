//! The documented rule, applied: the cap first, then whether the device had room (a margin of
//! one 2 MiB page), then every holder of memory compared with the shortfall; the largest that
//! alone covers it is the primary cause, the others secondary, and none means capacity.

use super::holders::Holders;
use super::{Evidence, Reserved};
use crate::explain::context::{
    FRAGMENTATION_MIN_SHARE_OF_REQUEST, FRAGMENTATION_MIN_SHARE_OF_RESERVED, ROOM_MARGIN_BYTES,
};
use crate::explain::interval::{Iv, Verdict, percent};
use crate::explain::{Cause, Diagnosis, cause, nvidia_smi_check, snapshot_checks};

/// A holder of memory that might have served the request.
struct Holder {
    causes: Vec<Cause>,
    bytes: Iv,
    /// What it is, for sentences ("this process's memory outside PyTorch's allocator").
    what: String,
    /// Why it is too small, for `ruled_out` ("only 331.08 MiB of … is unallocated").
    too_small: String,
}

/// `free + extra − request ≥ one page`: the allocation would have had room.
fn room(free: Iv, extra: Iv, request: Iv) -> Verdict {
    free.plus(extra)
        .minus(request)
        .ge(Iv::exact(ROOM_MARGIN_BYTES))
}

pub(super) fn decide(d: &mut Diagnosis, e: &Evidence, holders: Holders) {
    // PyTorch prints the size it asked `cudaMalloc` for (`alloc_size`: the whole segment,
    // 2 MiB for a small request), so the printed request is what the driver refused.
    let (r, f) = (e.request, e.free);
    let had_room = room(f, Iv::exact(0), r);
    if let Some(cap) = e.allowed {
        let reserved = e.reserved.as_ref().map_or(Iv::exact(0), |x| x.total);
        let need = d.bytes(
            "reserved_plus_request_bytes",
            "reserved + requested",
            reserved.plus(r),
        );
        match need.gt(cap) {
            // With room on the device and the cap not ruled out, only the cap refused.
            Verdict::Yes | Verdict::Undecided if had_room == Verdict::Yes => {
                d.cause = Some(cause::FRACTION_CAP);
                d.summary = format!(
                    "The per-process cap refused it: PyTorch's {reserved} reserved plus the {r} request is {need}, against the {cap} allowed, while the device still had {f} free."
                );
            }
            Verdict::Yes => {
                d.cause = Some(cause::FRACTION_CAP);
                d.summary = format!(
                    "The per-process cap refused it: PyTorch's {reserved} reserved plus the {r} request is {need}, over the {cap} allowed."
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
        if d.cause == Some(cause::FRACTION_CAP) {
            d.check(
                "grep -rn 'set_per_process_memory_fraction\\|per_process_memory_fraction' . ; echo \"$PYTORCH_CUDA_ALLOC_CONF\"",
                "finds where the cap is set: raise it, or budget the workload under it",
            );
        }
    }
    if had_room == Verdict::Yes {
        if d.cause.is_none() {
            d.summary = format!(
                "The device reported {f} free, more than the {r} requested and a page to spare, yet the allocation failed."
            );
            d.undecided(
                "Why did the driver refuse a request smaller than free memory?".into(),
                vec![cause::OTHER_PROCESS, cause::FRAGMENTATION],
                "PyTorch reads free memory after the refusal and after releasing its cache: memory another process freed in between, or a limit outside PyTorch (MIG, MPS, a container), gives this picture".into(),
            );
        }
        finish_checks(d, e);
        return;
    }
    let plain = r.minus(f);
    // Within a page of the request, the page is part of what was missing.
    let shortfall = if plain.low < ROOM_MARGIN_BYTES {
        d.bytes(
            "shortfall_bytes",
            "requested + one 2 MiB page − device_free",
            plain.plus(Iv::exact(ROOM_MARGIN_BYTES)).non_negative(),
        )
    } else {
        d.bytes(
            "shortfall_bytes",
            "requested − device_free",
            plain.non_negative(),
        )
    };
    let mut candidates = Vec::new();
    if let Some(x) = e.reserved.as_ref() {
        fragmentation_candidate(d, x, r, &mut candidates);
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
                what: "this process's memory outside PyTorch's allocator beyond its CUDA context (cuBLAS/cuDNN workspaces, NCCL buffers, other libraries)".into(),
                too_small: format!("this process holds only {outside} outside PyTorch's allocator beyond one CUDA context"),
            });
            candidates.push(Holder {
                causes: vec![cause::OTHER_PROCESS],
                bytes: others,
                what: "other processes' memory".into(),
                too_small: format!("other processes hold at most {}", Iv::exact(others.high)),
            });
        }
        Holders::Unsplit { outside_pytorch } => candidates.push(Holder {
            causes: vec![cause::OTHER_PROCESS, cause::OUTSIDE_ALLOCATOR],
            bytes: outside_pytorch,
            what: "device memory PyTorch did not reserve, beyond this process's CUDA context (other processes, or this process outside PyTorch's allocator)".into(),
            too_small: format!("only {outside_pytorch} of the device's used memory is outside PyTorch's reserve beyond one CUDA context"),
        }),
        Holders::OthersOnly { others } => candidates.push(Holder {
            causes: vec![cause::OTHER_PROCESS],
            bytes: others,
            what: "other processes' memory".into(),
            too_small: format!("other processes hold at most {}", Iv::exact(others.high)),
        }),
        Holders::None => {}
    }
    attribute(d, r, f, shortfall, candidates, e.reserved.is_some());
    finish_checks(d, e);
}

/// Reserved-but-unallocated memory, if it clears the floor (a share of reserved and of the
/// request): below it the pool's own slack, not fragmentation.
fn fragmentation_candidate(d: &mut Diagnosis, x: &Reserved, r: Iv, out: &mut Vec<Holder>) {
    let u = x.unallocated;
    let share = u.ratio(x.total).map(percent).unwrap_or_default();
    let of_reserved = floor(u, x.total, FRAGMENTATION_MIN_SHARE_OF_RESERVED);
    let of_request = floor(u, r, FRAGMENTATION_MIN_SHARE_OF_REQUEST);
    match (of_reserved, of_request) {
        (Verdict::Yes, Verdict::Yes) => out.push(Holder {
            causes: vec![cause::FRAGMENTATION],
            bytes: u,
            what: "reserved but unallocated memory (free blocks in partly used segments)".into(),
            too_small: format!(
                "only {u} of the {} reserved is unallocated ({share})",
                x.total
            ),
        }),
        (Verdict::No, _) => d.ruled_out.push(format!(
            "not fragmentation: only {u} of the {} reserved is unallocated ({share}), under the {:.0}% floor below which it is the allocator's own rounding",
            x.total,
            FRAGMENTATION_MIN_SHARE_OF_RESERVED * 100.0
        )),
        (_, Verdict::No) => d.ruled_out.push(format!(
            "not fragmentation: the {u} reserved but unallocated is under half the {r} request, slack rather than memory the request waited for"
        )),
        _ => d.undecided(
            "Is the reserved-but-unallocated memory fragmentation or the pool's slack?".into(),
            vec![cause::FRAGMENTATION, cause::CAPACITY],
            format!("{u} unallocated ({share} of {} reserved) is at the floor within the printed precision", x.total),
        ),
    }
}

/// `part ≥ share × whole` over the intervals.
fn floor(part: Iv, whole: Iv, share: f64) -> Verdict {
    let scaled = |v: i128| (v as f64 * share) as i128;
    part.ge(Iv {
        low: scaled(whole.low),
        high: scaled(whole.high),
    })
}

/// `whole`: the message gave PyTorch's figures, so memory no holder accounts for is in live
/// tensors; without them, nothing is concluded from what is missing.
fn attribute(d: &mut Diagnosis, r: Iv, f: Iv, shortfall: Iv, candidates: Vec<Holder>, whole: bool) {
    let mut sufficient: Vec<Holder> = Vec::new();
    for h in candidates {
        match room(f, h.bytes, r) {
            Verdict::Yes => sufficient.push(h),
            Verdict::Undecided => d.undecided(
                format!("Would the {} of {} have covered the {shortfall} shortfall?", h.bytes, h.what),
                h.causes.clone(),
                format!("free + that = {} against the {r} request and a 2 MiB page: the printed precision cannot tell", f.plus(h.bytes)),
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
            if h.causes[0] == cause::FRAGMENTATION {
                d.findings.push(
                    "Part of the reserved-but-unallocated memory may be blocks cached for another stream or waiting for one (record_stream); a snapshot shows each block's stream.".into(),
                );
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i128 = 1 << 20;

    #[test]
    fn a_margin_below_one_page_is_no_room() {
        let r = Iv::exact(20 * MIB);
        assert_eq!(room(Iv::exact(21 * MIB), Iv::exact(0), r), Verdict::No);
        assert_eq!(room(Iv::exact(22 * MIB), Iv::exact(0), r), Verdict::Yes);
        assert_eq!(room(Iv::exact(MIB), Iv::exact(21 * MIB), r), Verdict::Yes);
    }

    #[test]
    fn the_floor_is_a_share_of_both() {
        let reserved = Iv::exact(1000 * MIB);
        assert_eq!(floor(Iv::exact(50 * MIB), reserved, 0.05), Verdict::Yes);
        assert_eq!(floor(Iv::exact(49 * MIB), reserved, 0.05), Verdict::No);
        let printed = Iv {
            low: 49 * MIB,
            high: 51 * MIB,
        };
        assert_eq!(floor(printed, reserved, 0.05), Verdict::Undecided);
    }
}
