//! The device the fake pretends to be: headroom's profile files (`profiles/*.toml`), of which
//! only the fields a driver would embody are read (sizes, bandwidths, the stack model).
//!
//! The built-in profiles are headroom's own files, embedded at build time; `HEADROOM_FAKE_PROFILE`
//! may also name a file (for example one `headroom calibrate` wrote). Unknown fields are ignored.

use serde::Deserialize;

/// (name, TOML text) of the profiles shipped with headroom.
pub const BUILTIN: &[(&str, &str)] = &[
    ("tiny-4g", include_str!("../../../profiles/tiny-4g.toml")),
    ("t4-16g", include_str!("../../../profiles/t4-16g.toml")),
    ("l4-24g", include_str!("../../../profiles/l4-24g.toml")),
    ("a10g-24g", include_str!("../../../profiles/a10g-24g.toml")),
    ("a100-40g", include_str!("../../../profiles/a100-40g.toml")),
    ("h100-80g", include_str!("../../../profiles/h100-80g.toml")),
    ("h200", include_str!("../../../profiles/h200.toml")),
];

pub const DEFAULT: &str = "tiny-4g";

/// headroom's profile folder: a name that is neither built in nor a file is looked up there,
/// so every profile under `profiles/` serves by name.
pub const PROFILES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles");

/// The file `name_or_path` names: itself, else `profiles/<name>.toml`.
pub fn profile_file(name_or_path: &str) -> std::path::PathBuf {
    let direct = std::path::PathBuf::from(name_or_path);
    let named = std::path::Path::new(PROFILES_DIR).join(format!("{name_or_path}.toml"));
    if !direct.exists() && !name_or_path.contains('/') && named.exists() {
        named
    } else {
        direct
    }
}

/// A size written as bytes (`4096`) or with a unit (`"512MiB"`, `"2GB"`, `"1.5GiB"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(Size(v)),
            Raw::Text(s) => parse_size(&s).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `"512MiB"`-style sizes: a decimal number and one of B, KiB, MiB, GiB, TiB, KB, MB,
/// GB, TB; the result must be a whole number of bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    let scale: u64 = match unit {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(format!("size {text:?}: unknown or missing unit")),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() {
        return Err(format!("size {text:?}: no number"));
    }
    let parse = |t: &str| -> Result<u128, String> {
        if t.is_empty() {
            Ok(0)
        } else {
            t.parse::<u128>()
                .map_err(|_| format!("size {text:?}: not a number"))
        }
    };
    let denominator = 10u128
        .checked_pow(frac.len() as u32)
        .ok_or_else(|| format!("size {text:?}: too many decimals"))?;
    let numerator = parse(whole)? * denominator + parse(frac)?;
    let bytes = numerator * scale as u128;
    if bytes % denominator != 0 {
        return Err(format!("size {text:?}: not a whole number of bytes"));
    }
    u64::try_from(bytes / denominator).map_err(|_| format!("size {text:?}: too large"))
}

#[derive(Debug, Clone, Deserialize)]
pub struct Profile {
    pub name: String,
    pub gpu_name: String,
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub memory: Memory,
    pub bandwidth: Bandwidth,
    pub stack: Stack,
    #[serde(default)]
    pub latency: Latency,
    #[serde(default)]
    pub graphs: Graphs,
    #[serde(default)]
    pub kernels: Kernels,
    /// The `[[mig]]` table, read only in MIG mode (`mig_profiles`), so that a profile whose
    /// table the fake cannot read still serves as a whole GPU.
    #[serde(default)]
    pub mig: Vec<toml::Table>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Memory {
    /// CUDA-visible total (`cuMemGetInfo`, `cuDeviceTotalMem`).
    pub total_bytes: Size,
    /// What NVML reports as reserved, outside the CUDA-visible total.
    pub nvml_reserved_bytes: Size,
    /// Device memory a context takes when it is created (its default stack included).
    pub context_overhead_bytes: Size,
    pub page_bytes: Size,
    pub small_alloc_limit_bytes: Size,
    pub small_alloc_spacing_bytes: Size,
    pub pool_granularity_bytes: Size,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Bandwidth {
    pub copy_bytes_per_s: f64,
    pub fill_bytes_per_s: f64,
    pub verify_bytes_per_s: f64,
    pub memset_bytes_per_s: f64,
    pub touch_pages_per_s: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Stack {
    pub threads_per_multiprocessor: u32,
    pub default_per_thread_bytes: Size,
}

/// A duration written as `"8us"`, `"250ms"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dur(pub std::time::Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        crate::config::parse_duration(&s)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

/// The host-side cost of the calls a sampler makes in a loop: the fake's own calls take a few
/// hundred nanoseconds, and a sampler polling that fast would see many times the readings a
/// real GPU gives.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Latency {
    #[serde(default)]
    pub mem_get_info: Dur,
    #[serde(default)]
    pub nvml_memory: Dur,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Graphs {
    pub exec_bytes_per_node: Size,
    pub alloc_granularity_bytes: Size,
}

impl Default for Graphs {
    fn default() -> Self {
        Graphs {
            exec_bytes_per_node: Size(10 << 10),
            alloc_granularity_bytes: Size(2 << 20),
        }
    }
}

/// What loading a module costs; a profile without `[kernels]` charges nothing, as headroom's
/// simulator reads the same file.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Kernels {
    /// Device memory one loaded module takes.
    pub module_bytes: Size,
}

/// A node profile's `[node]` table: `devices` cards of the `base` profile, some with another
/// CUDA-visible total (headroom's node profiles; other per-card keys are not modeled).
#[derive(Debug, Clone, Deserialize)]
struct NodeSection {
    base: String,
    devices: u32,
    #[serde(default)]
    card: Vec<CardSection>,
}

#[derive(Debug, Clone, Deserialize)]
struct CardSection {
    index: u32,
    total_bytes: Option<Size>,
}

/// The devices a profile describes: one (a device profile) or a node's cards.
#[derive(Debug, Clone)]
pub struct Devices {
    pub profile: Profile,
    /// Each card's CUDA-visible total; `None` for a device profile (any count of it).
    pub card_totals: Option<Vec<u64>>,
}

/// headroom's built-in node profiles.
pub const BUILTIN_NODES: &[(&str, &str)] = &[(
    "8xh100-80g",
    include_str!("../../../profiles/8xh100-80g.toml"),
)];

impl Devices {
    /// A built-in device or node profile by name, or a file of either kind.
    pub fn resolve(name_or_path: &str) -> Result<Devices, String> {
        let node_text = match BUILTIN_NODES.iter().find(|(n, _)| *n == name_or_path) {
            Some((_, t)) => Some((t.to_string(), None)),
            None if !BUILTIN.iter().any(|(n, _)| *n == name_or_path) => {
                let file = profile_file(name_or_path);
                std::fs::read_to_string(&file).ok().and_then(|t| {
                    let table: toml::Table = toml::from_str(&t).ok()?;
                    table.contains_key("node").then(|| {
                        let dir = file.parent().map(|d| d.to_path_buf());
                        (t, dir)
                    })
                })
            }
            None => None,
        };
        let Some((text, dir)) = node_text else {
            return Ok(Devices {
                profile: Profile::resolve(name_or_path)?,
                card_totals: None,
            });
        };
        #[derive(Deserialize)]
        struct File {
            node: NodeSection,
        }
        let f: File =
            toml::from_str(&text).map_err(|e| format!("node profile {name_or_path}: {e}"))?;
        let n = f.node;
        // The base: a built-in profile, a file next to the node's (with or without `.toml`), or
        // a profile under profiles/.
        let beside = dir
            .filter(|_| !BUILTIN.iter().any(|(b, _)| *b == n.base))
            .and_then(|d| {
                [d.join(&n.base), d.join(format!("{}.toml", n.base))]
                    .into_iter()
                    .find(|p| p.is_file())
            });
        let base = beside.map_or(n.base.clone(), |p| p.display().to_string());
        let profile = Profile::resolve(&base)?;
        if !(1..=64).contains(&n.devices) {
            return Err(format!(
                "node profile {name_or_path}: devices must be from 1 to 64"
            ));
        }
        let mut totals = vec![profile.memory.total_bytes.0; n.devices as usize];
        for c in &n.card {
            let slot = totals
                .get_mut(c.index as usize)
                .ok_or_else(|| format!("node profile {name_or_path}: no card {}", c.index))?;
            if let Some(t) = c.total_bytes {
                *slot = t.0;
            }
        }
        Ok(Devices {
            profile,
            card_totals: Some(totals),
        })
    }
}

impl Profile {
    /// A built-in profile by name, or a profile file by path.
    pub fn resolve(name_or_path: &str) -> Result<Profile, String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::parse(text, name_or_path);
        }
        let text = std::fs::read_to_string(profile_file(name_or_path)).map_err(|e| {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            format!(
                "profile {name_or_path:?} is neither a built-in one ({}), one under {PROFILES_DIR} \
                 nor a readable file: {e}",
                names.join(", ")
            )
        })?;
        Profile::parse(&text, name_or_path)
    }

    pub fn parse(text: &str, origin: &str) -> Result<Profile, String> {
        let p: Profile = toml::from_str(text).map_err(|e| format!("profile {origin}: {e}"))?;
        let m = &p.memory;
        for (key, v) in [
            ("memory.page_bytes", m.page_bytes.0),
            (
                "memory.small_alloc_spacing_bytes",
                m.small_alloc_spacing_bytes.0,
            ),
            ("memory.pool_granularity_bytes", m.pool_granularity_bytes.0),
            (
                "graphs.alloc_granularity_bytes",
                p.graphs.alloc_granularity_bytes.0,
            ),
        ] {
            if !v.is_power_of_two() {
                return Err(format!(
                    "profile {origin}: {key} must be a power of two, not {v}"
                ));
            }
        }
        if m.small_alloc_limit_bytes.0 > m.page_bytes.0 || m.total_bytes.0 == 0 {
            return Err(format!("profile {origin}: inconsistent memory sizes"));
        }
        if p.multiprocessors == 0 || p.stack.threads_per_multiprocessor == 0 {
            return Err(format!(
                "profile {origin}: multiprocessors and threads must be above zero"
            ));
        }
        Ok(p)
    }

    /// The `[[mig]]` table's instance kinds (`profile`, `total_bytes`, `multiprocessors`; other
    /// keys are ignored).
    pub fn mig_profiles(&self) -> Result<Vec<crate::topology::MigProfile>, String> {
        self.mig
            .iter()
            .enumerate()
            .map(|(i, t)| {
                crate::topology::MigProfile::deserialize(toml::Value::Table(t.clone()))
                    .map_err(|e| format!("profile {}: [[mig]] entry {}: {e}", self.name, i + 1))
            })
            .collect()
    }

    /// (major, minor) from `"9.0"`.
    pub fn capability(&self) -> (i32, i32) {
        let (a, b) = self
            .compute_capability
            .split_once('.')
            .unwrap_or((&self.compute_capability, "0"));
        (a.trim().parse().unwrap_or(9), b.trim().parse().unwrap_or(0))
    }

    /// Resident threads on the whole device: what the stack reservation is multiplied by.
    pub fn resident_threads(&self) -> u64 {
        self.multiprocessors as u64 * self.stack.threads_per_multiprocessor as u64
    }

    /// The name the driver reports: the profile's, marked as this fake rather than the simulator.
    pub fn device_name(&self) -> String {
        let base = self.gpu_name.trim_end_matches(" (simulated)");
        format!("{base} (fake driver)")
    }
}
