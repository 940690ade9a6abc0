//! NVML, where the driver ships it: whole-device memory with the driver's reserved share, and
//! the processes the driver sees. Everything here degrades to `None`; NVML is optional.
//!
//! A device is found by its UUID, never by index: the CUDA ordinal and NVML's index need not
//! agree, and a MIG instance (`MIG-…`, `cuDeviceGetUuid_v2`) has an NVML handle of its own
//! whose memory is the instance's. On MIG, NVML refuses the process list to an unprivileged
//! user (`NVML_ERROR_NO_PERMISSION`): that list is unavailable, with the reason, never an error.

mod library;

use std::time::Instant;

pub use library::{Device, NvmlError};
use library::{Nvml, RawHandle, VALUE_NOT_AVAILABLE};

use crate::mig::{MigIdentity, UuidKind, profile_from_device_name};
use crate::reading::{RawReading, Reader};
use crate::{NvmlMemory, ProcessUsage};

/// An NVML session bound to one device by UUID (a GPU's `GPU-…` or a MIG instance's `MIG-…`),
/// looked up once: every later read uses that handle.
pub struct NvmlDevice {
    nvml: Nvml,
    handle: RawHandle,
}

impl NvmlDevice {
    /// `None` when NVML is missing or does not know the device.
    pub fn open(uuid: &str) -> Option<NvmlDevice> {
        Self::try_open(uuid).ok()
    }

    /// As `open`, with NVML's error when it fails.
    pub fn try_open(uuid: &str) -> Result<NvmlDevice, NvmlError> {
        let nvml = Nvml::init()?;
        let handle = nvml.device_by_uuid(uuid)?.raw();
        Ok(NvmlDevice { nvml, handle })
    }

    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    /// The device's handle, looked up when the session opened.
    pub fn handle(&self) -> Result<Device<'_>, NvmlError> {
        Ok(self.nvml.device_from(self.handle))
    }

    pub fn memory(&self) -> Option<NvmlMemory> {
        read_memory(&self.handle().ok()?).ok()
    }

    /// The compute processes on this device. Slow (a global driver lock): never poll it fast.
    pub fn processes(&self) -> Option<Vec<ProcessUsage>> {
        self.processes_or_why().ok()
    }

    /// As `processes`, or why NVML gave no list (`process_list_error`).
    pub fn processes_or_why(&self) -> Result<Vec<ProcessUsage>, String> {
        let d = self
            .handle()
            .map_err(|e| format!("NVML lost the device: {e}"))?;
        read_processes(&d).map_err(|e| process_list_error(&e))
    }

    /// The device's handle for a caller that reads it many times (looked up once), with
    /// readings timed from `origin`; the error is NVML's.
    pub fn reader(&self, origin: Instant) -> Result<NvmlReader<'_>, String> {
        let device = self.handle().map_err(|e| e.to_string())?;
        Ok(NvmlReader { device, origin })
    }

    /// The MIG instance this device is, with its parent GPU; `None` on a whole GPU (or an NVML
    /// too old to say).
    pub fn mig_identity(&self) -> Option<MigIdentity> {
        mig_identity(&self.handle().ok()?)
    }
}

/// One NVML device handle, read many times: memory info at every tick, the process list
/// (slow: a global driver lock) far less often.
pub struct NvmlReader<'a> {
    device: Device<'a>,
    origin: Instant,
}

impl NvmlReader<'_> {
    /// NVML's memory info, or the call and its error.
    pub fn memory(&self) -> Result<NvmlMemory, String> {
        read_memory(&self.device).map_err(|e| format!("nvmlDeviceGetMemoryInfo: {e}"))
    }

    /// The compute processes on the device, or why NVML gave no list.
    pub fn processes(&self) -> Result<Vec<ProcessUsage>, String> {
        read_processes(&self.device).map_err(|e| process_list_error(&e))
    }

    /// Nanoseconds since the reader's origin.
    pub fn now_ns(&self) -> u64 {
        crate::reading::since(self.origin)
    }

    /// One whole-device reading through NVML (free and total are NVML's).
    pub fn reading(&self) -> Result<RawReading, String> {
        let m = self.memory()?;
        Ok(RawReading {
            t_ns: crate::reading::since(self.origin),
            free_bytes: m.free_bytes,
            total_bytes: m.total_bytes,
            nvml: Some(m),
        })
    }
}

impl Reader for NvmlReader<'_> {
    fn read(&self) -> Result<RawReading, String> {
        self.reading()
    }

    fn now_ns(&self) -> u64 {
        NvmlReader::now_ns(self)
    }
}

/// Why NVML gave no process list, in one line: the call, NVML's code and text, and on
/// `NO_PERMISSION` what it means on MIG.
pub fn process_list_error(e: &NvmlError) -> String {
    match e {
        e if e.is_code("NVML_ERROR_NO_PERMISSION") => format!(
            "nvmlDeviceGetComputeRunningProcesses: NVML_ERROR_NO_PERMISSION ({e}); on a MIG \
             instance NVML lists processes to administrators only"
        ),
        other => match other.name() {
            Some(name) => format!("nvmlDeviceGetComputeRunningProcesses: {name} ({other})"),
            None => format!("nvmlDeviceGetComputeRunningProcesses: {other}"),
        },
    }
}

/// A MIG handle's instance: its profile (from its name), parent GPU and instance ids.
pub fn mig_identity(d: &Device<'_>) -> Option<MigIdentity> {
    if !d.is_mig_device_handle().ok()? {
        return None;
    }
    let parent = d.mig_parent().ok()?;
    Some(MigIdentity {
        profile: d.name().ok().and_then(|n| profile_from_device_name(&n)),
        parent_index: parent.index().ok(),
        parent_uuid: parent.uuid().ok()?,
        parent_name: parent.name().ok(),
        gpu_instance_id: instance_id(d, InstanceKind::Gpu),
        compute_instance_id: instance_id(d, InstanceKind::Compute),
    })
}

enum InstanceKind {
    Gpu,
    Compute,
}

/// `nvmlDeviceGetGpuInstanceId` / `nvmlDeviceGetComputeInstanceId`, where the library has them.
fn instance_id(d: &Device<'_>, kind: InstanceKind) -> Option<u32> {
    match kind {
        InstanceKind::Gpu => d.gpu_instance_id().ok(),
        InstanceKind::Compute => d.compute_instance_id().ok(),
    }
}

/// One MIG instance as NVML lists it on its parent GPU, before any CUDA context.
#[derive(Debug, Clone)]
pub struct NvmlInstance {
    /// `MIG-…`.
    pub uuid: String,
    /// `NVIDIA H200 MIG 1g.18gb`.
    pub name: String,
    pub identity: MigIdentity,
    pub memory: Option<NvmlMemory>,
    pub processes: Result<Vec<ProcessUsage>, String>,
}

/// One physical GPU as NVML lists it, with its MIG instances when MIG mode is on.
#[derive(Debug, Clone)]
pub struct NvmlGpu {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub driver_version: Option<String>,
    /// MIG mode is on (current mode, not pending).
    pub mig_enabled: bool,
    pub instances: Vec<NvmlInstance>,
    /// The whole GPU's memory and process list (read when MIG mode is off).
    pub memory: Option<NvmlMemory>,
    pub processes: Result<Vec<ProcessUsage>, String>,
}

/// Every physical GPU NVML sees and the MIG instances of those in MIG mode (`None` without
/// NVML). NVML sees every instance whatever `CUDA_VISIBLE_DEVICES` says.
pub fn gpus() -> Option<Vec<NvmlGpu>> {
    let nvml = Nvml::init().ok()?;
    let count = nvml.device_count().ok()?;
    let driver_version = nvml.sys_driver_version().ok();
    let mut out = Vec::new();
    for index in 0..count {
        let Ok(d) = nvml.device_by_index(index) else {
            continue;
        };
        let mig_enabled = d.mig_mode().is_ok_and(|(current, _)| current == 1);
        let (instances, memory, processes) = if mig_enabled {
            let why = "the GPU is in MIG mode: its instances have the process lists".to_string();
            (instances(&d), None, Err(why))
        } else {
            let ps = read_processes(&d).map_err(|e| process_list_error(&e));
            (vec![], read_memory(&d).ok(), ps)
        };
        out.push(NvmlGpu {
            index,
            uuid: d.uuid().unwrap_or_default(),
            name: d.name().unwrap_or_default(),
            driver_version: driver_version.clone(),
            mig_enabled,
            instances,
            memory,
            processes,
        });
    }
    Some(out)
}

/// The MIG instances of a GPU in MIG mode: every slot below its maximum that holds one.
fn instances(gpu: &Device<'_>) -> Vec<NvmlInstance> {
    let max = gpu.max_mig_device_count().unwrap_or(0);
    (0..max)
        .filter_map(|i| gpu.mig_device_by_index(i).ok())
        .filter_map(|m| {
            let identity = mig_identity(&m)?;
            Some(NvmlInstance {
                uuid: m.uuid().ok()?,
                name: m.name().unwrap_or_default(),
                identity,
                memory: read_memory(&m).ok(),
                processes: read_processes(&m).map_err(|e| process_list_error(&e)),
            })
        })
        .collect()
}

/// NVML's memory info of a device handle: v2 (one call), or v1 where the library lacks v2 or
/// its v2 fails (reported on WSL2 and on unified-memory parts); after a v2 failure the session
/// asks v1 directly.
pub fn read_memory(d: &Device<'_>) -> Result<NvmlMemory, NvmlError> {
    if d.memory_v2_usable() {
        match d.memory_v2() {
            Ok(m) => {
                return Ok(NvmlMemory {
                    total_bytes: m.total,
                    reserved_bytes: Some(m.reserved),
                    used_bytes: m.used,
                    free_bytes: m.free,
                });
            }
            // A device NVML no longer has is no reason to try another call.
            Err(e) if e.is_code("NVML_ERROR_GPU_IS_LOST") => return Err(e),
            Err(e) => {
                d.forget_memory_v2();
                // Said once per process, whatever the sessions.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    crate::notice::say(crate::notice::Notice::Note(&format!(
                    "nvmlDeviceGetMemoryInfo_v2 failed: {} ({e}); reading NVML's memory info v1 \
                     instead, which counts the driver's reserve as used without saying how much \
                     it is",
                    e.name().unwrap_or("an error")
                    )))
                });
                return read_memory_v1(d).map_err(|v1| NvmlError::Both(Box::new(e), Box::new(v1)));
            }
        }
    }
    read_memory_v1(d)
}

/// NVML's first memory info, on drivers before R510 (NVML 11.6 added the v2 that splits out
/// the driver's reserved share): `used` there includes that share, whose size it does not
/// give, so `reserved_bytes` is `None`.
fn read_memory_v1(d: &Device<'_>) -> Result<NvmlMemory, NvmlError> {
    let m = d.memory_v1()?;
    Ok(NvmlMemory {
        total_bytes: m.total,
        reserved_bytes: None,
        used_bytes: m.used,
        free_bytes: m.free,
    })
}

/// The compute processes NVML lists on a device handle, this process marked.
pub fn read_processes(d: &Device<'_>) -> Result<Vec<ProcessUsage>, NvmlError> {
    let me = std::process::id();
    // `_v2` first: every branch from R450 on exports it, with the same 24-byte record in every
    // nvml.h; `_v3` only where `_v2` is gone. Either way the record size is read from what the
    // driver wrote (535.43.02–535.86 wrote 32-byte records through `_v3`).
    let listed = match d.processes_v2() {
        Err(NvmlError::MissingSymbol(_)) => d.processes_v3(),
        Err(e) if e.is_code("NVML_ERROR_FUNCTION_NOT_FOUND") => d.processes_v3(),
        other => other,
    };
    Ok(listed?
        .into_iter()
        .map(|p| ProcessUsage {
            pid: p.pid,
            used_bytes: (p.used_gpu_memory != VALUE_NOT_AVAILABLE).then_some(p.used_gpu_memory),
            is_self: p.pid == me,
        })
        .collect())
}

/// Whether NVML knows `gpu_uuid` as a whole GPU or `mig_uuid` as a MIG instance (with its
/// parent's UUID); `None` without NVML or where it knows neither.
pub fn uuid_kind(gpu_uuid: &str, mig_uuid: &str) -> Option<UuidKind> {
    let nvml = Nvml::init().ok()?;
    if nvml.device_by_uuid(gpu_uuid).is_ok() {
        return Some(UuidKind::Gpu);
    }
    let d = nvml.device_by_uuid(mig_uuid).ok()?;
    let parent_uuid = d.mig_parent().ok().and_then(|p| p.uuid().ok());
    Some(UuidKind::Mig { parent_uuid })
}

/// NVML's memory reading of a device by UUID before any CUDA context exists.
pub fn memory_before_context(uuid: &str) -> Option<NvmlMemory> {
    NvmlDevice::open(uuid)?.memory()
}

/// The driver's version as NVML reports it (`550.54.15`), without a device.
pub fn driver_version() -> Option<String> {
    Nvml::init().ok()?.sys_driver_version().ok()
}

/// `nvmlInit_v2 failed: NVML_ERROR_DRIVER_NOT_LOADED (…)` where NVML's library loads but says
/// the driver's kernel module is not loaded; `None` otherwise.
pub fn driver_not_loaded() -> Option<String> {
    match Nvml::init() {
        Err(e) if e.is_code("NVML_ERROR_DRIVER_NOT_LOADED") => Some(format!(
            "nvmlInit_v2 failed: NVML_ERROR_DRIVER_NOT_LOADED ({e})"
        )),
        _ => None,
    }
}

/// Why NVML cannot start, in one line naming its error as the driver does
/// (`nvmlInit_v2 failed: NVML_ERROR_DRIVER_NOT_LOADED (…)`), or `None` when it starts. Said
/// beside a CUDA failure: NVML tells a missing kernel module from a missing library.
pub fn init_failure() -> Option<String> {
    let e = Nvml::init().err()?;
    Some(match &e {
        NvmlError::Load(why) => format!("libnvidia-ml.so.1 could not be loaded ({why})"),
        NvmlError::MissingSymbol(s) => format!("NVML lacks a function headroom calls ({s})"),
        _ => match e.name() {
            Some(name) => format!("nvmlInit_v2 failed: {name} ({e})"),
            None => format!("nvmlInit_v2 failed: {e}"),
        },
    })
}
