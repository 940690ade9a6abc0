//! Raw readings of device memory between the harness's own calls: the time, free and total,
//! and NVML's figures where the reader has them. Tagging a reading with what the run was doing
//! (its phase, its own views) is the sampler's business above this crate.

use std::time::Instant;

use crate::NvmlMemory;

/// One reading of the whole device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawReading {
    /// Nanoseconds since the reader's origin (the device's time zero for a device's reader),
    /// taken as the reading returned.
    pub t_ns: u64,
    pub free_bytes: u64,
    pub total_bytes: u64,
    /// NVML's whole-device view, for a reader that reads NVML.
    pub nvml: Option<NvmlMemory>,
}

impl RawReading {
    /// Memory in use: NVML's `used` where the reading has it (which leaves the driver's
    /// reserved share out), else total − free.
    pub fn used_bytes(&self) -> u64 {
        self.nvml
            .map_or(self.total_bytes.saturating_sub(self.free_bytes), |m| {
                m.used_bytes
            })
    }
}

/// Reads a device's memory at the wall clock, from whichever thread holds it (the sampler's
/// own thread, or `watch`'s two loops at once).
pub trait Reader: Send + Sync {
    /// Runs once, first, on the reading thread (the cuda reader makes its context current).
    fn bind(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// One reading, now.
    fn read(&self) -> Result<RawReading, String>;
    /// The same reading with nothing of headroom's around the driver call (no watch over
    /// it): the floor a sampler's cost is measured against (`benches/sampler.rs`). Never a
    /// run's reading: a call made here that never returned would go unnoticed.
    fn read_bare(&self) -> Result<RawReading, String> {
        self.read()
    }
    /// The reader's clock (nanoseconds since its origin): when a failed reading failed.
    fn now_ns(&self) -> u64;
}

/// How a device's memory can be read between the harness's own calls.
pub enum Readings {
    /// Measured on a thread: the reader takes each reading when asked.
    Measured(Box<dyn Reader>),
    /// Modeled in virtual time: the device answers for any past instant (`free_at_ns`), and
    /// one query costs `query_ns`. `now_ns` is the device's time at the start.
    Modeled { query_ns: u64, now_ns: u64 },
}

/// Nanoseconds from `origin` to now.
pub fn since(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}
