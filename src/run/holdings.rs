//! What a run holds on the device, by the names the workload gave it: live allocations (with
//! the stream each was made on), streams, tenant processes and CUDA graphs, and the harness's
//! own views they add up to.

use std::collections::{HashMap, HashSet};

use anyhow::Context;

use crate::alloc::{AllocStats, AllocatorKind};
use crate::device::{DevPtr, Device, StreamId};
use crate::record::{View, ViewSet};
use crate::run::GraphRun;
use crate::tenant::TenantProcess;
use crate::workload::Via;

/// One live allocation of the workload.
#[derive(Debug, Clone)]
pub(crate) struct LiveAlloc {
    pub ptr: DevPtr,
    pub bytes: u64,
    pub via: Via,
    /// The stream it was allocated on: its free is ordered there.
    pub stream: String,
}

#[derive(Default)]
pub(crate) struct Holdings {
    live: HashMap<String, LiveAlloc>,
    streams: HashMap<String, StreamId>,
    /// Bytes taken with `via = "driver"`, outside the allocator.
    pub driver_bytes: u64,
    /// Names whose allocation hit an OOM the workload continued past.
    failed: HashSet<String>,
    /// `headroom hold` children started by `tenant` steps; stopped and reaped at the end.
    pub tenants: Vec<TenantProcess>,
    /// CUDA graphs: handles, graph allocations, and what was measured.
    pub graphs: GraphRun,
}

impl Holdings {
    pub fn new() -> Holdings {
        Holdings {
            streams: HashMap::from([("main".to_string(), StreamId::MAIN)]),
            ..Default::default()
        }
    }

    /// The stream named `name`, created on first use.
    pub fn stream(&mut self, dev: &mut dyn Device, name: &str) -> anyhow::Result<StreamId> {
        if let Some(s) = self.streams.get(name) {
            return Ok(*s);
        }
        let s = dev
            .create_stream()
            .with_context(|| format!("cannot create stream {name:?}"))?;
        self.streams.insert(name.to_string(), s);
        Ok(s)
    }

    /// The workload's name for a stream the run created.
    pub fn stream_name(&self, id: StreamId) -> String {
        self.streams
            .iter()
            .find(|(_, s)| **s == id)
            .map_or_else(|| format!("stream {}", id.0), |(n, _)| n.clone())
    }

    /// Address and requested size of a live allocation or graph allocation.
    pub fn ptr_of(&self, name: &str) -> anyhow::Result<(DevPtr, u64)> {
        self.live
            .get(name)
            .map(|a| (a.ptr, a.bytes))
            .or_else(|| self.graphs.ptr_of(name))
            .with_context(|| format!("{name:?} is not live"))
    }

    pub fn live(&self, name: &str) -> Option<&LiveAlloc> {
        self.live.get(name)
    }

    pub fn insert(&mut self, name: String, a: LiveAlloc) {
        if a.via == Via::Driver {
            self.driver_bytes += a.bytes;
        }
        self.live.insert(name, a);
    }

    pub fn remove(&mut self, name: &str) -> Option<LiveAlloc> {
        let a = self.live.remove(name)?;
        if a.via == Via::Driver {
            self.driver_bytes -= a.bytes;
        }
        Some(a)
    }

    /// The live members of group `group` (`w[0]`, `w[1]`, …), by index.
    pub fn members(&self, group: &str) -> Vec<(u64, String)> {
        let mut m: Vec<(u64, String)> = self
            .live
            .keys()
            .filter_map(|k| Some((crate::workload::member_index(group, k)?, k.clone())))
            .collect();
        m.sort();
        m
    }

    /// Every live allocation taken from the driver directly, by name.
    pub fn driver_allocations(&self) -> Vec<(String, DevPtr)> {
        let mut v: Vec<(String, DevPtr)> = self
            .live
            .iter()
            .filter(|(_, a)| a.via == Via::Driver)
            .map(|(n, a)| (n.clone(), a.ptr))
            .collect();
        v.sort();
        v
    }

    /// Forgets every allocation (after the device released them all).
    pub fn clear_allocations(&mut self) {
        self.live.clear();
        self.driver_bytes = 0;
    }

    /// Whether an earlier step's allocation of `name` failed (an OOM the workload continued
    /// past): steps on it are skipped.
    pub fn failed(&self, name: &str) -> bool {
        self.failed.contains(name)
    }

    pub fn set_failed(&mut self, name: &str, failed: bool) {
        if failed {
            self.failed.insert(name.to_string());
        } else {
            self.failed.remove(name);
        }
    }

    /// The harness-side views now (no device query): what the allocator and the driver
    /// allocations hold, and the graph attributes last read.
    pub fn views(&self, kind: AllocatorKind, s: &AllocStats) -> ViewSet {
        let mut v = s.views();
        v.set(View::OwnBytes, self.driver_bytes + s.reserved_bytes);
        if kind == AllocatorKind::Pool {
            v.set(View::PoolUsed, s.allocated_bytes);
            v.set(View::PoolReserved, s.reserved_bytes);
        }
        self.graphs.views(&mut v);
        v
    }
}
