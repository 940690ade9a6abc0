//! The fake's settings, read once from the environment (`HEADROOM_FAKE_*`, see the crate docs).
//!
//! A bad setting is not ignored: it is kept as an error that `cuInit` and `nvmlInit` print and
//! fail with. Tests install settings directly (`install`), which also starts a fresh driver.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::faults::{self, Rule};
use crate::profile::{self, Profile};

#[derive(Debug, Clone)]
pub struct Config {
    pub profile: Profile,
    pub devices: u32,
    /// Each device's CUDA-visible total (a node profile's cards may differ).
    pub totals: Vec<u64>,
    /// The cross-process state file; `None`: state is this process's own.
    pub state_path: Option<PathBuf>,
    pub release_delay: Duration,
    pub exclusive_process: bool,
    pub nvml_hide_self: bool,
    pub faults: Vec<Rule>,
    pub time_scale: f64,
}

/// The settings in force, their number (a new one means a new driver) and the fault counters.
pub struct Loaded {
    pub config: Result<Arc<Config>, String>,
    pub generation: u64,
    pub counters: faults::Counters,
}

static LOADED: Mutex<Option<Arc<Loaded>>> = Mutex::new(None);
static GENERATION: Mutex<u64> = Mutex::new(0);

fn next_generation() -> u64 {
    let mut g = GENERATION.lock().unwrap_or_else(|e| e.into_inner());
    *g += 1;
    *g
}

/// The settings in force, read from the environment on first use.
pub fn loaded() -> Arc<Loaded> {
    let mut slot = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = slot.as_ref() {
        return l.clone();
    }
    let l = Arc::new(Loaded {
        config: Config::from_vars(|k| std::env::var(k).ok()).map(Arc::new),
        generation: next_generation(),
        counters: faults::Counters::default(),
    });
    *slot = Some(l.clone());
    l
}

/// Replaces the settings (tests): `vars` stand for the environment. The driver, the NVML
/// session and the fault counters start over.
pub fn install(vars: &[(&str, &str)]) -> Result<(), String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::from_vars(|k| map.get(k).cloned()).map(Arc::new);
    let err = config.as_ref().err().cloned();
    let l = Arc::new(Loaded {
        config,
        generation: next_generation(),
        counters: faults::Counters::default(),
    });
    *LOADED.lock().unwrap_or_else(|e| e.into_inner()) = Some(l);
    err.map_or(Ok(()), Err)
}

/// Parses `"200ms"`, `"30s"`, `"1.5s"`, `"500us"`, `"10ns"`, `"2min"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], &s[split..]);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("duration {text:?}: not a number"))?;
    let seconds = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "min" => 60.0,
        _ => return Err(format!("duration {text:?}: use ns, us, ms, s or min")),
    };
    Duration::try_from_secs_f64(value * seconds).map_err(|e| format!("duration {text:?}: {e}"))
}

impl Config {
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let profile_name = var("HEADROOM_FAKE_PROFILE").unwrap_or_else(|| profile::DEFAULT.into());
        let resolved = profile::Devices::resolve(profile_name.trim())?;
        let profile = resolved.profile;
        let node_count = resolved.card_totals.as_ref().map(|t| t.len() as u32);
        let devices = match var("HEADROOM_FAKE_DEVICES") {
            None => node_count.unwrap_or(1),
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| {
                    format!("HEADROOM_FAKE_DEVICES={v:?}: give a number from 1 to 64")
                })?,
        };
        let release_delay = match var("HEADROOM_FAKE_RELEASE_DELAY") {
            None => Duration::from_millis(200),
            Some(v) => {
                parse_duration(&v).map_err(|e| format!("HEADROOM_FAKE_RELEASE_DELAY: {e}"))?
            }
        };
        let exclusive_process = match var("HEADROOM_FAKE_COMPUTE_MODE").as_deref().map(str::trim) {
            None | Some("default") => false,
            Some("exclusive_process") => true,
            Some(other) => {
                return Err(format!(
                    "HEADROOM_FAKE_COMPUTE_MODE={other:?}: use default or exclusive_process"
                ));
            }
        };
        let nvml_hide_self = match var("HEADROOM_FAKE_NVML_HIDE_SELF")
            .as_deref()
            .map(str::trim)
        {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                return Err(format!(
                    "HEADROOM_FAKE_NVML_HIDE_SELF={other:?}: use 0 or 1"
                ));
            }
        };
        let faults = match var("HEADROOM_FAKE_FAULTS") {
            None => Vec::new(),
            Some(v) => faults::parse(&v).map_err(|e| format!("HEADROOM_FAKE_FAULTS: {e}"))?,
        };
        let time_scale = match var("HEADROOM_FAKE_TIME_SCALE") {
            None => 1.0,
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("HEADROOM_FAKE_TIME_SCALE={v:?}: give a number ≥ 0"))?,
        };
        let totals = (0..devices as usize)
            .map(|i| {
                resolved
                    .card_totals
                    .as_ref()
                    .and_then(|t| t.get(i).copied())
                    .unwrap_or(profile.memory.total_bytes.0)
            })
            .collect();
        Ok(Config {
            profile,
            devices,
            totals,
            state_path: var("HEADROOM_FAKE_STATE").map(PathBuf::from),
            release_delay,
            exclusive_process,
            nvml_hide_self,
            faults,
            time_scale,
        })
    }

    /// Device `device`'s CUDA-visible total.
    pub fn total_bytes(&self, device: u32) -> u64 {
        self.totals
            .get(device as usize)
            .copied()
            .unwrap_or(self.profile.memory.total_bytes.0)
    }

    /// Modeled GPU time for `seconds` of work at full speed, times `HEADROOM_FAKE_TIME_SCALE`.
    pub fn scaled(&self, seconds: f64) -> Duration {
        Duration::try_from_secs_f64(seconds * self.time_scale).unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        Config::from_vars(|k| map.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn defaults_and_errors() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.profile.name, "tiny-4g");
        assert_eq!(
            (c.devices, c.release_delay),
            (1, Duration::from_millis(200))
        );
        assert!(!c.exclusive_process && !c.nvml_hide_self && c.faults.is_empty());
        let e = cfg(&[("HEADROOM_FAKE_DEVICES", "zero")]).unwrap_err();
        assert!(e.contains("HEADROOM_FAKE_DEVICES"), "{e}");
        let e = cfg(&[(
            "HEADROOM_FAKE_FAULTS",
            "cuMemAlloc_v2@x=CUDA_ERROR_OUT_OF_MEMORY",
        )])
        .unwrap_err();
        assert!(e.contains("cuMemAlloc_v2@x"), "{e}");
        let node = cfg(&[("HEADROOM_FAKE_PROFILE", "8xh100-80g")]).unwrap();
        assert_eq!(node.devices, 8);
        assert_eq!(node.total_bytes(3), 80961 << 20);
        assert_eq!(node.total_bytes(0), 81089 << 20);
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
    }
}
