//! Whether a workload can run on a device at all, before its first step: the smallest device
//! it states it fits on (`[workload] min_total_bytes`), and the driver capabilities its
//! allocator and steps use (`crate::device::Capabilities`, read when the device opened).
//!
//! A workload that does not fit is refused naming what it needs (exit 2), or recorded as
//! `skipped` with that reason under `run --skip-unfit`: a card too small or a driver without a
//! feature is a fact about the device, not a failure of the workload.

use crate::alloc::AllocatorSpec;
use crate::device::{Capability, DeviceInfo};
use crate::units::Bytes;
use crate::workload::Workload;

/// What the workload uses that needs a capability not every device has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub capability: Capability,
    /// The feature, as the workload file spells it, and the driver calls behind it.
    pub feature: String,
}

/// Every capability the workload needs, once per feature, in the order they appear.
pub fn needs(wl: &Workload) -> Vec<Need> {
    let mut out = Vec::new();
    match &wl.allocator {
        AllocatorSpec::Pool(_) => out.push(Need {
            capability: Capability::MemoryPools,
            feature: "the pool allocator ([allocator] kind = \"pool\": cuMemPoolCreate, \
                      cuMemAllocFromPoolAsync)"
                .into(),
        }),
        AllocatorSpec::Caching(c) if c.expandable_segments => out.push(Need {
            capability: Capability::VirtualMemoryManagement,
            feature: "expandable segments (expandable_segments:True: cuMemAddressReserve, \
                      cuMemCreate, cuMemMap)"
                .into(),
        }),
        _ => {}
    }
    if let Some(label) = &wl.facts.first_graph_allocate {
        out.push(Need {
            capability: Capability::MemoryPools,
            feature: format!(
                "graph memory nodes (an allocation captured into a graph, step {}: \
                 cuMemAllocAsync on a capturing stream)",
                label
            ),
        });
    }
    out
}

/// Why the workload cannot run on the device, if it cannot: its stated minimum above the
/// device's total (checked first: nothing else can be known of a workload too large to
/// expand), else the first capability it needs that the device lacks.
pub fn unfit_total(min_total_bytes: Option<u64>, info: &DeviceInfo) -> Option<String> {
    let min = min_total_bytes?;
    (info.total_bytes < min).then(|| {
        format!(
            "the workload needs a device of at least {} ({min} bytes) CUDA-visible \
             ([workload] min_total_bytes); {} has {} ({} bytes)",
            Bytes(min),
            info.name,
            Bytes(info.total_bytes),
            info.total_bytes
        )
    })
}

/// The first capability `wl` needs that the device lacks, as a reason naming the attribute.
pub fn unfit_capabilities(wl: &Workload, info: &DeviceInfo) -> Option<String> {
    needs(wl)
        .into_iter()
        .find(|n| !info.capabilities.has(n.capability))
        .map(|n| {
            format!(
                "{} needs {}, which {} reports as 0",
                n.feature,
                n.capability.attribute(),
                info.name
            )
        })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::device::Capabilities;
    use crate::device::prelude::*;
    use crate::device::profile::SimProfile;
    use crate::device::sim::SimDevice;
    use crate::units::{GIB, MIB};

    fn info(profile: &str, caps: Capabilities) -> DeviceInfo {
        let mut p = SimProfile::resolve(profile).unwrap();
        p.capabilities = caps;
        SimDevice::open(p, 0).info().clone()
    }

    fn wl(text: &str) -> Workload {
        Workload::from_toml(text, Path::new("w.toml"), 4 * GIB).unwrap()
    }

    const NONE: Capabilities = Capabilities {
        memory_pools_supported: false,
        virtual_memory_management_supported: false,
    };

    #[test]
    fn a_stated_minimum_above_the_total_is_unfit_with_both_figures() {
        let tiny = info("tiny-4g", Capabilities::default());
        assert_eq!(unfit_total(None, &tiny), None);
        assert_eq!(unfit_total(Some(4 * GIB), &tiny), None);
        let why = unfit_total(Some(4 * GIB + 2 * MIB), &tiny).unwrap();
        assert!(
            why.contains("at least 4.00 GiB (4297064448 bytes)")
                && why.contains("has 4.00 GiB (4294967296 bytes)"),
            "{why}"
        );
    }

    #[test]
    fn each_feature_names_the_attribute_it_needs() {
        let none = info("tiny-4g", NONE);
        let all = info("tiny-4g", Capabilities::default());
        let plain = wl(
            "[workload]\nname = \"p\"\n[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"2MiB\" }]\n",
        );
        assert!(needs(&plain).is_empty());
        assert_eq!(unfit_capabilities(&plain, &none), None);

        let pool = wl(
            "[workload]\nname = \"p\"\n[allocator]\nkind = \"pool\"\n[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"2MiB\" }]\n",
        );
        let why = unfit_capabilities(&pool, &none).unwrap();
        assert!(
            why.starts_with("the pool allocator")
                && why.contains("CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED"),
            "{why}"
        );
        assert_eq!(unfit_capabilities(&pool, &all), None);

        let expandable = wl(
            "[workload]\nname = \"e\"\n[allocator]\nkind = \"caching\"\nexpandable_segments = true\n[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"2MiB\" }]\n",
        );
        let why = unfit_capabilities(&expandable, &none).unwrap();
        assert!(
            why.starts_with("expandable segments")
                && why.contains("CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"),
            "{why}"
        );
        let no_vmm = info(
            "tiny-4g",
            Capabilities {
                virtual_memory_management_supported: false,
                ..Capabilities::default()
            },
        );
        assert!(unfit_capabilities(&expandable, &no_vmm).is_some());
        assert_eq!(unfit_capabilities(&pool, &no_vmm), None);

        let graphs = Workload::load(Path::new("workloads/oom/graph-pool.toml"), 4 * GIB).unwrap();
        let n = needs(&graphs);
        assert_eq!(n.len(), 1, "{n:?}");
        assert_eq!(n[0].capability, Capability::MemoryPools);
        assert!(n[0].feature.starts_with("graph memory nodes"), "{n:?}");
    }
}
