//! Simulated device profiles: the constants and rules the simulator follows, loaded from TOML.
//!
//! The built-in profiles live in `profiles/*.toml` and are embedded in the binary; a user's own
//! file (for example one written by `headroom calibrate`) loads through `--profile FILE`.
//! Every constant in a shipped profile carries a comment naming its source.

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::units::{DurationNs, Size};

/// Profiles compiled into the binary: (name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("tiny-4g", include_str!("../../profiles/tiny-4g.toml")),
    ("t4-16g", include_str!("../../profiles/t4-16g.toml")),
    ("l4-24g", include_str!("../../profiles/l4-24g.toml")),
    ("a10g-24g", include_str!("../../profiles/a10g-24g.toml")),
    ("a100-40g", include_str!("../../profiles/a100-40g.toml")),
    ("h100-80g", include_str!("../../profiles/h100-80g.toml")),
    ("h200", include_str!("../../profiles/h200.toml")),
];

/// The profile `--backend auto` and `--backend sim` use when none is named.
pub const DEFAULT_PROFILE: &str = "h200";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimProfile {
    pub name: String,
    /// What `headroom devices` shows as the GPU's name.
    pub gpu_name: String,
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub driver_version: String,
    pub memory: MemoryModel,
    pub latency: LatencyModel,
    pub bandwidth: BandwidthModel,
    pub stack: StackModel,
    #[serde(default)]
    pub graphs: GraphModel,
    #[serde(default)]
    pub kernels: KernelModel,
    /// Processes other than the harness that hold memory on the device from the start.
    #[serde(default)]
    pub other_processes: Vec<OtherProcess>,
    /// Driver features the device has (`[capabilities]`; each true unless set false), as a
    /// vGPU or virtualized card may lack memory pools or virtual memory management.
    #[serde(default)]
    pub capabilities: crate::device::Capabilities,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryModel {
    /// CUDA-visible total (`cuMemGetInfo`).
    pub total_bytes: Size,
    /// NVML's `reserved`: driver and firmware memory outside the CUDA-visible total.
    pub nvml_reserved_bytes: Size,
    /// Device memory a new context takes (visible only as a drop in free memory).
    pub context_overhead_bytes: Size,
    /// Physical page size; allocations above `small_alloc_limit_bytes` take whole pages.
    pub page_bytes: Size,
    /// Allocations at or below this size share pages.
    pub small_alloc_limit_bytes: Size,
    /// Spacing of small allocations inside a shared page.
    pub small_alloc_spacing_bytes: Size,
    /// Granularity of the stream-ordered pool's reservations.
    pub pool_granularity_bytes: Size,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyModel {
    pub mem_get_info: DurationNs,
    pub nvml_memory: DurationNs,
    pub malloc_base: DurationNs,
    /// Extra allocation time per GiB.
    pub malloc_per_gib: DurationNs,
    pub free: DurationNs,
    pub malloc_async: DurationNs,
    pub free_async: DurationNs,
    pub launch: DurationNs,
    pub stream_create: DurationNs,
    pub synchronize: DurationNs,
    pub context_create: DurationNs,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandwidthModel {
    /// Device-to-device copy, counting bytes read plus bytes written, per second.
    pub copy_bytes_per_s: f64,
    /// The `fill` kernel, bytes written per second.
    pub fill_bytes_per_s: f64,
    /// The `verify` kernel, bytes read per second.
    pub verify_bytes_per_s: f64,
    /// `cuMemsetD32`, bytes written per second.
    pub memset_bytes_per_s: f64,
    /// The `touch` kernel: pages made resident per second.
    pub touch_pages_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackModel {
    /// Resident threads per multiprocessor; the stack reservation is per resident thread.
    pub threads_per_multiprocessor: u32,
    /// The per-thread stack a context starts with.
    pub default_per_thread_bytes: Size,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphModel {
    /// Device memory an executable graph takes per kernel node.
    pub exec_bytes_per_node: Size,
    /// Granularity of graph allocation-node reservations.
    pub alloc_granularity_bytes: Size,
}

impl Default for GraphModel {
    fn default() -> Self {
        GraphModel {
            exec_bytes_per_node: Size(10 * 1024),
            alloc_granularity_bytes: Size(2 << 20),
        }
    }
}

/// What loading headroom's kernels costs the device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelModel {
    /// Device memory one loaded PTX module takes (code, constants, its share of the context).
    pub module_bytes: Size,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtherProcess {
    pub pid: u32,
    pub bytes: Size,
    /// When it takes the memory, from device open (default: already holding it).
    #[serde(default)]
    pub start: DurationNs,
    /// How long it holds it (default: for the whole run).
    #[serde(default)]
    pub duration: Option<DurationNs>,
}

impl SimProfile {
    /// Parses a profile's TOML; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> anyhow::Result<SimProfile> {
        let p: SimProfile = toml::from_str(text)
            .with_context(|| format!("{origin}: not a valid device profile"))?;
        p.check()
            .with_context(|| format!("{origin}: inconsistent device profile"))?;
        Ok(p)
    }

    /// A built-in profile by name, or a profile file by path.
    pub fn resolve(name_or_path: &str) -> anyhow::Result<SimProfile> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return SimProfile::from_toml(text, &format!("built-in profile {name_or_path}"));
        }
        let path = Path::new(name_or_path);
        if path.exists() || name_or_path.ends_with(".toml") {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read device profile {}", path.display()))?;
            return SimProfile::from_toml(&text, &path.display().to_string());
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        bail!(
            "unknown device profile {name_or_path:?}: built-in profiles are {}, or give a path to a .toml file",
            names.join(", ")
        )
    }

    pub fn builtin_all() -> Vec<SimProfile> {
        BUILTIN
            .iter()
            .map(|(n, t)| SimProfile::from_toml(t, n).expect("built-in profiles are valid"))
            .collect()
    }

    fn check(&self) -> anyhow::Result<()> {
        let m = &self.memory;
        if m.total_bytes.0 == 0 {
            bail!("memory.total_bytes must be above zero");
        }
        if m.context_overhead_bytes.0 >= m.total_bytes.0 {
            bail!("memory.context_overhead_bytes must be below memory.total_bytes");
        }
        for (key, v) in [
            ("memory.page_bytes", m.page_bytes.0),
            (
                "memory.small_alloc_spacing_bytes",
                m.small_alloc_spacing_bytes.0,
            ),
            ("memory.pool_granularity_bytes", m.pool_granularity_bytes.0),
            (
                "graphs.alloc_granularity_bytes",
                self.graphs.alloc_granularity_bytes.0,
            ),
        ] {
            if v == 0 || !v.is_power_of_two() {
                bail!("{key} must be a power of two above zero, not {v}");
            }
        }
        if m.small_alloc_limit_bytes.0 > m.page_bytes.0 {
            bail!("memory.small_alloc_limit_bytes must not exceed memory.page_bytes");
        }
        let b = &self.bandwidth;
        for (key, v) in [
            ("bandwidth.copy_bytes_per_s", b.copy_bytes_per_s),
            ("bandwidth.fill_bytes_per_s", b.fill_bytes_per_s),
            ("bandwidth.verify_bytes_per_s", b.verify_bytes_per_s),
            ("bandwidth.memset_bytes_per_s", b.memset_bytes_per_s),
            ("bandwidth.touch_pages_per_s", b.touch_pages_per_s),
        ] {
            if v.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !v.is_finite() {
                bail!("{key} must be a positive number, not {v}");
            }
        }
        if self.multiprocessors == 0 || self.stack.threads_per_multiprocessor == 0 {
            bail!("multiprocessors and stack.threads_per_multiprocessor must be above zero");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse() {
        let all = SimProfile::builtin_all();
        assert_eq!(all.len(), BUILTIN.len());
        // Each card as its sources give it: CUDA-visible total, SMs, compute capability.
        for (name, total_mib, sms, cc) in [
            ("tiny-4g", 4096, 8, "9.0"),
            ("t4-16g", 14_930, 40, "7.5"),
            ("l4-24g", 22_580, 58, "8.9"),
            ("a10g-24g", 22_600, 80, "8.6"),
            ("a100-40g", 40_336, 108, "8.0"),
            ("h100-80g", 81_089, 132, "9.0"),
            ("h200", 143_156, 132, "9.0"),
        ] {
            let p = SimProfile::resolve(name).unwrap();
            assert_eq!(p.name, name);
            assert_eq!(p.memory.total_bytes.0, total_mib << 20, "{name}");
            assert_eq!(
                (p.multiprocessors, p.compute_capability.as_str()),
                (sms, cc)
            );
            assert_eq!(p.capabilities, crate::device::Capabilities::default());
        }
    }

    #[test]
    fn capabilities_are_read_from_the_profile() {
        let text = format!(
            "{}\n[capabilities]\nmemory_pools_supported = false\n",
            BUILTIN[0].1
        );
        let p = SimProfile::from_toml(&text, "x.toml").unwrap();
        assert!(!p.capabilities.memory_pools_supported);
        assert!(p.capabilities.virtual_memory_management_supported);
        let e = format!(
            "{:#}",
            SimProfile::from_toml(&format!("{text}vmm = false\n"), "x.toml").unwrap_err()
        );
        assert!(e.contains("vmm"), "{e}");
    }

    #[test]
    fn unknown_profile_lists_the_builtins() {
        let e = SimProfile::resolve("a100").unwrap_err().to_string();
        assert!(e.contains("tiny-4g") && e.contains("h200"), "{e}");
    }

    #[test]
    fn bad_profile_names_the_key() {
        let text = BUILTIN[0]
            .1
            .replace("page_bytes = \"2MiB\"", "page_bytes = \"3MiB\"");
        let e = format!("{:#}", SimProfile::from_toml(&text, "x.toml").unwrap_err());
        assert!(e.contains("memory.page_bytes"), "{e}");
    }
}
