//! `headroom devices`: the GPUs the driver sees, or the simulated profiles when it sees none.

use serde::Serialize;

use crate::cli::DeviceArgs;
use crate::device::cuda::{self, CudaDevice};
use crate::device::nvml::NvmlDevice;
use crate::device::prelude::*;
use crate::device::profile::{DEFAULT_PROFILE, SimProfile};
use crate::device::select::Backend;
use crate::device::{NvmlMemory, ProcessUsage};
use crate::units::Bytes;

#[derive(Debug, Serialize)]
struct GpuRow {
    index: u32,
    name: String,
    uuid: String,
    compute_capability: String,
    multiprocessors: u32,
    compute_mode: String,
    total_bytes: u64,
    free_bytes: Option<u64>,
    driver_version: Option<String>,
    nvml: Option<NvmlMemory>,
    processes: Option<Vec<ProcessUsage>>,
}

#[derive(Debug, Serialize)]
struct ProfileRow {
    name: String,
    gpu_name: String,
    total_bytes: u64,
    context_overhead_bytes: u64,
    nvml_reserved_bytes: u64,
    multiprocessors: u32,
    default: bool,
}

#[derive(Debug, Serialize)]
struct Listing {
    backend: &'static str,
    /// Why there are no GPUs, when there are none.
    reason: Option<String>,
    gpus: Vec<GpuRow>,
    profiles: Vec<ProfileRow>,
}

pub fn devices(args: &DeviceArgs, json: bool) -> anyhow::Result<i32> {
    let probe = match args.backend {
        Backend::Sim => Err("--backend sim".to_string()),
        _ => cuda::probe(),
    };
    let listing = match probe {
        Ok(count) => Listing {
            backend: "cuda",
            reason: None,
            gpus: gpus(count)?,
            profiles: vec![],
        },
        Err(reason) => {
            if args.backend == Backend::Cuda {
                anyhow::bail!("{reason}");
            }
            Listing {
                backend: "sim",
                reason: Some(reason),
                gpus: vec![],
                profiles: profiles(),
            }
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&listing)?);
        return Ok(0);
    }
    if let Some(reason) = &listing.reason {
        println!("{reason}; simulated device profiles (use --profile NAME):");
        println!(
            "{:<10} {:<36} {:>12} {:>12} {:>6}",
            "profile", "models", "total", "context", "SMs"
        );
        for p in &listing.profiles {
            println!(
                "{:<10} {:<36} {:>12} {:>12} {:>6}{}",
                p.name,
                p.gpu_name,
                Bytes(p.total_bytes).to_string(),
                Bytes(p.context_overhead_bytes).to_string(),
                p.multiprocessors,
                if p.default { "  (default)" } else { "" }
            );
        }
        return Ok(0);
    }
    for g in &listing.gpus {
        println!(
            "GPU {}: {} · compute {} · {} SMs · compute mode {} · {}",
            g.index, g.name, g.compute_capability, g.multiprocessors, g.compute_mode, g.uuid
        );
        println!(
            "  CUDA-visible: {} total, {} free · driver {}",
            Bytes(g.total_bytes),
            g.free_bytes
                .map_or("unknown".into(), |f| Bytes(f).to_string()),
            g.driver_version.as_deref().unwrap_or("unknown")
        );
        if let Some(n) = &g.nvml {
            println!(
                "  NVML: {} total, {} reserved by driver/firmware, {} used, {} free",
                Bytes(n.total_bytes),
                Bytes(n.reserved_bytes),
                Bytes(n.used_bytes),
                Bytes(n.free_bytes)
            );
        }
        match &g.processes {
            Some(ps) if !ps.is_empty() => {
                for p in ps {
                    println!(
                        "  process {}: {}",
                        p.pid,
                        p.used_bytes
                            .map_or("usage not reported".into(), |b| Bytes(b).to_string())
                    );
                }
            }
            Some(_) => println!("  no compute processes"),
            None => println!("  (NVML not available: no per-process figures)"),
        }
    }
    Ok(0)
}

fn gpus(count: u32) -> anyhow::Result<Vec<GpuRow>> {
    let mut rows = Vec::new();
    for index in 0..count {
        let f = cuda::device_facts(index)?;
        let nvml = NvmlDevice::open(&f.uuid);
        let nvml_mem = nvml.as_ref().and_then(|n| n.memory());
        // Free memory without creating a context where NVML can tell; otherwise open one.
        let free_bytes = match nvml_mem {
            Some(m) => Some(f.total_bytes.saturating_sub(m.used_bytes)),
            None => CudaDevice::open(index)
                .ok()
                .and_then(|(mut d, _, _)| d.mem_info().ok())
                .map(|m| m.free_bytes),
        };
        rows.push(GpuRow {
            index,
            name: f.name,
            uuid: f.uuid,
            compute_capability: f.compute_capability,
            multiprocessors: f.multiprocessors,
            compute_mode: f.compute_mode,
            total_bytes: f.total_bytes,
            free_bytes,
            driver_version: nvml.as_ref().and_then(|n| n.driver_version()),
            nvml: nvml_mem,
            processes: nvml.as_ref().and_then(|n| n.processes()),
        });
    }
    Ok(rows)
}

fn profiles() -> Vec<ProfileRow> {
    SimProfile::builtin_all()
        .into_iter()
        .map(|p| ProfileRow {
            default: p.name == DEFAULT_PROFILE,
            name: p.name,
            gpu_name: p.gpu_name,
            total_bytes: p.memory.total_bytes.0,
            context_overhead_bytes: p.memory.context_overhead_bytes.0,
            nvml_reserved_bytes: p.memory.nvml_reserved_bytes.0,
            multiprocessors: p.multiprocessors,
        })
        .collect()
}
