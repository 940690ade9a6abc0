//! A fake NVIDIA driver: `libcuda` and NVML in one library, with the documented semantics of
//! the calls headroom makes, so that headroom's real `cuda` backend (cudarc, dynamic loading)
//! runs unchanged on machines without a GPU. `scripts/fake-gpu CMD…` builds it and runs CMD
//! with it in place of the real libraries.
//!
//! What it keeps from the real driver: the calling conventions (every symbol cudarc and
//! headroom's NVML module resolve, with their C layouts), asynchrony (one worker thread per stream,
//! kernels take modeled time, host copies stage and return), errors (context rules, sticky
//! errors, capture rules, out of memory) and the memory model of a headroom profile (pages,
//! small-allocation packing, context, stack, pools, VMM, graph memory). Kernels are headroom's,
//! executed by name on sparse device memory.
//!
//! # Environment
//!
//! - `HEADROOM_FAKE_PROFILE`: `tiny-4g` (default), `h100-80g`, `h200`, any profile under
//!   `profiles/` by name, or a profile file.
//! - `HEADROOM_FAKE_DEVICES`: number of identical devices (default 1).
//! - `HEADROOM_FAKE_STATE`: a file shared by every process using the fake (each process's
//!   memory and context per device); without it, state is per process. `scripts/fake-gpu`
//!   sets a fresh one per invocation.
//! - `HEADROOM_FAKE_RELEASE_DELAY` (default `200ms`): how long after a process's death was
//!   first noticed its memory is still counted.
//! - `HEADROOM_FAKE_COMPUTE_MODE`: `default` or `exclusive_process` (a second process's
//!   context creation fails with `CUDA_ERROR_DEVICE_UNAVAILABLE`).
//! - `HEADROOM_FAKE_NVML_HIDE_SELF=1`: NVML's process list omits the calling process.
//! - `HEADROOM_FAKE_FAULTS`: `API@N=ERROR`, `API@*=ERROR`, `API@N=hang:DURATION`, comma
//!   separated (see `faults`).
//! - `HEADROOM_FAKE_TIME_SCALE` (default 1.0): multiplies modeled kernel durations.
//! - `HEADROOM_FAKE_DRIVER`: a driver branch (`470`) or version (`535.261.03`): the reported
//!   versions, the JIT's newest PTX ISA and (through `scripts/fake-gpu`'s filter library) the
//!   symbols the branch has (see `branch`).
//! - `HEADROOM_FAKE_MIG`: MIG instances of every GPU, from the profile's `[[mig]]` table;
//!   `HEADROOM_FAKE_PRIVILEGED=1` lets NVML list processes in MIG mode (see `topology`).
//! - `HEADROOM_FAKE_DISABLE`: `memory_pools`, `vmm`: capabilities turned off.
//! - `CUDA_VISIBLE_DEVICES`: as on a real driver.
//!
//! A bad setting makes `cuInit` and `nvmlInit` fail with a message on stderr.

pub mod abi;
pub mod addr_map;
pub mod branch;
pub mod config;
pub mod content;
mod context;
pub mod errors;
mod exports;
pub mod faults;
mod ffi;
pub mod graphs;
pub mod kernels;
pub mod memory;
mod nvml;
mod ops;
pub mod pool;
pub mod profile;
pub mod ptx;
pub mod shared;
pub mod state;
pub mod stream;
pub mod symbols;
pub mod topology;
pub mod vmm;

pub use exports::context::*;
pub use exports::device::*;
pub use exports::graph::*;
pub use exports::memory::*;
pub use exports::module::*;
pub use exports::pool::*;
pub use exports::stream::*;
pub use exports::vmm::*;
pub use nvml::mig::*;
pub use nvml::*;

/// For tests that drive the C ABI in-process: one configuration at a time.
pub mod testing {
    use std::sync::{Mutex, MutexGuard};

    static LOCK: Mutex<()> = Mutex::new(());

    /// Serializes tests and starts a fresh driver with `vars` as its environment.
    pub fn driver(vars: &[(&str, &str)]) -> MutexGuard<'static, ()> {
        let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = crate::config::install(vars) {
            panic!("bad test settings: {e}");
        }
        guard
    }

    /// Like `driver`, for settings that are meant to be refused.
    pub fn driver_unchecked(vars: &[(&str, &str)]) -> MutexGuard<'static, ()> {
        let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _ = crate::config::install(vars);
        guard
    }
}
