//! PyTorch's `cudaMallocAsync` backend: its table names what PyTorch allocated, the device's
//! free memory and the per-process limit, so the rest of the device's use is someone else's
//! (or memory freed into the driver's pool but still pending on a stream).

use crate::explain::context::{Era, ROOM_MARGIN_BYTES, context_bytes, context_text};
use crate::explain::interval::{Iv, Verdict};
use crate::explain::{Diagnosis, cause, nvidia_smi_check, snapshot_checks};
use crate::oom_message::Quantity;

/// `SIZE_MAX` is what the table prints when no memory fraction was set.
const NO_LIMIT_BYTES: u64 = 1 << 60;

pub(super) fn diagnose(
    d: &mut Diagnosis,
    allocated: Option<&Quantity>,
    requested: &Quantity,
    total: &Quantity,
    free: &Quantity,
    limit: Option<&Quantity>,
) {
    let (r, t, f) = (Iv::of(requested), Iv::of(total), Iv::of(free));
    let a = allocated.map_or(Iv::exact(0), Iv::of);
    let limit = limit.filter(|q| {
        let unset = q.bytes.low >= NO_LIMIT_BYTES;
        if unset {
            d.findings.push(format!(
                "No per-process limit was set: {} is SIZE_MAX, the table's way of saying none.",
                q.printed
            ));
        }
        !unset
    });
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
    let context = context_bytes(t, Era::Lazy);
    let beyond = d.bytes(
        "not_allocated_beyond_context_bytes",
        &format!(
            "not_allocated_by_pytorch − one CUDA context ({})",
            context_text(context)
        ),
        unexplained.minus(Iv::exact(context)).non_negative(),
    );
    if d.cause.is_none() {
        let shortfall = d.bytes(
            "shortfall_bytes",
            "requested − free",
            r.minus(f).non_negative(),
        );
        match f.plus(beyond).minus(r).ge(Iv::exact(ROOM_MARGIN_BYTES)) {
            Verdict::No => {
                d.cause = Some(cause::CAPACITY);
                d.summary = format!(
                    "{r} was refused with {f} free; PyTorch's live allocations ({a}) leave too little on the card: beyond one CUDA context, only {beyond} is in use by anything else."
                );
            }
            _ => {
                d.summary = format!(
                    "{r} was refused with {f} free; {beyond} in use beyond PyTorch's live allocations and one CUDA context is more than the {shortfall} shortfall."
                );
                d.undecided(
                    format!("Who holds the {beyond} PyTorch has not allocated?"),
                    vec![cause::PENDING_FREE, cause::OTHER_PROCESS, cause::OUTSIDE_ALLOCATOR],
                    "memory freed into the cudaMallocAsync pool but still pending on another stream, other processes and other libraries all look the same in these figures".into(),
                );
                nvidia_smi_check(d);
            }
        }
    }
    super::native_backend_check(d);
    snapshot_checks(d);
}
