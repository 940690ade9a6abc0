//! The fake driver's C ABI, driven in process as cudarc and NVML's users would: one module
//! per area, in one test binary. A test that drives the fake holds its global lock
//! (`testing::driver`), so those run one at a time whatever the thread count.

#[path = "../common/mod.rs"]
mod common;

mod branches;
mod capabilities;
mod context;
mod exports;
mod faults;
mod graphs;
mod internals;
mod memory;
mod mig;
mod modules;
mod nvml;
mod pools;
mod streams;
