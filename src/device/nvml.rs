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
        let nvml = Nvml::init().ok()?;
        nvml.device_by_uuid(uuid).ok()?;
        Some(NvmlDevice {
            nvml,
            uuid: uuid.to_string(),
        })
    }

    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    pub fn memory(&self) -> Option<NvmlMemory> {
        let d = self.nvml.device_by_uuid(self.uuid.as_str()).ok()?;
        let m = d.memory_info().ok()?;
        Some(NvmlMemory {
            total_bytes: m.total,
            reserved_bytes: m.reserved,
            used_bytes: m.used,
            free_bytes: m.free,
        })
    }

    /// The compute processes on this device. Slow (a global driver lock): never poll it fast.
    pub fn processes(&self) -> Option<Vec<ProcessUsage>> {
        let d = self.nvml.device_by_uuid(self.uuid.as_str()).ok()?;
        let me = std::process::id();
        let list = d.running_compute_processes().ok()?;
        Some(
            list.into_iter()
                .map(|p| ProcessUsage {
                    pid: p.pid,
                    used_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    },
                    is_self: p.pid == me,
                })
                .collect(),
        )
    }
}

/// NVML's memory reading of a device by UUID before any CUDA context exists.
pub fn memory_before_context(uuid: &str) -> Option<NvmlMemory> {
    NvmlDevice::open(uuid)?.memory()
}
