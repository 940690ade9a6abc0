//! What else the driver says when CUDA offers no usable device: the CUDA version the library
//! reports (`cuDriverGetVersion` needs no `cuInit`) and NVML's own failure, which tells a
//! library without its kernel module (`NVML_ERROR_DRIVER_NOT_LOADED`) from a missing driver.

use cudarc::driver::sys;

use crate::{cuda, floor, nvml};

/// `reason` (why there is no usable CUDA device) followed by the driver's version, where the
/// library loads and the reason does not already name it, and NVML's failure, where it fails.
pub fn with_driver_detail(reason: &str) -> String {
    let mut out = reason.to_string();
    // SAFETY: only tries to dlopen libcuda; no driver call is made.
    if unsafe { sys::is_culib_present() } {
        if let Some(v) = cuda::driver_cuda_version() {
            // Below the floor the reason is the version's own message.
            if floor::below_floor(v).is_none() {
                let branch = floor::branch_of(v)
                    .or_else(|| nvml::driver_version().and_then(|d| floor::branch_of_driver(&d)))
                    .map_or_else(String::new, |b| format!(", R{b}"));
                out.push_str(&format!(
                    "; the driver library reports CUDA {}{branch} (cuDriverGetVersion {v})",
                    floor::cuda_version_text(v)
                ));
            }
        }
    }
    if let Some(why) = nvml::init_failure().filter(|w| !out.contains(w.as_str())) {
        out.push_str("; NVML: ");
        out.push_str(&why);
    }
    out
}
