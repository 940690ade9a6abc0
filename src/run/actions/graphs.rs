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

use crate::device::{DevPtr, Device, DeviceError, GraphId, GraphMemUsage, StreamId};
use crate::record::{View, ViewSet};
use crate::report::graphs::{GraphRecord, GraphsSummary, TrimRecord, pattern_report};
use crate::run::actions::{Done, Failure, Target};
use crate::units::{Bytes, SignedBytes};
use crate::workload::{Action, Workload};

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
    /// allocation in the device's granularity (`alloc_rounding`), for the free-memory floor at the first launch).
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

impl GraphRun {
    /// Reads the graph attributes once before the first phase when the workload has graphs.
    pub(crate) fn start(&mut self, wl: &Workload, dev: &mut dyn Device) -> anyhow::Result<()> {
        if wl.facts.uses_graphs {
            self.enabled = true;
            self.usage = Some(
                dev.graph_mem_usage()
                    .context("reading the graph memory attributes failed")?,
            );
        }
        Ok(())
    }

    /// Ends a capture a stopped run left open, so that releasing memory (which synchronizes)
    /// is not refused; the half-recorded graph is destroyed.
    pub(crate) fn abort_capture(&mut self, dev: &mut dyn Device) -> Result<(), DeviceError> {
        let Some((stream, _, _)) = self.capture.take() else {
            return Ok(());
        };
        let (id, _) = dev.graph_end_capture(stream)?;
        dev.graph_destroy(id)
    }

    fn id(&self, graph: &str) -> Result<GraphId, Failure> {
        self.ids
            .get(graph)
            .copied()
            .ok_or_else(|| Failure::Error(format!("graph {graph:?} does not exist")))
    }

    fn record_mut(&mut self, graph: &str) -> Option<&mut GraphRecord> {
        let i = *self.current.get(graph)?;
        self.records.get_mut(i)
    }
}

/// An out-of-memory from a graph call, as the OOM path records it.
fn graph_oom(e: DeviceError, stream: StreamId, what: &str, latency_ns: u64) -> Failure {
    Failure::from_driver(e, stream, format!("graph ({what})"), latency_ns)
}

/// Runs one graph action, measuring device free around it.
pub(super) fn act(t: &mut Target, action: &Action, stream: StreamId) -> Result<Done, Failure> {
    let free_before = t.dev.mem_info()?.free_bytes;
    let reserved_before = t.held.graphs.usage.map_or(0, |u| u.reserved_current_bytes);
    let t0 = t.dev.now_ns();
    let out = call(t, action, stream, t0);
    let latency_ns = t.dev.now_ns() - t0;
    // The "after" reading is of the work done, not of work still queued: launches, uploads
    // and frees of graph memory are stream-ordered.
    if out.is_ok() {
        settle(t, action, stream)?;
    }
    if let Ok(u) = t.dev.graph_mem_usage() {
        t.held.graphs.usage = Some(u);
    }
    let mut done = out?;
    done.latency_ns = latency_ns;
    let free_after = t.dev.mem_info()?.free_bytes;
    let reserved_after = t.held.graphs.usage.map_or(0, |u| u.reserved_current_bytes);
    let dropped = drop_bytes(free_before, free_after);
    let grown = reserved_after as i64 - reserved_before as i64;
    let phase = t.phase.to_string();
    let graphs = &mut t.held.graphs;
    match action {
        Action::BeginCapture { graph, tag, .. } => {
            // The baseline is after the call: on a GPU, beginning the first capture loads
            // the kernels first, which is context memory, not the graph's.
            let rec = GraphRecord {
                graph: graph.clone(),
                phase,
                step: t.step.to_string(),
                stream: action.stream().unwrap_or("main").to_string(),
                pattern: tag.as_ref().map(|t| t.pattern.clone()),
                batch_size: tag.as_ref().map(|t| t.batch_size),
                sample: tag.as_ref().is_some_and(|t| t.sample),
                device_free_before_capture_bytes: free_after,
                ..GraphRecord::default()
            };
            graphs.records.push(rec);
            let i = graphs.records.len() - 1;
            graphs.current.insert(graph.clone(), i);
        }
        Action::EndCapture { graph, .. } => {
            let before = graphs
                .record_mut(graph)
                .map(|r| r.device_free_before_capture_bytes);
            if let Some(r) = graphs.record_mut(graph) {
                r.capture_bytes = before.map(|b| drop_bytes(b, free_after));
            }
        }
        Action::Instantiate { graph, auto_free } => {
            if let Some(r) = graphs.record_mut(graph) {
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
            let (times, first) = match action {
                Action::Replay { times, first, .. } => (*times as u64, *first),
                _ => (0, false),
            };
            if let Some(r) = graphs.record_mut(graph) {
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
            let what = match (action, first) {
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
            if let Some(r) = graphs.record_mut(graph) {
                r.destroyed = true;
                r.destroy_returned_bytes = Some(-dropped);
            }
            graphs.current.remove(graph);
            graphs.ids.remove(graph);
            done.detail = format!(
                "device free {}; the graph pool keeps {} reserved until trimmed",
                SignedBytes(-dropped as i128),
                Bytes(reserved_after)
            );
        }
        Action::TrimGraphMemory => {
            graphs.trims.push(TrimRecord {
                phase,
                step: t.step.to_string(),
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
fn settle(t: &mut Target, action: &Action, stream: StreamId) -> Result<(), Failure> {
    let capturing = t.held.graphs.capture.is_some();
    match action {
        Action::Upload { .. } | Action::Replay { .. } => t.dev.stream_synchronize(stream)?,
        Action::GraphFree { .. } if !capturing => t.dev.stream_synchronize(stream)?,
        _ => {}
    }
    Ok(())
}

/// Launches between two looks at the Ctrl-C flag during a replay (a few milliseconds of host
/// time on any backend).
const LAUNCHES_PER_CHECK: u64 = 256;

/// Launches graph `id` `times` over, stopping early when interrupted.
fn replay(
    t: &mut Target,
    id: GraphId,
    stream: StreamId,
    times: u64,
    t0: u64,
) -> Result<(), Failure> {
    for i in 0..times {
        if i % LAUNCHES_PER_CHECK == 0 && t.interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Failure::Interrupted(format!(
                "interrupted after {i} of {times} launches"
            )));
        }
        let r = t.dev.graph_launch(id, stream);
        r.map_err(|e| graph_oom(e, stream, "launch", t.dev.now_ns() - t0))?;
    }
    Ok(())
}

/// The device call behind one graph action.
fn call(t: &mut Target, action: &Action, stream: StreamId, t0: u64) -> Result<Done, Failure> {
    match action {
        Action::BeginCapture { .. } => {
            t.dev.graph_begin_capture(stream)?;
            t.held.graphs.capture = Some((stream, 0, 0));
            Ok(Done::timed(0))
        }
        Action::GraphAllocate { name, bytes, .. } => {
            let ptr = t.dev.graph_malloc(*bytes, stream)?;
            t.held.graphs.allocs.insert(name.clone(), (ptr, *bytes));
            if let Some((_, now, peak)) = &mut t.held.graphs.capture {
                *now += t.dev.alloc_rounding().graph_bytes(*bytes);
                *peak = (*peak).max(*now);
            }
            Ok(Done {
                requested_bytes: Some(*bytes),
                detail: format!("allocation node at {ptr:#x}"),
                ..Done::timed(0)
            })
        }
        Action::GraphFree { name, .. } => {
            let (ptr, bytes) = t
                .held
                .graphs
                .ptr_of(name)
                .ok_or_else(|| Failure::Error(format!("{name:?} is not a graph allocation")))?;
            t.dev.graph_free(ptr, stream)?;
            if let Some((_, now, _)) = &mut t.held.graphs.capture {
                *now = now.saturating_sub(t.dev.alloc_rounding().graph_bytes(bytes));
            }
            Ok(Done {
                requested_bytes: Some(bytes),
                ..Done::timed(0)
            })
        }
        Action::EndCapture { graph, .. } => {
            let (id, shape) = t.dev.graph_end_capture(stream)?;
            t.held.graphs.ids.insert(graph.clone(), id);
            if let Some((_, _, peak)) = t.held.graphs.capture.take() {
                t.held.graphs.peaks.insert(graph.clone(), peak);
            }
            if let Some(r) = t.held.graphs.record_mut(graph) {
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
            let id = t.held.graphs.id(graph)?;
            let r = t.dev.graph_instantiate(id, *auto_free);
            r.map_err(|e| graph_oom(e, stream, "executable", t.dev.now_ns() - t0))?;
            Ok(Done::timed(0))
        }
        Action::Upload { graph, .. } | Action::Replay { graph, .. } => {
            let id = t.held.graphs.id(graph)?;
            let first_map = t
                .held
                .graphs
                .current
                .get(graph)
                .is_some_and(|i| t.held.graphs.records[*i].first_map_bytes.is_none());
            if first_map {
                let need = t.held.graphs.peaks.get(graph).copied().unwrap_or(0);
                t.check_floor(need)?;
            }
            match action {
                Action::Upload { .. } => {
                    let r = t.dev.graph_upload(id, stream);
                    r.map_err(|e| graph_oom(e, stream, "upload", t.dev.now_ns() - t0))?
                }
                Action::Replay { times, .. } => replay(t, id, stream, u64::from(*times), t0)?,
                _ => {}
            }
            Ok(Done::timed(0))
        }
        Action::DestroyGraph { graph } => {
            let id = t.held.graphs.id(graph)?;
            // Launches still running keep the executable alive: destroy after them.
            t.dev.synchronize()?;
            t.dev.graph_destroy(id)?;
            Ok(Done::timed(0))
        }
        Action::TrimGraphMemory => {
            // A trim returns only memory no graph uses now: frees still queued must land.
            t.dev.synchronize()?;
            t.dev.graph_mem_trim()?;
            Ok(Done::timed(0))
        }
        Action::GraphsReport(spec) => {
            let report = pattern_report(spec, &t.held.graphs.records).map_err(|e| {
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
            t.held.graphs.patterns.push(report);
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
