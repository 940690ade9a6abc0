//! Figures that cannot all hold: each contradiction is a finding naming the two figures, never
//! a silent clamp.

use super::{Evidence, absurd};
use crate::explain::Diagnosis;
use crate::explain::interval::{Iv, Verdict};
use crate::oom_message::{ProcessUse, Quantity};

/// `a` exceeds `b` for every value their printed precision allows.
fn exceeds(a: Iv, b: Iv) -> bool {
    a.gt(b) == Verdict::Yes
}

fn contradiction(d: &mut Diagnosis, big: &str, big_iv: Iv, small: &str, small_iv: Iv, why: &str) {
    d.contradicted = true;
    d.findings.push(format!(
        "The figures contradict each other: {big} ({big_iv}) exceeds {small} ({small_iv}); {why}"
    ));
}

/// A request of a petabyte or more: the size was computed wrong; nothing else is concluded.
pub(super) fn impossible_request(d: &mut Diagnosis, requested: &Quantity) -> bool {
    if crate::explain::context::address_like(Iv::of(requested)) {
        address_as_size(d, &requested.printed);
        return true;
    }
    if !super::absurd(Iv::of(requested)) {
        return false;
    }
    d.summary = format!(
        "The request ({}) is larger than any device holds: the size was computed wrong (a negative or uninitialized dimension, an overflow), so the memory figures do not explain it.",
        requested.printed
    );
    d.findings.push(
        "A tensor size that large comes from the shapes, not from memory pressure: print the shapes of the failing operation's inputs.".into(),
    );
    true
}

/// A request of 127–128 TiB: an x86-64 user-space address (0x7f…) read as a size; nothing else
/// is concluded.
pub(crate) fn address_as_size(d: &mut Diagnosis, printed: &str) {
    d.summary = format!(
        "The request ({printed}) lies between 127 and 128 TiB, where Linux on x86-64 maps stacks and shared libraries (0x7f…): an address read as a size (an uninitialized field, a pointer passed for a length, an extension built for another ABI or GPU), so the memory figures do not explain it."
    );
    d.findings.push(
        "A size just under 2^47 bytes is the shape of a user-space pointer, not of a tensor: check the extension or custom kernel that made the call (rebuild it for this GPU and this PyTorch), and print the sizes it passes.".into(),
    );
}

/// Contradictions the sentence form can show, beyond the common ones.
pub(super) fn sentence_form(
    d: &mut Diagnosis,
    e: &Evidence,
    this: Option<&Quantity>,
    processes: &[ProcessUse],
) {
    common(d, e);
    if let (Some(q), Some(r)) = (this, e.reserved.as_ref())
        && !exceeds(Iv::of(q), e.total)
        && exceeds(r.total, Iv::of(q))
    {
        contradiction(
            d,
            "PyTorch's reserved memory",
            r.total,
            "this process's memory in use",
            Iv::of(q),
            "NVML counted the process at another instant, or the device shares memory with the host.",
        );
    }
    if let Some(q) = this
        && exceeds(Iv::of(q), e.total)
    {
        contradiction(
            d,
            "this process's memory in use",
            Iv::of(q),
            "the device total",
            e.total,
            "NVML gave no figure for the process (2^64 bytes is its \"not available\") or counted another device.",
        );
        // A cap is decided by the request, free memory and the cap, none of them this figure.
        d.contradiction_spares
            .push(crate::explain::cause::FRACTION_CAP);
    }
    let listed = processes
        .iter()
        .filter(|p| !exceeds(Iv::of(&p.used), e.total))
        .fold(Iv::exact(0), |acc, p| acc.plus(Iv::of(&p.used)));
    if !processes.is_empty() && exceeds(listed, e.total) {
        contradiction(
            d,
            "the listed processes' memory",
            listed,
            "the device total",
            e.total,
            "NVML's per-process figures are not to be trusted here.",
        );
    }
}

/// Contradictions any PyTorch message with its device figures can show.
pub(super) fn common(d: &mut Diagnosis, e: &Evidence) {
    if exceeds(e.free, e.total) {
        contradiction(
            d,
            "free memory",
            e.free,
            "the device total",
            e.total,
            "the two were read from different devices or at different times.",
        );
    }
    if let Some(r) = e.reserved.as_ref()
        && exceeds(r.total, e.total)
    {
        contradiction(
            d,
            "PyTorch's reserved memory",
            r.total,
            "the device total",
            e.total,
            "the device lends system memory (Windows' shared GPU memory, a unified-memory APU), so the card's total is not the limit that was hit.",
        );
    }
    if absurd(e.total) {
        d.findings.push(format!(
            "The device total ({}) is more than any device holds: the driver reported a wrapped counter.",
            e.total
        ));
    }
}

/// 1.4 to 2.0 printed "reserved in total", which includes the allocated bytes.
pub(super) fn legacy_total_below_allocated(
    d: &mut Diagnosis,
    allocated: &Quantity,
    reserved: &Quantity,
) {
    if exceeds(Iv::of(allocated), Iv::of(reserved)) {
        contradiction(
            d,
            "\"already allocated\"",
            Iv::of(allocated),
            "\"reserved in total by PyTorch\"",
            Iv::of(reserved),
            "the allocator's total includes what it allocated, so one of the two was edited or read from another device.",
        );
    }
}
