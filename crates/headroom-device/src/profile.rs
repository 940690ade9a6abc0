//! Simulated device profiles: the constants and rules the simulator follows, loaded from TOML.
//!
//! The built-in profiles live in `profiles/*.toml` and are embedded in the binary; a user's own
//! file (for example one written by `headroom calibrate`) loads through `--profile FILE`.
//! Every constant in a shipped profile carries a comment naming its source.

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::mig::{self, MigOf, MigProfile};
use crate::units::{DurationNs, Size};

/// Profiles compiled into the binary: (name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("tiny-4g", include_str!("../../../profiles/tiny-4g.toml")),
    ("t4-16g", include_str!("../../../profiles/t4-16g.toml")),
    ("l4-24g", include_str!("../../../profiles/l4-24g.toml")),
    ("a10g-24g", include_str!("../../../profiles/a10g-24g.toml")),
    ("a100-40g", include_str!("../../../profiles/a100-40g.toml")),
    ("h100-80g", include_str!("../../../profiles/h100-80g.toml")),
    ("h200", include_str!("../../../profiles/h200.toml")),
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
    pub capabilities: crate::Capabilities,
    /// The card's MIG instance profiles (`[[mig]]`): `--profile <name>-<mig profile>` is a
    /// card of one instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigProfile>,
    /// Set on a card made from one of another card's `[[mig]]` tables.
    #[serde(skip)]
    pub mig_of: Option<MigOf>,
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

    /// A built-in profile by name (a card, or one MIG instance of a card: `h200-1g.18gb`), or
    /// a profile file by path.
    pub fn resolve(name_or_path: &str) -> anyhow::Result<SimProfile> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return SimProfile::from_toml(text, &format!("built-in profile {name_or_path}"));
        }
        if let Some(card) = builtin_instance(name_or_path)? {
            return Ok(card);
        }
        let path = Path::new(name_or_path);
        if path.exists() || name_or_path.ends_with(".toml") {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read device profile {}", path.display()))?;
            return SimProfile::from_toml(&text, &path.display().to_string());
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        let instances: Vec<String> = SimProfile::builtin_instances()
            .into_iter()
            .map(|c| c.name)
            .collect();
        bail!(
            "unknown device profile {name_or_path:?}: built-in profiles are {}, MIG instances {}, \
             or give a path to a .toml file",
            names.join(", "),
            instances.join(", ")
        )
    }

    /// Every MIG instance of every built-in card, as a card (`h200-1g.18gb`, …), in the
    /// cards' order and each card's `[[mig]]` order.
    pub fn builtin_instances() -> Vec<SimProfile> {
        SimProfile::builtin_all()
            .iter()
            .flat_map(|p| p.mig.iter().map(|m| mig::instance_card(p, m)))
            .collect()
    }

    /// The card of one of this card's MIG profiles, or an error naming the ones it has.
    pub fn instance(&self, profile: &str) -> anyhow::Result<SimProfile> {
        match self.mig.iter().find(|m| m.profile == profile) {
            Some(m) => Ok(mig::instance_card(self, m)),
            None if self.mig.is_empty() => bail!(
                "device profile {} has no MIG profiles ([[mig]] tables), so it has no instance {profile:?}",
                self.name
            ),
            None => bail!(
                "device profile {} has no MIG profile {profile:?}: its MIG profiles are {}",
                self.name,
                self.mig
                    .iter()
                    .map(|m| m.profile.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
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
        self.check_mig()
    }

    /// Each `[[mig]]` table: a profile name as NVIDIA writes them, once, and an instance no
    /// larger than the card that holds it its context.
    fn check_mig(&self) -> anyhow::Result<()> {
        let mut seen = std::collections::BTreeSet::new();
        for (i, m) in self.mig.iter().enumerate() {
            let place = format!("[[mig]] #{} (profile = {:?})", i + 1, m.profile);
            if !mig::is_profile_name(&m.profile) {
                bail!("{place}: not a MIG profile name; NVIDIA writes them as 1g.18gb or 3g.71gb");
            }
            if !seen.insert(m.profile.as_str()) {
                bail!("{place}: this profile is described twice");
            }
            let total = m.total_bytes.0;
            let context = self.memory.context_overhead_bytes.0;
            if total <= context || total > self.memory.total_bytes.0 {
                bail!(
                    "{place}: total_bytes = {total} must be above the context overhead ({context} \
                     bytes) and at most the card's memory.total_bytes ({} bytes)",
                    self.memory.total_bytes.0
                );
            }
            if m.multiprocessors == 0 || m.multiprocessors > self.multiprocessors {
                bail!(
                    "{place}: multiprocessors = {} must be from 1 to the card's {}",
                    m.multiprocessors,
                    self.multiprocessors
                );
            }
        }
        Ok(())
    }
}

/// Whether `name` is a built-in profile: a card, or one MIG instance of a card.
pub fn is_builtin(name: &str) -> bool {
    BUILTIN.iter().any(|(n, _)| *n == name) || matches!(builtin_instance(name), Ok(Some(_)))
}

/// `h200-1g.18gb`: the instance card, when the name is a built-in card and one of its MIG
/// profiles; an error naming the card's MIG profiles when only the card is right.
fn builtin_instance(name: &str) -> anyhow::Result<Option<SimProfile>> {
    let Some((parent, profile)) = mig::split_instance_name(name) else {
        return Ok(None);
    };
    let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == parent) else {
        return Ok(None);
    };
    let card = SimProfile::from_toml(text, &format!("built-in profile {parent}"))?;
    card.instance(profile)
        .with_context(|| format!("unknown device profile {name:?}"))
        .map(Some)
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
            assert_eq!(p.capabilities, crate::Capabilities::default());
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
    fn a_mig_instance_is_its_parent_with_the_instance_memory_and_sms() {
        let h200 = SimProfile::resolve("h200").unwrap();
        let slice = SimProfile::resolve("h200-1g.18gb").unwrap();
        let table = h200.mig.iter().find(|m| m.profile == "1g.18gb").unwrap();
        assert_eq!(slice.name, "h200-1g.18gb");
        assert_eq!(slice.gpu_name, "NVIDIA H200 MIG 1g.18gb (simulated)");
        assert_eq!(slice.memory.total_bytes, table.total_bytes);
        assert_eq!(slice.memory.total_bytes.0, 16384 << 20);
        assert_eq!(slice.multiprocessors, table.multiprocessors);
        assert_eq!(slice.memory.nvml_reserved_bytes.0, 0);
        assert_eq!(slice.bandwidth, h200.bandwidth);
        assert_eq!(slice.latency, h200.latency);
        assert!(slice.mig.is_empty());
        let of = slice.mig_of.unwrap();
        assert_eq!(
            (of.parent.as_str(), of.profile.as_str()),
            ("h200", "1g.18gb")
        );
        let h100 = SimProfile::resolve("h100-80g-3g.40gb").unwrap();
        assert_eq!(
            (h100.memory.total_bytes.0, h100.multiprocessors),
            (40448 << 20, 60)
        );
        assert!(is_builtin("h200-7g.141gb") && !is_builtin("h200-8g.1gb"));
    }

    #[test]
    fn every_builtin_instance_fits_its_card_and_is_listed() {
        let names: Vec<String> = SimProfile::builtin_instances()
            .into_iter()
            .map(|c| c.name)
            .collect();
        let want: Vec<String> = [
            "h100-80g-1g.10gb",
            "h100-80g-1g.20gb",
            "h100-80g-2g.20gb",
            "h100-80g-3g.40gb",
            "h100-80g-4g.40gb",
            "h100-80g-7g.80gb",
            "h200-1g.18gb",
            "h200-1g.35gb",
            "h200-2g.35gb",
            "h200-3g.71gb",
            "h200-4g.71gb",
            "h200-7g.141gb",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(names, want);
        for card in SimProfile::builtin_all() {
            let mut last = (0, 0);
            for m in &card.mig {
                assert!(
                    m.total_bytes.0 <= card.memory.total_bytes.0,
                    "{}",
                    m.profile
                );
                // Profiles are listed from the smallest; neither figure shrinks along the list.
                let now = (m.total_bytes.0, m.multiprocessors);
                assert!(now.0 >= last.0 && now.1 >= last.1, "{}", m.profile);
                last = now;
            }
        }
        let e = format!("{:#}", SimProfile::resolve("h200-9g.1gb").unwrap_err());
        assert!(
            e.contains("\"h200-9g.1gb\"") && e.contains("1g.18gb, 1g.35gb"),
            "{e}"
        );
        let e = format!("{:#}", SimProfile::resolve("tiny-4g-1g.5gb").unwrap_err());
        assert!(e.contains("tiny-4g has no MIG profiles"), "{e}");
        let e = SimProfile::resolve("a100").unwrap_err().to_string();
        assert!(e.contains("h200-1g.18gb"), "{e}");
    }

    #[test]
    fn a_bad_mig_table_names_its_place_and_value() {
        let h200 = BUILTIN.iter().find(|(n, _)| *n == "h200").unwrap().1;
        for (from, to, want) in [
            (
                "profile = \"1g.35gb\"",
                "profile = \"1g.35\"",
                "[[mig]] #2 (profile = \"1g.35\"): not a MIG profile name",
            ),
            (
                "profile = \"1g.35gb\"",
                "profile = \"1g.18gb\"",
                "[[mig]] #2 (profile = \"1g.18gb\"): this profile is described twice",
            ),
            (
                "total_bytes = \"16384MiB\"",
                "total_bytes = \"200GiB\"",
                "total_bytes = 214748364800 must be above the context overhead",
            ),
            (
                "multiprocessors = 16                # [obs] 16 SMs",
                "multiprocessors = 0 #",
                "[[mig]] #1 (profile = \"1g.18gb\"): multiprocessors = 0 must be from 1 to the card's 132",
            ),
        ] {
            assert!(h200.contains(from), "{from}");
            let text = h200.replacen(from, to, 1);
            let e = format!("{:#}", SimProfile::from_toml(&text, "x.toml").unwrap_err());
            assert!(e.contains("x.toml") && e.contains(want), "{want}: {e}");
        }
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
