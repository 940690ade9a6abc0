//! Steps over many allocations at once: filling the device until it refuses, and freeing a
//! filled group (keeping every k-th member).

use std::sync::atomic::Ordering;

use anyhow::bail;

use crate::run::exec::{Done, Failure};
use crate::run::{Runner, Stop};
use crate::workload::{Action, Planned, Via};

impl Runner<'_, '_> {
    /// the point of the step, not an OOM result.
    pub(super) fn fill_device(
        &mut self,
        phase: &str,
        p: &Planned,
        name: &str,
        bytes: u64,
        via: Via,
        stream_name: &str,
    ) -> anyhow::Result<Option<Stop>> {
        let stream = self.stream(stream_name)?;
        for i in 0u64.. {
            if self.interrupted.load(Ordering::Relaxed) {
                return Ok(Some(Stop::Interrupted));
            }
            let one = Planned {
                label: format!("{}.{}", p.label, i + 1),
                origin: p.origin,
                action: Action::Allocate {
                    name: format!("{name}[{i}]"),
                    bytes,
                    via,
                    stream: stream_name.to_string(),
                },
                continue_on_oom: false,
            };
            self.pump();
            let member = format!("{name}[{i}]");
            match self.act(&one, stream) {
                Ok(done) => {
                    let r = self.event_reading()?;
                    self.row(
                        phase,
                        &one,
                        &member,
                        stream_name,
                        &done,
                        "ok",
                        Some(r.device_free_bytes),
                    )?;
                }
                Err(Failure::Oom {
                    request,
                    latency_ns,
                }) => {
                    let r = self.event_reading()?;
                    let done = Done {
                        requested_bytes: Some(request.requested_bytes),
                        size_bytes: Some(request.rounded_bytes),
                        latency_ns,
                        detail: format!(
                            "full after {i} allocations: the {} allocator refused the next",
                            request.pool
                        ),
                    };
                    self.row(
                        phase,
                        &one,
                        &member,
                        stream_name,
                        &done,
                        "full",
                        Some(r.device_free_bytes),
                    )?;
                    return Ok(None);
                }
                Err(Failure::Floor(msg)) => {
                    let done = Done {
                        detail: format!("full after {i} allocations: {msg}"),
                        ..Done::timed(0)
                    };
                    self.row(phase, &one, &member, stream_name, &done, "full", None)?;
                    return Ok(None);
                }
                Err(Failure::Error(msg)) => {
                    let done = Done {
                        detail: msg.clone(),
                        ..Done::timed(0)
                    };
                    self.row(phase, &one, &member, stream_name, &done, "error", None)?;
                    bail!("allocate {member}: {msg}");
                }
            }
        }
        Ok(None)
    }

    /// Frees the live members of a filled group, keeping every `keep_every`-th by index.
    pub(super) fn free_group(
        &mut self,
        phase: &str,
        p: &Planned,
        name: &str,
        keep_every: Option<u32>,
    ) -> anyhow::Result<Option<Stop>> {
        let prefix = format!("{name}[");
        let mut members: Vec<(u64, String)> = self
            .live
            .keys()
            .filter_map(|k| {
                Some((
                    k.strip_prefix(&prefix)?
                        .strip_suffix(']')?
                        .parse::<u64>()
                        .ok()?,
                    k.clone(),
                ))
            })
            .collect();
        members.sort();
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
            if let Some(stop) = self.exec(phase, &one)? {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }
}
