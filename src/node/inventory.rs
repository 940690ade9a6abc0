//! The GPUs of a node and who is on them: model, UUID, CUDA-visible total, driver, NVML's
//! memory and process list, read without creating a context (a node's parent process never
//! holds a GPU; its workers do). `headroom devices` lists the same fields.

use serde::{Deserialize, Serialize};

use crate::device::mig::MigIdentity;
use crate::device::node_profile::NodeProfile;
use crate::device::nvml::NvmlDevice;
use crate::device::profile::DEFAULT_PROFILE;
use crate::device::select::{self, Choice, Request};
use crate::device::sim::{SimDevice, sim_card_identity};
use crate::device::{BackendKind, NvmlMemory, ProcessUsage};
use crate::node::instances;

/// One GPU as a node sees it before anything runs on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuIdentity {
    pub index: u32,
    /// The model, as the driver names it.
    pub name: String,
    pub uuid: String,
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub compute_mode: String,
    /// CUDA-visible total (`cuDeviceTotalMem`).
    pub total_bytes: u64,
    /// CUDA-visible free (total − NVML used), where known.
    pub free_bytes: Option<u64>,
    pub driver_version: Option<String>,
    pub nvml: Option<NvmlMemory>,
    /// Every compute process on the GPU (`None` without NVML, or where NVML refused it).
    pub processes: Option<Vec<ProcessUsage>>,
    /// Why there is no process list, when there is none (no NVML; NVML refused it, as on a
    /// MIG instance without privileges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_unavailable: Option<String>,
    /// The MIG instance this is, with its profile and parent GPU (`None` on a whole GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigIdentity>,
    /// What a process for this GPU sets `CUDA_VISIBLE_DEVICES` to, then opening CUDA device 0:
    /// its UUID, on a node with a GPU in MIG mode (a CUDA process sees one MIG instance, so
    /// `index` is this GPU's place in the node's list, not a CUDA ordinal). `None` elsewhere:
    /// `index` is then the CUDA ordinal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
}

impl GpuIdentity {
    /// The first eight hex digits of the UUID, for folder names (`gpu3-1a2b3c4d`).
    pub fn uuid_prefix(&self) -> String {
        let hex: String = self
            .uuid
            .trim_start_matches("GPU-")
            .trim_start_matches("MIG-")
            .chars()
            .filter(char::is_ascii_hexdigit)
            .take(8)
            .collect();
        if hex.is_empty() {
            "nouuid".into()
        } else {
            hex.to_ascii_lowercase()
        }
    }

    /// The worker's folder inside the node folder.
    pub fn folder_name(&self) -> String {
        format!("gpu{}-{}", self.index, self.uuid_prefix())
    }
}

/// Every GPU of the node on one backend.
#[derive(Debug, Clone)]
pub struct Inventory {
    pub backend: BackendKind,
    /// The simulated (node) profile's name.
    pub profile: Option<String>,
    pub gpus: Vec<GpuIdentity>,
    /// Why the simulator was chosen, when `--backend auto` fell back to it.
    pub notice: Option<String>,
}

/// Reads every GPU as `select::open` would choose the backend, without a context: where NVML
/// cannot tell free memory, it is unknown (a listing's context would take memory, and on an
/// exclusive-process GPU keep the job it lists for from creating its own).
pub fn inventory(req: Request<'_>) -> anyhow::Result<Inventory> {
    match select::choose(req)? {
        Choice::Sim { notice } => {
            let node = NodeProfile::resolve(req.profile.unwrap_or(DEFAULT_PROFILE))?;
            Ok(Inventory {
                backend: BackendKind::Sim,
                profile: Some(node.name.clone()),
                gpus: sim_gpus(&node),
                notice,
            })
        }
        Choice::Cuda { count } => Ok(Inventory {
            backend: BackendKind::Cuda,
            profile: None,
            gpus: cuda_gpus(count)?,
            notice: None,
        }),
    }
}

/// The cards of a simulated node, as NVML would show them before any context: the profile's
/// other processes present from the start, and their memory.
pub fn sim_gpus(node: &NodeProfile) -> Vec<GpuIdentity> {
    node.cards
        .iter()
        .enumerate()
        .map(|(i, card)| {
            let index = i as u32;
            let before = SimDevice::open(card.clone(), index).before_context();
            let processes = card
                .other_processes
                .iter()
                .filter(|p| p.start.0 == 0)
                .map(|p| ProcessUsage {
                    pid: p.pid,
                    used_bytes: Some(p.bytes.0),
                    is_self: false,
                })
                .collect();
            let (uuid, mig) = sim_card_identity(card, index);
            GpuIdentity {
                index,
                name: card.gpu_name.clone(),
                uuid,
                mig,
                processes_unavailable: None,
                cuda_visible_devices: None,
                compute_capability: card.compute_capability.clone(),
                multiprocessors: card.multiprocessors,
                compute_mode: "default".into(),
                total_bytes: card.memory.total_bytes.0,
                free_bytes: Some(card.memory.total_bytes.0.saturating_sub(before.used_bytes)),
                driver_version: Some(card.driver_version.clone()),
                nvml: Some(before),
                processes: Some(processes),
            }
        })
        .collect()
}

/// The GPUs on the driver: by CUDA ordinal, or, when a GPU is in MIG mode, every MIG
/// instance (and whole GPU) NVML lists, each to be opened through `CUDA_VISIBLE_DEVICES`.
fn cuda_gpus(count: u32) -> anyhow::Result<Vec<GpuIdentity>> {
    if let Some(rows) = instances::mig_node(count)? {
        return Ok(rows);
    }
    let mut rows = Vec::new();
    for index in 0..count {
        let f = select::device_facts(index)?;
        let nvml = NvmlDevice::open(&f.uuid);
        let (processes, processes_unavailable) = match &nvml {
            Some(n) => split(n.processes_or_why()),
            None => (None, Some("NVML is not available for this GPU".to_string())),
        };
        let nvml_mem = nvml.as_ref().and_then(|n| n.memory());
        let free_bytes = match nvml_mem {
            // NVML's v2 used leaves out the driver's reserved share, as the CUDA-visible total
            // does; v1 (before R510, or where v2 fails) counts it in used without saying how
            // much it is, but its free is what CUDA can use either way.
            Some(m) if m.reserved_bytes.is_none_or(|r| r == 0) => {
                Some(m.free_bytes.min(f.total_bytes))
            }
            Some(m) => Some(f.total_bytes.saturating_sub(m.used_bytes)),
            None => None,
        };
        let mig = f.mig(nvml.as_ref());
        rows.push(GpuIdentity {
            index,
            compute_capability: f.compute_capability,
            multiprocessors: f.multiprocessors,
            compute_mode: f.compute_mode,
            total_bytes: f.total_bytes,
            free_bytes,
            // Without NVML the CUDA library still says which CUDA version it implements.
            driver_version: nvml
                .as_ref()
                .and_then(|n| n.driver_version())
                .or_else(|| Some(format!("CUDA {}", select::cuda_driver_version()))),
            nvml: nvml_mem,
            processes,
            processes_unavailable,
            mig,
            cuda_visible_devices: None,
            name: f.name,
            uuid: f.uuid,
        });
    }
    Ok(rows)
}

/// A process list, or why there is none, as two fields.
pub(crate) fn split(
    r: Result<Vec<ProcessUsage>, String>,
) -> (Option<Vec<ProcessUsage>>, Option<String>) {
    match r {
        Ok(ps) => (Some(ps), None),
        Err(why) => (None, Some(why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::select::Backend;

    #[test]
    fn the_simulated_node_shows_its_busy_card_and_distinct_folders() {
        let inv = inventory(Request::new(Backend::Sim, Some("8xh100-80g"))).unwrap();
        assert_eq!(inv.gpus.len(), 8);
        assert_eq!(inv.profile.as_deref(), Some("8xh100-80g"));
        let busy = &inv.gpus[5];
        let ps = busy.processes.as_ref().unwrap();
        assert_eq!((ps.len(), ps[0].pid), (1, 4242));
        assert_eq!(busy.nvml.unwrap().used_bytes, 20 << 30);
        assert_eq!(busy.free_bytes, Some(busy.total_bytes - (20 << 30)));
        assert_eq!(inv.gpus[3].total_bytes, 80961 << 20);
        let folders: std::collections::BTreeSet<String> =
            inv.gpus.iter().map(GpuIdentity::folder_name).collect();
        assert_eq!(folders.len(), 8);
        assert!(inv.gpus[2].folder_name().starts_with("gpu2-"));
        assert_eq!(inv.gpus[2].uuid_prefix().len(), 8);
    }
}
