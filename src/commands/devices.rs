//! `headroom devices`: the GPUs the driver sees (or a simulated device or node's, with
//! `--profile`), or the simulated profiles when there is no driver.

use serde::Serialize;

use crate::cli::DeviceArgs;
use crate::device::driver_detail::with_driver_detail;
use crate::device::node_profile::NodeProfile;
use crate::device::profile::{DEFAULT_PROFILE, SimProfile};
use crate::device::select::{self, Backend, Choice};
use crate::node::inventory::{GpuIdentity, inventory};
use crate::text_table::{Align, TextTable};
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
    /// For a MIG instance (`h200-1g.18gb`): the card it is part of and its MIG profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_profile: Option<String>,
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
    // Where the driver was asked and failed, say what else it reports (its version, NVML).
    let probed = args.backend != Backend::Sim && args.profile.is_none();
    let detail = |reason: &str| {
        if probed {
            with_driver_detail(reason)
        } else {
            reason.to_string()
        }
    };
    let choice =
        select::choose(args.request()).map_err(|e| anyhow::anyhow!(detail(&e.to_string())))?;
    let listing = match choice {
        // A simulated device or node: its GPUs, as a driver would list them.
        Choice::Sim { .. } if args.profile.is_some() => Listing {
            backend: "sim",
            reason: None,
            gpus: inventory(args.request())?.gpus,
            profiles: vec![],
        },
        // No GPU here (or --backend sim): the profiles the simulator offers instead.
        Choice::Sim { notice } => Listing {
            backend: "sim",
            reason: Some(notice.map_or_else(|| "--backend sim".into(), |n| detail(&n))),
            gpus: vec![],
            profiles: profiles(),
        },
        Choice::Cuda { .. } => Listing {
            backend: "cuda",
            reason: None,
            gpus: inventory(args.request())?.gpus,
            profiles: vec![],
        },
    };
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&listing)?)?;
        return Ok(0);
    }
    if let Some(reason) = &listing.reason {
        crate::outln!("{reason}; simulated device profiles (use --profile NAME):")?;
        let mut t = TextTable::new(&[
            ("profile", Align::Left),
            ("models", Align::Left),
            ("total", Align::Right),
            ("context", Align::Right),
            ("SMs", Align::Right),
            ("", Align::Left),
        ]);
        for p in &listing.profiles {
            t.row([
                p.name.clone(),
                p.gpu_name.clone(),
                Bytes(p.total_bytes).to_string(),
                Bytes(p.context_overhead_bytes).to_string(),
                p.multiprocessors.to_string(),
                if p.default { "(default)" } else { "" }.to_string(),
            ]);
        }
        crate::out!("{}", t.render())?;
        return Ok(0);
    }
    if listing.backend == "cuda" && listing.gpus.iter().any(|g| g.mig.is_some()) {
        crate::outln!(
            "MIG mode: a CUDA process sees one instance; choose it with \
             CUDA_VISIBLE_DEVICES=<its MIG UUID>, or run on every one with --device all"
        )?;
    }
    for g in &listing.gpus {
        let kind = match &g.mig {
            Some(m) => format!(
                "MIG {}: {} · MIG {} of GPU {} ({})",
                g.index,
                g.name,
                m.profile.as_deref().unwrap_or("(profile unknown)"),
                m.parent_index.map_or("?".into(), |i| i.to_string()),
                m.parent_uuid
            ),
            None => format!("GPU {}: {}", g.index, g.name),
        };
        crate::outln!(
            "{kind} · compute {} · {} SMs · compute mode {} · {}",
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
            let reserved = n.reserved_bytes.map_or_else(
                || "reserve not reported (memory info v1 counts it in used)".into(),
                |r| format!("{} reserved by driver/firmware", Bytes(r)),
            );
            crate::outln!(
                "  NVML: {} total, {reserved}, {} used, {} free",
                Bytes(n.total_bytes),
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
            None => crate::outln!(
                "  no process list: {}",
                g.processes_unavailable
                    .as_deref()
                    .unwrap_or("NVML not available")
            )?,
        }
    }
    Ok(0)
}

fn profiles() -> Vec<ProfileRow> {
    SimProfile::builtin_all()
        .into_iter()
        .chain(SimProfile::builtin_instances())
        .map(|p| ProfileRow {
            default: p.name == DEFAULT_PROFILE,
            name: p.name,
            gpu_name: p.gpu_name,
            total_bytes: p.memory.total_bytes.0,
            context_overhead_bytes: p.memory.context_overhead_bytes.0,
            nvml_reserved_bytes: p.memory.nvml_reserved_bytes.0,
            multiprocessors: p.multiprocessors,
            devices: 1,
            mig_parent: p.mig_of.as_ref().map(|m| m.parent.clone()),
            mig_profile: p.mig_of.as_ref().map(|m| m.profile.clone()),
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
                mig_parent: None,
                mig_profile: None,
            }
        }))
        .collect()
}
