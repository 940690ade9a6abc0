//! The device attributes that say which optional driver features a device has: a workload
//! that needs one the device lacks is refused before its first step instead of failing in it.

use cudarc::driver::result;
use cudarc::driver::sys;

use super::driver_err;
use crate::{Capabilities, DevResult};

/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` and `..._VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`
/// of device `index`, read without a context.
pub fn device_capabilities(index: u32) -> DevResult<Capabilities> {
    let dev = result::device::get(index as i32).map_err(|e| driver_err("cuDeviceGet", 0, e))?;
    use sys::CUdevice_attribute as A;
    let supported = |a: A| -> DevResult<bool> {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        match unsafe { result::device::get_attribute(dev, a) } {
            Ok(v) => Ok(v != 0),
            // A driver older than the attribute does not know it: it has not the feature.
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_INVALID_VALUE => Ok(false),
            Err(e) => Err(driver_err("cuDeviceGetAttribute", 0, e)),
        }
    };
    Ok(Capabilities {
        memory_pools_supported: supported(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?,
        // Attribute 102; cudarc spells it by its older name.
        virtual_memory_management_supported: supported(
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
        )?,
    })
}
