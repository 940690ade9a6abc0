//! CUDA graph steps (`capture`, `instantiate`, `upload`, `replay`, `destroy_graph`,
//! `trim_graph_memory`) and the `graphs` pattern, with the driver's rules checked before a run.
//!
//! The checks follow what the driver would refuse, so a bad workload stops here with its file,
//! phase and step instead of failing on the GPU: a capture on the legacy default stream, work
//! inside a capture on another stream or that the host must wait for, a free node for memory
//! no graph allocated, a replay of a graph never instantiated or already destroyed, a relaunch
//! without auto-free while the last launch's allocations are live, and a replay of a graph
//! whose captured kernels use memory freed since the capture.

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, Emitter, LiveName, check_name};
use crate::units::SizeSpec;
use crate::workload::action::GraphTag;
use crate::workload::parse::{WorkloadError, parse_step};
use crate::workload::step::{Step, ViaSpec};

/// Stream names that would mean the legacy default stream, which cannot be captured.
const LEGACY_STREAMS: &[&str] = &["default", "legacy", "null", "0"];

/// Ops whose `stream` a capture fills in when a step names none.
const STREAM_OPS: &[&str] = &["allocate", "touch", "fill", "copy", "triad", "spin"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Captured,
    Instantiated { auto_free: bool },
}

#[derive(Debug, Clone)]
struct GraphInfo {
    stream: String,
    state: State,
    /// Names it allocates and does not free: live after each launch.
    unfreed: Vec<(String, LiveName)>,
    /// Names allocated outside the graph that its kernels use.
    uses: BTreeSet<String>,
    /// Allocations of other graphs its free nodes free.
    frees: Vec<String>,
    /// A name it uses that was freed after the capture.
    stale: Option<String>,
    /// Launched since it was instantiated.
    launched: bool,
    last_stream: String,
}

#[derive(Debug, Clone)]
struct OpenCapture {
    graph: String,
    stream: String,
    /// The capture's allocation nodes, in order, and the same names for lookups (a capture
    /// of many nodes must not search a list per node).
    allocated: Vec<String>,
    allocated_set: std::collections::HashSet<String>,
    uses: BTreeSet<String>,
    frees: Vec<String>,
}

/// Graphs and graph-allocated names, walked in program order.
#[derive(Debug, Clone, Default)]
pub(super) struct GraphBook {
    graphs: BTreeMap<String, GraphInfo>,
    destroyed: BTreeSet<String>,
    capture: Option<OpenCapture>,
    /// Allocated by a graph that has not been launched since: name → (graph, the name).
    pending: BTreeMap<String, (String, LiveName)>,
    /// Live names a graph allocated: name → (graph, the stream its free is ordered on).
    owners: BTreeMap<String, (String, String)>,
}

impl GraphBook {
    pub(super) fn capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Why `name` is not usable although a graph allocates it.
    pub(super) fn why_not_live(&self, name: &str) -> Option<String> {
        self.pending.get(name).map(|(g, _)| {
            format!(
                "it is allocated by graph {g:?}, which has not been launched since it was captured (an allocation node takes memory only when the graph runs); replay the graph first"
            )
        })
    }

    /// `name` was freed: graphs whose kernels use it may not be replayed any more.
    pub(super) fn freed_outside(&mut self, name: &str) {
        for g in self.graphs.values_mut() {
            if g.uses.contains(name) && g.stale.is_none() {
                g.stale = Some(name.to_string());
            }
        }
    }

    /// Notes the names a kernel inside the capture in progress uses.
    pub(super) fn note_use(&mut self, action: &Action) {
        let Some(c) = self.capture.as_mut() else {
            return;
        };
        let names: Vec<&String> = match action {
            Action::Touch { name, .. } | Action::Fill { name, .. } => vec![name],
            Action::Copy { src, dst, .. } => vec![src, dst],
            Action::Triad { a, b, c, .. } => vec![a, b, c],
            _ => return,
        };
        for n in names {
            if !c.allocated_set.contains(n) {
                c.uses.insert(n.clone());
            }
        }
    }
}

/// Fills in the capture stream for steps that name none, inside `repeat`s too.
fn patch_stream(v: &mut toml::Value, stream: &str) {
    let Some(t) = v.as_table_mut() else {
        return;
    };
    let op = t
        .get("op")
        .and_then(|o| o.as_str())
        .unwrap_or("")
        .to_string();
    if STREAM_OPS.contains(&op.as_str()) && !t.contains_key("stream") {
        t.insert("stream".into(), toml::Value::String(stream.into()));
    }
    if op == "repeat"
        && let Some(toml::Value::Array(inner)) = t.get_mut("steps")
    {
        for s in inner {
            patch_stream(s, stream);
        }
    }
}

/// `g[b]` for a group `g`: the members of a graph group, by index.
fn members(graphs: &BTreeMap<String, GraphInfo>, group: &str) -> Vec<String> {
    let mut m: Vec<(u64, String)> = graphs
        .keys()
        .filter_map(|k| Some((crate::workload::member_index(group, k)?, k.clone())))
        .collect();
    m.sort();
    m.into_iter().map(|(_, k)| k).collect()
}

impl Emitter<'_, '_> {
    fn book(&mut self) -> &mut GraphBook {
        &mut self.names.graphs
    }

    /// Refuses, inside a capture, what the driver would not record into a graph.
    pub(super) fn capturable(&self, step: &Step) -> Result<(), WorkloadError> {
        let Some(c) = self.names.graphs.capture.as_ref() else {
            return Ok(());
        };
        let other_stream = |s: &str| {
            self.err(format!(
                "inside the capture of graph {:?} every step runs on its stream {:?}; this step names stream {s:?} (work on another stream is not part of the graph and not ordered with it)",
                c.graph, c.stream
            ))
        };
        match step {
            Step::Allocate {
                via: ViaSpec::Driver,
                ..
            } => Err(self.err(
                "inside a capture, allocate records an allocation node (cuMemAllocAsync); via = \"driver\" (cuMemAlloc) cannot be captured",
            )),
            Step::Allocate { stream, .. }
            | Step::Touch { stream, .. }
            | Step::Fill { stream, .. }
            | Step::Copy { stream, .. }
            | Step::Triad { stream, .. }
            | Step::Spin { stream, .. }
                if *stream != c.stream =>
            {
                Err(other_stream(stream))
            }
            Step::Allocate { .. }
            | Step::Free { .. }
            | Step::Touch { .. }
            | Step::Fill { .. }
            | Step::Copy { .. }
            | Step::Triad { .. }
            | Step::Spin { .. }
            | Step::Repeat { .. } => Ok(()),
            Step::Verify { .. } => Err(self.err(
                "verify reads its result back to the host, which a capture cannot record; verify after a replay",
            )),
            Step::Corrupt { .. } => Err(self.err(
                "corrupt writes a word from the host through the driver; it cannot be captured",
            )),
            Step::Sleep { .. } => {
                Err(self.err("sleep is host time; a capture records GPU work only"))
            }
            Step::Synchronize { .. } => Err(self.err(
                "synchronizing while a stream captures is refused by the driver (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidates the capture",
            )),
            Step::Capture { .. } | Step::Graphs { .. } => {
                Err(self.err("a capture cannot contain another capture"))
            }
            other => Err(self.err(format!("{} cannot be captured into a graph", other.op()))),
        }
    }

    /// `allocate` inside a capture: allocation nodes.
    pub(super) fn graph_allocate(
        &mut self,
        name: &str,
        size: &SizeSpec,
        count: u32,
    ) -> Result<(), WorkloadError> {
        // The capture's graph and stream only: the capture itself grows with every node.
        let Some((graph, stream)) = self
            .names
            .graphs
            .capture
            .as_ref()
            .map(|c| (c.graph.clone(), c.stream.clone()))
        else {
            return Err(self.err("an allocation node needs a capture"));
        };
        if count == 0 {
            return Err(self.err("count must be at least 1"));
        }
        self.bound(u64::from(count))?;
        if count > 1 {
            self.multi = true;
        }
        for i in 0..count {
            let n = if count == 1 {
                name.to_string()
            } else {
                crate::workload::member_name(name, i)
            };
            let bytes = size.resolve(self.names.total_bytes);
            // The same checks (and live set) as a plain allocation.
            self.names.check(
                &self.place,
                &Action::Allocate {
                    name: n.clone(),
                    bytes,
                    via: ViaSpec::Allocator,
                    stream: stream.clone(),
                },
            )?;
            if let Some(open) = self.book().capture.as_mut() {
                open.allocated.push(n.clone());
                open.allocated_set.insert(n.clone());
            }
            self.push(Action::GraphAllocate {
                name: n,
                bytes,
                graph: graph.clone(),
                stream: stream.clone(),
            })?;
        }
        Ok(())
    }

    /// `free`: a plain free, the free of a graph allocation a launch left live, or (inside a
    /// capture) a free node.
    pub(super) fn free_resolved(&mut self, targets: Vec<String>) -> Result<(), WorkloadError> {
        if targets.len() > 1 {
            self.multi = true;
        }
        for t in targets {
            let capture = self.names.graphs.capture.as_ref().map(|c| {
                (
                    c.graph.clone(),
                    c.stream.clone(),
                    c.allocated_set.contains(&t),
                )
            });
            if let Some((graph, stream, allocated_here)) = capture {
                if allocated_here {
                    self.names.live.remove(&t);
                } else if self.names.graphs.owners.contains_key(&t) {
                    // Freed by this graph's free node each time it runs.
                    if let Some(open) = self.book().capture.as_mut() {
                        open.frees.push(t.clone());
                    }
                } else {
                    return Err(self.err(format!(
                        "free of {t:?} inside the capture of graph {graph:?}: {t:?} was not allocated by a graph, and a free node can only free graph allocations (free it outside the capture, or allocate it inside)"
                    )));
                }
                self.push(Action::GraphFree { name: t, stream })?;
            } else if let Some((_, stream)) = self.book().owners.remove(&t) {
                self.names.live.remove(&t);
                self.book().freed_outside(&t);
                self.push(Action::GraphFree { name: t, stream })?;
            } else {
                self.push(Action::Free { name: t })?;
            }
        }
        Ok(())
    }

    /// A `capture` step as written: inner steps parsed with the capture stream filled in.
    pub(super) fn capture_written(
        &mut self,
        graph: &str,
        stream: &str,
        steps: &[toml::Value],
    ) -> Result<(), WorkloadError> {
        let outer = self.place.clone();
        let mut parsed = Vec::new();
        for (k, v) in steps.iter().enumerate() {
            let mut v = v.clone();
            patch_stream(&mut v, stream);
            let place = format!("{outer}, inner step {}", k + 1);
            let s = parse_step(self.names.file, &place, &v)?;
            parsed.push((format!("{place} ({})", s.op()), s));
        }
        self.capture(graph, stream, None, parsed)
    }

    pub(super) fn capture(
        &mut self,
        graph: &str,
        stream: &str,
        tag: Option<GraphTag>,
        steps: Vec<(String, Step)>,
    ) -> Result<(), WorkloadError> {
        check_name(self.names, &self.place, graph)?;
        if LEGACY_STREAMS.contains(&stream) {
            return Err(self.err(format!(
                "stream {stream:?} would be the legacy default stream, which cannot be captured (cuStreamBeginCapture refuses it); name a stream of your own (every named stream is non-blocking)"
            )));
        }
        if self.names.graphs.capturing() {
            return Err(self.err("a capture cannot contain another capture"));
        }
        if self.names.graphs.graphs.contains_key(graph) {
            return Err(self.err(format!(
                "graph {graph:?} already exists; destroy_graph it before capturing it again"
            )));
        }
        if steps.is_empty() {
            return Err(self.err("the capture has no steps"));
        }
        self.multi = true;
        self.push(Action::BeginCapture {
            graph: graph.into(),
            stream: stream.into(),
            tag,
        })?;
        self.book().capture = Some(OpenCapture {
            graph: graph.into(),
            stream: stream.into(),
            allocated: Vec::new(),
            allocated_set: Default::default(),
            uses: BTreeSet::new(),
            frees: Vec::new(),
        });
        let outer = self.place.clone();
        for (place, s) in steps {
            self.place = place;
            let r = self.step(&s);
            if r.is_err() {
                self.book().capture = None;
                return r;
            }
        }
        self.place = outer;
        let c = self.book().capture.take().expect("opened above");
        self.push(Action::EndCapture {
            graph: graph.into(),
            stream: stream.into(),
        })?;
        // What the graph allocates and does not free exists only once it runs.
        let mut unfreed = Vec::new();
        for n in &c.allocated {
            if let Some(l) = self.names.live.remove(n) {
                unfreed.push((n.clone(), l.clone()));
                self.book().pending.insert(n.clone(), (graph.into(), l));
            }
        }
        let book = self.book();
        book.destroyed.remove(graph);
        book.graphs.insert(
            graph.into(),
            GraphInfo {
                stream: stream.into(),
                state: State::Captured,
                unfreed,
                uses: c.uses,
                frees: c.frees,
                stale: None,
                launched: false,
                last_stream: stream.into(),
            },
        );
        Ok(())
    }

    fn no_graph(&self, graph: &str, op: &str) -> WorkloadError {
        if self.names.graphs.destroyed.contains(graph) {
            self.err(format!(
                "{op} of graph {graph:?}, which was destroyed; capture it again first"
            ))
        } else {
            self.err(format!(
                "{op} of graph {graph:?}, which has not been captured at this point"
            ))
        }
    }

    pub(super) fn instantiate(
        &mut self,
        graph: &str,
        auto_free: bool,
    ) -> Result<(), WorkloadError> {
        let Some(info) = self.names.graphs.graphs.get(graph) else {
            return Err(self.no_graph(graph, "instantiate"));
        };
        if info.state != State::Captured {
            return Err(self.err(format!(
                "graph {graph:?} is already instantiated; a graph with memory nodes has one executable at a time (destroy_graph it and capture it again)"
            )));
        }
        if let Some(info) = self.book().graphs.get_mut(graph) {
            info.state = State::Instantiated { auto_free };
            info.launched = false;
        }
        self.push(Action::Instantiate {
            graph: graph.into(),
            auto_free,
        })
    }

    /// The graph's capture stream, once it is instantiated.
    fn instantiated(&self, graph: &str, op: &str) -> Result<(String, bool), WorkloadError> {
        let Some(info) = self.names.graphs.graphs.get(graph) else {
            return Err(self.no_graph(graph, op));
        };
        match info.state {
            State::Captured => Err(self.err(format!(
                "{op} of graph {graph:?}, which is not instantiated; add an instantiate step before it"
            ))),
            State::Instantiated { auto_free } => Ok((info.stream.clone(), auto_free)),
        }
    }

    pub(super) fn upload(
        &mut self,
        graph: &str,
        stream: Option<&str>,
    ) -> Result<(), WorkloadError> {
        let (own, _) = self.instantiated(graph, "upload")?;
        self.push(Action::Upload {
            graph: graph.into(),
            stream: stream.unwrap_or(&own).into(),
        })
    }

    pub(super) fn replay(
        &mut self,
        graph: &str,
        times: u32,
        stream: Option<&str>,
    ) -> Result<(), WorkloadError> {
        let (own, auto_free) = self.instantiated(graph, "replay")?;
        if times == 0 {
            return Err(self.err("times must be at least 1"));
        }
        let info = self.names.graphs.graphs[graph].clone();
        if let Some(n) = &info.stale {
            return Err(self.err(format!(
                "graph {graph:?} uses {n:?}, which was freed after the capture: the graph still holds its old address, and a replay would touch freed memory"
            )));
        }
        for f in &info.frees {
            if !self.names.graphs.owners.contains_key(f) {
                return Err(self.err(format!(
                    "graph {graph:?} frees {f:?}, which is not a live graph allocation at this point"
                )));
            }
            if times > 1 {
                return Err(self.err(format!(
                    "graph {graph:?} frees {f:?} on every launch; replaying it {times} times would free it twice"
                )));
            }
        }
        let still_live: Vec<&str> = info
            .unfreed
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| {
                self.names
                    .graphs
                    .owners
                    .get(*n)
                    .is_some_and(|(g, _)| g == graph)
            })
            .collect();
        if !auto_free {
            if !still_live.is_empty() {
                return Err(self.err(format!(
                    "replay of graph {graph:?}: {} from its previous launch still live and it was instantiated without auto_free, so cuGraphLaunch would fail (CUDA_ERROR_INVALID_VALUE); free them first, or instantiate with auto_free = true",
                    if still_live.len() == 1 {
                        format!("{:?} is", still_live[0])
                    } else {
                        format!("{still_live:?} are")
                    }
                )));
            }
            if times > 1 && !info.unfreed.is_empty() {
                return Err(self.err(format!(
                    "replay of graph {graph:?} {times} times: it leaves {:?} live after each launch and was instantiated without auto_free, so the second launch would fail (CUDA_ERROR_INVALID_VALUE); instantiate with auto_free = true",
                    info.unfreed[0].0
                )));
            }
        }
        let stream = stream.unwrap_or(&own).to_string();
        for (n, l) in &info.unfreed {
            let ours = self
                .names
                .graphs
                .owners
                .get(n)
                .is_some_and(|(g, _)| g == graph);
            if self.names.live.contains_key(n) && !ours {
                return Err(self.err(format!(
                    "replay of graph {graph:?} would allocate {n:?} again, but that name is now another allocation; free it first"
                )));
            }
            let book = self.book();
            book.pending.remove(n);
            book.owners
                .insert(n.clone(), (graph.into(), stream.clone()));
            self.names.live.insert(n.clone(), l.clone());
        }
        for f in &info.frees {
            self.names.live.remove(f);
            let book = self.book();
            book.owners.remove(f);
            book.freed_outside(f);
        }
        let first = !info.launched;
        if let Some(g) = self.book().graphs.get_mut(graph) {
            g.launched = true;
            g.last_stream = stream.clone();
        }
        let replay = |times: u32, first: bool| Action::Replay {
            graph: graph.into(),
            stream: stream.clone(),
            times,
            first,
        };
        if first && times > 1 {
            self.multi = true;
            self.push(replay(1, true))?;
            self.push(replay(times - 1, false))
        } else {
            self.push(replay(times, first))
        }
    }

    pub(super) fn destroy_graph(&mut self, graph: &str) -> Result<(), WorkloadError> {
        let targets = if self.names.graphs.graphs.contains_key(graph) {
            vec![graph.to_string()]
        } else {
            members(&self.names.graphs.graphs, graph)
        };
        if targets.is_empty() {
            return Err(self.no_graph(graph, "destroy_graph"));
        }
        if targets.len() > 1 {
            self.multi = true;
        }
        for t in targets {
            let book = self.book();
            book.graphs.remove(&t);
            book.destroyed.insert(t.clone());
            // Allocations of a graph that never ran never existed; live ones stay live.
            book.pending.retain(|_, (g, _)| *g != t);
            self.push(Action::DestroyGraph { graph: t })?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "graphs_tests.rs"]
mod tests;
