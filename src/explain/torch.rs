//! PyTorch's messages: which memory, had it been usable, would have served the request.
//!
//! The caching allocator prints its message after its retry chain has already released every
//! unsplit cached block, so what the message calls "reserved but unallocated" is memory in
//! partly used segments (or cached for another stream). The shortfall (request − free, plus
//! one 2 MiB page of margin) is then held by someone: split free blocks (fragmentation), free
//! blocks in CUDA-graph private pools (graph-pool), this process outside PyTorch's allocator
//! beyond its CUDA context (outside-allocator), other processes (other-process) — or by live
//! tensors (capacity). Every holder is compared first; one whose memory alone covers the
//! shortfall is a cause, the largest the primary one (`attribute`).

mod attribute;
mod findings;
pub(super) use findings::address_as_size;
mod holders;
mod malloc_async;

use super::context::{Era, IMPOSSIBLE_BYTES};
use super::interval::{Iv, Verdict};
use super::{Diagnosis, cause, nvidia_smi_check, snapshot_checks};
use crate::oom_message::{Detail, Quantity};
use holders::holders;

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
                era: Era::Lazy,
            };
            if *truncated {
                d.findings.push(
                    "The message stops before its last sentence; what it leaves out is not assumed.".into(),
                );
            }
            if findings::impossible_request(d, requested) {
                return;
            }
            findings::sentence_form(d, &e, this_process.as_ref(), processes);
            let holders = holders(d, &e, this_process.as_ref(), processes);
            attribute::decide(d, &e, holders);
        }
        Detail::PytorchCaching { requested, .. }
        | Detail::PytorchCachingLegacy { requested, .. }
            if legacy_figures(detail).is_none() =>
        {
            if findings::impossible_request(d, requested) {
                return;
            }
            if let Detail::PytorchCaching {
                cut_at_device: true,
                ..
            } = detail
            {
                d.findings.push(format!("{NUL_CUT} (the caching allocator's message: pytorch/pytorch#123984, fixed in PyTorch 2.4)."));
            }
            cut_short(d, requested);
        }
        Detail::PytorchCachingLegacy {
            requested, allowed, ..
        } => {
            let Some((total, allocated, free, reserved)) = legacy_figures(detail) else {
                return;
            };
            let a = Iv::of(allocated);
            let (r, u) = match reserved {
                LegacyReserve::Total(q) => {
                    let r = d.bytes("reserved_bytes", "reserved in total by PyTorch", Iv::of(q));
                    findings::legacy_total_below_allocated(d, allocated, q);
                    let u = d.bytes(
                        "reserved_unallocated_bytes",
                        "reserved − allocated",
                        r.minus(a).non_negative(),
                    );
                    (r, u)
                }
                LegacyReserve::Cached(q) => {
                    // Before 1.4 "cached" was already reserved − allocated.
                    let u = d.bytes(
                        "reserved_unallocated_bytes",
                        "cached (reserved − allocated in PyTorch < 1.4)",
                        Iv::of(q),
                    );
                    let r = d.bytes("reserved_bytes", "allocated + cached", a.plus(u));
                    (r, u)
                }
            };
            d.fraction(
                "reserved_unallocated_share",
                "reserved_unallocated / reserved",
                u,
                r,
            );
            let e = Evidence {
                request: Iv::of(requested),
                total: Iv::of(total),
                free: Iv::of(free),
                reserved: Some(Reserved {
                    total: r,
                    unallocated: u,
                }),
                pools: None,
                allowed: allowed.as_ref().map(Iv::of),
                era: Era::Eager,
            };
            if findings::impossible_request(d, requested) {
                return;
            }
            findings::common(d, &e);
            let holders = holders(d, &e, None, &[]);
            attribute::decide(d, &e, holders);
        }
        Detail::PytorchCudaMallocAsync {
            allocated,
            requested: Some(requested),
            device_total: Some(total),
            device_free: Some(free),
            limit,
            ..
        } => malloc_async::diagnose(
            d,
            allocated.as_ref(),
            requested,
            total,
            free,
            limit.as_ref(),
        ),
        Detail::PytorchCudaMallocAsync {
            cut_at_device: true,
            ..
        } => {
            d.summary = "The cudaMallocAsync backend refused a request on GPU 0; the message was cut where PyTorch printed the device, so its table (allocated, requested, device limit, free) never reached the log.".into();
            d.findings.push(format!(
                "{NUL_CUT} (cudaMallocAsync's message: pytorch/pytorch#168369)."
            ));
            d.undecided(
                "Why was the request refused?".into(),
                vec![cause::CAPACITY, cause::OTHER_PROCESS, cause::PENDING_FREE],
                "nothing but the allocator and the device survives in the text".into(),
            );
            d.check_python(
                "print(torch.cuda.mem_get_info(0), torch.cuda.memory_allocated(0))",
                "in an `except torch.OutOfMemoryError` handler: the device's free and total bytes and PyTorch's live bytes at the failure, the figures the cut message lost",
            );
            d.check(
                "python main.py --disable-cuda-malloc",
                "for ComfyUI, which turns cudaMallocAsync on by itself: keeps PyTorch's own caching allocator, whose out-of-memory message names free, reserved and per-process memory",
            );
            native_backend_check(d);
            snapshot_checks(d);
            nvidia_smi_check(d);
        }
        _ => {
            d.summary = "The cudaMallocAsync backend refused a request; the message lacks the figures that decide why.".into();
            native_backend_check(d);
            snapshot_checks(d);
            nvidia_smi_check(d);
        }
    }
}

/// Why a PyTorch message stops at its device number.
const NUL_CUT: &str = "The message stops where PyTorch printed the device number: it printed the device index, an 8-bit integer, as a character, and on GPU 0 that character is NUL, which ends the text; so this is GPU 0, and what PyTorch wrote after it was lost before the log";

/// PyTorch's memory snapshot needs its own caching allocator: `cudaMallocAsync` refuses
/// `_record_memory_history` ("does not yet support recordHistory").
pub(super) fn native_backend_check(d: &mut Diagnosis) {
    d.check(
        "PYTORCH_CUDA_ALLOC_CONF=backend:native python train.py",
        "reruns on PyTorch's own caching allocator: cudaMallocAsync records no memory snapshot (`_record_memory_history` refuses it), and the caching allocator's message names reserved, free and per-process memory; its peak may differ from cudaMallocAsync's",
    );
}

enum LegacyReserve<'a> {
    Total(&'a Quantity),
    Cached(&'a Quantity),
}

/// The four figures a parenthesis message needs: total, allocated, free, reserved or cached.
fn legacy_figures(detail: &Detail) -> Option<(&Quantity, &Quantity, &Quantity, LegacyReserve<'_>)> {
    match detail {
        Detail::PytorchCachingLegacy {
            device_total: Some(t),
            allocated: Some(a),
            device_free: Some(f),
            reserved,
            cached,
            ..
        } => {
            let r = match (reserved, cached) {
                (Some(q), _) => LegacyReserve::Total(q),
                (None, Some(q)) => LegacyReserve::Cached(q),
                (None, None) => return None,
            };
            Some((t, a, f, r))
        }
        _ => None,
    }
}

fn cut_short(d: &mut Diagnosis, requested: &Quantity) {
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
    /// Whether the process's CUDA context was created with lazy module loading.
    era: Era,
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

/// A request no device could hold says more about the size computation than about memory.
fn absurd(request: Iv) -> bool {
    request.ge(Iv::exact(IMPOSSIBLE_BYTES)) == Verdict::Yes
}
