//! Expanding steps into primitive actions, and checking every name's lifetime before a run.
//!
//! Patterns (`weights`, `activations`, `workspace`, `kv`) and `repeat` become plain allocate,
//! touch, sleep and free actions. Because a workload is deterministic, the set of live names at
//! every action is known in advance: freeing an unknown name, verifying a buffer never filled,
//! or allocating more than the device holds is caught here, before anything is allocated.

mod comm;
mod forward;
mod graphs;
mod graphs_pattern;
mod live_set;
mod names;
mod patterns;
mod walk;

use crate::units::MAX_DURATION_NS;
use crate::units::SizeSpec;
use crate::workload::parse::{WorkloadError, parse_step};
use crate::workload::step::{Count, OnOom, Step};
use names::{LiveName, Names, check_name};

pub use crate::workload::action::{Action, Planned, Via};
pub use crate::workload::action::{GraphTag, GraphsSpec};
pub use walk::{Expander, expand, expand_with};

/// The most actions a workload may expand to. A run makes them one at a time and holds only
/// the one it runs, so its memory does not grow with them (10^5, 10^6 and 10^7 actions all
/// peak under 70 MB). The check before the run walks each step, but counts instead of walking
/// what is shown to repeat exactly (`forward`: a `repeat`'s rounds, a `kv` pattern's arrivals,
/// `workspace` repeats, inference layers), so its cost does not grow with repeat or request
/// counts. What grows with them is the run's `events.csv` and `timeline.csv`, a row each per
/// action (about 140 bytes together, 1.4 GB at the bound).
pub const MAX_ACTIONS: u64 = 10_000_000;

/// The most actions one step may state at once (`count`, a graph's layers), the most
/// allocations a `count = "fill"` may make, and the most steps walked that make no action:
/// what one step states is held at once (live names, a capture's nodes), so it is bounded
/// apart from the run's length. (A probe of `headroom validate` stays below it.)
pub const MAX_STEP_ACTIONS: u64 = 1_000_000;

/// Hands on the actions of one written step, resolving names against the live set as it goes.
struct Emitter<'n, 'f, 't> {
    names: &'n mut Names<'f>,
    place: String,
    label: String,
    origin: &'static str,
    /// Takes each action as it is made; `false` ends the expansion (the run stopped).
    take: &'t mut dyn FnMut(Planned) -> bool,
    /// Actions this step has made so far.
    emitted: usize,
    /// Whether the step expands to more than one action (then labels get a sub-index).
    multi: bool,
    continue_on_oom: bool,
}

impl Emitter<'_, '_, '_> {
    /// Refuses a step that states more than `MAX_STEP_ACTIONS` at once, or would take the
    /// workload past `MAX_ACTIONS`, before it expands.
    fn bound(&self, adding: u64) -> Result<(), WorkloadError> {
        if adding > MAX_STEP_ACTIONS {
            return Err(self.err(format!(
                "this step would make {adding} actions, more than the {MAX_STEP_ACTIONS} \
                 headroom expands from one step (what a step states is held at once): split it \
                 into several steps"
            )));
        }
        let total = self.names.actions.saturating_add(adding);
        if total > MAX_ACTIONS {
            return Err(self.past_bound(total, ""));
        }
        Ok(())
    }

    /// The refusal of a workload that would make `total` actions.
    fn past_bound(&self, total: u64, how: &str) -> WorkloadError {
        self.err(format!(
            "this step would take the workload to {total} actions{how}, more than the \
             {MAX_ACTIONS} a run makes (its memory does not grow with them, under 70 MB at \
             any count; each is written to events.csv and timeline.csv, about 140 bytes an \
             action, 1.4 GB at the bound): split the workload into several runs"
        ))
    }

    fn push(&mut self, action: Action) -> Result<(), WorkloadError> {
        self.bound(1)?;
        self.names.actions += 1;
        match &action {
            Action::Synchronize { stream: Some(s) } if !self.names.streams.contains(s) => {
                let known: Vec<&str> = self.names.streams.iter().map(String::as_str).collect();
                return Err(self.err(format!(
                    "synchronize of stream {s:?}, which no step before it uses: nothing is queued \
                     there (streams so far: {})",
                    known.join(", ")
                )));
            }
            Action::Synchronize { .. } => {}
            a => {
                if let Some(s) = a.stream()
                    && !self.names.streams.contains(s)
                {
                    self.names.streams.insert(s.to_string());
                }
            }
        }
        self.names.check(&self.place, &action)?;
        self.names.graphs.note_use(&action);
        if let Action::Sleep { duration_ns } | Action::Spin { duration_ns, .. } = &action {
            self.names.stated_ns = self.names.stated_ns.saturating_add(*duration_ns);
            if self.names.stated_ns > MAX_DURATION_NS {
                return Err(self.err(format!(
                    "the workload's sleeps and spins come to more than 30 days in all here ({} ns), the longest a workload may state",
                    self.names.stated_ns
                )));
            }
        }
        // The check's taker reads a label only to find the `[expect] oom` step and the first
        // allocation captured into a graph: other actions go without one there.
        let labelled = !self.names.check_walk
            || self.names.oom_at.is_some()
            || matches!(action, Action::GraphAllocate { .. });
        let label = if !labelled {
            String::new()
        } else if self.multi {
            crate::workload::step_id::of_action(&self.label, self.emitted + 1)
        } else {
            self.label.clone()
        };
        self.emitted += 1;
        let taken = (self.take)(Planned {
            label,
            origin: self.origin,
            action,
            continue_on_oom: self.continue_on_oom,
        });
        if !taken {
            // Not a bad workload: the taker is done. The flag tells the two apart.
            self.names.halted = true;
            return Err(self.err("the expansion was stopped by its taker"));
        }
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
        let Some(k) = keep_every else {
            return self.free_resolved(members);
        };
        let prefix = format!("{name}[");
        let freed: Vec<String> = members
            .into_iter()
            .filter(|m| {
                let idx = m
                    .strip_prefix(&prefix)
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|i| i.parse::<u64>().ok());
                idx.is_none_or(|i| i % k as u64 != 0)
            })
            .collect();
        self.free_resolved(freed)
    }

    /// Expands one step. The work is bounded by what it emits: each action counts towards
    /// `MAX_ACTIONS`, and each step walked that emits none counts towards `MAX_STEP_ACTIONS` (a `free` whose
    /// `keep_every` keeps every member), or a repeat of one would never end.
    fn step(&mut self, step: &Step) -> Result<(), WorkloadError> {
        let before = self.names.actions;
        self.step_actions(step)?;
        if self.names.actions == before {
            self.names.idle_steps += 1;
            if self.names.idle_steps > MAX_STEP_ACTIONS {
                return Err(self.err(format!(
                    "more than {MAX_STEP_ACTIONS} steps walked so far expand to no action (this one \
                     included), more than headroom walks: a repeat of a step that does nothing"
                )));
            }
        }
        Ok(())
    }

    fn step_actions(&mut self, step: &Step) -> Result<(), WorkloadError> {
        if self.names.graphs.capturing() {
            self.capturable(step)?;
        }
        if let Some(action) = one_action(step) {
            return self.push(action);
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
                self.allocate(name, size, count, *via, stream)
            }
            Step::Free { name, keep_every } => self.free(name, *keep_every),
            Step::Touch {
                name,
                stride,
                stream,
            } => self.each("touch", name, |n| Action::Touch {
                name: n,
                stride_bytes: stride.0,
                stream: stream.to_string(),
            }),
            Step::Fill { name, seed, stream } => self.each("fill", name, |n| Action::Fill {
                name: n,
                seed: *seed,
                stream: stream.to_string(),
            }),
            Step::Verify { name, seed, stream } => self.each("verify", name, |n| Action::Verify {
                name: n,
                seed: *seed,
                stream: stream.to_string(),
            }),
            Step::RecordStream { name, stream } => {
                self.each("record_stream", name, |n| Action::RecordStream {
                    name: n,
                    stream: stream.to_string(),
                })
            }
            Step::Corrupt {
                name,
                offset,
                value,
                stream,
            } => self.corrupt(name, offset.0, *value, stream),
            Step::Tenant { size, duration } => self.tenant(size, duration.0),
            Step::Capture {
                graph,
                stream,
                steps,
            } => self.capture_written(graph, stream, steps),
            Step::Instantiate { graph, auto_free } => self.instantiate(graph, *auto_free),
            Step::Upload { graph, stream } => self.upload(graph, stream.as_deref()),
            Step::Replay {
                graph,
                times,
                stream,
            } => self.replay(graph, *times, stream.as_deref()),
            Step::DestroyGraph { graph } => self.destroy_graph(graph),
            Step::Graphs { .. } => self.graphs_pattern(step),
            Step::Repeat { times, steps } => self.repeat(*times, steps),
            Step::Weights { .. }
            | Step::Activations { .. }
            | Step::Workspace { .. }
            | Step::Kv { .. } => self.pattern(step),
            Step::Comm { .. } => self.comm(step),
            Step::Copy { .. }
            | Step::Triad { .. }
            | Step::Spin { .. }
            | Step::Sleep { .. }
            | Step::Synchronize { .. }
            | Step::Trim { .. }
            | Step::EmptyCache {}
            | Step::Stack { .. }
            | Step::TrimGraphMemory {} => unreachable!("one_action expands {}", step.op()),
        }
    }

    /// `allocate`: one action, `count` of them named `name[i]`, or a fill of the device.
    fn allocate(
        &mut self,
        name: &str,
        size: &SizeSpec,
        count: &Count,
        via: Via,
        stream: &str,
    ) -> Result<(), WorkloadError> {
        let count = match count {
            Count::Fill if self.names.graphs.capturing() => {
                return Err(self.err("count = \"fill\" cannot be captured into a graph"));
            }
            Count::Fill => return self.fill_device(name, size, via, stream),
            Count::N(n) => *n,
        };
        if self.names.graphs.capturing() {
            return self.graph_allocate(name, size, count);
        }
        if count == 0 {
            return Err(self.err("count must be at least 1"));
        }
        self.bound(count as u64)?;
        if count > 1 {
            self.multi = true;
        }
        for i in 0..count {
            let n = if count == 1 {
                name.to_string()
            } else {
                crate::workload::member_name(name, i)
            };
            self.push(Action::Allocate {
                name: n,
                bytes: self.names.bytes(size),
                via,
                stream: stream.to_string(),
            })?;
        }
        Ok(())
    }

    /// `count = "fill"`: allocations until the device is full, bounded by what it can hold.
    fn fill_device(
        &mut self,
        name: &str,
        size: &SizeSpec,
        via: Via,
        stream: &str,
    ) -> Result<(), WorkloadError> {
        let bytes = self.names.bytes(size);
        // The device can hold at most this many (allocations take ≥ 512 B).
        let most = self.names.total_bytes / bytes.max(512);
        // Checked against a real device only (before one is known, the total is unbounded).
        if self.names.total_bytes < u64::MAX && most > MAX_STEP_ACTIONS {
            return Err(self.err(format!(
                "count = \"fill\" of {bytes}-byte allocations could make {most} allocations on \
                 this device, more than the {MAX_STEP_ACTIONS} a run makes: use a larger size"
            )));
        }
        self.push(Action::FillDevice {
            name: name.to_string(),
            bytes,
            via,
            stream: stream.to_string(),
        })
    }

    fn corrupt(
        &mut self,
        name: &str,
        offset_bytes: u64,
        value: u32,
        stream: &str,
    ) -> Result<(), WorkloadError> {
        let targets = self.names.resolve(&self.place, "corrupt", name)?;
        if targets.len() != 1 {
            return Err(self.err(format!(
                "corrupt needs one allocation; {name:?} names {}",
                targets.len()
            )));
        }
        self.push(Action::Corrupt {
            name: targets[0].clone(),
            offset_bytes,
            value,
            stream: stream.to_string(),
        })
    }

    fn tenant(&mut self, size: &SizeSpec, duration_ns: u64) -> Result<(), WorkloadError> {
        let bytes = self.names.bytes(size);
        if bytes == 0 || duration_ns == 0 {
            return Err(self.err("a tenant needs a size and a duration above zero"));
        }
        self.push(Action::Tenant { bytes, duration_ns })
    }

    /// `repeat`: the inner steps, parsed once, expanded `times` times with their round in
    /// the place.
    fn repeat(&mut self, times: u32, steps: &[toml::Value]) -> Result<(), WorkloadError> {
        if times == 0 {
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
        let start = self.names.actions;
        let mut first_round = 0;
        // The walk's state at the start of the last round looked at (the check looks at the
        // starts of its first five rounds only: rounds of one program settle within a round or two, if ever).
        let mut seen: Option<(forward::Shape, forward::Counters)> = None;
        let mut round = 0;
        while round < times {
            let before = self.names.actions;
            match round {
                1 => first_round = before - start,
                2 => {
                    // Two rounds of the same number of actions: the rest make as many, so a
                    // repeat past the bound is refused here rather than walked to it.
                    let per_round = before - start - first_round;
                    let total =
                        before.saturating_add(per_round.saturating_mul(u64::from(times - round)));
                    if per_round > 0 && per_round == first_round && total > MAX_ACTIONS {
                        self.place = outer;
                        return Err(
                            self.past_bound(total, &format!(" ({times} rounds of {per_round})"))
                        );
                    }
                }
                _ => {}
            }
            if self.names.fast_forward && round <= 4 {
                let now = (self.shape(), self.counters());
                // The last round left everything as it found it: so does each one after it.
                if let Some((shape, from)) = seen.take()
                    && shape == now.0
                {
                    // Round 2 is reached as walked, for the refusal above to come as it does.
                    let most = if round == 1 { 1 } else { times - round };
                    let k = self.periods_within_bounds(&from, &now.1, u64::from(most));
                    if k > 0 {
                        self.count_periods(&from, &now.1, k);
                        round += k as u32;
                        seen = Some(now);
                        continue;
                    }
                } else {
                    seen = Some(now);
                }
            }
            for (k, s) in parsed.iter().enumerate() {
                self.place = format!(
                    "{outer}, round {}, inner step {} ({})",
                    round + 1,
                    k + 1,
                    s.op()
                );
                self.step(s)?;
            }
            round += 1;
        }
        self.place = outer;
        Ok(())
    }
}

/// The steps that are exactly one action, whatever came before them.
fn one_action(step: &Step) -> Option<Action> {
    Some(match step {
        Step::Copy { src, dst, stream } => Action::Copy {
            src: src.clone(),
            dst: dst.clone(),
            stream: stream.to_string(),
        },
        Step::Triad {
            a,
            b,
            c,
            scalar,
            stream,
        } => Action::Triad {
            a: a.clone(),
            b: b.clone(),
            c: c.clone(),
            scalar: *scalar,
            stream: stream.to_string(),
        },
        Step::Spin { duration, stream } => Action::Spin {
            duration_ns: duration.0,
            stream: stream.to_string(),
        },
        Step::Sleep { duration } => Action::Sleep {
            duration_ns: duration.0,
        },
        Step::Synchronize { stream } => Action::Synchronize {
            stream: stream.clone(),
        },
        Step::Trim { keep } => Action::Trim { keep_bytes: keep.0 },
        Step::EmptyCache {} => Action::EmptyCache,
        Step::Stack { frame } => Action::Stack {
            frame_bytes: frame.0,
        },
        Step::TrimGraphMemory {} => Action::TrimGraphMemory,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
