//! The action handlers: one workload action turned into device and allocator calls.
//!
//! A handler sees only what it acts on (`Target`): the device, the allocator, what the run
//! holds, and the floor of free memory it must keep. It returns what it did (`Done`) or how
//! it failed (`Failure`); the step loop (`run::steps`) owns everything else — the reading
//! after the action, the event row, the OOM evidence, the latency histograms.

mod graphs;
mod kernels;
mod memory;
pub(crate) use tenant::TENANT_START_NS;
mod streams;
mod tenant;

pub(crate) use graphs::GraphRun;

use crate::alloc::{AllocError, Allocator, OomRequest};
use crate::device::{Device, DeviceError, Mismatch, StreamId};
use crate::run::TenantLaunch;
use crate::run::holdings::Holdings;
use crate::units::Bytes;
use crate::workload::Action;

/// What an action acts on.
pub(crate) struct Target<'a> {
    pub dev: &'a mut dyn Device,
    pub alloc: &'a mut dyn Allocator,
    pub held: &'a mut Holdings,
    pub floor: Floor,
    /// How `tenant` steps start a real process; `None` on the simulator.
    pub tenant_launch: Option<&'a TenantLaunch>,
    /// Set by Ctrl-C: a step that loops on the host (a graph replayed `times` over) checks it.
    pub interrupted: &'a std::sync::atomic::AtomicBool,
    /// The phase and step the action belongs to (graph records name them).
    pub phase: &'a str,
    pub step: &'a str,
}

/// The free memory a step must leave, unless OOM is allowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Floor {
    pub keep_free_bytes: u64,
    pub allow_oom: bool,
}

/// What one action did, for its row in `events.csv`.
#[derive(Debug, Default)]
pub(crate) struct Done {
    pub requested_bytes: Option<u64>,
    pub size_bytes: Option<u64>,
    pub latency_ns: u64,
    pub detail: String,
    /// A `verify` that found wrong words.
    pub mismatch: Option<Mismatch>,
    /// A kernel raised the context's stack reservation (memory the context keeps).
    pub stack_raised: bool,
}

impl Done {
    pub fn timed(latency_ns: u64) -> Done {
        Done {
            latency_ns,
            ..Done::default()
        }
    }
}

/// How an action failed.
pub(crate) enum Failure {
    Oom {
        request: Box<OomRequest>,
        latency_ns: u64,
    },
    /// The step would go below the free-memory floor; it was not run.
    Floor(String),
    /// Ctrl-C (or SIGTERM) during a step that checks for it: what it did so far.
    Interrupted(String),
    Error(String),
}

impl From<DeviceError> for Failure {
    fn from(e: DeviceError) -> Self {
        Failure::Error(e.to_string())
    }
}

impl From<AllocError> for Failure {
    fn from(e: AllocError) -> Self {
        match e {
            AllocError::OutOfMemory(request) => Failure::Oom {
                request,
                latency_ns: 0,
            },
            other => Failure::Error(other.to_string()),
        }
    }
}

impl Failure {
    /// A device OOM outside any allocator (a kernel's stack, the graph allocator), as the OOM
    /// path records it; other errors pass through.
    pub fn from_driver(e: DeviceError, stream: StreamId, pool: String, latency_ns: u64) -> Failure {
        match e {
            DeviceError::OutOfMemory { requested_bytes } => Failure::Oom {
                request: Box::new(OomRequest {
                    requested_bytes,
                    rounded_bytes: requested_bytes,
                    driver_request_bytes: requested_bytes,
                    pool,
                    stream,
                    retries: vec![],
                }),
                latency_ns,
            },
            other => other.into(),
        }
    }
}

impl Target<'_> {
    /// Checks the free-memory floor before a step that may take `need_bytes` from the driver.
    pub fn check_floor(&mut self, need_bytes: u64) -> Result<(), Failure> {
        if self.floor.allow_oom {
            return Ok(());
        }
        let mem = self.dev.mem_info()?;
        if mem.free_bytes < need_bytes.saturating_add(self.floor.keep_free_bytes) {
            return Err(Failure::Floor(format!(
                "this step may take {} from the driver with {} free, which would leave less than the {} floor; pass --allow-oom to go past free memory",
                Bytes(need_bytes),
                Bytes(mem.free_bytes),
                Bytes(self.floor.keep_free_bytes)
            )));
        }
        Ok(())
    }

    /// The address and size of a live allocation, as a failure when it is not live.
    fn lookup(&self, name: &str) -> Result<(u64, u64), Failure> {
        self.held
            .ptr_of(name)
            .map_err(|e| Failure::Error(e.to_string()))
    }
}

/// Runs `action` on `stream`. Sleeps, device fills and group frees are the step loop's.
pub(crate) fn act(t: &mut Target, action: &Action, stream: StreamId) -> Result<Done, Failure> {
    match action {
        Action::Allocate {
            name, bytes, via, ..
        } => memory::allocate(t, name, *bytes, *via, stream),
        Action::Free { name } => memory::free(t, name),
        Action::Touch { .. }
        | Action::Fill { .. }
        | Action::Verify { .. }
        | Action::Corrupt { .. }
        | Action::Copy { .. }
        | Action::Triad { .. }
        | Action::Spin { .. }
        | Action::Stack { .. } => kernels::act(t, action, stream),
        Action::Synchronize { .. }
        | Action::Trim { .. }
        | Action::EmptyCache
        | Action::RecordStream { .. } => streams::act(t, action, stream),
        Action::Tenant { bytes, duration_ns } => tenant::start(t, *bytes, *duration_ns),
        a if a.is_graph() => graphs::act(t, a, stream),
        Action::Sleep { .. } | Action::FillDevice { .. } | Action::FreeGroup { .. } => {
            Err(Failure::Error(format!(
                "internal: {} is run by the step loop, not a handler",
                action.op()
            )))
        }
        other => Err(Failure::Error(format!(
            "internal: no handler for {}",
            other.op()
        ))),
    }
}
