//! Before the first step: the kernels the workload launches loaded, the sampler's cost at full
//! rate measured, and the idle reading — the baseline every peak and the release check are
//! read against — taken with the processes the driver lists.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;

use crate::device::{Device, NvmlMemory, ProcessUsage, process_list_doubt};
use crate::report::summary::{
    Idle, IdleReading, KernelLoad, PhaseStatus, PhaseSummary, PlanMarks, SamplerPerturbation,
    Summary, WorkloadInfo,
};
use crate::run::Baseline;
use crate::sampler::{LiveViews, StartSampler};
use crate::units::{MIB, utc_timestamp};
use crate::workload::Workload;

/// The idle reading and what was measured before it.
pub(super) struct Before {
    pub idle: Idle,
    pub baseline: Baseline,
    pub sampler_perturbation: Option<SamplerPerturbation>,
}

/// Loads the kernels, measures the sampler's cost (a full-rate sampler on a real driver) and
/// takes the idle reading.
pub(super) fn before_first_step(
    wl: &Workload,
    device: &mut dyn Device,
    before_context: Option<NvmlMemory>,
    sample_interval_ns: u64,
) -> anyhow::Result<Before> {
    // The kernels the workload launches are loaded first: their modules are the context's
    // memory from then on, not a drop in the middle of the first kernel step.
    let kernels = load_kernels(wl, device)?;
    let sampler_perturbation = if sample_interval_ns == 0 && !device.info().is_sim() {
        Some(sampler_perturbation(device).context("measuring the sampler's cost to allocations")?)
    } else {
        None
    };
    let mut before = idle_reading(device, before_context, kernels)?;
    before.sampler_perturbation = sampler_perturbation;
    Ok(before)
}

/// The idle reading alone: the device as the run found it (after the context and `kernels`,
/// the load measured just before it, if any).
pub(super) fn idle_reading(
    device: &mut dyn Device,
    before_context: Option<NvmlMemory>,
    kernels: Option<KernelLoad>,
) -> anyhow::Result<Before> {
    // Idle, after the context: one reading before anything of the workload exists.
    let mem = device
        .mem_info()
        .context("the idle reading (cuMemGetInfo) failed")?;
    let nvml = device.nvml_memory();
    let (processes, processes_unavailable) = match device.processes_or_why() {
        Ok(ps) => (Some(ps), None),
        Err(why) => (None, Some(why)),
    };
    let processes_doubt = processes
        .as_deref()
        .and_then(|ps| process_list_doubt(ps, nvml.map(|n| n.used_bytes)));
    let others_bytes = match &processes_doubt {
        None => others_bytes(&processes).min(mem.used_bytes()),
        Some(_) => 0,
    };
    let idle = Idle {
        before_context,
        after_context: IdleReading {
            t_ns: device.now_ns(),
            device_free_bytes: mem.free_bytes,
            device_used_bytes: mem.used_bytes(),
            device_total_bytes: mem.total_bytes,
            nvml,
        },
        // The kernels loaded since are not the context's creation cost.
        context_overhead_bytes: context_overhead(before_context, nvml)
            .map(|b| b.saturating_sub(kernels.map_or(0, |k| k.device_bytes.max(0) as u64))),
        kernels,
        processes_doubt,
        processes,
        processes_unavailable,
    };
    Ok(Before {
        baseline: Baseline {
            free_bytes: mem.free_bytes,
            used_bytes: mem.used_bytes(),
            others_bytes,
        },
        idle,
        sampler_perturbation: None,
    })
}

/// Loads the kernel modules `wl` needs, if any, and measures what they took.
fn load_kernels(wl: &Workload, device: &mut dyn Device) -> anyhow::Result<Option<KernelLoad>> {
    let mut needed = wl.facts.kernel_modules.clone();
    if needed.is_empty() {
        return Ok(None);
    }
    needed.sort_by_key(|m| m.index());
    needed.dedup();
    let before = device
        .mem_info()
        .context("reading device memory before the kernels' load")?
        .free_bytes;
    let modules = device
        .load_kernels(&needed)
        .context("loading headroom's kernels failed")?;
    let after = device
        .mem_info()
        .context("reading device memory after the kernels' load")?
        .free_bytes;
    Ok(Some(KernelLoad {
        modules,
        device_bytes: before as i64 - after as i64,
    }))
}

/// Times 2 MiB allocate/free pairs without and with a full-rate sampler running (which is
/// then stopped and its readings dropped).
fn sampler_perturbation(device: &mut dyn Device) -> anyhow::Result<SamplerPerturbation> {
    const PAIRS: u32 = 64;
    let time_pairs = |device: &mut dyn Device| -> anyhow::Result<u64> {
        let mut ns = Vec::with_capacity(PAIRS as usize);
        for _ in 0..PAIRS {
            let t0 = device.now_ns();
            let p = device.malloc(2 * MIB)?;
            device.free(p)?;
            ns.push(device.now_ns() - t0);
        }
        ns.sort_unstable();
        Ok(ns[ns.len() / 2])
    };
    let without = time_pairs(device)?;
    let sampler = device.start_sampler(0, Arc::new(LiveViews::default()))?;
    let with = time_pairs(device);
    device.publish_memory();
    sampler.stop(device.now_ns(), &mut Vec::new());
    Ok(SamplerPerturbation {
        pairs: PAIRS,
        alloc_free_p50_without_sampler_ns: without,
        alloc_free_p50_with_sampler_ns: with?,
    })
}

fn others_bytes(processes: &Option<Vec<ProcessUsage>>) -> u64 {
    processes
        .iter()
        .flatten()
        .filter(|p| !p.is_self)
        .filter_map(|p| p.used_bytes)
        .sum()
}

fn context_overhead(before: Option<NvmlMemory>, after: Option<NvmlMemory>) -> Option<u64> {
    Some(after?.used_bytes.saturating_sub(before?.used_bytes))
}

/// Everything the run's summary knows before the first step (status `running`).
pub(super) struct SummaryStart<'a> {
    pub wl: &'a Workload,
    pub device: crate::device::DeviceInfo,
    pub started: std::time::SystemTime,
    pub start_ns: u64,
    pub sample_interval_ns: u64,
    pub keep_free_bytes: u64,
    pub allow_oom: bool,
    pub plan: Option<PlanMarks>,
}

pub(super) fn initial_summary(s: SummaryStart, before: &mut Before) -> Summary {
    let wl = s.wl;
    Summary::begin(crate::report::summary::SummaryStart {
        workload: WorkloadInfo {
            name: wl.name.clone(),
            file: wl.file.display().to_string(),
            description: wl.description.clone(),
            allocator: wl.allocator.kind(),
            allocator_settings: serde_json::to_value(&wl.allocator).unwrap_or_default(),
            sample_interval_ns: s.sample_interval_ns,
            keep_free_bytes: s.keep_free_bytes,
            allow_oom: s.allow_oom,
        },
        device: s.device,
        started_utc: utc_timestamp(s.started),
        start_ns: s.start_ns,
        idle: Some(before.idle.clone()),
        idle_basis: None,
        phases: wl
            .phases
            .iter()
            .map(|p| PhaseSummary {
                name: p.name.clone(),
                status: PhaseStatus::Pending,
                start_ns: None,
                end_ns: None,
                actions_run: 0,
                actions_planned: p.planned,
                peaks: BTreeMap::new(),
            })
            .collect(),
        sampler_perturbation: before.sampler_perturbation.take(),
        plan: s.plan,
    })
}
