//! Which GPUs a node may put under pressure: never one another process is using, unless
//! `--shared-ok`.
//!
//! The check runs in the node's parent before any worker starts, so no context of this node
//! exists yet and every process the driver lists is another one. The list is still doubted
//! as a single run doubts it (`device::process_sum_doubt`): when the processes it names are
//! far from NVML's whole-device `used`, as a PID namespace can make them, it is reported and
//! never acted on. Each worker then checks its own GPU again once its context exists.

use serde::{Deserialize, Serialize};

use crate::device::ProcessUsage;
use crate::node::inventory::GpuIdentity;
use crate::units::Bytes;

/// What the process list says about one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Occupancy {
    /// No other process holds memory there.
    Free,
    /// Other processes hold memory there.
    Busy { others: Vec<ProcessUsage> },
    /// The list cannot be believed; not acted on.
    Doubted { why: String },
    /// No process list (no NVML): not known, not acted on.
    Unknown,
}

/// Reads one GPU's process list as the node's safety rule does.
pub fn occupancy(gpu: &GpuIdentity) -> Occupancy {
    let Some(ps) = &gpu.processes else {
        return Occupancy::Unknown;
    };
    if let Some(why) = crate::device::process_sum_doubt(ps, gpu.nvml.map(|m| m.used_bytes)) {
        return Occupancy::Doubted { why };
    }
    // `is_self` cannot be set here (this process has no context), but a worker's own entry
    // would never be another tenant.
    let others: Vec<ProcessUsage> = ps
        .iter()
        .filter(|p| !p.is_self && p.used_bytes != Some(0))
        .cloned()
        .collect();
    if others.is_empty() {
        Occupancy::Free
    } else {
        Occupancy::Busy { others }
    }
}

/// "pid 4242 (20.00 GiB), pid 77 (usage unknown)".
pub fn describe(others: &[ProcessUsage]) -> String {
    others
        .iter()
        .map(|p| {
            format!(
                "pid {} ({})",
                p.pid,
                p.used_bytes
                    .map_or("usage unknown".into(), |b| Bytes(b).to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::NvmlMemory;

    fn gpu(processes: Option<Vec<ProcessUsage>>, used: u64) -> GpuIdentity {
        GpuIdentity {
            index: 0,
            name: "g".into(),
            uuid: "GPU-1".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 1,
            compute_mode: "default".into(),
            total_bytes: 80 << 30,
            free_bytes: None,
            driver_version: None,
            nvml: Some(NvmlMemory {
                total_bytes: 81 << 30,
                reserved_bytes: Some(1 << 30),
                used_bytes: used,
                free_bytes: (80 << 30) - used,
            }),
            processes,
            processes_unavailable: None,
            mig: None,
            cuda_visible_devices: None,
        }
    }

    fn p(pid: u32, bytes: u64) -> ProcessUsage {
        ProcessUsage {
            pid,
            used_bytes: Some(bytes),
            is_self: false,
        }
    }

    #[test]
    fn busy_free_doubted_unknown() {
        assert_eq!(occupancy(&gpu(Some(vec![]), 0)), Occupancy::Free);
        let busy = occupancy(&gpu(Some(vec![p(4242, 20 << 30)]), 20 << 30));
        assert_eq!(
            busy,
            Occupancy::Busy {
                others: vec![p(4242, 20 << 30)]
            }
        );
        if let Occupancy::Busy { others } = busy {
            assert_eq!(describe(&others), "pid 4242 (20.00 GiB)");
        }
        // Memory in use that no listed process accounts for: a PID namespace hides them.
        let hidden = occupancy(&gpu(Some(vec![]), 20 << 30));
        assert!(
            matches!(&hidden, Occupancy::Doubted { why } if why.contains("NVML counts")),
            "{hidden:?}"
        );
        assert_eq!(occupancy(&gpu(None, 0)), Occupancy::Unknown);
    }
}
