//! The caching allocator's settings, by the names PyTorch gives them in
//! `PYTORCH_CUDA_ALLOC_CONF` (c10/core/AllocatorConfig.cpp, `parseArgs`).
//!
//! The text form is PyTorch's: `max_split_size_mb:128,expandable_segments:True`. Every
//! setting PyTorch's native allocator reads is either implemented or refused with a message
//! that names it and says why; nothing is silently ignored.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::sizes::{LARGE_BUFFER_BYTES, ROUNDUP_INTERVALS, round_size};

const MIB: u64 = 1 << 20;
/// `max_split_size_mb` and `max_non_split_rounding_mb` must be at least `kLargeBuffer` in MiB.
const MIN_SPLIT_MB: u64 = LARGE_BUFFER_BYTES / MIB;

/// A setting that could not be used: which one, the value given, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("caching allocator setting `{setting}:{value}`: {reason}")]
pub struct ConfigError {
    pub setting: String,
    pub value: String,
    pub reason: String,
}

fn bad(setting: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        setting: setting.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Settings of the caching allocator. `Default` is PyTorch's default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CachingConfig {
    /// `max_split_size_mb`: blocks of this size or larger are never split, and serve only
    /// requests of at least this size. `None`: unlimited (PyTorch's default).
    pub max_split_size_mb: Option<u64>,
    /// `max_non_split_rounding_mb`: an oversize cached block serves a request only if it is
    /// smaller than the request plus this much (default 20, `kLargeBuffer`).
    pub max_non_split_rounding_mb: u64,
    /// `expandable_segments`: one growing virtual range per pool and stream instead of
    /// separate `cudaMalloc` segments.
    pub expandable_segments: bool,
    /// `garbage_collection_threshold` in (0, 1): before asking the driver, release old cached
    /// blocks once reserved memory passes this fraction of the allowed memory. Acts only with
    /// `per_process_memory_fraction`, as in PyTorch.
    pub garbage_collection_threshold: Option<f64>,
    /// `roundup_power2_divisions` per size interval ([1 MiB, 2 MiB), [2, 4), …, ≥ 32 GiB; smaller
    /// sizes use the first): 0 or 1 means plain 512-byte rounding.
    pub roundup_power2_divisions: [u32; ROUNDUP_INTERVALS],
    /// `torch.cuda.set_per_process_memory_fraction`: the allocator refuses to hold more than
    /// this fraction of the device's total memory. Not a `PYTORCH_CUDA_ALLOC_CONF` key in
    /// PyTorch (it is a function call); accepted here under this name.
    pub per_process_memory_fraction: Option<f64>,
}

// Every float is checked finite and in range when set, so equality is total.
impl Eq for CachingConfig {}

impl Default for CachingConfig {
    fn default() -> Self {
        CachingConfig {
            max_split_size_mb: None,
            max_non_split_rounding_mb: MIN_SPLIT_MB,
            expandable_segments: false,
            garbage_collection_threshold: None,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            per_process_memory_fraction: None,
        }
    }
}

/// Settings PyTorch knows that headroom refuses, with the reason.
const REFUSED: &[(&str, &str)] = &[
    (
        "release_lock_on_cudamalloc",
        "it only changes locking around cudaMalloc, which a single-threaded model cannot show",
    ),
    (
        "release_lock_on_hipmalloc",
        "it only changes locking around hipMalloc, which a single-threaded model cannot show",
    ),
    (
        "pinned_use_cuda_host_register",
        "it concerns pinned host memory, which headroom does not model",
    ),
    (
        "pinned_use_hip_host_register",
        "it concerns pinned host memory, which headroom does not model",
    ),
    (
        "pinned_num_register_threads",
        "it concerns pinned host memory, which headroom does not model",
    ),
    (
        "pinned_use_background_threads",
        "it concerns pinned host memory, which headroom does not model",
    ),
    (
        "pinned_reserve_segment_size_mb",
        "it concerns pinned host memory, which headroom does not model",
    ),
    (
        "graph_capture_record_stream_reuse",
        "CUDA graph capture is not part of the caching allocator model",
    ),
];

/// The settings `set` accepts, for error messages.
pub const SETTINGS: &[&str] = &[
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "expandable_segments",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "per_process_memory_fraction",
    "backend",
];

fn parse_u64(setting: &str, value: &str) -> Result<u64, ConfigError> {
    value
        .parse::<u64>()
        .map_err(|_| bad(setting, value, "expected a whole non-negative number"))
}

fn parse_fraction(setting: &str, value: &str) -> Result<f64, ConfigError> {
    let v: f64 = value
        .parse()
        .map_err(|_| bad(setting, value, "expected a number"))?;
    if !v.is_finite() {
        return Err(bad(setting, value, "expected a finite number"));
    }
    Ok(v)
}

fn parse_bool(setting: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(bad(
            setting,
            value,
            "expected True or False (PyTorch's spelling)",
        )),
    }
}

/// Splits PyTorch's syntax into tokens: names and values, with `,` `:` `[` `]` on their own
/// (`AllocatorConfig::lexArgs`; blanks are dropped).
fn lex(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        match c {
            ',' | ':' | '[' | ']' => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                out.push(c.to_string());
            }
            c if c.is_whitespace() => {}
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

impl CachingConfig {
    /// Parses PyTorch's `PYTORCH_CUDA_ALLOC_CONF` syntax, e.g.
    /// `max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:4]`.
    pub fn parse(text: &str) -> Result<CachingConfig, ConfigError> {
        let mut cfg = CachingConfig::default();
        let tokens = lex(text);
        let mut i = 0;
        while i < tokens.len() {
            let key = tokens[i].as_str();
            if tokens.get(i + 1).map(String::as_str) != Some(":") {
                return Err(bad(key, "", "expected `name:value`"));
            }
            i += 2;
            let value = if tokens.get(i).map(String::as_str) == Some("[") {
                let close = tokens[i..]
                    .iter()
                    .position(|t| t == "]")
                    .map(|p| i + p)
                    .ok_or_else(|| bad(key, &tokens[i..].concat(), "missing `]`"))?;
                let v = tokens[i..=close].concat();
                i = close + 1;
                v
            } else {
                let v = tokens.get(i).cloned().unwrap_or_default();
                if v.is_empty() || v == "," {
                    return Err(bad(key, "", "missing value"));
                }
                i += 1;
                v
            };
            cfg.set(key, &value)?;
            match tokens.get(i).map(String::as_str) {
                None => {}
                Some(",") => i += 1,
                Some(t) => return Err(bad(key, &value, format!("expected `,` before `{t}`"))),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Sets one setting by PyTorch's name from its text value. Call `validate` when done.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let value = value.trim();
        match name {
            "max_split_size_mb" => {
                let mb = parse_u64(name, value)?;
                if mb < MIN_SPLIT_MB {
                    return Err(bad(
                        name,
                        value,
                        format!("too small: PyTorch requires at least {MIN_SPLIT_MB}"),
                    ));
                }
                self.max_split_size_mb = Some(mb.min(u64::MAX / MIB));
            }
            "max_non_split_rounding_mb" => {
                let mb = parse_u64(name, value)?;
                if mb < MIN_SPLIT_MB {
                    return Err(bad(
                        name,
                        value,
                        format!("too small: PyTorch requires at least {MIN_SPLIT_MB}"),
                    ));
                }
                self.max_non_split_rounding_mb = mb.min(u64::MAX / MIB);
            }
            "expandable_segments" => self.expandable_segments = parse_bool(name, value)?,
            "garbage_collection_threshold" => {
                let v = parse_fraction(name, value)?;
                if !(v > 0.0 && v < 1.0) {
                    return Err(bad(name, value, "must lie strictly between 0.0 and 1.0"));
                }
                self.garbage_collection_threshold = Some(v);
            }
            "per_process_memory_fraction" => {
                let v = parse_fraction(name, value)?;
                if !(v > 0.0 && v <= 1.0) {
                    return Err(bad(name, value, "must lie in (0.0, 1.0]"));
                }
                self.per_process_memory_fraction = Some(v);
            }
            "roundup_power2_divisions" => self.roundup_power2_divisions = parse_divisions(value)?,
            "backend" => match value {
                "native" => {}
                "cudaMallocAsync" => {
                    return Err(bad(
                        name,
                        value,
                        "this is the stream-ordered pool, not the caching allocator: use the `pool` allocator",
                    ));
                }
                _ => {
                    return Err(bad(
                        name,
                        value,
                        "unknown backend (PyTorch knows native and cudaMallocAsync)",
                    ));
                }
            },
            _ => {
                if let Some((_, why)) = REFUSED.iter().find(|(k, _)| *k == name) {
                    return Err(bad(name, value, format!("not supported: {why}")));
                }
                return Err(bad(
                    name,
                    value,
                    format!("unknown setting (known: {})", SETTINGS.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Reads settings from a TOML table (a workload's `[allocator]` section without `kind`):
    /// each key a setting by PyTorch's name (`max_split_size_mb = 128`,
    /// `expandable_segments = true`, `roundup_power2_divisions = "[256:1,>:4]"`), and
    /// optionally `settings = "…"` in `PYTORCH_CUDA_ALLOC_CONF` syntax, applied first.
    pub fn from_toml(table: &toml::Table) -> Result<CachingConfig, ConfigError> {
        let mut cfg = match table.get("settings") {
            None => CachingConfig::default(),
            Some(toml::Value::String(s)) => CachingConfig::parse(s)?,
            Some(other) => return Err(bad("settings", &other.to_string(), "expected a string")),
        };
        for (name, value) in table.iter().filter(|(k, _)| *k != "settings") {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(true) => "True".into(),
                toml::Value::Boolean(false) => "False".into(),
                other => {
                    return Err(bad(
                        name,
                        &other.to_string(),
                        "expected a number, true/false or a string",
                    ));
                }
            };
            cfg.set(name, &text)?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks settings that only make sense together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(t) = self.garbage_collection_threshold
            && self.per_process_memory_fraction.is_none()
        {
            return Err(bad(
                "garbage_collection_threshold",
                &t.to_string(),
                "has no effect without per_process_memory_fraction (PyTorch collects only when a memory \
                 fraction is set); set both or neither",
            ));
        }
        Ok(())
    }

    /// `max_split_size` in bytes (`u64::MAX` when unlimited).
    pub fn max_split_size_bytes(&self) -> u64 {
        self.max_split_size_mb.map_or(u64::MAX, |mb| mb * MIB)
    }

    pub fn max_non_split_rounding_bytes(&self) -> u64 {
        self.max_non_split_rounding_mb * MIB
    }

    /// The size a request of `bytes` is rounded to (`bytes` below 1 EiB).
    pub fn round_size(&self, bytes: u64) -> u64 {
        round_size(bytes, &self.roundup_power2_divisions)
    }

    /// Whether garbage collection runs before asking the driver.
    pub fn gc_enabled(&self) -> bool {
        self.garbage_collection_threshold.is_some() && self.per_process_memory_fraction.is_some()
    }
}

/// `roundup_power2_divisions`: one number for every interval, or a list `[64:8,256:4,>:1]`
/// whose keys are interval starts in MiB (powers of two) and `>` for all later intervals
/// (`AllocatorConfig::parseRoundUpPower2Divisions`).
fn parse_divisions(value: &str) -> Result<[u32; ROUNDUP_INTERVALS], ConfigError> {
    const NAME: &str = "roundup_power2_divisions";
    let mut out = [0u32; ROUNDUP_INTERVALS];
    let parse_div = |v: &str, zero_ok: bool| -> Result<u32, ConfigError> {
        let d: u32 = v
            .parse()
            .map_err(|_| bad(NAME, value, format!("`{v}` is not a whole number")))?;
        if !(d.is_power_of_two() || (zero_ok && d == 0)) {
            return Err(bad(
                NAME,
                value,
                format!("divisions must be a power of two, got {d}"),
            ));
        }
        Ok(d)
    };
    let Some(list) = value.strip_prefix('[') else {
        out.fill(parse_div(value, false)?);
        return Ok(out);
    };
    let list = list
        .strip_suffix(']')
        .ok_or_else(|| bad(NAME, value, "missing `]`"))?;
    let mut last: Option<usize> = None;
    for entry in list.split(',').filter(|e| !e.is_empty()) {
        let (key, div) = entry
            .split_once(':')
            .ok_or_else(|| bad(NAME, value, format!("`{entry}` is not `size_mb:divisions`")))?;
        let d = parse_div(div, true)?;
        if key == ">" {
            let from = last.map_or(0, |l| l + 1);
            out[from.min(ROUNDUP_INTERVALS)..].fill(d);
            continue;
        }
        let mb: u64 = key
            .parse()
            .map_err(|_| bad(NAME, value, format!("`{key}` is not a size in MiB")))?;
        if !mb.is_power_of_two() {
            return Err(bad(
                NAME,
                value,
                format!("interval {key} MiB is not a power of two"),
            ));
        }
        let index = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
        if last.is_none() {
            out[..index].fill(d);
        }
        out[index] = d;
        last = Some(index);
    }
    Ok(out)
}

impl FromStr for CachingConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CachingConfig::parse(s)
    }
}

impl TryFrom<String> for CachingConfig {
    type Error = ConfigError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        CachingConfig::parse(&s)
    }
}

impl From<CachingConfig> for String {
    fn from(c: CachingConfig) -> String {
        c.to_string()
    }
}

/// PyTorch's syntax, non-default settings only (empty for the defaults); `parse` reads it back.
impl fmt::Display for CachingConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(mb) = self.max_split_size_mb {
            parts.push(format!("max_split_size_mb:{mb}"));
        }
        if self.max_non_split_rounding_mb != MIN_SPLIT_MB {
            parts.push(format!(
                "max_non_split_rounding_mb:{}",
                self.max_non_split_rounding_mb
            ));
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".into());
        }
        if let Some(t) = self.garbage_collection_threshold {
            parts.push(format!("garbage_collection_threshold:{t}"));
        }
        let d = &self.roundup_power2_divisions;
        if d.iter().all(|x| *x == d[0]) {
            if d[0] != 0 {
                parts.push(format!("roundup_power2_divisions:{}", d[0]));
            }
        } else {
            let mut items: Vec<String> = (0..ROUNDUP_INTERVALS - 1)
                .map(|i| format!("{}:{}", 1u64 << i, d[i]))
                .collect();
            items.push(format!(">:{}", d[ROUNDUP_INTERVALS - 1]));
            parts.push(format!("roundup_power2_divisions:[{}]", items.join(",")));
        }
        if let Some(p) = self.per_process_memory_fraction {
            parts.push(format!("per_process_memory_fraction:{p}"));
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::caching::sizes::roundup_interval;

    #[test]
    fn pytorch_syntax_round_trips() {
        let c = CachingConfig::parse(
            "max_split_size_mb:40, max_non_split_rounding_mb:30,expandable_segments:True,\
             garbage_collection_threshold:0.5,per_process_memory_fraction:0.9,\
             roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]",
        )
        .unwrap();
        assert_eq!(c.max_split_size_bytes(), 40 * MIB);
        assert_eq!(c.max_non_split_rounding_bytes(), 30 * MIB);
        assert!(c.expandable_segments && c.gc_enabled());
        // The expectations of PyTorch's own AllocatorConfig test.
        let div = |mb: u64| c.roundup_power2_divisions[roundup_interval(mb * MIB)];
        assert_eq!(
            [
                div(32),
                div(64),
                div(128),
                div(256),
                div(512),
                div(1024),
                div(2048),
                div(8192)
            ],
            [8, 8, 2, 4, 2, 4, 1, 1]
        );
        let again = CachingConfig::parse(&c.to_string()).unwrap();
        assert_eq!(again, c);
        assert_eq!(CachingConfig::default().to_string(), "");
        assert_eq!(CachingConfig::parse("").unwrap(), CachingConfig::default());
    }

    #[test]
    fn divisions_list_leaves_gaps_at_zero() {
        let c = CachingConfig::parse("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]")
            .unwrap();
        let div = |mb: u64| c.roundup_power2_divisions[roundup_interval(mb * MIB)];
        assert_eq!(
            [
                div(64),
                div(128),
                div(256),
                div(512),
                div(1024),
                div(2048),
                div(4096)
            ],
            [8, 8, 16, 1, 0, 8, 2]
        );
        let single = CachingConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(single.roundup_power2_divisions, [4; ROUNDUP_INTERVALS]);
        assert_eq!(single.to_string(), "roundup_power2_divisions:4");
    }

    #[test]
    fn toml_tables_use_the_same_names() {
        let t: toml::Table = toml::from_str(
            "settings = \"roundup_power2_divisions:4\"\nmax_split_size_mb = 256\nexpandable_segments = true\n\
             per_process_memory_fraction = 0.5\ngarbage_collection_threshold = 0.8",
        )
        .unwrap();
        let c = CachingConfig::from_toml(&t).unwrap();
        assert_eq!(
            c.to_string(),
            "max_split_size_mb:256,expandable_segments:True,garbage_collection_threshold:0.8,\
             roundup_power2_divisions:4,per_process_memory_fraction:0.5"
        );
        let t: toml::Table = toml::from_str("max_split_size_mb = [1, 2]").unwrap();
        assert!(
            CachingConfig::from_toml(&t)
                .unwrap_err()
                .reason
                .contains("expected a number")
        );
        let t: toml::Table = toml::from_str("max_split_size_mb = -5").unwrap();
        assert!(
            CachingConfig::from_toml(&t)
                .unwrap_err()
                .to_string()
                .contains("`max_split_size_mb:-5`")
        );
    }

    #[test]
    fn errors_name_the_setting_and_value() {
        let e = CachingConfig::parse("max_split_size_mb:10").unwrap_err();
        assert_eq!(
            (e.setting.as_str(), e.value.as_str()),
            ("max_split_size_mb", "10")
        );
        assert!(e.to_string().contains("at least 20"), "{e}");
        let e = CachingConfig::parse("expandable_segments:true").unwrap_err();
        assert!(e.to_string().contains("True or False"), "{e}");
        let e = CachingConfig::parse("garbage_collection_threshold:1.5").unwrap_err();
        assert_eq!(e.setting, "garbage_collection_threshold");
        let e = CachingConfig::parse("garbage_collection_threshold:0.6").unwrap_err();
        assert!(e.reason.contains("per_process_memory_fraction"), "{e}");
        let e = CachingConfig::parse("roundup_power2_divisions:3").unwrap_err();
        assert!(e.reason.contains("power of two"), "{e}");
        let e = CachingConfig::parse("backend:cudaMallocAsync").unwrap_err();
        assert!(e.reason.contains("`pool` allocator"), "{e}");
        let e = CachingConfig::parse("pinned_num_register_threads:4").unwrap_err();
        assert!(e.reason.contains("pinned host memory"), "{e}");
        let e = CachingConfig::parse("max_spilt_size_mb:128").unwrap_err();
        assert!(e.reason.contains("unknown setting"), "{e}");
        assert!(CachingConfig::parse("max_split_size_mb").is_err());
        assert!(CachingConfig::parse("max_split_size_mb:").is_err());
        assert!(CachingConfig::parse("max_split_size_mb:64 expandable_segments:True").is_err());
        assert!(CachingConfig::parse("backend:native").is_ok());
    }
}
