//! The calling convention every exported function goes through: count the call for fault
//! injection, refuse the calls of a capability turned off, catch any panic (none may unwind into
//! C), and turn `Result` into a status code.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::{CUresult, nvmlReturn_t};
use crate::config;
use crate::errors::{
    self, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_STUB_LIBRARY,
    CUDA_ERROR_UNKNOWN, NVML_ERROR_UNKNOWN,
};
use crate::faults;

thread_local! {
    /// A sticky error injected at this thread's current `cuLaunchKernel`: the launch succeeds
    /// and the kernel faults when it runs, as a real faulting kernel does.
    static KERNEL_FAULT: Cell<Option<CUresult>> = const { Cell::new(None) };
}

/// Takes the fault injected into the current `cuLaunchKernel`, if any.
pub fn take_kernel_fault() -> Option<CUresult> {
    KERNEL_FAULT.with(Cell::take)
}

fn injected(api: &'static str) -> Option<u32> {
    let loaded = config::loaded();
    let cfg = loaded.config.as_ref().ok()?;
    faults::on_call(&cfg.faults, &loaded.counters, api)
}

/// Whether `api` belongs to a capability turned off (`HEADROOM_FAKE_DISABLE`).
fn disabled(api: &str) -> bool {
    let loaded = config::loaded();
    loaded
        .config
        .as_ref()
        .is_ok_and(|c| c.disabled.refuses(api))
}

/// `HEADROOM_FAKE_STUB=1`: the library is the CUDA toolkit's link-time stub, whose every
/// driver call returns `CUDA_ERROR_STUB_LIBRARY`.
fn stub() -> bool {
    let loaded = config::loaded();
    loaded.config.as_ref().is_ok_and(|c| c.stub)
}

fn guarded<T>(api: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("headroom-fake-gpu: internal error in {api} (a panic); returning an error");
        fallback
    })
}

/// Runs a CUDA entry point.
pub fn cuda(api: &'static str, f: impl FnOnce() -> Result<(), CUresult>) -> CUresult {
    guarded(api, CUDA_ERROR_UNKNOWN, || {
        if stub() {
            return CUDA_ERROR_STUB_LIBRARY;
        }
        if let Some(code) = injected(api) {
            if !errors::is_sticky(code) {
                return code;
            }
            if api == "cuLaunchKernel" {
                KERNEL_FAULT.with(|k| k.set(Some(code)));
            } else {
                crate::state::poison_current(code);
                return code;
            }
        }
        let r = if disabled(api) {
            Err(CUDA_ERROR_NOT_SUPPORTED)
        } else {
            f()
        };
        KERNEL_FAULT.with(Cell::take);
        match r {
            Ok(()) => 0,
            Err(e) => e,
        }
    })
}

/// Runs an NVML entry point.
pub fn nvml(api: &'static str, f: impl FnOnce() -> Result<(), nvmlReturn_t>) -> nvmlReturn_t {
    guarded(api, NVML_ERROR_UNKNOWN, || {
        if let Some(code) = injected(api) {
            return code;
        }
        match f() {
            Ok(()) => 0,
            Err(e) => e,
        }
    })
}

/// Writes `v` through an out-pointer; a null one is an invalid value.
///
/// # Safety
/// `p` must be null or valid for writing a `T`.
pub unsafe fn out<T>(p: *mut T, v: T) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and the caller guarantees it is valid for writes.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Copies `s` into a C buffer of `len` bytes, NUL-terminated, truncating if needed.
///
/// # Safety
/// `buf` must be null or valid for `len` bytes.
pub unsafe fn write_cstr(buf: *mut std::ffi::c_char, len: usize, s: &str) -> bool {
    if buf.is_null() || len == 0 {
        return false;
    }
    let n = s.len().min(len - 1);
    // SAFETY: `n + 1 <= len` bytes of `buf` are writable (the caller's guarantee).
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    n == s.len()
}

/// Keeps the calling thread busy until `d` has passed since `start` (a call's modeled cost;
/// too short to sleep for).
pub fn take_at_least(start: std::time::Instant, d: std::time::Duration) {
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}
