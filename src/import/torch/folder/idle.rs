//! The idle reading of an imported snapshot: none, since a snapshot records no idle reading,
//! device total, context cost or other processes; or derived from what the user gave
//! (`--device-total`, `--profile`), and labeled so in `summary.json`'s `idle_basis`.

use crate::device::NvmlMemory;
use crate::report::summary::{Idle, IdleReading};

use super::{ImportOptions, evidence_basis};

/// The summary's idle reading, the reason it is null or what it is derived from, and the
/// device total that figures derived from the total (headroom at the peak) may use.
pub(super) struct IdleEvidence {
    pub idle: Option<Idle>,
    pub basis: String,
    pub total: Option<u64>,
}

/// What the replay device read at idle: its total, free memory, NVML before the context and
/// the context's cost. Used only under `--profile`, where the user chose that device.
pub(super) struct Simulated {
    pub total: u64,
    pub free: u64,
    pub before: NvmlMemory,
    pub context_bytes: u64,
}

pub(super) fn idle_evidence(opts: &ImportOptions, sim: Simulated) -> IdleEvidence {
    match (opts.device_total, opts.profile.as_deref()) {
        (Some(t), _) => IdleEvidence {
            idle: Some(bare(IdleReading {
                t_ns: 0,
                device_free_bytes: t,
                device_used_bytes: 0,
                device_total_bytes: t,
                nvml: None,
            })),
            basis: format!(
                "derived from --device-total {t}: the whole total assumed free at idle (the snapshot records no idle reading, context cost or other processes)"
            ),
            total: Some(t),
        },
        (None, Some(p)) => IdleEvidence {
            idle: Some(Idle {
                before_context: Some(sim.before),
                context_overhead_bytes: Some(sim.context_bytes),
                ..bare(IdleReading {
                    t_ns: 0,
                    device_free_bytes: sim.free,
                    device_used_bytes: sim.total.saturating_sub(sim.free),
                    device_total_bytes: sim.total,
                    nvml: None,
                })
            }),
            basis: format!(
                "derived from --profile {p} (assumed, not recorded): the simulated device's idle reading, with no other processes"
            ),
            total: Some(sim.total),
        },
        (None, None) => IdleEvidence {
            idle: None,
            basis: evidence_basis(opts),
            total: None,
        },
    }
}

/// An idle reading with nothing known beside it.
fn bare(after_context: IdleReading) -> Idle {
    Idle {
        before_context: None,
        after_context,
        context_overhead_bytes: None,
        kernels: None,
        processes: None,
        processes_doubt: None,
        processes_unavailable: None,
    }
}
