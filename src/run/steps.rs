//! The step loop: each phase's actions in order, each one run by its handler
//! (`run::actions`), read back, written as its `events.csv` row and — when memory was refused —
//! recorded with the evidence of that instant. Between steps it listens for Ctrl-C and for
//! device errors the sampler saw; after each phase it puts everything on disk.

use std::sync::atomic::Ordering;

use anyhow::bail;

use crate::record::NO_PHASE;
use crate::record::timeline::EventResult;
use crate::report::summary::{MismatchRecord, PhaseStatus};
use crate::run::actions::{self, Done, Failure, Target};
use crate::run::recording::RowKey;
use crate::run::{Runner, Stop, watchdog};
use crate::units::Nanos;
use crate::workload::{Action, Planned, Via, member_name};

/// A sleep on a real GPU, in slices: the sampler thread's readings are drained after each.
const SLEEP_SLICE_NS: u64 = 20_000_000;
/// A sleep on the simulator, in slices of virtual time: each slice's sampler readings (at most
/// 100 ms of them) are written before the next.
pub(crate) const SIM_SLEEP_SLICE_NS: u64 = 100_000_000;

/// What a refused allocation means for the step that asked.
#[derive(Clone, Copy)]
enum Refusal {
    /// An out-of-memory result: recorded with its evidence; the run stops (unless the step
    /// continues past it).
    Oom,
    /// The end of a fill of the device after `count` allocations: the point of the step.
    EndsFill { count: u64 },
}

impl Runner<'_, '_> {
    /// Runs every phase, expanding its actions as it goes (only the one running is held);
    /// returns what stopped it early, if anything.
    pub(super) fn run_phases(&mut self) -> Option<Stop> {
        let wl = self.wl;
        let mut expander = wl.expander();
        for (pi, phase) in wl.phases.iter().enumerate() {
            self.phase = pi as u32;
            self.rec.live.set_phase(self.phase);
            let t_ns = self.dev.now_ns();
            self.rec.folder.phase_started(pi, t_ns);
            let mut stop = None;
            let expanded = expander.phase(&mut |planned| {
                stop = self.run_action(pi, &phase.name, &planned);
                stop.is_none()
            });
            if let Err(e) = expanded {
                // Checked before the run: a file that expanded once expands again.
                stop = Some(Stop::Failed(format!("phase {:?}: {e}", phase.name)));
            }
            let status = match &stop {
                None => PhaseStatus::Completed,
                Some(Stop::Oom) => PhaseStatus::Oom,
                Some(_) => PhaseStatus::Stopped,
            };
            let t_ns = self.dev.now_ns();
            self.rec.folder.phase_ended(pi, t_ns, status);
            self.fill_summary();
            self.rec.checkpoint(&*self.dev);
            if stop.is_some() {
                self.rec.folder.phases_from(pi + 1, PhaseStatus::Skipped);
                return stop;
            }
        }
        None
    }

    /// Runs one action of phase `pi` and counts it; returns what ends the run, if anything.
    fn run_action(&mut self, pi: usize, phase: &str, planned: &Planned) -> Option<Stop> {
        let done = self.rec.folder.actions_run();
        let phases = self.wl.phases.len();
        self.rec
            .progress
            .step(pi, phases, phase, &planned.label, done);
        if self.limits.interrupted.load(Ordering::Relaxed) {
            return Some(Stop::Interrupted);
        }
        if let Some(fault) = self.rec.sampler_error() {
            return Some(self.stop_on_fault(phase, planned, &fault));
        }
        self.arm_watchdog(phase, planned);
        let outcome = self.step(phase, planned);
        self.limits.watchdog.disarm();
        match outcome {
            Ok(None) => {
                self.rec.folder.action_ran(pi);
                None
            }
            Ok(Some(Stop::Oom)) if planned.continue_on_oom => {
                self.rec.folder.action_ran(pi);
                None
            }
            Ok(Some(s)) => {
                if s == Stop::Oom {
                    self.rec.folder.action_ran(pi);
                }
                Some(s)
            }
            Err(e) => Some(Stop::Failed(format!(
                "phase {phase:?}, step {}: {e:#}",
                planned.label
            ))),
        }
    }

    /// What a handler acts on, borrowed from the runner.
    fn target<'a>(&'a mut self, phase: &'a str, step: &'a str) -> Target<'a> {
        Target {
            dev: &mut *self.dev,
            alloc: &mut *self.alloc,
            held: &mut self.held,
            floor: self.limits.floor,
            tenant_launch: self.limits.tenant_launch.as_ref(),
            interrupted: &self.limits.interrupted,
            phase,
            step,
        }
    }

    /// Runs one planned action. `Ok(Some(stop))` ends the run early; `Err` is a failure to run.
    fn step(&mut self, phase: &str, p: &Planned) -> anyhow::Result<Option<Stop>> {
        match &p.action {
            Action::FillDevice {
                name,
                bytes,
                via,
                stream,
            } => return self.fill_device(phase, p, name, *bytes, *via, stream),
            Action::FreeGroup { name, keep_every } => {
                return self.free_group(phase, p, name, *keep_every);
            }
            _ => {}
        }
        let name = p.action.name().unwrap_or("");
        // A free is ordered on the stream its block was allocated on.
        let stream_name = match &p.action {
            Action::Free { name } => self
                .held
                .live(name)
                .map_or("main".to_string(), |a| a.stream.clone()),
            a => a.stream().unwrap_or("main").to_string(),
        };
        let stream = self.held.stream(&mut *self.dev, &stream_name)?;
        let is_alloc = matches!(p.action, Action::Allocate { .. });
        let key = RowKey {
            phase,
            step: &p.label,
            op: p.action.op(),
            name,
            stream: &stream_name,
        };
        if !is_alloc && self.held.failed(name) {
            let done = Done {
                detail: format!("skipped: the allocation of {name:?} failed earlier"),
                ..Done::default()
            };
            self.rec
                .row(self.dev.now_ns(), &key, &done, EventResult::Skipped, None)?;
            return Ok(None);
        }
        // Readings due before this action see the state before it.
        self.rec.pump(&*self.dev);
        let res = match &p.action {
            Action::Sleep { duration_ns } => {
                let slept_ns = self.sleep(*duration_ns);
                if slept_ns < *duration_ns {
                    // Ctrl-C during the sleep: the run is interrupted, not failed.
                    let done = Done {
                        detail: "interrupted during the sleep".into(),
                        ..Done::timed(slept_ns)
                    };
                    self.rec
                        .row(self.dev.now_ns(), &key, &done, EventResult::Stopped, None)?;
                    return Ok(Some(Stop::Interrupted));
                }
                Ok(Done::timed(*duration_ns))
            }
            action => actions::act(&mut self.target(phase, &p.label), action, stream),
        };
        if is_alloc {
            self.held
                .set_failed(name, matches!(res, Err(Failure::Oom { .. })));
        }
        self.note_latency(&p.action, &res);
        self.finish_step(&key, p, res, Refusal::Oom)
    }

    /// Records a latency in the histogram of its call.
    fn note_latency(&mut self, action: &Action, res: &Result<Done, Failure>) {
        let latency_ns = match res {
            Ok(d) => d.latency_ns,
            Err(Failure::Oom { latency_ns, .. }) => *latency_ns,
            Err(_) => return,
        };
        match action {
            Action::Allocate { .. } => self.rec.alloc_latency.record(latency_ns),
            Action::Free { .. } => self.rec.free_latency.record(latency_ns),
            _ => {}
        }
    }

    /// The reading after a step, its event row, and what it means for the run.
    fn finish_step(
        &mut self,
        key: &RowKey,
        p: &Planned,
        res: Result<Done, Failure>,
        refusal: Refusal,
    ) -> anyhow::Result<Option<Stop>> {
        match res {
            Ok(done) => {
                // A device error that surfaces only at the reading (a kernel that faulted
                // asynchronously) is this step's: its row names the call and the error.
                let r = match self.reading() {
                    Ok(r) => r,
                    Err(e) => {
                        let failed = Done {
                            detail: format!("the reading after the step failed: {e:#}"),
                            ..done
                        };
                        self.rec
                            .row(self.dev.now_ns(), key, &failed, EventResult::Error, None)?;
                        bail!("{}: {}", step_what(key), failed.detail)
                    }
                };
                if let Some(m) = done.mismatch {
                    self.mismatches.push(MismatchRecord {
                        phase: key.phase.to_string(),
                        step: p.label.clone(),
                        name: key.name.to_string(),
                        bytes: done.requested_bytes.unwrap_or(0),
                        mismatch: m,
                    });
                }
                self.context_grew |= done.stack_raised;
                self.rec.row(
                    self.dev.now_ns(),
                    key,
                    &done,
                    EventResult::Ok,
                    Some(r.device_free_bytes),
                )?;
                Ok(None)
            }
            Err(Failure::Oom {
                request,
                latency_ns,
            }) => {
                let r = self.reading()?;
                let done = Done {
                    requested_bytes: Some(request.requested_bytes),
                    size_bytes: Some(request.rounded_bytes),
                    latency_ns,
                    ..Done::default()
                };
                match refusal {
                    Refusal::EndsFill { count } => {
                        let done = Done {
                            detail: format!(
                                "full after {count} allocations: the {} allocator refused the next",
                                request.pool
                            ),
                            ..done
                        };
                        self.rec.row(
                            self.dev.now_ns(),
                            key,
                            &done,
                            EventResult::Full,
                            Some(r.device_free_bytes),
                        )?;
                        Ok(None)
                    }
                    Refusal::Oom => {
                        let rec = self.oom_record(key, p, &request, r)?;
                        let done = Done {
                            detail: format!(
                                "{}: {}",
                                rec.diagnosis.observation,
                                crate::cause::join(&rec.diagnosis.causes, ", ")
                            ),
                            ..done
                        };
                        self.rec.row(
                            self.dev.now_ns(),
                            key,
                            &done,
                            EventResult::Oom,
                            Some(r.device_free_bytes),
                        )?;
                        self.ooms.push(rec);
                        Ok(Some(Stop::Oom))
                    }
                }
            }
            Err(Failure::Floor(msg)) => {
                let (result, detail) = match refusal {
                    Refusal::EndsFill { count } => (
                        EventResult::Full,
                        format!("full after {count} allocations: {msg}"),
                    ),
                    Refusal::Oom => (EventResult::Stopped, msg.clone()),
                };
                let done = Done {
                    detail,
                    ..Done::default()
                };
                self.rec.row(self.dev.now_ns(), key, &done, result, None)?;
                Ok(match refusal {
                    Refusal::EndsFill { .. } => None,
                    Refusal::Oom => Some(Stop::Floor(format!(
                        "phase {:?}, step {}: {msg}",
                        key.phase, p.label
                    ))),
                })
            }
            Err(Failure::Interrupted(msg)) => {
                let done = Done {
                    detail: msg,
                    ..Done::default()
                };
                self.rec
                    .row(self.dev.now_ns(), key, &done, EventResult::Stopped, None)?;
                Ok(Some(Stop::Interrupted))
            }
            Err(Failure::Error(msg)) => {
                let done = Done {
                    detail: msg.clone(),
                    ..Done::default()
                };
                self.rec
                    .row(self.dev.now_ns(), key, &done, EventResult::Error, None)?;
                bail!("{}: {msg}", step_what(key))
            }
        }
    }

    /// The event-synchronous reading, with the harness's views of now.
    pub(super) fn reading(&mut self) -> anyhow::Result<crate::record::Reading> {
        let views = self.held.views(self.alloc.kind(), &self.alloc.stats());
        self.rec.reading(&mut *self.dev, self.phase, views)
    }

    /// Allocates `name[0]`, `name[1]`, … until the allocator or the device refuses (or the
    /// free-memory floor is reached, unless OOM is allowed). The refusal ends the fill; it is
    /// the point of the step, not an OOM result.
    fn fill_device(
        &mut self,
        phase: &str,
        p: &Planned,
        name: &str,
        bytes: u64,
        via: Via,
        stream_name: &str,
    ) -> anyhow::Result<Option<Stop>> {
        let stream = self.held.stream(&mut *self.dev, stream_name)?;
        for i in 0u64.. {
            if self.limits.interrupted.load(Ordering::Relaxed) {
                return Ok(Some(Stop::Interrupted));
            }
            let member = member_name(name, i);
            let one = Planned {
                label: format!("{}.{}", p.label, i + 1),
                origin: p.origin,
                action: Action::Allocate {
                    name: member.clone(),
                    bytes,
                    via,
                    stream: stream_name.to_string(),
                },
                continue_on_oom: false,
            };
            self.rec.pump(&*self.dev);
            let res = actions::act(&mut self.target(phase, &one.label), &one.action, stream);
            self.note_latency(&one.action, &res);
            let ends = matches!(res, Err(Failure::Oom { .. } | Failure::Floor(_)));
            let key = RowKey {
                phase,
                step: &one.label,
                op: one.action.op(),
                name: &member,
                stream: stream_name,
            };
            let stop = self.finish_step(&key, &one, res, Refusal::EndsFill { count: i })?;
            if ends || stop.is_some() {
                return Ok(stop);
            }
        }
        Ok(None)
    }

    /// Frees the live members of a filled group, keeping every `keep_every`-th by index.
    fn free_group(
        &mut self,
        phase: &str,
        p: &Planned,
        name: &str,
        keep_every: Option<u32>,
    ) -> anyhow::Result<Option<Stop>> {
        let members = self.held.members(name);
        for (n, (idx, member)) in members.into_iter().enumerate() {
            if keep_every.is_some_and(|k| idx % k as u64 == 0) {
                continue;
            }
            let one = Planned {
                label: format!("{}.{}", p.label, n + 1),
                origin: p.origin,
                action: Action::Free { name: member },
                continue_on_oom: false,
            };
            if let Some(stop) = self.step(phase, &one)? {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }

    /// The host waits in slices, so the sampler's readings are written as they come (an hour
    /// on the simulator is not 3.6 million readings held at once) and Ctrl-C is heard.
    /// Returns how long it waited (less than asked when interrupted).
    fn sleep(&mut self, duration_ns: u64) -> u64 {
        let slice_ns = if self.dev.info().is_sim() {
            SIM_SLEEP_SLICE_NS
        } else {
            SLEEP_SLICE_NS
        };
        let start = self.dev.now_ns();
        let end = start.saturating_add(duration_ns);
        loop {
            let now = self.dev.now_ns();
            if now >= end {
                return duration_ns;
            }
            if self.limits.interrupted.load(Ordering::Relaxed) {
                return now - start;
            }
            self.dev.sleep((end - now).min(slice_ns));
            self.rec.pump(&*self.dev);
        }
    }

    /// The step about to run is not run: the device already failed. Its row says why.
    fn stop_on_fault(
        &mut self,
        phase: &str,
        p: &Planned,
        fault: &crate::sampler::SamplerError,
    ) -> Stop {
        let seen_in = self
            .wl
            .phases
            .get(fault.phase as usize)
            .filter(|_| fault.phase != NO_PHASE)
            .map_or("before the first phase".to_string(), |ph| {
                format!("during phase {:?}", ph.name)
            });
        let done = Done {
            detail: format!(
                "not run: the device reported {} at {} {seen_in} (seen by the sampler)",
                fault.error,
                Nanos(fault.t_ns)
            ),
            ..Done::default()
        };
        let key = RowKey {
            phase,
            step: &p.label,
            op: p.action.op(),
            name: p.action.name().unwrap_or(""),
            stream: p.action.stream().unwrap_or("main"),
        };
        if let Err(e) = self
            .rec
            .row(self.dev.now_ns(), &key, &done, EventResult::Error, None)
        {
            crate::errln!("warning: writing events.csv: {e:#}");
        }
        Stop::Failed(format!(
            "phase {phase:?}, step {}: {}",
            p.label, done.detail
        ))
    }

    /// Arms the watchdog for one action, with the waiting the action itself does.
    fn arm_watchdog(&mut self, phase: &str, p: &Planned) {
        let expected_ns = match &p.action {
            Action::Sleep { duration_ns } => *duration_ns,
            Action::Spin { duration_ns, .. } => *duration_ns,
            Action::Tenant { .. } => actions::TENANT_START_NS,
            // Anything else may wait for a spin queued before it.
            _ => self.limits.longest_spin_ns,
        };
        let scope = watchdog::Scope {
            phase,
            step: &p.label,
            op: p.action.op(),
            name: p.action.name().unwrap_or(""),
            stream: p.action.stream().unwrap_or("main"),
        };
        let now = self.dev.now_ns();
        self.limits.watchdog.arm(scope, now, expected_ns);
    }
}

/// The op and, when it has one, the name it acts on: "allocate kv", "trim".
fn step_what(key: &RowKey) -> String {
    if key.name.is_empty() {
        key.op.to_string()
    } else {
        format!("{} {}", key.op, key.name)
    }
}
