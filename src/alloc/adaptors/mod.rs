//! Adaptors: allocators that wrap another allocator (their upstream, any `Box<dyn Allocator>`)
//! and add exactly one concern, as RMM's resource adaptors do.
//!
//! - `logging`: a CSV line per allocate, free and failure, with size, stream and time
//!   (headroom's own log format, which `alloc::replay` reads back); every run logs through it.
//!
//! Per-phase peaks, live allocations by name and the free-memory floor are the run's own
//! (`record`, `run::holdings`, the step loop), measured on every view and not only the
//! allocator's, so no adaptor repeats them. Everything an adaptor does not change is passed to
//! the upstream unchanged; it keeps the upstream's `kind`.

pub mod logging;

pub use logging::{LOG_HEADER, LoggingAdaptor};

/// Frees every live block of an adaptor's table through `free` (in address order), then asks
/// the upstream to release the rest. Returns the first error.
pub(crate) fn release_through<A: crate::alloc::Allocator + ?Sized>(
    this: &mut A,
    dev: &mut dyn crate::device::AllocDevice,
    mut live: Vec<crate::device::DevPtr>,
) -> Vec<crate::alloc::AllocError> {
    live.sort_unstable();
    live.into_iter()
        .filter_map(|p| this.free(dev, p).err())
        .collect()
}
