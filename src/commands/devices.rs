//! `headroom devices`: the GPUs the driver sees (or a simulated device or node's, with
//! `--profile`), or the simulated profiles when there is no driver.

use serde::Serialize;

use crate::cli::DeviceArgs;
use crate::device::node_profile::NodeProfile;
use crate::device::profile::{DEFAULT_PROFILE, SimProfile};
use crate::device::select::{self, Choice};
use crate::node::inventory::{GpuIdentity, inventory};
use crate::units::Bytes;

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct ProfileRow {
    name: String,
    gpu_name: String,
    total_bytes: u64,
    context_overhead_bytes: u64,
    nvml_reserved_bytes: u64,
    multiprocessors: u32,
    /// GPUs: 1 for a device profile, more for a node profile.
    devices: u32,
    default: bool,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct Listing {
    backend: &'static str,
    /// Why there are no GPUs, when there are none.
    reason: Option<String>,
    gpus: Vec<GpuIdentity>,
    profiles: Vec<ProfileRow>,
}

pub fn devices(args: &DeviceArgs, json: bool) -> anyhow::Result<i32> {
    let listing = match select::choose(args.request())? {
        // A simulated device or node: its GPUs, as a driver would list them.
        Choice::Sim { .. } if args.profile.is_some() => Listing {
            backend: "sim",
            reason: None,
            gpus: inventory(args.request(), true)?.gpus,
            profiles: vec![],
        },
        // No GPU here (or --backend sim): the profiles the simulator offers instead.
        Choice::Sim { notice } => Listing {
            backend: "sim",
            reason: Some(notice.unwrap_or_else(|| "--backend sim".into())),
            gpus: vec![],
            profiles: profiles(),
        },
        Choice::Cuda { .. } => Listing {
            backend: "cuda",
            reason: None,
            gpus: inventory(args.request(), true)?.gpus,
            profiles: vec![],
        },
    };
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&listing)?)?;
        return Ok(0);
    }
    if let Some(reason) = &listing.reason {
        crate::outln!("{reason}; simulated device profiles (use --profile NAME):")?;
        crate::outln!(
            "{:<12} {:<44} {:>12} {:>12} {:>6}",
            "profile",
            "models",
            "total",
            "context",
            "SMs"
        )?;
        for p in &listing.profiles {
            crate::outln!(
                "{:<12} {:<44} {:>12} {:>12} {:>6}{}",
                p.name,
                p.gpu_name,
                Bytes(p.total_bytes).to_string(),
                Bytes(p.context_overhead_bytes).to_string(),
                p.multiprocessors,
                if p.default { "  (default)" } else { "" }
            )?;
        }
        return Ok(0);
    }
    for g in &listing.gpus {
        crate::outln!(
            "GPU {}: {} · compute {} · {} SMs · compute mode {} · {}",
            g.index,
            g.name,
            g.compute_capability,
            g.multiprocessors,
            g.compute_mode,
            g.uuid
        )?;
        crate::outln!(
            "  CUDA-visible: {} total, {} free · driver {}",
            Bytes(g.total_bytes),
            g.free_bytes
                .map_or("unknown".into(), |f| Bytes(f).to_string()),
            g.driver_version.as_deref().unwrap_or("unknown")
        )?;
        if let Some(n) = &g.nvml {
            crate::outln!(
                "  NVML: {} total, {} reserved by driver/firmware, {} used, {} free",
                Bytes(n.total_bytes),
                Bytes(n.reserved_bytes),
                Bytes(n.used_bytes),
                Bytes(n.free_bytes)
            )?;
        }
        match &g.processes {
            Some(ps) if !ps.is_empty() => {
                for p in ps {
                    crate::outln!(
                        "  process {}: {}",
                        p.pid,
                        p.used_bytes
                            .map_or("usage not reported".into(), |b| Bytes(b).to_string())
                    )?;
                }
            }
            Some(_) => crate::outln!("  no compute processes")?,
            None => crate::outln!("  (NVML not available: no per-process figures)")?,
        }
    }
    Ok(0)
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
            devices: 1,
        })
        .chain(NodeProfile::builtin_all().into_iter().map(|n| {
            let c = &n.cards[0];
            ProfileRow {
                default: false,
                devices: n.device_count(),
                gpu_name: format!("{} × {}", n.device_count(), c.gpu_name),
                name: n.name,
                total_bytes: c.memory.total_bytes.0,
                context_overhead_bytes: c.memory.context_overhead_bytes.0,
                nvml_reserved_bytes: c.memory.nvml_reserved_bytes.0,
                multiprocessors: c.multiprocessors,
            }
        }))
        .collect()
}
