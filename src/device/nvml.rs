//! NVML, where the driver ships it: whole-device memory with the driver's reserved share, and
//! the processes the driver sees. Everything here degrades to `None`; NVML is optional.

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use crate::device::{NvmlMemory, ProcessUsage};

/// An NVML session bound to one device (by UUID, so the CUDA ordinal and NVML index agree).
pub struct NvmlDevice {
    nvml: Nvml,
    uuid: String,
}

impl NvmlDevice {
    /// `None` when NVML is missing or does not know the device.
    pub fn open(uuid: &str) -> Option<NvmlDevice> {
        Self::try_open(uuid).ok()
    }

    /// As `open`, with NVML's error when it fails.
    pub fn try_open(uuid: &str) -> Result<NvmlDevice, nvml_wrapper::error::NvmlError> {
        let nvml = Nvml::init()?;
        nvml.device_by_uuid(uuid)?;
        Ok(NvmlDevice {
            nvml,
            uuid: uuid.to_string(),
        })
    }

    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    /// The device's handle, for a caller that reads it many times (looked up once).
    pub fn handle(&self) -> Result<nvml_wrapper::Device<'_>, nvml_wrapper::error::NvmlError> {
        self.nvml.device_by_uuid(self.uuid.as_str())
    }

    pub fn memory(&self) -> Option<NvmlMemory> {
        read_memory(&self.handle().ok()?).ok()
    }

    /// The compute processes on this device. Slow (a global driver lock): never poll it fast.
    pub fn processes(&self) -> Option<Vec<ProcessUsage>> {
        read_processes(&self.handle().ok()?).ok()
    }
}

/// NVML's memory info (v2) of a device handle: one call.
pub fn read_memory(
    d: &nvml_wrapper::Device<'_>,
) -> Result<NvmlMemory, nvml_wrapper::error::NvmlError> {
    let m = d.memory_info()?;
    Ok(NvmlMemory {
        total_bytes: m.total,
        reserved_bytes: m.reserved,
        used_bytes: m.used,
        free_bytes: m.free,
    })
}

/// The compute processes NVML lists on a device handle, this process marked.
pub fn read_processes(
    d: &nvml_wrapper::Device<'_>,
) -> Result<Vec<ProcessUsage>, nvml_wrapper::error::NvmlError> {
    let me = std::process::id();
    Ok(d.running_compute_processes()?
        .into_iter()
        .map(|p| ProcessUsage {
            pid: p.pid,
            used_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
            is_self: p.pid == me,
        })
        .collect())
}

/// NVML's memory reading of a device by UUID before any CUDA context exists.
pub fn memory_before_context(uuid: &str) -> Option<NvmlMemory> {
    NvmlDevice::open(uuid)?.memory()
}
