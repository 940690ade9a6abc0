//! Simulated nodes: several GPUs described by one profile, where single cards may differ.
//!
//! A node profile is a TOML file with a `[node]` table in place of a device profile's keys:
//!
//! ```toml
//! [node]
//! name = "8xh100-80g"
//! base = "h100-80g"       # every card starts as this device profile (a built-in name or a file)
//! devices = 8
//!
//! [[node.card]]           # per-card differences, by index
//! index = 3
//! total_bytes = "80961MiB"
//! other_processes = [{ pid = 4242, bytes = "20GiB" }]
//! ```
//!
//! A card may change `total_bytes`, `gpu_name`, `driver_version` and `other_processes`; every
//! card is named after the node, so `--profile 8xh100-80g --device 3` is card 3 of it. A plain
//! device profile is a node of one card (any `--device N` opens it, as before).

use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::profile::{self, OtherProcess, SimProfile};
use crate::units::Size;

/// Node profiles compiled into the binary: (name, TOML text).
pub const BUILTIN_NODES: &[(&str, &str)] = &[(
    "8xh100-80g",
    include_str!("../../../profiles/8xh100-80g.toml"),
)];

/// The variables a scheduler sets that tell one node of a fleet from another: a Slurm array
/// task, a Kubernetes Indexed Job's index, a node of a multi-node Slurm job.
pub const FLEET_RANK_VARS: [&str; 3] = [
    "SLURM_ARRAY_TASK_ID",
    "JOB_COMPLETION_INDEX",
    "SLURM_NODEID",
];

/// Which node of a fleet this simulated node is: the scheduler's ranks of it and the host's
/// name, when a scheduler set any (so every simulated node of a fleet has UUIDs of its own, as
/// real GPUs do); `None` outside one, where a profile's cards keep the same UUIDs in every run.
pub fn fleet_identity() -> Option<String> {
    static ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let ranks: Vec<String> = FLEET_RANK_VARS
            .iter()
            .filter_map(|v| std::env::var(v).ok().map(|x| format!("{v}={x}")))
            .collect();
        if ranks.is_empty() {
            return None;
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        Some(format!("{}@{host}", ranks.join(",")))
    })
    .clone()
}

/// The most cards a node profile may have.
pub const MAX_DEVICES: u32 = 64;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeFile {
    node: NodeSection,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeSection {
    name: String,
    base: String,
    devices: u32,
    #[serde(default)]
    card: Vec<CardOverride>,
}

/// What one card of a node changes from the base profile.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CardOverride {
    index: u32,
    total_bytes: Option<Size>,
    gpu_name: Option<String>,
    driver_version: Option<String>,
    other_processes: Option<Vec<OtherProcess>>,
}

/// A simulated node: one device profile per card.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeProfile {
    pub name: String,
    /// The cards, by index; a plain device profile gives one.
    pub cards: Vec<SimProfile>,
    /// Whether it came from a node profile (`[node]`) rather than a plain device profile.
    pub is_node: bool,
}

impl NodeProfile {
    /// A built-in device or node profile by name, or a profile file (either kind) by path.
    pub fn resolve(name_or_path: &str) -> anyhow::Result<NodeProfile> {
        if let Some((_, text)) = BUILTIN_NODES.iter().find(|(n, _)| *n == name_or_path) {
            return NodeProfile::from_toml(text, &format!("built-in profile {name_or_path}"), None);
        }
        let path = Path::new(name_or_path);
        let is_builtin_device = profile::is_builtin(name_or_path);
        if !is_builtin_device && (path.exists() || name_or_path.ends_with(".toml")) {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read device profile {}", path.display()))?;
            if is_node_text(&text) {
                return NodeProfile::from_toml(&text, &path.display().to_string(), path.parent());
            }
        }
        let p = SimProfile::resolve(name_or_path).map_err(|e| {
            let nodes: Vec<&str> = BUILTIN_NODES.iter().map(|(n, _)| *n).collect();
            if format!("{e}").starts_with("unknown device profile") {
                anyhow::anyhow!("{e:#}; built-in node profiles are {}", nodes.join(", "))
            } else {
                e
            }
        })?;
        Ok(NodeProfile {
            name: p.name.clone(),
            cards: vec![p],
            is_node: false,
        })
    }

    /// Parses a node profile; `dir` is where a relative `base` file is looked for.
    pub fn from_toml(text: &str, origin: &str, dir: Option<&Path>) -> anyhow::Result<NodeProfile> {
        let file: NodeFile =
            toml::from_str(text).with_context(|| format!("{origin}: not a valid node profile"))?;
        let n = file.node;
        if n.devices == 0 || n.devices > MAX_DEVICES {
            bail!(
                "{origin}: node.devices = {} must be from 1 to {MAX_DEVICES}",
                n.devices
            );
        }
        let base_ref = match dir {
            Some(d) if !profile::is_builtin(&n.base) => d.join(&n.base).display().to_string(),
            _ => n.base.clone(),
        };
        let base = SimProfile::resolve(&base_ref)
            .with_context(|| format!("{origin}: node.base = {:?}", n.base))?;
        let mut cards: Vec<SimProfile> = (0..n.devices)
            .map(|_| SimProfile {
                name: n.name.clone(),
                ..base.clone()
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for c in &n.card {
            let place = format!("{origin}: [[node.card]] index = {}", c.index);
            if c.index >= n.devices {
                bail!(
                    "{place}: the node has {} devices (0 to {})",
                    n.devices,
                    n.devices - 1
                );
            }
            if !seen.insert(c.index) {
                bail!("{place}: this card is described twice");
            }
            let card = &mut cards[c.index as usize];
            if let Some(t) = c.total_bytes {
                if t.0 <= card.memory.context_overhead_bytes.0 {
                    bail!(
                        "{place}: total_bytes = {} must be above the context overhead ({} bytes)",
                        t.0,
                        card.memory.context_overhead_bytes.0
                    );
                }
                card.memory.total_bytes = t;
            }
            if let Some(g) = &c.gpu_name {
                card.gpu_name = g.clone();
            }
            if let Some(d) = &c.driver_version {
                card.driver_version = d.clone();
            }
            if let Some(p) = &c.other_processes {
                card.other_processes = p.clone();
            }
        }
        Ok(NodeProfile {
            name: n.name,
            cards,
            is_node: true,
        })
    }

    /// How many GPUs the node has.
    pub fn device_count(&self) -> u32 {
        self.cards.len() as u32
    }

    /// The profile of card `index`. A plain device profile answers every index (as a
    /// simulated device always has); a node has only its own cards.
    pub fn card(&self, index: u32) -> anyhow::Result<SimProfile> {
        if !self.is_node {
            if index != 0 {
                bail!(
                    "there is no simulated device {index}: profile {} is one device (0); a node \
                     profile such as 8xh100-80g has several",
                    self.name
                );
            }
            return Ok(self.cards[0].clone());
        }
        match self.cards.get(index as usize) {
            Some(c) => Ok(c.clone()),
            None => bail!(
                "there is no simulated device {index}: node profile {} has {} (0 to {})",
                self.name,
                self.cards.len(),
                self.cards.len() - 1
            ),
        }
    }

    /// Every built-in node profile.
    pub fn builtin_all() -> Vec<NodeProfile> {
        BUILTIN_NODES
            .iter()
            .map(|(n, t)| NodeProfile::from_toml(t, n, None).expect("built-in nodes are valid"))
            .collect()
    }
}

/// Whether a profile's text is a node profile (has a `[node]` table).
fn is_node_text(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("node"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_builtin_node_has_a_short_card_and_a_busy_one() {
        let n = NodeProfile::resolve("8xh100-80g").unwrap();
        assert!(n.is_node);
        assert_eq!(n.device_count(), 8);
        let h100 = SimProfile::resolve("h100-80g").unwrap();
        let short: Vec<u32> = (0..8)
            .filter(|i| n.cards[*i as usize].memory.total_bytes != h100.memory.total_bytes)
            .collect();
        let busy: Vec<u32> = (0..8)
            .filter(|i| !n.cards[*i as usize].other_processes.is_empty())
            .collect();
        assert_eq!((short.len(), busy.len()), (1, 1));
        assert_ne!(short, busy);
        assert!(n.cards.iter().all(|c| c.name == "8xh100-80g"));
        assert_eq!(n.cards[0].memory, h100.memory);
        let e = n.card(8).unwrap_err().to_string();
        assert!(
            e.contains("no simulated device 8") && e.contains("0 to 7"),
            "{e}"
        );
    }

    #[test]
    fn a_plain_profile_is_a_node_of_one_card() {
        let n = NodeProfile::resolve("tiny-4g").unwrap();
        assert!(!n.is_node);
        assert_eq!(n.device_count(), 1);
        assert_eq!(n.card(0).unwrap().memory.total_bytes.0, 4 * GIB);
        let err = n.card(5).unwrap_err().to_string();
        assert!(err.contains("no simulated device 5"), "{err}");
    }

    #[test]
    fn a_file_names_its_base_relative_to_itself_and_bad_cards_name_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let tiny = profile::BUILTIN
            .iter()
            .find(|(n, _)| *n == "tiny-4g")
            .unwrap()
            .1;
        std::fs::write(dir.path().join("mine.toml"), tiny).unwrap();
        let node = dir.path().join("node.toml");
        std::fs::write(
            &node,
            "[node]\nname = \"two\"\nbase = \"mine.toml\"\ndevices = 2\n\n[[node.card]]\nindex = 1\ntotal_bytes = \"3GiB\"\ndriver_version = \"550.1\"\n",
        )
        .unwrap();
        let n = NodeProfile::resolve(node.to_str().unwrap()).unwrap();
        assert_eq!(n.name, "two");
        assert_eq!(n.cards[1].memory.total_bytes.0, 3 * GIB);
        assert_eq!(n.cards[1].driver_version, "550.1");
        assert_eq!(n.cards[0].memory.total_bytes.0, 4 * GIB);

        for (body, want) in [
            (
                "devices = 2\n[[node.card]]\nindex = 2\n",
                "index = 2: the node has 2 devices",
            ),
            (
                "devices = 2\n[[node.card]]\nindex = 1\n[[node.card]]\nindex = 1\n",
                "described twice",
            ),
            ("devices = 0\n", "node.devices = 0"),
            (
                "devices = 2\n[[node.card]]\nindex = 0\ntotal_bytes = \"100MiB\"\n",
                "above the context overhead",
            ),
            (
                "devices = 2\n[[node.card]]\nindex = 0\nmemory = 1\n",
                "unknown field `memory`",
            ),
        ] {
            let text = format!("[node]\nname = \"x\"\nbase = \"tiny-4g\"\n{body}");
            let e = format!(
                "{:#}",
                NodeProfile::from_toml(&text, "x.toml", None).unwrap_err()
            );
            assert!(e.contains("x.toml") && e.contains(want), "{want}: {e}");
        }
    }
}
