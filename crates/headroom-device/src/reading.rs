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
    /// Modeled in virtual time: the device publishes its memory to `memory`, which answers for
    /// any instant up to the device's clock, and one query costs `query_ns`. `now_ns` is the
    /// device's time at the start.
    Modeled {
        query_ns: u64,
        now_ns: u64,
        memory: std::sync::Arc<ModeledMemory>,
    },
}

/// A simulated device's memory as the device publishes it (`DeviceCore::publish_memory`): what
/// this process holds as of its last call, and the modeled other processes with the span each
/// holds its memory for. Between two calls only those others change free memory, so a reader
/// answers for any instant since the last call from this alone, never asking the device.
#[derive(Debug, Default)]
pub struct ModeledMemory {
    published: std::sync::Mutex<PublishedMemory>,
}

/// One publication of a simulated device's memory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PublishedMemory {
    pub total_bytes: u64,
    /// This process's memory, its context included.
    pub own_used_bytes: u64,
    /// The other processes: `(start_ns, end_ns, bytes)`, each holding `bytes` from `start_ns`
    /// until `end_ns` (exclusive; `u64::MAX`: to the end).
    pub others: Vec<(u64, u64, u64)>,
}

impl ModeledMemory {
    /// Replaces what was published.
    pub fn publish(&self, memory: PublishedMemory) {
        *self.lock() = memory;
    }

    /// Device free bytes at `t_ns`.
    pub fn free_at_ns(&self, t_ns: u64) -> u64 {
        let p = self.lock();
        let others: u64 = p
            .others
            .iter()
            .filter(|(start, end, _)| *start <= t_ns && t_ns < *end)
            .map(|x| x.2)
            .sum();
        p.total_bytes.saturating_sub(p.own_used_bytes + others)
    }

    /// A time until which (exclusive) free memory stays what it is at `t_ns`: the next arrival
    /// or departure of another process.
    pub fn free_steady_until_ns(&self, t_ns: u64) -> u64 {
        let p = self.lock();
        let edges = p.others.iter().flat_map(|x| [x.0, x.1]);
        edges.filter(|&b| b > t_ns).min().unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PublishedMemory> {
        // A poisoned lock only means another thread panicked mid-update of plain numbers.
        self.published.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Nanoseconds from `origin` to now.
pub fn since(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}
