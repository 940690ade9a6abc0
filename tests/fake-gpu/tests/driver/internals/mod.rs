//! The fake driver's modules checked one by one, beside the C ABI tests: the library has no
//! unit tests of its own, so it is compiled once for the tests, not a second time with them.

mod addr_map;
mod branch;
mod config;
mod content;
mod errors;
mod faults;
mod graphs;
mod kernels;
mod memory;
mod pool;
mod profile;
mod ptx;
mod shared;
mod topology;
