//! The causes of "CUDA out of memory while memory looks free", as headroom names them: one
//! vocabulary for a run's OOM diagnosis (`oom`), an error message's (`explain`) and the
//! scenarios in `workloads/oom/` that reproduce each.

use serde::{Deserialize, Serialize};

/// One cause, serialized by its name (`fragmentation`, `other-process`, …).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// Free pieces inside the allocator's segments, none large enough for the request.
    Fragmentation,
    /// Another process holds the memory.
    OtherProcess,
    /// This process holds memory outside the allocator (NCCL, cuBLAS workspaces, plain
    /// `cuMemAlloc`).
    OutsideAllocator,
    /// CUDA graph memory reserved but unused: a trim would return it.
    GraphPool,
    /// CUDA graph memory in use by live graph allocations.
    GraphMemory,
    /// Frees queued behind busy streams have not completed yet.
    PendingFree,
    /// Memory no allocator reports: the context, the stack reservation, kernel modules.
    HeldOutsideAnyAllocator,
    /// The request fits at idle but not at the workload's peak.
    PeakNotIdle,
    /// The device is simply too small for what is asked.
    Capacity,
    /// The allocator's own cap (`per_process_memory_fraction`) refused a request the device
    /// had room for.
    FractionCap,
}

impl Cause {
    pub const ALL: [Cause; 10] = [
        Cause::Fragmentation,
        Cause::OtherProcess,
        Cause::OutsideAllocator,
        Cause::GraphPool,
        Cause::GraphMemory,
        Cause::PendingFree,
        Cause::HeldOutsideAnyAllocator,
        Cause::PeakNotIdle,
        Cause::Capacity,
        Cause::FractionCap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Fragmentation => "fragmentation",
            Cause::OtherProcess => "other-process",
            Cause::OutsideAllocator => "outside-allocator",
            Cause::GraphPool => "graph-pool",
            Cause::GraphMemory => "graph-memory",
            Cause::PendingFree => "pending-free",
            Cause::HeldOutsideAnyAllocator => "held-outside-any-allocator",
            Cause::PeakNotIdle => "peak-not-idle",
            Cause::Capacity => "capacity",
            Cause::FractionCap => "fraction-cap",
        }
    }

    /// The shipped workload that reproduces the cause on any card, if one does.
    pub fn scenario(self) -> Option<&'static str> {
        Some(match self {
            Cause::Fragmentation => "workloads/oom/fragmentation.toml",
            Cause::OtherProcess => "workloads/oom/other-tenant.toml",
            Cause::OutsideAllocator => "workloads/oom/outside-allocator.toml",
            Cause::GraphPool => "workloads/oom/graph-pool.toml",
            Cause::PendingFree => "workloads/oom/pending-free.toml",
            Cause::HeldOutsideAnyAllocator => "workloads/oom/context-and-stack.toml",
            Cause::PeakNotIdle | Cause::Capacity => "workloads/oom/peak-not-idle.toml",
            Cause::FractionCap => "workloads/oom/fraction-cap.toml",
            Cause::GraphMemory => return None,
        })
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The names joined with `sep`, for people (`a, b, c`; `a or b`).
pub fn join(causes: &[Cause], sep: &str) -> String {
    causes
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(sep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_serialize_as_written_and_every_scenario_exists() {
        for c in Cause::ALL {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
            if let Some(path) = c.scenario() {
                let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
                assert!(full.is_file(), "{c}: {path} is missing");
            }
        }
    }
}
