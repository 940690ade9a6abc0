//! A simulated device without a driver feature (the profile's `[capabilities]` set it false)
//! answers that feature's calls as such a driver does: `CUDA_ERROR_NOT_SUPPORTED`.

use super::SimDevice;
use crate::{Capability, DevResult, DeviceError};

impl SimDevice {
    /// Refuses `call` unless the device has `capability`.
    pub(super) fn require(&self, capability: Capability, call: &'static str) -> DevResult<()> {
        if self.info.capabilities.has(capability) {
            return Ok(());
        }
        Err(DeviceError::Driver {
            call,
            detail: format!(
                "CUDA_ERROR_NOT_SUPPORTED (operation not supported: the device reports {} = 0)",
                capability.attribute()
            ),
        })
    }
}
