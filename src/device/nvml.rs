//! NVML, where the driver ships it: whole-device memory with the driver's reserved share, and
//! the processes the driver sees. Everything here degrades to `None`; NVML is optional.

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

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

/// Why NVML cannot start, in one line naming its error as the driver does
/// (`nvmlInit_v2 failed: NVML_ERROR_DRIVER_NOT_LOADED (…)`), or `None` when it starts. Said
/// beside a CUDA failure: NVML tells a missing kernel module from a missing library.
pub fn init_failure() -> Option<String> {
    let e = Nvml::init().err()?;
    Some(match &e {
        NvmlError::LibloadingError(l) => format!("libnvidia-ml.so.1 could not be loaded ({l})"),
        NvmlError::FailedToLoadSymbol(s) => format!("NVML lacks a function headroom calls ({s})"),
        _ => match error_name(&e) {
            Some(name) => format!("nvmlInit_v2 failed: {name} ({e})"),
            None => format!("nvmlInit_v2 failed: {e}"),
        },
    })
}

/// The name of NVML's return code for `e` (`NVML_ERROR_…`); `None` for an error that is not one.
pub fn error_name(e: &NvmlError) -> Option<&'static str> {
    use NvmlError as E;
    Some(match e {
        E::Uninitialized => "NVML_ERROR_UNINITIALIZED",
        E::InvalidArg => "NVML_ERROR_INVALID_ARGUMENT",
        E::NotSupported => "NVML_ERROR_NOT_SUPPORTED",
        E::NoPermission => "NVML_ERROR_NO_PERMISSION",
        E::NotFound => "NVML_ERROR_NOT_FOUND",
        E::InsufficientSize(_) => "NVML_ERROR_INSUFFICIENT_SIZE",
        E::InsufficientPower => "NVML_ERROR_INSUFFICIENT_POWER",
        E::DriverNotLoaded => "NVML_ERROR_DRIVER_NOT_LOADED",
        E::Timeout => "NVML_ERROR_TIMEOUT",
        E::IrqIssue => "NVML_ERROR_IRQ_ISSUE",
        E::LibraryNotFound => "NVML_ERROR_LIBRARY_NOT_FOUND",
        E::FunctionNotFound => "NVML_ERROR_FUNCTION_NOT_FOUND",
        E::CorruptedInfoROM => "NVML_ERROR_CORRUPTED_INFOROM",
        E::GpuLost => "NVML_ERROR_GPU_IS_LOST",
        E::ResetRequired => "NVML_ERROR_RESET_REQUIRED",
        E::OperatingSystem => "NVML_ERROR_OPERATING_SYSTEM",
        E::LibRmVersionMismatch => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        E::InUse => "NVML_ERROR_IN_USE",
        E::InsufficientMemory => "NVML_ERROR_MEMORY",
        E::NoData => "NVML_ERROR_NO_DATA",
        E::Unknown => "NVML_ERROR_UNKNOWN",
        _ => return None,
    })
}
