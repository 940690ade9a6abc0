//! Running CUDA graph actions and measuring what each one did to device memory.
//!
//! Every graph action reads device free memory before and after itself and refreshes the
//! driver's graph memory attributes, which then fill `graph_used_bytes` and
//! `graph_reserved_bytes` in every reading. Per graph, the record keeps the capture, the
//! executable graph (the drop at instantiation), the allocation nodes made physical (the drop
//! and the graph pool's growth at the first upload or launch), the launches and what destroying
//! it gave back; a `graphs` pattern's report is computed from its graphs' records.

use std::collections::HashMap;

use anyhow::Context;

use crate::device::{DevPtr, DeviceError, GraphId, GraphMemUsage, StreamId};
use crate::record::{View, ViewSet};
use crate::report::graphs::{GraphRecord, GraphsSummary, TrimRecord, pattern_report};
use crate::run::Runner;
use crate::run::exec::{Done, Failure};
use crate::units::{Bytes, MIB, SignedBytes, round_up};
use crate::workload::{Action, Planned};

/// The run's graphs: handles by name, graph allocations by name, and what was measured.
#[derive(Debug, Default)]
pub(crate) struct GraphRun {
    /// The workload has graph steps: the graph views are read and the section reported.
    enabled: bool,
    ids: HashMap<String, GraphId>,
    /// Graph allocations by name: address and requested bytes.
    allocs: HashMap<String, (DevPtr, u64)>,
    usage: Option<GraphMemUsage>,
    records: Vec<GraphRecord>,
    /// Index in `records` of the graph alive under each name.
    current: HashMap<String, usize>,
    /// The capture in progress: its stream, the bytes live in it now and its peak (each
    /// allocation rounded to 2 MiB, for the free-memory floor at the first launch).
    capture: Option<(StreamId, u64, u64)>,
    peaks: HashMap<String, u64>,
    trims: Vec<TrimRecord>,
    patterns: Vec<crate::report::graphs::GraphPatternReport>,
}

impl GraphRun {
    /// The graph views now (none unless the workload has graph steps).
    pub(crate) fn views(&self, v: &mut ViewSet) {
        if let Some(u) = self.usage {
            v.set(View::GraphUsed, u.used_current_bytes);
            v.set(View::GraphReserved, u.reserved_current_bytes);
        }
    }

    /// A graph allocation's address and requested size.
    pub(crate) fn ptr_of(&self, name: &str) -> Option<(DevPtr, u64)> {
        self.allocs.get(name).copied()
    }

    /// Device memory the executables still alive took (measured at instantiation).
    pub(crate) fn live_exec_bytes(&self) -> u64 {
        self.current
            .values()
            .filter_map(|i| self.records[*i].exec_bytes)
            .map(|b| b.max(0) as u64)
            .sum()
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The summary section; `driver_usage` defaults to the latest reading of the attributes.
    pub(crate) fn summary(&self, driver_usage: Option<GraphMemUsage>) -> Option<GraphsSummary> {
        self.enabled.then(|| GraphsSummary {
            driver_usage: driver_usage.or(self.usage),
            graphs: self.records.clone(),
            trims: self.trims.clone(),
            patterns: self.patterns.clone(),
        })
    }
}

fn drop_bytes(before: u64, after: u64) -> i64 {
    before as i64 - after as i64
}

impl Runner<'_, '_> {
    /// Reads the graph attributes once before the first phase when the workload has graphs.
    pub(crate) fn graph_start(&mut self) -> anyhow::Result<()> {
        if self.wl.actions().any(|(_, a)| a.action.is_graph()) {
            self.graphs.enabled = true;
            self.graphs.usage = Some(
                self.dev
                    .graph_mem_usage()
                    .context("reading the graph memory attributes failed")?,
            );
        }
        Ok(())
    }

    /// Ends a capture a stopped run left open, so that releasing memory (which synchronizes)
    /// is not refused; the half-recorded graph is destroyed.
    pub(crate) fn graph_abort_capture(&mut self) -> Result<(), DeviceError> {
        let Some((stream, _, _)) = self.graphs.capture.take() else {
            return Ok(());
        };
        let (id, _) = self.dev.graph_end_capture(stream)?;
        self.dev.graph_destroy(id)
    }

    fn graph_id(&self, graph: &str) -> Result<GraphId, Failure> {
        self.graphs
            .ids
            .get(graph)
            .copied()
            .ok_or_else(|| Failure::Error(format!("graph {graph:?} does not exist")))
    }

    fn record_mut(&mut self, graph: &str) -> Option<&mut GraphRecord> {
        let i = *self.graphs.current.get(graph)?;
        self.graphs.records.get_mut(i)
    }

    /// An out-of-memory from a graph call, as the OOM path records it.
    fn graph_oom(e: DeviceError, stream: StreamId, what: &str, latency_ns: u64) -> Failure {
        match e {
            DeviceError::OutOfMemory { requested_bytes } => Failure::Oom {
                request: Box::new(crate::alloc::OomRequest {
                    requested_bytes,
                    rounded_bytes: requested_bytes,
                    driver_request_bytes: requested_bytes,
                    pool: format!("graph ({what})"),
                    stream,
                    retries: vec![],
                }),
                latency_ns,
            },
            other => other.into(),
        }
    }

    /// Runs one graph action, measuring device free around it.
    pub(super) fn graph_act(&mut self, p: &Planned, stream: StreamId) -> Result<Done, Failure> {
        let free_before = self.dev.mem_info()?.free_bytes;
        let reserved_before = self.graphs.usage.map_or(0, |u| u.reserved_current_bytes);
        let t0 = self.dev.now_ns();
        let out = self.graph_call(p, stream, t0);
        let latency_ns = self.dev.now_ns() - t0;
        // The "after" reading is of the work done, not of work still queued: launches, uploads
        // and frees of graph memory are stream-ordered.
        if out.is_ok() {
            self.settle_graph_work(&p.action, stream)?;
        }
        if let Ok(u) = self.dev.graph_mem_usage() {
            self.graphs.usage = Some(u);
        }
        let mut done = out?;
        done.latency_ns = latency_ns;
        let free_after = self.dev.mem_info()?.free_bytes;
        let reserved_after = self.graphs.usage.map_or(0, |u| u.reserved_current_bytes);
        let dropped = drop_bytes(free_before, free_after);
        let grown = reserved_after as i64 - reserved_before as i64;
        let phase = self.wl.phases[self.phase as usize].name.clone();
        match &p.action {
            Action::BeginCapture { graph, tag, .. } => {
                // The baseline is after the call: on a GPU, beginning the first capture loads
                // the kernels first, which is context memory, not the graph's.
                let rec = GraphRecord {
                    graph: graph.clone(),
                    phase,
                    step: p.label.clone(),
                    stream: p.action.stream().unwrap_or("main").to_string(),
                    pattern: tag.as_ref().map(|t| t.pattern.clone()),
                    batch_size: tag.as_ref().map(|t| t.batch_size),
                    sample: tag.as_ref().is_some_and(|t| t.sample),
                    device_free_before_capture_bytes: free_after,
                    ..GraphRecord::default()
                };
                self.graphs.records.push(rec);
                let i = self.graphs.records.len() - 1;
                self.graphs.current.insert(graph.clone(), i);
            }
            Action::EndCapture { graph, .. } => {
                let before = self
                    .record_mut(graph)
                    .map(|r| r.device_free_before_capture_bytes);
                if let Some(r) = self.record_mut(graph) {
                    r.capture_bytes = before.map(|b| drop_bytes(b, free_after));
                }
            }
            Action::Instantiate { graph, auto_free } => {
                if let Some(r) = self.record_mut(graph) {
                    r.auto_free = Some(*auto_free);
                    r.exec_bytes = Some(dropped);
                }
                done.size_bytes = Some(dropped.max(0) as u64);
                done.detail = format!(
                    "the executable graph took {} of device memory",
                    SignedBytes(dropped as i128)
                );
            }
            Action::Upload { graph, .. } | Action::Replay { graph, .. } => {
                let (times, first) = match &p.action {
                    Action::Replay { times, first, .. } => (*times as u64, *first),
                    _ => (0, false),
                };
                if let Some(r) = self.record_mut(graph) {
                    let first_map = r.first_map_bytes.is_none();
                    if first_map {
                        r.first_map_bytes = Some(dropped);
                        r.graph_reserved_growth_bytes = Some(grown);
                    }
                    r.launches += times;
                    if times > 0 {
                        r.device_free_after_launches_bytes = Some(free_after);
                    }
                }
                let what = match (&p.action, first) {
                    (Action::Upload { .. }, _) => "upload".to_string(),
                    (_, true) => "first launch".to_string(),
                    _ => format!("{times} steady replays"),
                };
                done.size_bytes = Some(dropped.max(0) as u64);
                done.detail = format!(
                    "{what}: device free {}, graph pool reserved {}",
                    SignedBytes(-dropped as i128),
                    SignedBytes(grown as i128)
                );
            }
            Action::DestroyGraph { graph } => {
                if let Some(r) = self.record_mut(graph) {
                    r.destroyed = true;
                    r.destroy_returned_bytes = Some(-dropped);
                }
                self.graphs.current.remove(graph);
                self.graphs.ids.remove(graph);
                done.detail = format!(
                    "device free {}; the graph pool keeps {} reserved until trimmed",
                    SignedBytes(-dropped as i128),
                    Bytes(reserved_after)
                );
            }
            Action::TrimGraphMemory => {
                self.graphs.trims.push(TrimRecord {
                    phase,
                    step: p.label.clone(),
                    graph_reserved_before_bytes: reserved_before,
                    graph_reserved_after_bytes: reserved_after,
                    released_bytes: -grown,
                    device_free_gain_bytes: -dropped,
                });
                done.size_bytes = Some((-grown).max(0) as u64);
                done.detail = format!(
                    "released {} of graph memory; device free {}",
                    SignedBytes(-grown as i128),
                    SignedBytes(-dropped as i128)
                );
            }
            _ => {}
        }
        Ok(done)
    }

    /// Waits for the stream-ordered work of a graph action before its "after" reading.
    fn settle_graph_work(&mut self, action: &Action, stream: StreamId) -> Result<(), Failure> {
        let capturing = self.graphs.capture.is_some();
        match action {
            Action::Upload { .. } | Action::Replay { .. } => self.dev.stream_synchronize(stream)?,
            Action::GraphFree { .. } if !capturing => self.dev.stream_synchronize(stream)?,
            _ => {}
        }
        Ok(())
    }

    /// The device call behind one graph action.
    fn graph_call(&mut self, p: &Planned, stream: StreamId, t0: u64) -> Result<Done, Failure> {
        let elapsed = |s: &Self| s.dev.now_ns() - t0;
        match &p.action {
            Action::BeginCapture { .. } => {
                self.dev.graph_begin_capture(stream)?;
                self.graphs.capture = Some((stream, 0, 0));
                Ok(Done::timed(0))
            }
            Action::GraphAllocate { name, bytes, .. } => {
                let ptr = self.dev.graph_malloc(*bytes, stream)?;
                self.graphs.allocs.insert(name.clone(), (ptr, *bytes));
                if let Some((_, now, peak)) = &mut self.graphs.capture {
                    *now += round_up(*bytes, 2 * MIB);
                    *peak = (*peak).max(*now);
                }
                Ok(Done {
                    requested_bytes: Some(*bytes),
                    detail: format!("allocation node at {ptr:#x}"),
                    ..Done::timed(0)
                })
            }
            Action::GraphFree { name, .. } => {
                let (ptr, bytes) = self
                    .graphs
                    .ptr_of(name)
                    .ok_or_else(|| Failure::Error(format!("{name:?} is not a graph allocation")))?;
                self.dev.graph_free(ptr, stream)?;
                if let Some((_, now, _)) = &mut self.graphs.capture {
                    *now = now.saturating_sub(round_up(bytes, 2 * MIB));
                }
                Ok(Done {
                    requested_bytes: Some(bytes),
                    ..Done::timed(0)
                })
            }
            Action::EndCapture { graph, .. } => {
                let (id, shape) = self.dev.graph_end_capture(stream)?;
                self.graphs.ids.insert(graph.clone(), id);
                if let Some((_, _, peak)) = self.graphs.capture.take() {
                    self.graphs.peaks.insert(graph.clone(), peak);
                }
                if let Some(r) = self.record_mut(graph) {
                    r.shape = shape;
                }
                Ok(Done {
                    requested_bytes: Some(shape.alloc_node_bytes),
                    detail: format!(
                        "{} kernel nodes, {} allocation nodes ({}), {} free nodes; {} stays live after each launch",
                        shape.kernel_nodes,
                        shape.alloc_nodes,
                        Bytes(shape.alloc_node_bytes),
                        shape.free_nodes,
                        Bytes(shape.unfreed_bytes)
                    ),
                    ..Done::timed(0)
                })
            }
            Action::Instantiate { graph, auto_free } => {
                let id = self.graph_id(graph)?;
                self.dev
                    .graph_instantiate(id, *auto_free)
                    .map_err(|e| Self::graph_oom(e, stream, "executable", elapsed(self)))?;
                Ok(Done::timed(0))
            }
            Action::Upload { graph, .. } | Action::Replay { graph, .. } => {
                let id = self.graph_id(graph)?;
                let first_map = self
                    .graphs
                    .current
                    .get(graph)
                    .is_some_and(|i| self.graphs.records[*i].first_map_bytes.is_none());
                if first_map {
                    let need = self.graphs.peaks.get(graph).copied().unwrap_or(0);
                    self.check_floor(need)?;
                }
                match &p.action {
                    Action::Upload { .. } => self
                        .dev
                        .graph_upload(id, stream)
                        .map_err(|e| Self::graph_oom(e, stream, "upload", elapsed(self)))?,
                    Action::Replay { times, .. } => {
                        for _ in 0..*times {
                            self.dev
                                .graph_launch(id, stream)
                                .map_err(|e| Self::graph_oom(e, stream, "launch", elapsed(self)))?;
                        }
                    }
                    _ => {}
                }
                Ok(Done::timed(0))
            }
            Action::DestroyGraph { graph } => {
                let id = self.graph_id(graph)?;
                // Launches still running keep the executable alive: destroy after them.
                self.dev.synchronize()?;
                self.dev.graph_destroy(id)?;
                Ok(Done::timed(0))
            }
            Action::TrimGraphMemory => {
                // A trim returns only memory no graph uses now: frees still queued must land.
                self.dev.synchronize()?;
                self.dev.graph_mem_trim()?;
                Ok(Done::timed(0))
            }
            Action::GraphsReport(spec) => {
                let report = pattern_report(spec, &self.graphs.records).map_err(|e| {
                    Failure::Error(format!("the graphs report of {:?}: {e}", spec.name))
                })?;
                let detail = format!(
                    "{} graphs cost {}; a linear extrapolation from batch sizes {} and {} captured alone predicted {} (error {}, {:+.2}%)",
                    report.graphs.len(),
                    SignedBytes(report.measured_total_bytes as i128),
                    spec.samples[0],
                    spec.samples[1],
                    SignedBytes(report.predicted_total_bytes as i128),
                    SignedBytes(report.error_bytes as i128),
                    report.error_percent
                );
                let measured = report.measured_total_bytes.max(0) as u64;
                self.graphs.patterns.push(report);
                Ok(Done {
                    size_bytes: Some(measured),
                    detail,
                    ..Done::timed(0)
                })
            }
            other => Err(Failure::Error(format!(
                "{} is not a graph action",
                other.op()
            ))),
        }
    }
}
