//! headroom: put a GPU under defined memory pressure and report the truth about it.
//!
//! The crate is layered from the device edge up: `device` (the `headroom-device` crate:
//! capability traits with a real-GPU backend and a simulated one), `alloc` (allocators over a device), `workload` (what to run), `run` (runs
//! it and records every view), `record` (readings, peaks) and `report` (what comes out).

// Standard output goes through `output::print` (`out!`, `outln!`), which survives a reader
// that goes away; a bare `print!` would panic there. Standard error goes through
// `output::eprint` (`err!`, `errln!`), which a closed or full stderr cannot make panic.
#![deny(clippy::print_stdout)]
#![deny(clippy::print_stderr)]

pub mod alloc;
pub mod bandwidth;
pub mod bounded;
pub mod calibrate;
pub mod cause;
pub mod cli;
pub mod commands;
pub mod crosscheck;
pub mod device_args;
pub mod diff;
/// The device edge (`crates/headroom-device`): capabilities, backends, profiles, kernels.
pub use headroom_device as device;
pub mod expect;
pub mod explain;
pub mod exporter;
pub mod folder;
pub mod import;
pub use headroom_device::kernels;
pub mod merge;
pub mod model;
pub mod node;
pub mod oom;
pub mod oom_message;
pub mod outdir;
pub mod output;
pub mod plan;
pub mod record;
pub mod report;
pub mod run;
pub mod sampler;
pub mod schema;
pub mod shipped;
pub mod signals;
pub mod tenant;
pub mod text_table;
pub mod torch_job;

pub use headroom_device::units;
pub mod watch;
pub mod workload;
