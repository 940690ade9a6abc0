//! Replays an allocation log against an allocator on a device: does this trace fit, and how
//! high does each memory view go?
//!
//! Two log formats are read, told apart by their header line:
//! - headroom's own (`t_ns,action,ptr,bytes,stream,detail`, written by the logging adaptor);
//! - RMM's `logging_resource_adaptor` (`Thread,Time,Action,Pointer,Size,Stream`; actions
//!   `allocate`, `free` or `deallocate`, and `allocate failure`).
//!
//! Addresses in the log are the original run's: each logged allocation is replayed with the
//! allocator under test and its address mapped to the new one. Streams are mapped likewise
//! (the log's stream 0 is the device's main stream; others are created on first use). Failure
//! lines of the log are counted and skipped. The replay stops at the first allocation the
//! allocator refuses: that is the answer "does not fit", with the evidence.
//!
//! Peaks are exact for the allocator's views (read after every event) and for `device_used`
//! at every event that changed the allocator's reservation; what other processes do between
//! those moments is not sampled.
//!
//! A log holds allocator calls only, not kernels: in a replay no stream has queued work, so a
//! free left pending by `record_stream` completes at the next allocation, whatever the pacing.
//!
//! A trace recorded by another allocator (a PyTorch snapshot, read by `crate::import::torch`)
//! replays through the same engine as a sequence of requests (`recorded`), with each request's
//! segment decisions compared to the recording's (`fidelity`); `whatif` replays it again and
//! again to find the smallest device it fits on and how other settings would have done.

mod engine;
pub mod fidelity;
mod parse;
pub mod placement;
pub mod recorded;
mod report;
mod trace_device;
pub mod whatif;

pub use fidelity::{Fidelity, SegmentOp, SegmentOpKind};
pub use recorded::{
    Observer, Outcome, Recorded, RecordedOptions, Request, RequestSource, replay_recorded,
};
pub use report::{BadRow, LogFormat, Peak, ReplayFailure, ReplayPeaks, ReplayReport};

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use serde::Serialize;

use crate::alloc::{AllocError, Allocator, AllocatorSpec};
use crate::device::DeviceError;
use crate::device::prelude::*;

/// RMM's header line.
pub const RMM_HEADER: [&str; 6] = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"];

/// What to do with a line that cannot be read (or contradicts the log, such as a double free).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRowPolicy {
    /// The first bad line is an error (`ReplayError::BadRow`).
    #[default]
    Stop,
    /// Bad lines are skipped and listed in the report (`ReplayReport::bad_rows`).
    Collect,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    pub on_bad_row: BadRowPolicy,
    /// Advance the device clock to follow the log's timestamps (so frees pending on busy
    /// streams complete as they did). Off: events follow each other as fast as the device goes.
    pub pace: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read {source_name}: {error}")]
    Io {
        source_name: String,
        error: io::Error,
    },
    #[error("{source_name}: {message}")]
    Format {
        source_name: String,
        message: String,
    },
    #[error("{source_name} line {line}: {message}")]
    BadRow {
        source_name: String,
        line: u64,
        message: String,
    },
    /// The allocator or the device failed other than by running out of memory.
    #[error("{source_name} line {line}: {error}")]
    Allocator {
        source_name: String,
        line: u64,
        error: AllocError,
    },
    #[error("cannot build the allocator: {0}")]
    Build(AllocError),
    #[error("cannot read the device: {0}")]
    Device(DeviceError),
}

/// Replays the log at `path` with a fresh allocator built from `spec` on `dev`; everything
/// is released at the end.
pub fn replay_file(
    path: &Path,
    spec: &AllocatorSpec,
    dev: &mut dyn AllocDevice,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|error| ReplayError::Io {
        source_name: name.clone(),
        error,
    })?;
    replay_reader(
        &name,
        BufReader::with_capacity(1 << 16, file),
        spec,
        dev,
        opts,
    )
}

/// Replays a log read from `input` (named `source_name` in messages) with a fresh allocator
/// built from `spec`; everything is released at the end.
pub fn replay_reader<R: Read>(
    source_name: &str,
    input: R,
    spec: &AllocatorSpec,
    dev: &mut dyn AllocDevice,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let mut alloc = spec.build(dev).map_err(ReplayError::Build)?;
    let result = replay_with(
        source_name,
        input,
        alloc.as_mut(),
        &spec.to_string(),
        dev,
        opts,
    );
    let released = alloc.release_all(dev);
    let report = result?;
    released.map_err(|error| ReplayError::Allocator {
        source_name: source_name.to_string(),
        line: 0,
        error,
    })?;
    Ok(report)
}

/// Replays a log against an allocator the caller built (with adaptors, for instance) and
/// still owns: nothing is released at the end. `allocator_name` is how the report names it.
pub fn replay_with<R: Read>(
    source_name: &str,
    input: R,
    alloc: &mut dyn Allocator,
    allocator_name: &str,
    dev: &mut dyn AllocDevice,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    engine::Replay::new(source_name, alloc, allocator_name, dev, opts)?.run(input)
}
