//! Out-of-memory as a result: the evidence at the instant of the refusal, and a diagnosis in
//! the article's vocabulary (which observation applies, and what to check next).
//!
//! The diagnosis only states what the evidence shows. "Reserved minus allocated" is reported as
//! a clue next to the largest free block, never as reclaimable memory; memory outside the
//! allocator and other processes are named with their scope.

use serde::{Deserialize, Serialize};

pub use crate::cause::Cause;

/// What refused a request, as `summary.json` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefusedBy {
    /// `cuMemAlloc` outside any allocator, or the driver itself (a kernel's stack).
    Driver,
    Direct,
    Pool,
    Caching,
    /// The graph allocator, mapping a graph's memory at upload or launch.
    Graph,
}

impl From<crate::alloc::AllocatorKind> for RefusedBy {
    fn from(k: crate::alloc::AllocatorKind) -> Self {
        match k {
            crate::alloc::AllocatorKind::Direct => RefusedBy::Direct,
            crate::alloc::AllocatorKind::Pool => RefusedBy::Pool,
            crate::alloc::AllocatorKind::Caching => RefusedBy::Caching,
        }
    }
}

impl std::fmt::Display for RefusedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusedBy::Driver => "driver",
            RefusedBy::Direct => "direct",
            RefusedBy::Pool => "pool",
            RefusedBy::Caching => "caching",
            RefusedBy::Graph => "graph",
        })
    }
}

use crate::device::{NvmlMemory, ProcessUsage};
use crate::units::Bytes;

mod refused;
pub use refused::OomPlace;

/// Everything known at the moment a request was refused. Byte counts are raw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OomRecord {
    pub utc: String,
    pub t_ns: u64,
    pub phase: String,
    pub step: String,
    pub op: String,
    pub name: String,
    /// What refused: the allocator, the driver (an allocation outside the allocator, a
    /// kernel's stack) or the graph allocator.
    pub via: RefusedBy,
    pub requested_bytes: u64,
    /// After the allocator's rounding: what PyTorch reports as "Tried to allocate".
    pub rounded_bytes: u64,
    /// What was asked of the driver when it refused.
    pub driver_request_bytes: u64,
    pub pool: String,
    pub stream: String,
    /// Steps the allocator took before giving up, in order.
    pub retries: Vec<crate::alloc::RetryStep>,
    /// The device's total; null where it is not known (a snapshot records none):
    /// `device_evidence_basis` says why.
    pub device_total_bytes: Option<u64>,
    pub device_free_bytes: u64,
    /// The device's total − free; null where the total is not known (an import without
    /// `--device-total` or `--profile`).
    pub device_used_bytes: Option<u64>,
    /// Free memory at the idle reading before the workload; null where there was none.
    pub idle_device_free_bytes: Option<u64>,
    pub own_bytes: u64,
    /// Taken straight from the driver, outside the allocator's counters; null where it is
    /// not known.
    pub outside_allocator_bytes: Option<u64>,
    /// Where the device total, the idle reading and the memory outside the allocator come
    /// from when they were not measured (an imported snapshot: null ones are "not in the
    /// snapshot", others derived from `--device-total`/`--profile`); absent when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_evidence_basis: Option<String>,
    pub alloc_allocated_bytes: u64,
    pub alloc_reserved_bytes: u64,
    /// reserved − allocated: a clue, not memory that a request can be promised.
    pub reserved_but_unallocated_bytes: u64,
    /// Largest free block inside held memory in the pool this request needed.
    pub largest_free_block_bytes: u64,
    pub inactive_split_count: u64,
    pub inactive_split_bytes: u64,
    /// Device memory in use that is neither this run's allocations nor its idle baseline
    /// (another process, or memory the driver took for this one: stack, modules, graphs);
    /// null where the device's use is not known (a snapshot imported without a device total).
    pub unexplained_used_bytes: Option<i64>,
    /// The driver's graph memory at that instant (`CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT`), where
    /// the workload uses CUDA graphs: mapped by a graph or backing a live graph allocation.
    #[serde(default)]
    pub graph_used_bytes: Option<u64>,
    /// `CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`: what the graph allocator holds from the
    /// device, used or not, until `cuDeviceGraphMemTrim`.
    #[serde(default)]
    pub graph_reserved_bytes: Option<u64>,
    /// Device memory the executable graphs still alive took at instantiation (measured).
    #[serde(default)]
    pub graph_exec_bytes: Option<u64>,
    pub nvml: Option<NvmlMemory>,
    pub processes: Option<Vec<ProcessUsage>>,
    /// Why the process list cannot be believed (`device::process_list_doubt`): then no other
    /// process is blamed on it.
    #[serde(default)]
    pub processes_doubt: Option<String>,
    pub diagnosis: Diagnosis,
}

/// Which observation from the article applies, what the numbers show, and what to check next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Diagnosis {
    /// The article's table row that fits best.
    pub observation: String,
    /// The causes found in the evidence.
    pub causes: Vec<Cause>,
    /// Findings, each a sentence with the numbers.
    pub findings: Vec<String>,
    pub check_next: Vec<String>,
}

/// How a figure a snapshot does not record is named in findings and reports.
pub const NOT_RECORDED: &str = "not in the snapshot";

const OBS_LOOKS_FREE: &str = "Device looks free, but one request fails";
const OBS_GAP: &str = "Reserved is larger than allocated";
const OBS_SMALL_FITS: &str = "A small workload fits, a larger one does not";
const OBS_DISAGREE: &str = "Framework and device totals disagree";

impl OomRecord {
    /// Where a plot marks this OOM: device used, or the allocator's reserved memory where
    /// device used is not known.
    pub fn plotted_bytes(&self) -> u64 {
        self.device_used_bytes.unwrap_or(self.alloc_reserved_bytes)
    }

    /// Fills in the diagnosis from the evidence already in the record.
    pub fn diagnose(&mut self) {
        self.diagnosis = diagnose(self);
    }
}

/// Derives the diagnosis from the evidence.
pub fn diagnose(r: &OomRecord) -> Diagnosis {
    let mut causes = Vec::new();
    let mut findings = Vec::new();
    let mut check = Vec::new();
    let mut observation = OBS_LOOKS_FREE;
    let need = r.rounded_bytes.max(r.requested_bytes);

    findings.push(format!(
        "At {} ({}, step {}) a request for {} ({} after rounding) was refused; the driver was asked for {}.",
        r.utc,
        r.phase,
        r.step,
        Bytes(r.requested_bytes),
        Bytes(r.rounded_bytes),
        Bytes(r.driver_request_bytes)
    ));
    let known = |b: Option<u64>| b.map_or(NOT_RECORDED.to_string(), |b| Bytes(b).to_string());
    findings.push(match (r.device_total_bytes, r.idle_device_free_bytes) {
        (Some(total), Some(idle)) => format!(
            "Device: {} free of {} at that instant; {} was free at the idle reading.",
            Bytes(r.device_free_bytes),
            Bytes(total),
            Bytes(idle)
        ),
        (total, idle) => format!(
            "Device: {} free at that instant; the device total is {} and the idle reading is {}.",
            Bytes(r.device_free_bytes),
            known(total),
            known(idle)
        ),
    });

    if !r.retries.is_empty() {
        let steps: Vec<&str> = r.retries.iter().map(|s| s.text.as_str()).collect();
        findings.push(format!(
            "Before giving up, the allocator tried: {}.",
            steps.join("; ")
        ));
    }
    fraction_cap(r, &mut observation, &mut causes, &mut findings, &mut check);

    if let Some(why) = &r.processes_doubt {
        findings.push(format!(
            "The driver's process list cannot be trusted here ({why}); no other process is blamed on it."
        ));
    }
    let others: Vec<&ProcessUsage> = r
        .processes
        .iter()
        .flatten()
        .filter(|_| r.processes_doubt.is_none())
        .filter(|p| !p.is_self && p.used_bytes.unwrap_or(0) > 0)
        .collect();
    let others_bytes: u64 = others.iter().filter_map(|p| p.used_bytes).sum();
    if !others.is_empty() {
        observation = OBS_DISAGREE;
        causes.push(Cause::OtherProcess);
        let list: Vec<String> = others
            .iter()
            .map(|p| {
                format!(
                    "pid {} holds {}",
                    p.pid,
                    p.used_bytes
                        .map_or("an unknown amount".into(), |b| Bytes(b).to_string())
                )
            })
            .collect();
        findings.push(format!(
            "Other processes hold {} on this device ({}); this run's own views do not include them.",
            Bytes(others_bytes),
            list.join(", ")
        ));
        check.push("List the processes on the device (nvidia-smi, or processes in summary.json) and agree who owns the memory; never kill another tenant to make room.".to_string());
    }

    let gap = r.reserved_but_unallocated_bytes;
    // The block-level evidence exists only for an allocator that reports its free blocks; the
    // driver's pool does not, and its gap is read below as pending frees.
    let knows_blocks = r.via == RefusedBy::Caching;
    if knows_blocks && gap >= need && r.largest_free_block_bytes < need {
        observation = OBS_GAP;
        causes.push(Cause::Fragmentation);
        findings.push(format!(
            "The allocator held {} reserved but unallocated — the subtraction says {} would fit — but its largest free block was {}, and {} inactive split blocks held {}: no single piece could take the request.",
            Bytes(gap),
            Bytes(need),
            Bytes(r.largest_free_block_bytes),
            r.inactive_split_count,
            Bytes(r.inactive_split_bytes)
        ));
        check.push("Inspect the allocator's segments and blocks (a memory snapshot) before calling the gap a leak or reclaimable; compare the largest free block with the failing request.".to_string());
        check.push("Only if inactive split blocks dominate: consider max_split_size_mb or expandable_segments for the native allocator (ignored by cudaMallocAsync), and re-measure.".to_string());
    } else if gap > 0 && gap < need {
        findings.push(format!(
            "The allocator held {} reserved but unallocated, less than the request: even a perfect reuse of it would not have been enough.",
            Bytes(gap)
        ));
    }

    if let Some(outside) = r.outside_allocator_bytes.filter(|b| *b > 0) {
        causes.push(Cause::OutsideAllocator);
        if observation == OBS_LOOKS_FREE {
            observation = OBS_DISAGREE;
        }
        findings.push(format!(
            "{} was taken straight from the driver (as NCCL or cuBLAS workspaces are); the allocator's counters ({} allocated, {} reserved) never saw it.",
            Bytes(outside),
            Bytes(r.alloc_allocated_bytes),
            Bytes(r.alloc_reserved_bytes)
        ));
        check.push("Account for memory held outside the framework allocator (communication buffers, library workspaces, graph pools): compare device used with the allocator's reserved.".to_string());
    }

    graph_evidence(
        r,
        need,
        &mut observation,
        &mut causes,
        &mut findings,
        &mut check,
    );

    if r.pool == "pool" && r.retries.is_empty() && r.alloc_reserved_bytes > r.alloc_allocated_bytes
    {
        let pending = r.alloc_reserved_bytes - r.alloc_allocated_bytes;
        if pending >= need {
            observation = OBS_GAP;
            causes.push(Cause::PendingFree);

            findings.push(format!(
                "The stream-ordered pool held {} that was freed but not yet reusable by this stream (frees still pending behind queued work, or released only at the next synchronize).",
                Bytes(pending)
            ));
            check.push("Check which stream freed the memory and whether it has reached the free; synchronize or order the streams (event wait) before the allocation, or allow the pool's internal dependencies.".to_string());
        }
    }

    if let Some(unexplained) = r.unexplained_used_bytes.filter(|u| *u > (2 << 20))
        && others.is_empty()
    {
        causes.push(Cause::HeldOutsideAnyAllocator);
        findings.push(format!(
            "{} of device memory in use is neither this run's allocations nor its idle baseline: memory the driver took for this process (stack reservation, loaded modules, graph memory) or another process that NVML does not show.",
            Bytes(unexplained as u64)
        ));
        check.push("Compare device free before and after context creation and after launching deep-stack kernels; memory held by the context and its stack is in no allocator's statistics.".to_string());
    }

    match r.idle_device_free_bytes {
        Some(idle) if need <= idle && causes.is_empty() => {
            observation = OBS_SMALL_FITS;
            causes.push(Cause::PeakNotIdle);
            findings.push(format!(
                "The request would have fit in the idle reading's {} free; it failed because this run already held {} at its demanding moment. The idle reading is not the peak.",
                Bytes(idle),
                Bytes(r.own_bytes)
            ));
            check.push("Compare the defined peak of the workload with the idle reading, phase by phase (summary.json peaks), not the idle free memory alone.".to_string());
        }
        Some(idle) if causes.is_empty() => {
            causes.push(Cause::Capacity);
            findings.push(format!(
                "The request is larger than what was free even at idle ({}): a genuine capacity limit for this workload shape.",
                Bytes(idle)
            ));
        }
        None if causes.is_empty() => {
            // Only what was recorded: the free memory at the failure and what the allocator held.
            causes.push(Cause::Capacity);
            findings.push(format!(
                "The request was larger than the {} free at the failure, with {} reserved by the allocator ({} of it allocated); the idle reading is {}, so whether it would fit on an idle device is not known.",
                Bytes(r.device_free_bytes),
                Bytes(r.alloc_reserved_bytes),
                Bytes(r.alloc_allocated_bytes),
                NOT_RECORDED
            ));
        }
        _ => {}
    }
    check.push("Keep this record: one device, one failing request, one timestamped set of observations, before changing any configuration.".to_string());

    Diagnosis {
        observation: observation.to_string(),
        causes,
        findings,
        check_next: check,
    }
}

/// `per_process_memory_fraction`: the allocator's last attempt was refused by its own cap,
/// before the driver was asked. The cause is the cap, whatever the device had free; PyTorch's
/// message names it as "N allowed;".
fn fraction_cap(
    r: &OomRecord,
    observation: &mut &'static str,
    causes: &mut Vec<Cause>,
    findings: &mut Vec<String>,
    check: &mut Vec<String>,
) {
    let Some(cap) = r.retries.last().and_then(|s| s.fraction_cap) else {
        return;
    };
    causes.push(Cause::FractionCap);
    *observation = OBS_LOOKS_FREE;
    let room = if r.device_free_bytes >= cap.more_bytes {
        format!(
            "while the device had {} free, room for it",
            Bytes(r.device_free_bytes)
        )
    } else {
        format!(
            "and the device, with {} free, had no room for it either",
            Bytes(r.device_free_bytes)
        )
    };
    findings.push(format!(
        "The per-process memory fraction refused it: {} allowed ({} bytes); the allocator held {} and needed {} more, {} over the cap — refused without asking the driver, {room}.",
        Bytes(cap.allowed_bytes),
        cap.allowed_bytes,
        Bytes(cap.held_bytes),
        Bytes(cap.more_bytes),
        Bytes((cap.held_bytes + cap.more_bytes).saturating_sub(cap.allowed_bytes)),
    ));
    check.push("Check the process's memory fraction (torch.cuda.set_per_process_memory_fraction, or per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF) against what the workload needs at its peak; the cap counts what the allocator reserves, cached blocks included, so empty_cache before the peak can also help.".to_string());
}

/// Graph memory: the graph allocator's reservation, what graphs use of it, and executables.
/// `graph-pool` when trimming the unused part would have made the request fit; `graph-memory`
/// when only destroying live graphs (or freeing their allocations) would have.
fn graph_evidence(
    r: &OomRecord,
    need: u64,
    observation: &mut &'static str,
    causes: &mut Vec<Cause>,
    findings: &mut Vec<String>,
    check: &mut Vec<String>,
) {
    let reserved = r.graph_reserved_bytes.unwrap_or(0);
    let used = r.graph_used_bytes.unwrap_or(0).min(reserved);
    let exec = r.graph_exec_bytes.unwrap_or(0);
    if reserved == 0 && exec == 0 {
        return;
    }
    let unused = reserved - used;
    findings.push(format!(
        "CUDA graphs held {} at that instant: the driver's graph allocator had {} reserved, {} of it used by graphs or their live allocations and {} reserved but unused, and executable graphs took {}. No allocator counter includes any of it.",
        Bytes(reserved + exec),
        Bytes(reserved),
        Bytes(used),
        Bytes(unused),
        Bytes(exec)
    ));
    if *observation == OBS_LOOKS_FREE {
        *observation = OBS_DISAGREE;
    }
    if r.device_free_bytes < need && need <= r.device_free_bytes + unused {
        causes.push(Cause::GraphPool);
        findings.push(format!(
            "{} of graph memory was reserved but used by no graph (memory of destroyed or idle graphs stays in the graph pool until trimmed): with it returned, {} would have been free and the request would have fit.",
            Bytes(unused),
            Bytes(r.device_free_bytes + unused)
        ));
        check.push("Trim graph memory (cuDeviceGraphMemTrim) after destroying graphs, or budget the graph pool's reserved high-water mark (CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), not the graphs alive now.".to_string());
    } else if r.device_free_bytes < need && need <= r.device_free_bytes + reserved + exec {
        causes.push(Cause::GraphMemory);
        findings.push(format!(
            "Graphs alive at that instant (their mapped memory, live graph allocations and executables) held {}: the request fits only without them.",
            Bytes(used + exec)
        ));
        check.push("Count the memory of every captured graph (per batch size) in the budget: measure it on the device rather than extrapolating from two captures.".to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn record() -> OomRecord {
        OomRecord {
            utc: "2026-11-29T00:00:00.000Z".into(),
            t_ns: 1,
            phase: "p".into(),
            step: "3".into(),
            op: "allocate".into(),
            name: "x".into(),
            via: RefusedBy::Caching,
            requested_bytes: 100 * MIB,
            rounded_bytes: 100 * MIB,
            driver_request_bytes: 100 * MIB,
            pool: "large".into(),
            stream: "main".into(),
            retries: vec![],
            device_total_bytes: Some(4 * GIB),
            device_free_bytes: 50 * MIB,
            device_used_bytes: Some(4 * GIB - 50 * MIB),
            idle_device_free_bytes: Some(3 * GIB),
            own_bytes: 3 * GIB,
            outside_allocator_bytes: Some(0),
            device_evidence_basis: None,
            alloc_allocated_bytes: GIB,
            alloc_reserved_bytes: 3 * GIB,
            reserved_but_unallocated_bytes: 2 * GIB,
            largest_free_block_bytes: 18 * MIB,
            inactive_split_count: 100,
            inactive_split_bytes: 2 * GIB,
            unexplained_used_bytes: Some(0),
            graph_used_bytes: None,
            graph_reserved_bytes: None,
            graph_exec_bytes: None,
            nvml: None,
            processes: None,
            processes_doubt: None,
            diagnosis: Diagnosis {
                observation: String::new(),
                causes: vec![],
                findings: vec![],
                check_next: vec![],
            },
        }
    }

    #[test]
    fn fragmentation_is_a_gap_with_no_large_enough_block() {
        let d = diagnose(&record());
        assert_eq!(d.observation, OBS_GAP);
        assert_eq!(d.causes, [Cause::Fragmentation]);
        assert!(d.findings.iter().any(|f| f.contains("2.00 GiB reserved but unallocated") && f.contains("18.00 MiB")), "{d:?}");
    }

    #[test]
    fn other_tenant_is_named_with_its_usage() {
        let mut r = record();
        r.reserved_but_unallocated_bytes = 0;
        r.largest_free_block_bytes = 0;
        r.processes = Some(vec![
            ProcessUsage {
                pid: 1,
                used_bytes: Some(GIB),
                is_self: true,
            },
            ProcessUsage {
                pid: 77,
                used_bytes: Some(2 * GIB),
                is_self: false,
            },
        ]);
        let d = diagnose(&r);
        assert_eq!(d.observation, OBS_DISAGREE);
        assert!(
            d.findings
                .iter()
                .any(|f| f.contains("pid 77 holds 2.00 GiB")),
            "{d:?}"
        );
    }

    #[test]
    fn a_doubted_process_list_blames_no_other_process() {
        let mut r = record();
        r.reserved_but_unallocated_bytes = 0;
        r.largest_free_block_bytes = 0;
        // Inside a PID namespace this run is listed under its host PID: "pid 4242" is itself.
        r.processes = Some(vec![ProcessUsage {
            pid: 4242,
            used_bytes: Some(3 * GIB),
            is_self: false,
        }]);
        r.processes_doubt = crate::device::process_list_doubt(r.processes.as_ref().unwrap(), None);
        assert!(r.processes_doubt.is_some());
        let d = diagnose(&r);
        assert!(!d.causes.contains(&Cause::OtherProcess), "{d:?}");
        assert!(
            !d.findings.iter().any(|f| f.contains("pid 4242 holds")),
            "{d:?}"
        );
        assert!(
            d.findings
                .iter()
                .any(|f| f.contains("cannot be trusted") && f.contains("PID namespace")),
            "{d:?}"
        );
    }

    #[test]
    fn unused_graph_memory_that_a_trim_would_return_is_a_graph_pool_cause() {
        let mut r = record();
        r.via = RefusedBy::Direct;
        r.reserved_but_unallocated_bytes = 0;
        r.alloc_reserved_bytes = 0;
        r.alloc_allocated_bytes = 0;
        r.graph_reserved_bytes = Some(GIB);
        r.graph_used_bytes = Some(0);
        r.graph_exec_bytes = Some(0);
        let d = diagnose(&r);
        assert_eq!(d.causes, [Cause::GraphPool], "{d:?}");
        assert_eq!(d.observation, OBS_DISAGREE);
        assert!(
            d.findings
                .iter()
                .any(|f| f.contains("1.00 GiB reserved but unused")),
            "{d:?}"
        );
        // Used by a live graph: a trim would not help.
        r.graph_used_bytes = Some(GIB);
        assert_eq!(diagnose(&r).causes, [Cause::GraphMemory]);
    }

    #[test]
    fn peak_not_idle_when_nothing_else_explains_it() {
        let mut r = record();
        r.reserved_but_unallocated_bytes = 0;
        r.largest_free_block_bytes = 0;
        let d = diagnose(&r);
        assert_eq!(d.observation, OBS_SMALL_FITS);
        assert_eq!(d.causes, [Cause::PeakNotIdle]);
    }
}
