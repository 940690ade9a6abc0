//! Who holds the device memory PyTorch did not reserve, as far as the message tells: this
//! process outside PyTorch's allocator, other processes, or both together. This process's own
//! CUDA context is part of that memory and no one's fault: what is compared with the shortfall
//! is what lies beyond one context (`context`).

use super::Evidence;
use crate::explain::Diagnosis;
use crate::explain::cause;
use crate::explain::context::{ROOM_MARGIN_BYTES, context_bytes, context_text};
use crate::explain::interval::{Iv, Verdict};
use crate::oom_message::{ProcessUse, Quantity};

/// Memory on the device that PyTorch did not reserve, split by who holds it where the
/// message allows.
pub(super) enum Holders {
    Split {
        outside: Iv,
        others: Iv,
    },
    /// Other processes or this process outside PyTorch: the message cannot tell.
    Unsplit {
        outside_pytorch: Iv,
    },
    /// The message was cut before PyTorch's figures: only other processes can be told apart.
    OthersOnly {
        others: Iv,
    },
    None,
}

pub(super) fn holders(
    d: &mut Diagnosis,
    e: &Evidence,
    this: Option<&Quantity>,
    processes: &[ProcessUse],
) -> Holders {
    let used = d.bytes(
        "device_used_bytes",
        "device_total − device_free",
        e.total.minus(e.free),
    );
    let this = this.filter(|q| {
        // NVML has reported 2^64 bytes for a process; such a figure cannot be used.
        let possible = Iv::of(q).gt(e.total) != Verdict::Yes;
        if !possible {
            d.findings.push(format!(
                "The message says this process has {} in use, more than the device holds: NVML's figure is wrong, and is not used here.",
                q.printed
            ));
        }
        possible
    });
    let Some(reserved) = e.reserved.as_ref().map(|r| r.total) else {
        return match this {
            Some(q) => Holders::OthersOnly {
                others: d.bytes(
                    "other_processes_bytes",
                    "device_total − device_free − this_process",
                    used.minus(Iv::of(q)).non_negative(),
                ),
            },
            None => Holders::None,
        };
    };
    let listed = processes
        .iter()
        .fold(Iv::exact(0), |acc, p| acc.plus(Iv::of(&p.used)));
    if !processes.is_empty() {
        d.bytes(
            "listed_processes_bytes",
            "sum of the listed processes",
            listed,
        );
    }
    let this = match (this, processes) {
        (Some(q), _) => Some(Iv::of(q)),
        (None, [p]) => {
            let p_iv = Iv::of(&p.used);
            match p_iv.plus(reserved).gt(used) {
                Verdict::Yes => {
                    d.findings.push(format!(
                        "Process {} must be this process, seen under its host PID (a container): its {} and PyTorch's {} reserved cannot both fit in the {} in use.",
                        p.pid, p.used.printed, reserved, used
                    ));
                    Some(p_iv)
                }
                _ => {
                    d.undecided(
                        format!(
                            "Is process {} this process (under its host PID) or another one?",
                            p.pid
                        ),
                        vec![cause::OTHER_PROCESS, cause::OUTSIDE_ALLOCATOR],
                        "the message names no \"this process\", and both readings fit its numbers"
                            .into(),
                    );
                    None
                }
            }
        }
        (None, [_, _, ..]) => {
            if let Some(others) = listed_others(d, e, reserved, listed, processes) {
                return Holders::OthersOnly { others };
            }
            None
        }
        (None, []) => None,
    };
    match this {
        Some(p) => {
            d.bytes("this_process_bytes", "this process, as NVML counts it", p);
            if p.gt(used) == Verdict::Yes {
                d.findings.push(format!(
                    "This process's {p} exceeds the {used} in use on the device: the two readings were not taken at the same instant, or the device shares memory with the host."
                ));
            }
            let outside = d.bytes(
                "outside_allocator_bytes",
                "this_process − reserved",
                p.minus(reserved).non_negative(),
            );
            let outside = beyond_context(
                d,
                e,
                outside,
                "outside_allocator_beyond_context_bytes",
                "outside_allocator",
            );
            let others = d.bytes(
                "other_processes_bytes",
                "device_total − device_free − this_process",
                used.minus(p).non_negative(),
            );
            Holders::Split { outside, others }
        }
        None => {
            let outside = d.bytes(
                "outside_pytorch_bytes",
                "device_total − device_free − reserved",
                used.minus(reserved).non_negative(),
            );
            Holders::Unsplit {
                outside_pytorch: beyond_context(
                    d,
                    e,
                    outside,
                    "outside_pytorch_beyond_context_bytes",
                    "outside_pytorch",
                ),
            }
        }
    }
}

/// `bytes` less this process's CUDA context (by card class and loading era), never below 0.
fn beyond_context(d: &mut Diagnosis, e: &Evidence, bytes: Iv, name: &str, of: &str) -> Iv {
    let context = context_bytes(e.total, e.era);
    d.bytes(
        name,
        &format!("{of} − one CUDA context ({})", context_text(context)),
        bytes.minus(Iv::exact(context)).non_negative(),
    )
}

/// Several processes listed and no "this process" line (a container's PID namespace hides the
/// job's own PID from NVML's list, or the paste left the line out): this process is at most one
/// of them, and only one that holds PyTorch's reserve, so the others hold at least the listed
/// sum less the largest such process. That lower bound is returned, as other processes' memory,
/// when it alone gives the request a page of room; otherwise `None`, and the memory PyTorch did
/// not reserve stays unsplit.
fn listed_others(
    d: &mut Diagnosis,
    e: &Evidence,
    reserved: Iv,
    listed: Iv,
    processes: &[ProcessUse],
) -> Option<Iv> {
    let could_be_this = processes
        .iter()
        .map(|p| Iv::of(&p.used))
        .filter(|&u| u.ge(reserved) != Verdict::No)
        .max_by_key(|u| u.high)
        .unwrap_or(Iv::exact(0));
    let others = listed.minus(could_be_this).non_negative();
    let room = e
        .free
        .plus(others)
        .minus(e.request)
        .ge(Iv::exact(ROOM_MARGIN_BYTES));
    if room != Verdict::Yes {
        return None;
    }
    d.findings.push(format!(
        "The message lists {} processes and no \"this process\" line: this process is at most one of them (one holding PyTorch's {reserved} reserve), so the others hold at least the listed sum less the largest such process.",
        processes.len()
    ));
    Some(d.bytes(
        "other_processes_bytes",
        "listed processes − the largest that could be this process",
        others,
    ))
}
