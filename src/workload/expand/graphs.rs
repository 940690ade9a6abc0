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
use crate::workload::parse::{WorkloadError, parse_step_at};
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

#[derive(Debug, Clone, PartialEq)]
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

#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct GraphBook {
    graphs: BTreeMap<String, GraphInfo>,
    destroyed: BTreeSet<String>,
    capture: Option<OpenCapture>,
    /// Allocated by a graph that has not been launched since: name → (graph, the name).
    pending: BTreeMap<String, (String, LiveName)>,
    /// Live names a graph allocated: name → (graph, the stream its free is ordered on).
    owners: BTreeMap<String, (String, String)>,
    /// Names allocated outside the graphs whose kernels use them: name → those graphs (a free
    /// looks up its own name, never every graph).
    users: BTreeMap<String, BTreeSet<String>>,
}

impl GraphBook {
    /// Whether a graph allocates, owns or uses a name that `prefix` begins.
    pub(super) fn touches(&self, prefix: &str) -> bool {
        fn any<V>(m: &BTreeMap<String, V>, prefix: &str) -> bool {
            m.range(prefix.to_string()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(prefix))
        }
        self.capture.is_some()
            || any(&self.pending, prefix)
            || any(&self.owners, prefix)
            || any(&self.users, prefix)
    }

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
        let Some(graphs) = self.users.get(name) else {
            return;
        };
        for g in graphs {
            if let Some(info) = self.graphs.get_mut(g)
                && info.stale.is_none()
            {
                info.stale = Some(name.to_string());
            }
        }
    }

    fn add_graph(&mut self, graph: &str, info: GraphInfo) {
        for n in &info.uses {
            self.users
                .entry(n.clone())
                .or_default()
                .insert(graph.to_string());
        }
        self.graphs.insert(graph.to_string(), info);
    }

    fn remove_graph(&mut self, graph: &str) {
        let Some(info) = self.graphs.remove(graph) else {
            return;
        };
        for n in &info.uses {
            if let Some(users) = self.users.get_mut(n) {
                users.remove(graph);
                if users.is_empty() {
                    self.users.remove(n);
                }
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
    let op = t.get("op").and_then(|o| o.as_str()).unwrap_or("");
    let repeat = op == "repeat";
    if STREAM_OPS.contains(&op) && !t.contains_key("stream") {
        t.insert("stream".into(), toml::Value::String(stream.into()));
    }
    if repeat && let Some(toml::Value::Array(inner)) = t.get_mut("steps") {
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

impl Emitter<'_, '_, '_> {
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
            let bytes = self.names.bytes(size);
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
        let mut parsed = Vec::with_capacity(steps.len());
        for (k, v) in steps.iter().enumerate() {
            let mut v = v.clone();
            patch_stream(&mut v, stream);
            let place = || format!("{outer}, inner step {}", k + 1);
            parsed.push(parse_step_at(self.names.file, place, v)?);
        }
        self.capture(graph, stream, None, parsed, &|k, s| {
            format!("{outer}, inner step {} ({})", k + 1, s.op())
        })
    }

    pub(super) fn capture(
        &mut self,
        graph: &str,
        stream: &str,
        tag: Option<GraphTag>,
        steps: Vec<Step>,
        place_of: &dyn Fn(usize, &Step) -> String,
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
        for (k, s) in steps.iter().enumerate() {
            self.place = place_of(k, s);
            let r = self.step(s);
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
        book.add_graph(
            graph,
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
            book.remove_graph(&t);
            book.destroyed.insert(t.clone());
            // Allocations of a graph that never ran never existed; live ones stay live.
            book.pending.retain(|_, (g, _)| *g != t);
            self.push(Action::DestroyGraph { graph: t })?;
        }
        Ok(())
    }
}

#[path = "graph_launch.rs"]
mod launch;

#[cfg(test)]
#[path = "graphs_tests.rs"]
mod tests;
