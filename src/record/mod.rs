//! Readings of every memory view, kept apart by scope, and what the run makes of them.
//!
//! A `Reading` is one timestamped set of views. Views are never added together: each has a
//! name that says its scope (`device_used_bytes` is the whole device, all processes;
//! `alloc_reserved_bytes` is what the harness allocator holds from the driver, and so on).

pub mod peaks;
pub mod timeline;

use serde::{Deserialize, Serialize};

/// Every view a reading can carry. The order is the column order in `timeline.csv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    /// Whole device, all processes: `total − free` from `cuMemGetInfo`.
    DeviceUsed,
    /// Exact bytes this run holds from the driver, counted at each call (requested sizes).
    OwnBytes,
    /// Live blocks handed out by the harness allocator (rounded sizes).
    AllocAllocated,
    /// Segments the harness allocator holds from the driver.
    AllocReserved,
    /// Blocks in use or waiting on another stream before they can be reused.
    AllocActive,
    /// Free pieces of split segments.
    AllocInactiveSplit,
    /// The largest free block inside held segments.
    AllocLargestFree,
    /// Bytes asked for by live allocations, before rounding.
    AllocRequested,
    /// Stream-ordered pool: bytes in live allocations (driver attribute).
    PoolUsed,
    /// Stream-ordered pool: bytes the pool holds from the device (driver attribute).
    PoolReserved,
    /// Graph allocation nodes: bytes in live allocations (driver attribute).
    GraphUsed,
    /// Graph allocation nodes: bytes held for graphs (driver attribute).
    GraphReserved,
    /// A watched job's processes (`headroom watch`): the sum of their entries in NVML's
    /// process list, contexts included. Read at the process list's own, slower rate.
    JobUsed,
}

impl View {
    pub const ALL: [View; 13] = [
        View::DeviceUsed,
        View::OwnBytes,
        View::AllocAllocated,
        View::AllocReserved,
        View::AllocActive,
        View::AllocInactiveSplit,
        View::AllocLargestFree,
        View::AllocRequested,
        View::PoolUsed,
        View::PoolReserved,
        View::GraphUsed,
        View::GraphReserved,
        View::JobUsed,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// The column and key name, with its unit.
    pub fn key(self) -> &'static str {
        match self {
            View::DeviceUsed => "device_used_bytes",
            View::OwnBytes => "own_bytes",
            View::AllocAllocated => "alloc_allocated_bytes",
            View::AllocReserved => "alloc_reserved_bytes",
            View::AllocActive => "alloc_active_bytes",
            View::AllocInactiveSplit => "alloc_inactive_split_bytes",
            View::AllocLargestFree => "alloc_largest_free_bytes",
            View::AllocRequested => "alloc_requested_bytes",
            View::PoolUsed => "pool_used_bytes",
            View::PoolReserved => "pool_reserved_bytes",
            View::GraphUsed => "graph_used_bytes",
            View::GraphReserved => "graph_reserved_bytes",
            View::JobUsed => "job_used_bytes",
        }
    }

    /// What the view covers, in words for people.
    pub fn scope(self) -> &'static str {
        match self {
            View::DeviceUsed => "whole device, all processes (cuMemGetInfo)",
            View::OwnBytes => "bytes this run took from the driver",
            View::AllocAllocated => "live blocks of the harness allocator",
            View::AllocReserved => "segments the harness allocator holds",
            View::AllocActive => "blocks in use or pending on a stream",
            View::AllocInactiveSplit => "free pieces of split segments",
            View::AllocLargestFree => "largest free block in held segments",
            View::AllocRequested => "bytes asked for, before rounding",
            View::PoolUsed => "stream-ordered pool, live",
            View::PoolReserved => "stream-ordered pool, held",
            View::GraphUsed => "graph memory, live",
            View::GraphReserved => "graph memory, held",
            View::JobUsed => "the watched job's processes, contexts included (NVML process list)",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_key(key: &str) -> Option<View> {
        View::ALL.into_iter().find(|v| v.key() == key)
    }
}

/// The views of a run's idle reading: the allocator's (`alloc`, all zero before the first
/// step), own bytes, pool and graph memory, all known then (nothing allocated, no pool or
/// graph memory yet). The first row of every run's timeline thus gives each byte column a
/// number, so a CSV reader that infers types (polars, pandas) types them alike in every run.
pub fn idle_views(alloc: ViewSet) -> ViewSet {
    alloc
        .with(View::OwnBytes, 0)
        .with(View::PoolUsed, 0)
        .with(View::PoolReserved, 0)
        .with(View::GraphUsed, 0)
        .with(View::GraphReserved, 0)
}

/// A value for some views; the rest are unknown (not zero).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ViewSet {
    present: u32,
    values: [u64; View::COUNT],
}

impl ViewSet {
    pub fn get(&self, view: View) -> Option<u64> {
        (self.present & (1 << view.index()) != 0).then(|| self.values[view.index()])
    }

    pub fn set(&mut self, view: View, value: u64) {
        self.present |= 1 << view.index();
        self.values[view.index()] = value;
    }

    pub fn clear(&mut self, view: View) {
        self.present &= !(1 << view.index());
        self.values[view.index()] = 0;
    }

    pub fn with(mut self, view: View, value: u64) -> Self {
        self.set(view, value);
        self
    }

    /// Views present here, in column order.
    pub fn iter(&self) -> impl Iterator<Item = (View, u64)> + '_ {
        View::ALL
            .into_iter()
            .filter_map(move |v| self.get(v).map(|x| (v, x)))
    }

    /// Takes every view present in `other`, keeping ours where `other` has none.
    pub fn overlay(&mut self, other: &ViewSet) {
        for (v, x) in other.iter() {
            self.set(v, x);
        }
    }
}

/// Where a reading came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The background sampler.
    Sampler,
    /// Taken synchronously right after an allocate, free, launch or sync.
    Event,
    /// The idle reading before the workload.
    Idle,
    /// The reading after everything was released.
    Final,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Sampler => "sampler",
            Source::Event => "event",
            Source::Idle => "idle",
            Source::Final => "final",
        }
    }

    pub fn parse(s: &str) -> Option<Source> {
        match s {
            "sampler" => Some(Source::Sampler),
            "event" => Some(Source::Event),
            "idle" => Some(Source::Idle),
            "final" => Some(Source::Final),
            _ => None,
        }
    }
}

/// One timestamped set of views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Nanoseconds since the device was opened.
    pub t_ns: u64,
    /// Index of the phase running at the time (`u32::MAX` outside any phase).
    pub phase: u32,
    pub source: Source,
    pub device_free_bytes: u64,
    pub views: ViewSet,
}

/// The phase index used for readings outside every phase (idle, final).
pub const NO_PHASE: u32 = u32::MAX;
