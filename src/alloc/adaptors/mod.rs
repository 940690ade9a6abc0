//! Adaptors: allocators that wrap another allocator (their upstream, any `Box<dyn Allocator>`)
//! and add exactly one concern, as RMM's resource adaptors do.
//!
//! - `statistics`: value, peak and total of bytes and allocations, in nested scopes so each
//!   phase has its own peak (RMM's `statistics_resource_adaptor`).
//! - `tracking`: every live allocation with its id and name (RMM's `tracking_resource_adaptor`).
//! - `limiting`: a cap on allocated bytes; a request past it is an out-of-memory with the
//!   evidence (RMM's `limiting_resource_adaptor`).
//! - `logging`: a CSV line per allocate, free and failure, with size, stream and time
//!   (headroom's own log format, which `alloc::replay` reads back).
//!
//! Everything an adaptor does not change is passed to the upstream unchanged, so adaptors
//! stack in any order. Each keeps the upstream's `kind`.

pub mod limiting;
pub mod logging;
pub mod statistics;
pub mod tracking;

pub use limiting::LimitingAdaptor;
pub use logging::{LOG_HEADER, LoggingAdaptor};
pub use statistics::{Counter, Counters, StatisticsAdaptor};
pub use tracking::{TrackedAllocation, TrackingAdaptor};

/// Implements the `Allocator` methods an adaptor leaves to its upstream (`self.upstream`).
/// Each adaptor writes `kind`, `allocate`, `free` and `stats` itself, plus any it lists after
/// the type (to write its own instead of forwarding).
macro_rules! forward_to_upstream {
    () => {
        fn kind(&self) -> crate::alloc::AllocatorKind {
            self.upstream.kind()
        }

        fn record_stream(
            &mut self,
            dev: &mut dyn $crate::device::Device,
            ptr: $crate::device::DevPtr,
            stream: $crate::device::StreamId,
        ) -> Result<(), $crate::alloc::AllocError> {
            self.upstream.record_stream(dev, ptr, stream)
        }

        fn refresh(
            &mut self,
            dev: &mut dyn $crate::device::Device,
        ) -> Result<(), $crate::alloc::AllocError> {
            self.upstream.refresh(dev)
        }

        fn rounded_size(&self, bytes: u64) -> u64 {
            self.upstream.rounded_size(bytes)
        }

        fn driver_bytes_for(&self, bytes: u64) -> u64 {
            self.upstream.driver_bytes_for(bytes)
        }

        fn largest_free_for(&self, bytes: u64) -> u64 {
            self.upstream.largest_free_for(bytes)
        }
    };
}

pub(crate) use forward_to_upstream;

/// Frees every live block of an adaptor's table through `free` (in address order), then asks
/// the upstream to release the rest. Returns the first error.
pub(crate) fn release_through<A: crate::alloc::Allocator + ?Sized>(
    this: &mut A,
    dev: &mut dyn crate::device::Device,
    mut live: Vec<crate::device::DevPtr>,
) -> Vec<crate::alloc::AllocError> {
    live.sort_unstable();
    live.into_iter()
        .filter_map(|p| this.free(dev, p).err())
        .collect()
}
