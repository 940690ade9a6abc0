//! Expanding steps into primitive actions, and checking every name's lifetime before a run.
//!
//! Patterns (`weights`, `activations`, `workspace`, `kv`) and `repeat` become plain allocate,
//! touch, sleep and free actions. Because a workload is deterministic, the set of live names at
//! every action is known in advance: freeing an unknown name, verifying a buffer never filled,
//! or allocating more than the device holds is caught here, before anything is allocated.

mod graphs;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::units::Bytes;
use crate::workload::parse::{FileWorkload, WorkloadError, parse_step};
use crate::workload::step::{ActivationMode, Count, OnOom, Step, ViaSpec};

use crate::workload::{Phase, Workload};

pub use crate::workload::step::ViaSpec as Via;
pub use graphs::{GraphTag, GraphsSpec};

/// A primitive action, with names resolved to single allocations.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Action {
    Allocate {
        name: String,
        bytes: u64,
        via: Via,
        stream: String,
    },
    Free {
        name: String,
    },
    Touch {
        name: String,
        stride_bytes: u64,
        stream: String,
    },
    Fill {
        name: String,
        seed: u32,
        stream: String,
    },
    Verify {
        name: String,
        seed: u32,
        stream: String,
    },
    Corrupt {
        name: String,
        offset_bytes: u64,
        value: u32,
    },
    Copy {
        src: String,
        dst: String,
        stream: String,
    },
    Triad {
        a: String,
        b: String,
        c: String,
        scalar: f32,
        stream: String,
    },
    Spin {
        duration_ns: u64,
        stream: String,
    },
    Sleep {
        duration_ns: u64,
    },
    Synchronize {
        stream: Option<String>,
    },
    Trim {
        keep_bytes: u64,
    },
    EmptyCache,
    RecordStream {
        name: String,
        stream: String,
    },
    Stack {
        frame_bytes: u64,
    },
    Tenant {
        bytes: u64,
        duration_ns: u64,
    },
    /// Allocates `name[0]`, `name[1]`, … until the allocator or device refuses.
    FillDevice {
        name: String,
        bytes: u64,
        via: Via,
        stream: String,
    },
    /// Frees the live members of a group filled at run time, keeping every `keep_every`-th.
    FreeGroup {
        name: String,
        keep_every: Option<u32>,
    },
    /// `cuStreamBeginCapture` on `stream` for the graph `graph`.
    BeginCapture {
        graph: String,
        stream: String,
        /// Set for the graphs a `graphs` pattern captures.
        #[serde(skip_serializing_if = "Option::is_none")]
        tag: Option<GraphTag>,
    },
    /// `cuStreamEndCapture`.
    EndCapture {
        graph: String,
        stream: String,
    },
    /// An allocation node (`cuMemAllocAsync` while `stream` captures `graph`).
    GraphAllocate {
        name: String,
        bytes: u64,
        graph: String,
        stream: String,
    },
    /// `cuMemFreeAsync` of a graph allocation: a free node inside a capture, otherwise the
    /// free of an allocation a launch left live.
    GraphFree {
        name: String,
        stream: String,
    },
    Instantiate {
        graph: String,
        auto_free: bool,
    },
    Upload {
        graph: String,
        stream: String,
    },
    /// `times` launches; `first` when this is the first launch since instantiation.
    Replay {
        graph: String,
        stream: String,
        times: u32,
        first: bool,
    },
    DestroyGraph {
        graph: String,
    },
    TrimGraphMemory,
    /// The end of a `graphs` pattern: its report is computed from the readings.
    GraphsReport(Box<GraphsSpec>),
}

impl Action {
    pub fn op(&self) -> &'static str {
        match self {
            Action::Allocate { .. } => "allocate",
            Action::Free { .. } => "free",
            Action::Touch { .. } => "touch",
            Action::Fill { .. } => "fill",
            Action::Verify { .. } => "verify",
            Action::Corrupt { .. } => "corrupt",
            Action::Copy { .. } => "copy",
            Action::Triad { .. } => "triad",
            Action::Spin { .. } => "spin",
            Action::Sleep { .. } => "sleep",
            Action::Synchronize { .. } => "synchronize",
            Action::Trim { .. } => "trim",
            Action::EmptyCache => "empty_cache",
            Action::RecordStream { .. } => "record_stream",
            Action::Stack { .. } => "stack",
            Action::Tenant { .. } => "tenant",
            Action::FillDevice { .. } => "allocate",
            Action::FreeGroup { .. } => "free",
            Action::BeginCapture { .. } => "capture",
            Action::EndCapture { .. } => "end_capture",
            Action::GraphAllocate { .. } => "allocate",
            Action::GraphFree { .. } => "free",
            Action::Instantiate { .. } => "instantiate",
            Action::Upload { .. } => "upload",
            Action::Replay { .. } => "replay",
            Action::DestroyGraph { .. } => "destroy_graph",
            Action::TrimGraphMemory => "trim_graph_memory",
            Action::GraphsReport(_) => "graphs_report",
        }
    }

    /// Whether this is a CUDA graph action (the run then reads the graph memory views).
    pub fn is_graph(&self) -> bool {
        matches!(
            self,
            Action::BeginCapture { .. }
                | Action::EndCapture { .. }
                | Action::GraphAllocate { .. }
                | Action::GraphFree { .. }
                | Action::Instantiate { .. }
                | Action::Upload { .. }
                | Action::Replay { .. }
                | Action::DestroyGraph { .. }
                | Action::TrimGraphMemory
                | Action::GraphsReport(_)
        )
    }

    /// The allocation this action names, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            Action::Allocate { name, .. }
            | Action::Free { name }
            | Action::Touch { name, .. }
            | Action::Fill { name, .. }
            | Action::Verify { name, .. }
            | Action::Corrupt { name, .. }
            | Action::RecordStream { name, .. }
            | Action::GraphAllocate { name, .. }
            | Action::GraphFree { name, .. } => Some(name),
            Action::BeginCapture { graph, .. }
            | Action::EndCapture { graph, .. }
            | Action::Instantiate { graph, .. }
            | Action::Upload { graph, .. }
            | Action::Replay { graph, .. }
            | Action::DestroyGraph { graph } => Some(graph),
            Action::GraphsReport(spec) => Some(&spec.name),
            Action::Copy { dst, .. } => Some(dst),
            Action::FillDevice { name, .. } | Action::FreeGroup { name, .. } => Some(name),
            Action::Triad { a, .. } => Some(a),
            _ => None,
        }
    }

    /// The stream this action runs on, if it names one.
    pub fn stream(&self) -> Option<&str> {
        match self {
            Action::Allocate { stream, .. }
            | Action::FillDevice { stream, .. }
            | Action::Touch { stream, .. }
            | Action::Fill { stream, .. }
            | Action::Verify { stream, .. }
            | Action::Spin { stream, .. }
            | Action::Copy { stream, .. }
            | Action::Triad { stream, .. }
            | Action::RecordStream { stream, .. }
            | Action::BeginCapture { stream, .. }
            | Action::EndCapture { stream, .. }
            | Action::GraphAllocate { stream, .. }
            | Action::GraphFree { stream, .. }
            | Action::Upload { stream, .. }
            | Action::Replay { stream, .. } => Some(stream),
            Action::Synchronize { stream } => stream.as_deref(),
            _ => None,
        }
    }
}

/// An action with the step it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planned {
    /// `3` for the third step of its phase, `3.12` for the twelfth action a pattern or repeat
    /// in step 3 produced.
    pub label: String,
    /// The `op` of the step as written (`kv`, `repeat`, `allocate`, …).
    pub origin: &'static str,
    pub action: Action,
    /// An OOM at this action is recorded and the run goes on (`on_oom = "continue"`).
    pub continue_on_oom: bool,
}

#[derive(Debug, Clone)]
struct LiveName {
    bytes: u64,
    filled: bool,
}

/// The checker's view of which names are live, walked in program order.
struct Names<'a> {
    file: &'a Path,
    total_bytes: u64,
    live: BTreeMap<String, LiveName>,
    /// Groups allocated with `count = "fill"`: their members are known only at run time.
    filled: std::collections::BTreeSet<String>,
    /// Graphs, the capture in progress, and the names graphs allocate.
    graphs: graphs::GraphBook,
}

impl Names<'_> {
    fn err(&self, place: &str, msg: impl Into<String>) -> WorkloadError {
        WorkloadError::new(self.file, place, msg)
    }

    /// Exact name if live, else every live member `name[i]` of the group, in index order.
    fn resolve(&self, place: &str, op: &str, name: &str) -> Result<Vec<String>, WorkloadError> {
        if self.filled.contains(name) {
            return Err(self.err(
                place,
                format!("{op} of {name:?}: its members are allocated until the device is full, so only `free` can name them"),
            ));
        }
        if self.live.contains_key(name) {
            return Ok(vec![name.to_string()]);
        }
        let prefix = format!("{name}[");
        let mut members: Vec<(u64, String)> = self
            .live
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| {
                let idx = k[prefix.len()..].strip_suffix(']')?.parse::<u64>().ok()?;
                Some((idx, k.clone()))
            })
            .collect();
        if members.is_empty() {
            if let Some(why) = self.graphs.why_not_live(name) {
                return Err(self.err(place, format!("{op} of {name:?}: {why}")));
            }
            return Err(self.err(
                place,
                format!("{op} of {name:?}, which is not a live allocation at this point"),
            ));
        }
        members.sort();
        Ok(members.into_iter().map(|(_, k)| k).collect())
    }

    /// Kernels over several buffers need them live and of one size.
    fn same_sizes(&self, place: &str, op: &str, names: &[&String]) -> Result<(), WorkloadError> {
        let mut sizes = Vec::new();
        for n in names {
            let l = self.live.get(*n).ok_or_else(|| {
                self.err(
                    place,
                    format!("{op} of {n:?}, which is not a live allocation at this point"),
                )
            })?;
            sizes.push(format!("{n} is {} bytes", l.bytes));
            if l.bytes != self.live[names[0]].bytes {
                return Err(self.err(
                    place,
                    format!("{op} needs buffers of one size: {}", sizes.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Checks one primitive action and updates the live set.
    fn check(&mut self, place: &str, action: &Action) -> Result<(), WorkloadError> {
        match action {
            Action::Allocate { name, bytes, .. } => {
                check_name(self, place, name)?;
                if *bytes == 0 {
                    return Err(self.err(place, "size must be above zero"));
                }
                if *bytes > self.total_bytes {
                    return Err(self.err(
                        place,
                        format!(
                            "size {} ({bytes} bytes) exceeds the device's total of {} ({} bytes)",
                            Bytes(*bytes),
                            Bytes(self.total_bytes),
                            self.total_bytes
                        ),
                    ));
                }
                if self.live.contains_key(name) {
                    return Err(self.err(
                        place,
                        format!("{name:?} is already live; free it first or use another name"),
                    ));
                }
                if let Some(why) = self.graphs.why_not_live(name) {
                    return Err(self.err(place, format!("{name:?} is taken: {why}")));
                }
                self.live.insert(
                    name.clone(),
                    LiveName {
                        bytes: *bytes,
                        filled: false,
                    },
                );
            }
            Action::Free { name } => {
                self.live.remove(name);
                self.graphs.freed_outside(name);
            }
            Action::FillDevice { name, bytes, .. } => {
                check_name(self, place, name)?;
                if *bytes == 0 {
                    return Err(self.err(place, "size must be above zero"));
                }
                if self.live.contains_key(name) || self.filled.contains(name) {
                    return Err(self.err(
                        place,
                        format!("{name:?} is already live; free it first or use another name"),
                    ));
                }
                self.filled.insert(name.clone());
            }
            Action::FreeGroup {
                name,
                keep_every: None,
            } => {
                self.filled.remove(name);
            }
            Action::Fill { name, .. } => {
                if let Some(l) = self.live.get_mut(name) {
                    l.filled = true;
                }
            }
            Action::Verify { name, .. } if self.live.get(name).is_some_and(|l| !l.filled) => {
                return Err(self.err(
                    place,
                    format!(
                        "verify of {name:?}, which was never filled; add a fill step before it"
                    ),
                ));
            }
            Action::Corrupt {
                name, offset_bytes, ..
            } => {
                let bytes = self.live.get(name).map_or(0, |l| l.bytes);
                if offset_bytes % 4 != 0 {
                    return Err(self.err(
                        place,
                        format!("offset {offset_bytes} is not a multiple of 4 bytes"),
                    ));
                }
                if offset_bytes + 4 > bytes {
                    return Err(self.err(
                        place,
                        format!("offset {offset_bytes} is outside {name:?} ({bytes} bytes)"),
                    ));
                }
            }
            Action::Touch { stride_bytes, .. } if *stride_bytes == 0 || stride_bytes % 4 != 0 => {
                return Err(self.err(
                    place,
                    format!("stride {stride_bytes} must be a positive multiple of 4 bytes"),
                ));
            }
            Action::Copy { src, dst, .. } => self.same_sizes(place, "copy", &[src, dst])?,
            Action::Triad { a, b, c, .. } => self.same_sizes(place, "triad", &[a, b, c])?,
            Action::Spin { duration_ns, .. } if *duration_ns == 0 => {
                return Err(self.err(place, "`for` must be above zero"));
            }
            Action::Stack { frame_bytes } if *frame_bytes == 0 => {
                return Err(self.err(place, "frame must be above zero"));
            }
            _ => {}
        }
        Ok(())
    }
}

fn check_name(names: &Names, place: &str, name: &str) -> Result<(), WorkloadError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']'));
    if ok {
        Ok(())
    } else {
        Err(names.err(
            place,
            format!("name {name:?} may use only letters, digits, '_', '-' and '.'"),
        ))
    }
}

/// Collects actions for one written step, resolving names against the live set as it goes.
struct Emitter<'n, 'f> {
    names: &'n mut Names<'f>,
    place: String,
    label: String,
    origin: &'static str,
    out: Vec<Planned>,
    /// Whether the step expands to more than one action (then labels get a sub-index).
    multi: bool,
    continue_on_oom: bool,
}

impl Emitter<'_, '_> {
    fn push(&mut self, action: Action) -> Result<(), WorkloadError> {
        self.names.check(&self.place, &action)?;
        self.names.graphs.note_use(&action);
        let label = if self.multi {
            format!("{}.{}", self.label, self.out.len() + 1)
        } else {
            self.label.clone()
        };
        self.out.push(Planned {
            label,
            origin: self.origin,
            action,
            continue_on_oom: self.continue_on_oom,
        });

        Ok(())
    }

    /// Emits `make(name)` for each allocation `name` resolves to.
    fn each(
        &mut self,
        op: &str,
        name: &str,
        make: impl Fn(String) -> Action,
    ) -> Result<(), WorkloadError> {
        let targets = self.names.resolve(&self.place, op, name)?;
        if targets.len() > 1 {
            self.multi = true;
        }
        for t in targets {
            self.push(make(t))?;
        }
        Ok(())
    }

    fn err(&self, msg: impl Into<String>) -> WorkloadError {
        self.names.err(&self.place, msg)
    }

    /// A free of one name, a group, or a group but every `keep_every`-th member.
    fn free(&mut self, name: &str, keep_every: Option<u32>) -> Result<(), WorkloadError> {
        if keep_every == Some(0) {
            return Err(self.err("keep_every must be at least 1"));
        }
        if self.names.filled.contains(name) {
            return self.push(Action::FreeGroup {
                name: name.to_string(),
                keep_every,
            });
        }
        let members = self.names.resolve(&self.place, "free", name)?;
        if keep_every.is_some() && members.len() == 1 && members[0] == name {
            return Err(self.err(format!(
                "keep_every needs a group; {name:?} is one allocation"
            )));
        }
        let prefix = format!("{name}[");
        let freed: Vec<String> = members
            .into_iter()
            .filter(|m| {
                let idx = m
                    .strip_prefix(&prefix)
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|i| i.parse::<u64>().ok());
                match (keep_every, idx) {
                    (Some(k), Some(i)) => i % k as u64 != 0,
                    _ => true,
                }
            })
            .collect();
        self.free_resolved(freed)
    }

    fn step(&mut self, step: &Step) -> Result<(), WorkloadError> {
        if self.names.graphs.capturing() {
            self.capturable(step)?;
        }
        match step {
            Step::Allocate {
                name,
                size,
                count,
                via,
                stream,
                on_oom,
            } => {
                self.continue_on_oom = *on_oom == OnOom::Continue;
                let count = match count {
                    Count::Fill if self.names.graphs.capturing() => {
                        return Err(self.err("count = \"fill\" cannot be captured into a graph"));
                    }
                    Count::Fill => {
                        return self.push(Action::FillDevice {
                            name: name.clone(),
                            bytes: size.resolve(self.names.total_bytes),
                            via: *via,
                            stream: stream.clone(),
                        });
                    }
                    Count::N(n) => *n,
                };
                if self.names.graphs.capturing() {
                    return self.graph_allocate(name, size, count);
                }
                if count == 0 {
                    return Err(self.err("count must be at least 1"));
                }
                if count > 1 {
                    self.multi = true;
                }
                for i in 0..count {
                    let n = if count == 1 {
                        name.clone()
                    } else {
                        format!("{name}[{i}]")
                    };
                    self.push(Action::Allocate {
                        name: n,
                        bytes: size.resolve(self.names.total_bytes),
                        via: *via,
                        stream: stream.clone(),
                    })?;
                }
            }
            Step::Free { name, keep_every } => self.free(name, *keep_every)?,
            Step::Touch {
                name,
                stride,
                stream,
            } => self.each("touch", name, |n| Action::Touch {
                name: n,
                stride_bytes: stride.0,
                stream: stream.clone(),
            })?,
            Step::Fill { name, seed, stream } => self.each("fill", name, |n| Action::Fill {
                name: n,
                seed: *seed,
                stream: stream.clone(),
            })?,
            Step::Verify { name, seed, stream } => {
                self.each("verify", name, |n| Action::Verify {
                    name: n,
                    seed: *seed,
                    stream: stream.clone(),
                })?
            }
            Step::Corrupt {
                name,
                offset,
                value,
            } => {
                let targets = self.names.resolve(&self.place, "corrupt", name)?;
                if targets.len() != 1 {
                    return Err(self.err(format!(
                        "corrupt needs one allocation; {name:?} names {}",
                        targets.len()
                    )));
                }
                self.push(Action::Corrupt {
                    name: targets[0].clone(),
                    offset_bytes: offset.0,
                    value: *value,
                })?;
            }
            Step::Tenant { size, duration } => {
                let bytes = size.resolve(self.names.total_bytes);
                if bytes == 0 || duration.0 == 0 {
                    return Err(self.err("a tenant needs a size and a duration above zero"));
                }
                self.push(Action::Tenant {
                    bytes,
                    duration_ns: duration.0,
                })?
            }
            Step::Copy { src, dst, stream } => self.push(Action::Copy {
                src: src.clone(),
                dst: dst.clone(),
                stream: stream.clone(),
            })?,
            Step::Triad {
                a,
                b,
                c,
                scalar,
                stream,
            } => self.push(Action::Triad {
                a: a.clone(),
                b: b.clone(),
                c: c.clone(),
                scalar: *scalar,
                stream: stream.clone(),
            })?,
            Step::Spin { duration, stream } => self.push(Action::Spin {
                duration_ns: duration.0,
                stream: stream.clone(),
            })?,
            Step::Sleep { duration } => self.push(Action::Sleep {
                duration_ns: duration.0,
            })?,
            Step::Synchronize { stream } => self.push(Action::Synchronize {
                stream: stream.clone(),
            })?,
            Step::Trim { keep } => self.push(Action::Trim { keep_bytes: keep.0 })?,
            Step::EmptyCache {} => self.push(Action::EmptyCache)?,
            Step::RecordStream { name, stream } => {
                self.each("record_stream", name, |n| Action::RecordStream {
                    name: n,
                    stream: stream.clone(),
                })?
            }
            Step::Stack { frame } => self.push(Action::Stack {
                frame_bytes: frame.0,
            })?,
            Step::Capture {
                graph,
                stream,
                steps,
            } => self.capture_written(graph, stream, steps)?,
            Step::Instantiate { graph, auto_free } => self.instantiate(graph, *auto_free)?,
            Step::Upload { graph, stream } => self.upload(graph, stream.as_deref())?,
            Step::Replay {
                graph,
                times,
                stream,
            } => self.replay(graph, *times, stream.as_deref())?,
            Step::DestroyGraph { graph } => self.destroy_graph(graph)?,
            Step::TrimGraphMemory {} => self.push(Action::TrimGraphMemory)?,
            Step::Graphs { .. } => self.graphs_pattern(step)?,
            Step::Repeat { times, steps } => {
                if *times == 0 {
                    return Err(self.err("times must be at least 1"));
                }
                if steps.is_empty() {
                    return Err(self.err("repeat has no steps"));
                }
                self.multi = true;
                let outer = self.place.clone();
                let parsed: Vec<Step> = steps
                    .iter()
                    .enumerate()
                    .map(|(k, v)| {
                        parse_step(
                            self.names.file,
                            &format!("{outer}, inner step {}", k + 1),
                            v,
                        )
                    })
                    .collect::<Result<_, _>>()?;
                for round in 0..*times {
                    for (k, s) in parsed.iter().enumerate() {
                        self.place = format!(
                            "{outer}, round {}, inner step {} ({})",
                            round + 1,
                            k + 1,
                            s.op()
                        );
                        self.step(s)?;
                    }
                }
                self.place = outer;
            }
            Step::Weights {
                name,
                total,
                tensors,
                touch,
            } => {
                if *tensors == 0 || total.resolve(self.names.total_bytes) < *tensors as u64 {
                    return Err(self.err(
                        "weights needs tensors ≥ 1 and a total of at least one byte per tensor",
                    ));
                }
                self.multi = true;
                let each = total.resolve(self.names.total_bytes) / *tensors as u64;
                let last = total.resolve(self.names.total_bytes) - each * (*tensors as u64 - 1);
                for i in 0..*tensors {
                    let n = format!("{name}[{i}]");
                    let bytes = if i + 1 == *tensors { last } else { each };
                    self.push(Action::Allocate {
                        name: n.clone(),
                        bytes,
                        via: ViaSpec::Allocator,
                        stream: "main".into(),
                    })?;
                    if *touch {
                        self.push(Action::Touch {
                            name: n,
                            stride_bytes: 64 << 10,
                            stream: "main".into(),
                        })?;
                    }
                }
            }
            Step::Activations {
                name,
                layers,
                size,
                scratch,
                mode,
                layer_time,
            } => {
                if *layers == 0 {
                    return Err(self.err("layers must be at least 1"));
                }
                self.multi = true;
                let total = self.names.total_bytes;
                let alloc = |n: String, bytes: u64| Action::Allocate {
                    name: n,
                    bytes,
                    via: ViaSpec::Allocator,
                    stream: "main".into(),
                };
                let layer_n = |i: u32| format!("{name}[{i}]");
                let scratch_n = format!("{name}.scratch");
                let layer_body = |e: &mut Self| -> Result<(), WorkloadError> {
                    if let Some(s) = scratch {
                        e.push(alloc(scratch_n.clone(), s.resolve(total)))?;
                    }
                    if layer_time.0 > 0 {
                        e.push(Action::Sleep {
                            duration_ns: layer_time.0,
                        })?;
                    }
                    if scratch.is_some() {
                        e.push(Action::Free {
                            name: scratch_n.clone(),
                        })?;
                    }
                    Ok(())
                };
                for i in 0..*layers {
                    self.push(alloc(layer_n(i), size.resolve(total)))?;
                    layer_body(self)?;
                    if *mode == ActivationMode::Inference && i > 0 {
                        self.push(Action::Free {
                            name: layer_n(i - 1),
                        })?;
                    }
                }
                match mode {
                    ActivationMode::Train => {
                        for i in (0..*layers).rev() {
                            layer_body(self)?;
                            self.push(Action::Free { name: layer_n(i) })?;
                        }
                    }
                    ActivationMode::Inference => self.push(Action::Free {
                        name: layer_n(*layers - 1),
                    })?,
                }
            }
            Step::Workspace {
                name,
                size,
                repeats,
                hold,
                gap,
                via,
            } => {
                if *repeats == 0 {
                    return Err(self.err("repeats must be at least 1"));
                }
                self.multi = true;
                for r in 0..*repeats {
                    self.push(Action::Allocate {
                        name: name.clone(),
                        bytes: size.resolve(self.names.total_bytes),
                        via: *via,
                        stream: "main".into(),
                    })?;
                    self.push(Action::Touch {
                        name: name.clone(),
                        stride_bytes: 64 << 10,
                        stream: "main".into(),
                    })?;
                    if hold.0 > 0 {
                        self.push(Action::Sleep {
                            duration_ns: hold.0,
                        })?;
                    }
                    self.push(Action::Free { name: name.clone() })?;
                    if gap.0 > 0 && r + 1 < *repeats {
                        self.push(Action::Sleep { duration_ns: gap.0 })?;
                    }
                }
            }
            Step::Kv {
                name,
                requests,
                block,
                blocks_per_request,
                prefill_blocks,
                arrive_every,
                tick,
            } => {
                if *requests == 0 || *blocks_per_request == 0 || *arrive_every == 0 {
                    return Err(self
                        .err("requests, blocks_per_request and arrive_every must be at least 1"));
                }
                if *prefill_blocks == 0 || prefill_blocks > blocks_per_request {
                    return Err(self.err("prefill_blocks must be between 1 and blocks_per_request"));
                }
                self.multi = true;
                self.kv(
                    name,
                    *requests,
                    block.0,
                    *blocks_per_request,
                    *prefill_blocks,
                    *arrive_every,
                    tick.0,
                )?;
            }
        }
        Ok(())
    }

    /// Requests arrive every `arrive_every` ticks, take `prefill` blocks, grow one block a tick
    /// to `per_request`, then free all their blocks.
    #[allow(clippy::too_many_arguments)]
    fn kv(
        &mut self,
        name: &str,
        requests: u32,
        block: u64,
        per_request: u32,
        prefill: u32,
        arrive_every: u32,
        tick_ns: u64,
    ) -> Result<(), WorkloadError> {
        // held[r] = blocks request r holds (None before arrival and after it finished).
        let mut held: Vec<Option<u32>> = vec![None; requests as usize];
        let mut arrived = 0u32;
        let mut finished = 0u32;
        let mut tick = 0u32;
        let block_name = |r: u32, b: u32| format!("{name}.r{r}[{b}]");
        while finished < requests {
            for r in 0..arrived {
                if let Some(h) = held[r as usize] {
                    if h >= per_request {
                        for b in 0..h {
                            self.push(Action::Free {
                                name: block_name(r, b),
                            })?;
                        }
                        held[r as usize] = None;
                        finished += 1;
                    } else {
                        self.push(Action::Allocate {
                            name: block_name(r, h),
                            bytes: block,
                            via: ViaSpec::Allocator,
                            stream: "main".into(),
                        })?;
                        held[r as usize] = Some(h + 1);
                    }
                }
            }
            if arrived < requests && tick % arrive_every == 0 {
                let r = arrived;
                for b in 0..prefill {
                    self.push(Action::Allocate {
                        name: block_name(r, b),
                        bytes: block,
                        via: ViaSpec::Allocator,
                        stream: "main".into(),
                    })?;
                }
                held[r as usize] = Some(prefill);
                arrived += 1;
            }
            if finished < requests && tick_ns > 0 {
                self.push(Action::Sleep {
                    duration_ns: tick_ns,
                })?;
            }
            tick += 1;
        }
        Ok(())
    }
}

/// Expands a parsed file into a runnable workload, checking every action.
pub fn expand(
    file: FileWorkload,
    path: &Path,
    total_bytes: u64,
) -> Result<Workload, WorkloadError> {
    let mut names = Names {
        file: path,
        total_bytes,
        live: BTreeMap::new(),
        filled: Default::default(),
        graphs: Default::default(),
    };
    let mut phases = Vec::new();
    for (pi, (phase_name, steps)) in file.phases.iter().enumerate() {
        let mut actions = Vec::new();
        for (pos, step) in steps {
            let mut e = Emitter {
                names: &mut names,
                place: format!(
                    "phase {} ({phase_name:?}), step {pos} ({})",
                    pi + 1,
                    step.op()
                ),
                label: pos.to_string(),
                origin: step.op(),
                out: Vec::new(),
                multi: false,
                continue_on_oom: false,
            };
            e.step(step)?;
            actions.extend(e.out);
        }
        phases.push(Phase {
            name: phase_name.clone(),
            actions,
        });
    }
    if let crate::workload::OomExpectation::At(at) = &file.expect.oom {
        let found = phases.iter().any(|p| {
            p.actions.iter().any(|a| {
                let full = format!("{}/{}", p.name, a.label);
                full == *at || full.starts_with(&format!("{at}."))
            })
        });
        if !found {
            return Err(WorkloadError::new(
                path,
                "[expect]",
                format!("oom = {at:?} names no step; write \"phase name/step number\""),
            ));
        }
    }
    Ok(Workload {
        name: file.name,
        description: file.description,
        file: path.to_path_buf(),
        settings: file.settings,
        allocator: file.allocator,
        phases,
        expect: file.expect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn load(text: &str) -> Result<Workload, WorkloadError> {
        Workload::from_toml(text, Path::new("w.toml"), 4 * GIB)
    }

    fn ops(w: &Workload, phase: usize) -> Vec<String> {
        w.phases[phase]
            .actions
            .iter()
            .map(|p| match &p.action {
                Action::Allocate { name, bytes, .. } => format!("+{name}:{bytes}"),
                Action::Free { name } => format!("-{name}"),
                Action::Sleep { duration_ns } => format!("z{duration_ns}"),
                Action::Touch { name, .. } => format!("t{name}"),
                other => other.op().to_string(),
            })
            .collect()
    }

    const HEAD: &str = "[workload]\nname = \"t\"\n";

    #[test]
    fn allocate_count_and_group_free() {
        let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [\n {{ op = \"allocate\", name = \"w\", size = \"1GiB\", count = 3 }},\n {{ op = \"free\", name = \"w[1]\" }},\n {{ op = \"free\", name = \"w\" }},\n]\n"
        ))
        .unwrap();
        assert_eq!(
            ops(&w, 0),
            [
                "+w[0]:1073741824",
                "+w[1]:1073741824",
                "+w[2]:1073741824",
                "-w[1]",
                "-w[0]",
                "-w[2]"
            ]
        );
        let labels: Vec<&str> = w.phases[0]
            .actions
            .iter()
            .map(|a| a.label.as_str())
            .collect();
        assert_eq!(labels, ["1.1", "1.2", "1.3", "2", "3.1", "3.2"]);
    }

    #[test]
    fn weights_split_and_touch() {
        let w = load(&format!("{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"weights\", total = \"10MiB\", tensors = 3 }}]\n")).unwrap();
        let o = ops(&w, 0);
        assert_eq!(o.len(), 6);
        assert_eq!(o[0], format!("+weights[0]:{}", 10 * MIB / 3));
        assert_eq!(
            o[4],
            format!("+weights[2]:{}", 10 * MIB - 2 * (10 * MIB / 3))
        );
        assert_eq!(o[1], "tweights[0]");
        assert_eq!(w.planned_peak_bytes(), 10 * MIB);
    }

    #[test]
    fn activations_train_peaks_at_the_turn() {
        let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"activations\", layers = 4, size = \"100MiB\", scratch = \"50MiB\" }}]\n"
        ))
        .unwrap();
        // Four outputs live plus one scratch at the first backward layer.
        assert_eq!(w.planned_peak_bytes(), 450 * MIB);
        let o = ops(&w, 0);
        assert_eq!(o.first().unwrap(), &format!("+act[0]:{}", 100 * MIB));
        assert_eq!(o.last().unwrap(), "-act[0]");
    }

    #[test]
    fn activations_inference_holds_two_layers() {
        let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"activations\", layers = 5, size = \"100MiB\", mode = \"inference\" }}]\n"
        ))
        .unwrap();
        assert_eq!(w.planned_peak_bytes(), 200 * MIB);
        assert_eq!(ops(&w, 0).last().unwrap(), "-act[4]");
    }

    #[test]
    fn workspace_is_short_lived() {
        let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"workspace\", size = \"1GiB\", repeats = 2, hold = \"5ms\", gap = \"1ms\" }}]\n"
        ))
        .unwrap();
        assert_eq!(
            ops(&w, 0),
            [
                "+ws:1073741824",
                "tws",
                "z5000000",
                "-ws",
                "z1000000",
                "+ws:1073741824",
                "tws",
                "z5000000",
                "-ws"
            ]
        );
        assert_eq!(w.planned_peak_bytes(), GIB);
    }

    #[test]
    fn kv_grows_and_drains() {
        let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"kv\", requests = 3, block = \"1MiB\", blocks_per_request = 2, tick = \"0ns\" }}]\n"
        ))
        .unwrap();
        assert_eq!(
            ops(&w, 0),
            [
                "+kv.r0[0]:1048576",
                "+kv.r0[1]:1048576",
                "+kv.r1[0]:1048576",
                "-kv.r0[0]",
                "-kv.r0[1]",
                "+kv.r1[1]:1048576",
                "+kv.r2[0]:1048576",
                "-kv.r1[0]",
                "-kv.r1[1]",
                "+kv.r2[1]:1048576",
                "-kv.r2[0]",
                "-kv.r2[1]",
            ]
        );
        assert_eq!(w.planned_peak_bytes(), 3 * MIB);
    }

    #[test]
    fn repeat_expands_in_order() {
        let w = load(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"repeat\", times = 2, steps = [{{ op = \"allocate\", name = \"x\", size = \"1MiB\" }}, {{ op = \"free\", name = \"x\" }}] }}]\n"
        ))
        .unwrap();
        assert_eq!(ops(&w, 0), ["+x:1048576", "-x", "+x:1048576", "-x"]);
    }

    fn error(text: &str) -> String {
        load(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_workloads_name_file_phase_step_and_key() {
        let e = error(&format!(
            "{HEAD}[[phase]]\nname = \"load\"\nsteps = [{{ op = \"allocate\", name = \"x\", sise = \"1GiB\" }}]\n"
        ));
        assert!(
            e.starts_with("w.toml: phase 1 (\"load\"), step 1 (allocate): "),
            "{e}"
        );
        assert!(e.contains("sise"), "{e}");
        let e = error(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"12G\" }}]\n"
        ));
        assert!(e.contains("ambiguous") && e.contains("step 1"), "{e}");
        let e = error(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"-1GiB\" }}]\n"
        ));
        assert!(e.contains("negative"), "{e}");
        let e = error(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"free\", name = \"ghost\" }}]\n"
        ));
        assert!(
            e.contains("\"ghost\"") && e.contains("step 1 (free)"),
            "{e}"
        );
        let e = error(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"5GiB\" }}]\n"
        ));
        assert!(e.contains("exceeds the device's total"), "{e}");
        let e = error(HEAD);
        assert!(e.contains("no phases"), "{e}");
        let e = error(&format!("phase = []\n{HEAD}"));
        assert!(e.contains("empty"), "{e}");
        let e = error(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"x\", size = \"1MiB\" }}, {{ op = \"verify\", name = \"x\" }}]\n"
        ));
        assert!(
            e.contains("never filled") && e.contains("step 2 (verify)"),
            "{e}"
        );
        let e = error(&format!(
            "{HEAD}[settings]\nsample_interval = \"1ms\"\ncolour = 1\n[[phase]]\nname = \"p\"\nsteps = [{{ op = \"sleep\", for = \"1ms\" }}]\n"
        ));
        assert!(e.contains("[settings]") && e.contains("colour"), "{e}");
        let e = error(&format!(
            "{HEAD}[[phase]]\nname = \"p\"\nsteps = [{{ op = \"explode\" }}]\n"
        ));
        assert!(e.contains("explode"), "{e}");
        let e = error("[workload\nname = 1");
        assert!(e.contains("line 1") && e.contains("not valid TOML"), "{e}");
    }
}
