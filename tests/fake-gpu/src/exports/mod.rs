//! The exported C entry points, by API group.
//!
//! Each function's safety contract is the CUDA driver API reference's for the symbol of the
//! same name: pointers valid for what the reference says is read or written.

#![allow(clippy::missing_safety_doc)]

pub mod context;
pub mod device;
pub mod graph;
pub mod memory;
pub mod module;
pub mod pool;
pub mod stream;
pub mod vmm;
