//! Messages read by principle (`Detail::Generic`): what their labelled figures decide, by the
//! same rule as every format. Figures in PyTorch's shape (requested, total, free and whose
//! memory it is) go through PyTorch's arithmetic; fewer figures decide only what they can (a
//! request above the device is capacity; free memory a page above the request is a refusal
//! with room). Memory that is not the GPU's (host RAM, TPU HBM, on-chip shared memory) is said
//! to be so, and nothing about the device is concluded from it.

use super::interval::{Iv, Verdict};
use super::{Diagnosis, cause, nvidia_smi_check};
use crate::oom_message::{Detail, Figure, Label, MemorySpace, Owner, ProcessUse, Quantity};

/// One 2 MiB page: free memory less than this above the request counts as none.
const PAGE_BYTES: i128 = 2 << 20;

pub(super) fn diagnose(detail: &Detail, d: &mut Diagnosis) {
    let Detail::Generic {
        wording,
        runtime,
        memory,
        figures,
    } = detail
    else {
        return;
    };
    let from = runtime
        .as_deref()
        .map(|r| format!(" from {r}"))
        .unwrap_or_default();
    let unlabelled: Vec<&str> = figures
        .iter()
        .filter(|f| f.label.is_none())
        .map(|f| f.quantity.printed.as_str())
        .collect();
    if !unlabelled.is_empty() {
        d.findings.push(format!(
            "Sizes no word around them names (not used in the arithmetic): {}.",
            unlabelled.join(", ")
        ));
    }
    if wording.starts_with("Sum Total of in-use") {
        d.findings.push(
            "TensorFlow's BFC allocator prints this memory dump only after an allocation failed; the warning before it that names the request (\"Allocator (GPU_0_bfc) ran out of memory trying to allocate …\") is not in the text.".into(),
        );
    }
    match memory {
        MemorySpace::PinnedHostRam => {
            d.summary = format!(
                "\"{wording}\"{from} is about host RAM (pinned), not the GPU: page-locked host memory for transfers could not be had, so the GPU's memory figures do not bear on it."
            );
            d.findings.push("This is host RAM (pinned), not the GPU: the driver could not lock that much of the host's memory (free host RAM, or the locked-memory limit).".into());
            d.check(
                "free -h; ulimit -l",
                "the host's free memory and the locked-memory limit, which bound pinned allocations",
            );
            return;
        }
        MemorySpace::HostRam if wording.to_ascii_lowercase().starts_with("killed by signal") => {
            d.summary = format!(
                "\"{wording}\"{from}: a process ended by SIGKILL, which on Linux is almost always the kernel's out-of-memory killer: host RAM (or a container's or job's memory limit), not the GPU."
            );
            d.findings.push("This is host RAM, not the GPU, unless something else sent SIGKILL (a scheduler past its grace period, a user's kill -9): the kernel's log says which.".into());
            d.check(
                "dmesg -T | grep -iE 'out of memory|oom-kill|killed process'",
                "the kernel's out-of-memory killer, with the process it chose and its memory",
            );
            d.check(
                "free -h; cat /sys/fs/cgroup/memory.max",
                "the host's free memory and the container's limit",
            );
            return;
        }
        MemorySpace::HostRam => {
            d.summary = format!(
                "\"{wording}\"{from} is about host RAM, not the GPU: a CPU allocation failed, so the GPU's memory figures do not bear on it."
            );
            d.findings.push("This is host RAM, not the GPU: the process (or its container's memory limit) ran out of system memory.".into());
            d.check(
                "free -h; cat /sys/fs/cgroup/memory.max",
                "the host's free memory and the container's limit, which this allocation exceeded",
            );
            return;
        }
        MemorySpace::TpuHbm
        | MemorySpace::TpuVmem
        | MemorySpace::TpuSmem
        | MemorySpace::TpuCmem => {
            let space = memory.words();
            d.summary = format!(
                "\"{wording}\"{from} is about {space}, not a CUDA device: headroom's device views (NVML, the CUDA allocators) do not apply to it."
            );
            d.findings.push(format!("This is {space}, not a CUDA device; the figures are the TPU compiler's or runtime's own accounting."));
            return;
        }
        MemorySpace::SharedMemory => {
            d.summary = format!(
                "\"{wording}\"{from}: a kernel asked for more on-chip shared memory per block than the hardware has; this is not device memory, and free device memory would not help."
            );
            d.findings.push("This is on-chip shared memory, not the GPU's device memory: smaller blocks or fewer pipeline stages make the kernel fit.".into());
            return;
        }
        MemorySpace::Device => {}
    }
    let get = |l: Label| {
        figures
            .iter()
            .find(|f: &&Figure| f.label == Some(l))
            .map(|f| &f.quantity)
    };
    if let Some(synthetic) = as_pytorch(&get, figures) {
        d.findings.push(format!(
            "Read by the words around each figure (\"{wording}\"{from}), then by PyTorch's arithmetic."
        ));
        super::torch::diagnose(&synthetic, d);
        return;
    }
    d.summary = format!("\"{wording}\"{from}: the device's memory ran out.");
    let (Some(requested), total, free) =
        (get(Label::Requested), get(Label::Total), get(Label::Free))
    else {
        d.summary = format!(
            "\"{wording}\"{from}: an allocation was refused; the message names no request size."
        );
        d.undecided(
            "Who holds the memory?".into(),
            vec![cause::OTHER_PROCESS, cause::CAPACITY],
            "the message carries no request, so nothing can be compared".into(),
        );
        nvidia_smi_check(d);
        return;
    };
    let r = Iv::of(requested);
    if super::context::address_like(r) {
        super::torch::address_as_size(d, &requested.printed);
        return;
    }
    if let Some(t) = total {
        let t = Iv::of(t);
        if r.gt(t) == Verdict::Yes {
            d.summary = format!(
                "The request ({}) is larger than the device ({}): no freeing or sharing would serve it.",
                requested.printed,
                total.map_or("", |q| q.printed.as_str())
            );
            d.cause = Some(cause::CAPACITY);
            return;
        }
        if let Some(f) = free {
            let f = Iv::of(f);
            if f.gt(t) == Verdict::Yes {
                d.contradicted = true;
                d.findings.push(format!(
                    "The figures contradict each other: free memory ({f}) exceeds the device total ({t})."
                ));
            }
            d.bytes("held_bytes", "total − free", t.minus(f).non_negative());
        }
    }
    if let Some(f) = free {
        let f = Iv::of(f);
        let room = f.minus(r);
        d.bytes("free_after_request_bytes", "free − requested", room);
        if room.low >= PAGE_BYTES {
            d.summary = format!(
                "{} was refused with {} free, a page or more above it: the refusal came from a cap or from the allocator's own pool, not from the device.",
                requested.printed,
                free.map_or("", |q| q.printed.as_str())
            );
            d.undecided(
                "What refused a request the device had room for?".into(),
                vec![cause::FRACTION_CAP, cause::FRAGMENTATION],
                "the message prints no pool or cap figures".into(),
            );
            return;
        }
    }
    d.undecided(
        "Who holds the memory?".into(),
        vec![
            cause::OTHER_PROCESS,
            cause::OUTSIDE_ALLOCATOR,
            cause::CAPACITY,
        ],
        "the message does not say how much of the used memory is this process's".into(),
    );
    nvidia_smi_check(d);
}

/// The figures as a PyTorch message, when they are the ones its arithmetic needs: the request,
/// the device's total and free, and whose the used memory is (this process's, or the
/// allocator's allocated and reserved). Memory in use that the words before it give to a
/// process by its PID ("Process 4048 has X memory in use") is another process's, and one given
/// to "this process" is this one's; where no figure names its process, the first in use is
/// taken as this process's.
fn as_pytorch<'a>(
    get: &impl Fn(Label) -> Option<&'a Quantity>,
    figures: &[Figure],
) -> Option<Detail> {
    let requested = get(Label::Requested)?.clone();
    let total = get(Label::Total)?.clone();
    let free = get(Label::Free)?.clone();
    let in_use = || figures.iter().filter(|f| f.label == Some(Label::InUse));
    let processes: Vec<ProcessUse> = in_use()
        .filter_map(|f| match f.owner {
            Owner::Process(pid) => Some(ProcessUse {
                pid,
                used: f.quantity.clone(),
            }),
            _ => None,
        })
        .collect();
    let this_process = match in_use().find(|f| f.owner == Owner::ThisProcess) {
        Some(f) => Some(f.quantity.clone()),
        None if processes.is_empty() => get(Label::InUse).cloned(),
        None => None,
    };
    let allocated = get(Label::Allocated).cloned();
    let limit = get(Label::Limit).cloned();
    if let Some(unallocated) = get(Label::ReservedUnallocated).cloned() {
        return Some(Detail::PytorchCaching {
            device_kind: None,
            requested,
            device_index: None,
            device_total: Some(total),
            device_free: Some(free),
            processes,
            this_process,
            allowed: limit,
            allocated,
            private_pools: None,
            reserved_unallocated: Some(unallocated),
            hint: None,
            truncated: false,
            cut_at_device: false,
        });
    }
    let reserved = get(Label::Reserved).cloned();
    let cached = get(Label::Cached).cloned();
    if allocated.is_some() && (reserved.is_some() || cached.is_some()) {
        return Some(Detail::PytorchCachingLegacy {
            device_kind: None,
            requested,
            device_index: None,
            device_total: Some(total),
            allocated,
            active: None,
            device_free: Some(free),
            allowed: limit,
            reserved,
            cached,
            truncated: false,
        });
    }
    None
}
