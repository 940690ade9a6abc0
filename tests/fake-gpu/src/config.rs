//! The fake's settings, read once from the environment (`HEADROOM_FAKE_*`, see the crate docs).
//!
//! A bad setting is not ignored: it is kept as an error that `cuInit` and `nvmlInit` print and
//! fail with. Tests install settings directly (`install`), which also starts a fresh driver.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::branch::Release;
use crate::faults::{self, Rule};
use crate::profile::{self, Profile};
use crate::topology::{self, CudaDevice, MigProfile};

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
    /// The driver release (`HEADROOM_FAKE_DRIVER`).
    pub release: Release,
    /// Every GPU's MIG instances (`HEADROOM_FAKE_MIG`); `None`: MIG mode is off.
    pub mig: Option<Vec<MigProfile>>,
    /// `HEADROOM_FAKE_PRIVILEGED=1`: NVML lists processes in MIG mode.
    pub privileged: bool,
    /// `HEADROOM_FAKE_WSL2=1`: NVML as under WSL2: memory info v2 fails at run time
    /// (`NVML_ERROR_UNKNOWN`), the process lists with `NVML_ERROR_NOT_SUPPORTED`.
    pub wsl2: bool,
    /// `HEADROOM_FAKE_MIG_UUID_V1=instance`: `cuDeviceGetUuid` (v1) gives a MIG instance's own
    /// UUID, as v2 does; `parent` (the default) gives its GPU's.
    pub mig_uuid_v1_instance: bool,
    /// `HEADROOM_FAKE_STUB=1`: the CUDA toolkit's stub `libcuda.so` (every CUDA call returns
    /// `CUDA_ERROR_STUB_LIBRARY`), served from a folder named `stubs` as the toolkit's is.
    pub stub: bool,
    /// `HEADROOM_FAKE_KERNEL_EXEC_TIMEOUT=2s`: the driver's watchdog (a display GPU, WSL2):
    /// `CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT` reads 1 and a kernel modeled to run longer
    /// faults with `CUDA_ERROR_LAUNCH_TIMEOUT`.
    pub kernel_exec_timeout: Option<Duration>,
    /// Capabilities turned off (`HEADROOM_FAKE_DISABLE`).
    pub disabled: Disabled,
    /// What CUDA enumerates, by ordinal (`CUDA_VISIBLE_DEVICES` and MIG applied).
    pub cuda: Vec<CudaDevice>,
}

/// Device capabilities `HEADROOM_FAKE_DISABLE` turns off: the attribute reads 0 and every call
/// of the family fails with `CUDA_ERROR_NOT_SUPPORTED`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Disabled {
    pub memory_pools: bool,
    pub vmm: bool,
}

/// The stream-ordered allocator's calls (`HEADROOM_FAKE_DISABLE=memory_pools`).
pub const POOL_CALLS: &[&str] = &[
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAllocFromPoolAsync",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
    "cuDeviceGetDefaultMemPool",
    "cuDeviceGetMemPool",
    "cuDeviceSetMemPool",
];

/// The virtual memory management calls (`HEADROOM_FAKE_DISABLE=vmm`).
pub const VMM_CALLS: &[&str] = &[
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
];

impl Disabled {
    fn parse(text: &str) -> Result<Disabled, String> {
        let mut d = Disabled::default();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "memory_pools" => d.memory_pools = true,
                "vmm" => d.vmm = true,
                other => {
                    return Err(format!(
                        "HEADROOM_FAKE_DISABLE: {other:?} is not a capability; use memory_pools, vmm"
                    ));
                }
            }
        }
        Ok(d)
    }

    /// Whether the entry point `api` belongs to a family turned off.
    pub fn refuses(&self, api: &str) -> bool {
        (self.memory_pools && POOL_CALLS.contains(&api)) || (self.vmm && VMM_CALLS.contains(&api))
    }
}

/// The instances `HEADROOM_FAKE_MIG` names, each looked up in the profile's `[[mig]]` table.
fn mig_instances(profile: &Profile, names: &str) -> Result<Vec<MigProfile>, String> {
    let table = profile.mig_profiles()?;
    let valid: Vec<&str> = table.iter().map(|m| m.profile.as_str()).collect();
    let mut out = Vec::new();
    for name in names.split(',').map(str::trim) {
        let m = table.iter().find(|m| m.profile == name).ok_or_else(|| {
            if valid.is_empty() {
                format!(
                    "HEADROOM_FAKE_MIG: profile {} has no [[mig]] table, so no MIG profile {name:?}",
                    profile.name
                )
            } else {
                format!(
                    "HEADROOM_FAKE_MIG: {name:?} is not a MIG profile of {} (its [[mig]] table has {})",
                    profile.name,
                    valid.join(", ")
                )
            }
        })?;
        out.push(m.clone());
    }
    if out.len() > topology::MAX_MIG_INSTANCES as usize {
        return Err(format!(
            "HEADROOM_FAKE_MIG: {} instances; a GPU has at most {}",
            out.len(),
            topology::MAX_MIG_INSTANCES
        ));
    }
    let bytes: u64 = out.iter().map(|m| m.total_bytes.0).sum();
    let sms: u32 = out.iter().map(|m| m.multiprocessors).sum();
    if bytes > profile.memory.total_bytes.0 || sms > profile.multiprocessors {
        return Err(format!(
            "HEADROOM_FAKE_MIG={names:?}: the instances take {bytes} bytes and {sms} SMs, more than \
             {}'s {} bytes and {} SMs",
            profile.name, profile.memory.total_bytes.0, profile.multiprocessors
        ));
    }
    Ok(out)
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
        let release = match var("HEADROOM_FAKE_DRIVER") {
            None => Release::default(),
            Some(v) => Release::parse(&v)?,
        };
        let mig = match var("HEADROOM_FAKE_MIG") {
            None => None,
            Some(v) => Some(mig_instances(&profile, &v)?),
        };
        let privileged = match var("HEADROOM_FAKE_PRIVILEGED").as_deref().map(str::trim) {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                return Err(format!("HEADROOM_FAKE_PRIVILEGED={other:?}: use 0 or 1"));
            }
        };
        let wsl2 = match var("HEADROOM_FAKE_WSL2").as_deref().map(str::trim) {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => return Err(format!("HEADROOM_FAKE_WSL2={other:?}: use 0 or 1")),
        };
        let mig_uuid_v1_instance = match var("HEADROOM_FAKE_MIG_UUID_V1").as_deref().map(str::trim)
        {
            None | Some("parent") => false,
            Some("instance") => true,
            Some(other) => {
                return Err(format!(
                    "HEADROOM_FAKE_MIG_UUID_V1={other:?}: use parent or instance"
                ));
            }
        };
        let stub = match var("HEADROOM_FAKE_STUB").as_deref().map(str::trim) {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => return Err(format!("HEADROOM_FAKE_STUB={other:?}: use 0 or 1")),
        };
        let kernel_exec_timeout = match var("HEADROOM_FAKE_KERNEL_EXEC_TIMEOUT") {
            None => None,
            Some(v) => Some(
                parse_duration(&v)
                    .map_err(|e| format!("HEADROOM_FAKE_KERNEL_EXEC_TIMEOUT: {e}"))?,
            ),
        };
        let disabled = match var("HEADROOM_FAKE_DISABLE") {
            None => Disabled::default(),
            Some(v) => Disabled::parse(&v)?,
        };
        // An empty CUDA_VISIBLE_DEVICES hides every device, as on a real driver.
        let visible = get("CUDA_VISIBLE_DEVICES");
        let cuda = topology::cuda_devices(devices, mig.as_ref().map(Vec::len), visible.as_deref());
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
            release,
            mig,
            privileged,
            wsl2,
            mig_uuid_v1_instance,
            stub,
            kernel_exec_timeout,
            disabled,
            cuda,
        })
    }

    /// What CUDA device `ordinal` is.
    pub fn cuda_device(&self, ordinal: u32) -> CudaDevice {
        self.cuda
            .get(ordinal as usize)
            .copied()
            .unwrap_or(CudaDevice {
                physical: ordinal,
                instance: None,
            })
    }

    /// The MIG instance kind of instance `k` (in MIG mode).
    pub fn mig_profile(&self, k: u32) -> Option<&MigProfile> {
        self.mig.as_ref()?.get(k as usize)
    }

    /// CUDA device `ordinal`'s CUDA-visible total (a MIG instance's own).
    pub fn total_bytes(&self, ordinal: u32) -> u64 {
        let d = self.cuda_device(ordinal);
        match d.instance.and_then(|k| self.mig_profile(k)) {
            Some(m) => m.total_bytes.0,
            None => self.gpu_total_bytes(d.physical),
        }
    }

    /// Physical GPU `physical`'s CUDA-visible total.
    pub fn gpu_total_bytes(&self, physical: u32) -> u64 {
        self.totals
            .get(physical as usize)
            .copied()
            .unwrap_or(self.profile.memory.total_bytes.0)
    }

    /// CUDA device `ordinal`'s SM count.
    pub fn multiprocessors(&self, ordinal: u32) -> u32 {
        let d = self.cuda_device(ordinal);
        d.instance
            .and_then(|k| self.mig_profile(k))
            .map_or(self.profile.multiprocessors, |m| m.multiprocessors)
    }

    /// The shared-table key of CUDA device `ordinal`'s memory.
    pub fn memory_key(&self, ordinal: u32) -> u32 {
        let d = self.cuda_device(ordinal);
        topology::memory_key(d.physical, d.instance)
    }

    /// Modeled GPU time for `seconds` of work at full speed, times `HEADROOM_FAKE_TIME_SCALE`.
    pub fn scaled(&self, seconds: f64) -> Duration {
        Duration::try_from_secs_f64(seconds * self.time_scale).unwrap_or(Duration::ZERO)
    }
}
