//! Allocators over a device: how a workload obtains memory, and what each one counts.
//!
//! Following RMM's shape, an allocator gets its memory from an upstream (here the device,
//! passed in on every call) and adds one concern. `direct` asks the driver for every request
//! (it calls `Memory` only); `pool` uses the driver's stream-ordered pool (`PoolDevice`: the
//! pool and streams); `caching` models PyTorch's caching allocator (`CachingDevice`: memory,
//! streams, virtual memory, and `DeviceCore::info`); the logging adaptor reads the clock
//! (`DeviceCore::now_ns`). An allocator is driven through a `dyn AllocDevice`, which a
//! `dyn Device` upcasts to.
//! Each reports its own views (`alloc_*`), which are never added to the device's: allocated
//! memory sits inside reserved memory.

pub mod adaptors;
pub mod caching;
pub mod direct;
pub mod pool;
pub mod ptr_map;
pub mod replay;

use serde::{Deserialize, Serialize};

use crate::device::prelude::*;

use crate::device::{DevPtr, DeviceError, PoolConfig, StreamId};
use crate::record::{View, ViewSet};

/// A live allocation handed out by an allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub ptr: DevPtr,
    /// What the caller asked for.
    pub requested_bytes: u64,
    /// What the allocator accounts for it (its own rounding).
    pub size_bytes: u64,
    pub stream: StreamId,
}

/// The allocator's side of an out-of-memory: what was asked and how it was rounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OomRequest {
    pub requested_bytes: u64,
    /// The request after the allocator's rounding (what PyTorch prints as "Tried to allocate").
    pub rounded_bytes: u64,
    /// What the allocator asked the driver for when it was refused (a segment may be larger).
    pub driver_request_bytes: u64,
    /// The allocator pool the request belonged to (`small`, `large`, or the allocator's name).
    pub pool: String,
    pub stream: StreamId,
    /// Steps the allocator took before giving up, in order (e.g. "free oversize cached blocks").
    pub retries: Vec<RetryStep>,
}

/// One step an allocator took before it gave up on a request: what it tried and what came of
/// it, and, when its own cap refused the attempt, the bytes that cap allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(from = "RetryStepRepr")]
pub struct RetryStep {
    /// For people: the attempt and its outcome, with raw byte counts.
    pub text: String,
    /// Set when `per_process_memory_fraction` refused this attempt without asking the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction_cap: Option<FractionCapRefusal>,
}

/// An attempt refused by the caching allocator's `per_process_memory_fraction`: held + more
/// would pass what the fraction allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FractionCapRefusal {
    /// `allowed_memory_maximum`: fraction × device total (PyTorch's "N allowed;").
    pub allowed_bytes: u64,
    /// What the allocator held from the driver then.
    pub held_bytes: u64,
    /// The segment (or pages) the attempt needed on top.
    pub more_bytes: u64,
}

impl RetryStep {
    /// A step the driver or the allocator's own rules decided.
    pub fn said(text: impl Into<String>) -> RetryStep {
        RetryStep {
            text: text.into(),
            fraction_cap: None,
        }
    }
}

impl std::fmt::Display for RetryStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq<String> for RetryStep {
    fn eq(&self, other: &String) -> bool {
        self.text == *other
    }
}

/// A step as written: an object, or the bare sentence older files hold.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum RetryStepRepr {
    Text(String),
    Step {
        text: String,
        #[serde(default)]
        fraction_cap: Option<FractionCapRefusal>,
    },
}

impl From<RetryStepRepr> for RetryStep {
    fn from(r: RetryStepRepr) -> Self {
        match r {
            RetryStepRepr::Text(text) => RetryStep::said(text),
            RetryStepRepr::Step { text, fraction_cap } => RetryStep { text, fraction_cap },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("out of memory: {} bytes requested ({} after rounding)", .0.requested_bytes, .0.rounded_bytes)]
    OutOfMemory(Box<OomRequest>),
    #[error(transparent)]
    Device(DeviceError),
    #[error("{0}")]
    Invalid(String),
}

impl AllocError {
    pub fn is_oom(&self) -> bool {
        matches!(self, AllocError::OutOfMemory(_))
    }
}

/// An allocator's counters at one instant (PyTorch's `memory_stats` vocabulary).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct AllocStats {
    /// Live blocks, at their accounted size.
    pub allocated_bytes: u64,
    /// Memory held from the driver.
    pub reserved_bytes: u64,
    /// Blocks in use or waiting on a stream before reuse.
    pub active_bytes: u64,
    pub inactive_split_bytes: u64,
    pub inactive_split_count: u64,
    /// Largest free block inside held memory.
    pub largest_free_bytes: u64,
    /// Bytes asked for by live allocations, before rounding.
    pub requested_bytes: u64,
    pub segment_count: u64,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
}

impl AllocStats {
    /// The `alloc_*` views these counters stand for.
    pub fn views(&self) -> ViewSet {
        ViewSet::default()
            .with(View::AllocAllocated, self.allocated_bytes)
            .with(View::AllocReserved, self.reserved_bytes)
            .with(View::AllocActive, self.active_bytes)
            .with(View::AllocInactiveSplit, self.inactive_split_bytes)
            .with(View::AllocLargestFree, self.largest_free_bytes)
            .with(View::AllocRequested, self.requested_bytes)
    }
}

/// Which allocator serves a workload's requests.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AllocatorKind {
    /// One `cuMemAlloc` per request.
    Direct,
    /// The driver's stream-ordered pool (`cuMemAllocFromPoolAsync`).
    Pool,
    /// A model of PyTorch's native caching allocator.
    Caching,
}

impl AllocatorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AllocatorKind::Direct => "direct",
            AllocatorKind::Pool => "pool",
            AllocatorKind::Caching => "caching",
        }
    }
}

impl std::fmt::Display for AllocatorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a workload's memory is obtained.
pub trait Allocator: Send {
    fn kind(&self) -> AllocatorKind;

    fn allocate(
        &mut self,
        dev: &mut dyn AllocDevice,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError>;

    fn free(&mut self, dev: &mut dyn AllocDevice, ptr: DevPtr) -> Result<(), AllocError>;

    /// The block is also used on `stream` (PyTorch's `record_stream`): a later free must wait
    /// for that stream before the block is reused.
    fn record_stream(
        &mut self,
        _dev: &mut dyn AllocDevice,
        _ptr: DevPtr,
        _stream: StreamId,
    ) -> Result<(), AllocError> {
        Ok(())
    }

    /// Returns unused cached memory to the driver; returns the bytes released.
    fn empty_cache(&mut self, _dev: &mut dyn AllocDevice) -> Result<u64, AllocError> {
        Ok(0)
    }

    /// Brings counters up to date after something outside the allocator's calls (a
    /// synchronize, a trim) may have changed what it holds.
    fn refresh(&mut self, _dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        Ok(())
    }

    /// Completes every deferred free whose stream work is done, as the allocator's next
    /// allocation would (PyTorch's `process_events`). A replay calls it before the allocator
    /// leaves the device it was driven through, so no event of that device is left behind.
    fn complete_pending_frees(&mut self, _dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        Ok(())
    }

    fn stats(&self) -> AllocStats;

    /// `stats()`'s allocated, reserved and requested bytes alone: what a replay follows after
    /// every event (an allocator whose other figures cost a search answers this without it).
    fn byte_counters(&self) -> (u64, u64, u64) {
        let s = self.stats();
        (s.allocated_bytes, s.reserved_bytes, s.requested_bytes)
    }

    /// The size the allocator would account for a request of `bytes`.
    fn rounded_size(&self, bytes: u64) -> u64;

    /// Device memory a request of `bytes` may newly take from the driver (a whole segment for
    /// a caching allocator), for the check that keeps a floor of free memory.
    fn driver_bytes_for(&self, bytes: u64) -> u64 {
        self.rounded_size(bytes)
    }

    /// The largest free block inside held memory that a request of `bytes` could use.
    fn largest_free_for(&self, _bytes: u64) -> u64 {
        0
    }

    /// Frees every block and returns all held memory to the driver.
    fn release_all(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError>;
}

/// Which allocator a workload uses, with its settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum AllocatorSpec {
    Direct,
    Pool(PoolConfig),
    /// PyTorch's caching allocator with its settings (`caching::CachingConfig::parse`).
    Caching(caching::CachingConfig),
}

impl AllocatorSpec {
    pub fn kind(&self) -> AllocatorKind {
        match self {
            AllocatorSpec::Direct => AllocatorKind::Direct,
            AllocatorSpec::Pool(_) => AllocatorKind::Pool,
            AllocatorSpec::Caching(_) => AllocatorKind::Caching,
        }
    }

    /// Builds the allocator (configuring the device's pool where it needs one).
    pub fn build(&self, dev: &mut dyn AllocDevice) -> Result<Box<dyn Allocator>, AllocError> {
        Ok(match self {
            AllocatorSpec::Direct => Box::new(direct::DirectAllocator::default()),
            AllocatorSpec::Pool(cfg) => {
                pool::pool_of(dev)?
                    .pool_configure(*cfg)
                    .map_err(AllocError::Device)?;
                Box::new(pool::PoolAllocator::default())
            }
            AllocatorSpec::Caching(cfg) => {
                Box::new(caching::CachingAllocator::new(cfg.clone(), dev)?)
            }
        })
    }
}

/// The allocator and its settings for people: `direct`, `pool (release threshold …)`,
/// `caching (max_split_size_mb:128)`.
impl std::fmt::Display for AllocatorSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocatorSpec::Direct => f.write_str("direct"),
            AllocatorSpec::Pool(c) => write!(
                f,
                "pool (release threshold {} bytes, opportunistic reuse {}, internal dependencies {})",
                c.release_threshold_bytes, c.reuse_opportunistic, c.reuse_internal_dependencies
            ),
            AllocatorSpec::Caching(c) if c.to_string().is_empty() => f.write_str("caching"),
            AllocatorSpec::Caching(c) => write!(f, "caching ({c})"),
        }
    }
}

/// Frees every pointer in address order, going on past errors; returns the first error.
pub(crate) fn free_each(
    alloc: &mut dyn Allocator,
    dev: &mut dyn AllocDevice,
    mut ptrs: Vec<DevPtr>,
) -> Result<(), AllocError> {
    ptrs.sort_unstable();
    let mut first = None;
    for p in ptrs {
        if let Err(e) = alloc.free(dev, p) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Maps a device error to an allocator error, tagging an OOM with the request.
pub(crate) fn device_oom(
    e: DeviceError,
    bytes: u64,
    rounded: u64,
    pool: &str,
    stream: StreamId,
) -> AllocError {
    match e {
        DeviceError::OutOfMemory { requested_bytes } => {
            AllocError::OutOfMemory(Box::new(OomRequest {
                requested_bytes: bytes,
                rounded_bytes: rounded,
                driver_request_bytes: requested_bytes,
                pool: pool.to_string(),
                stream,
                retries: Vec::new(),
            }))
        }
        other => AllocError::Device(other),
    }
}
