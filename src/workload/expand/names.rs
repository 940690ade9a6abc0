//! The checker's view of a workload's names, walked in program order: which allocations are
//! live (and filled) at every action, so a free of an unknown name, a verify of a buffer never
//! filled or an allocation larger than the device is refused before anything runs.

use std::path::Path;

use crate::units::Bytes;
use crate::workload::parse::WorkloadError;
use crate::workload::rank::Rank;

use super::{Action, graphs};

/// The most allocations live at once, the names the check and the run hold (what a step
/// states is bounded apart from the run's length, so is what all of them hold together).
pub const MAX_LIVE_NAMES: u64 = super::MAX_STEP_ACTIONS;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LiveName {
    pub(super) bytes: u64,
    pub(super) filled: bool,
}

/// The checker's view of which names are live, walked in program order.
pub(super) struct Names<'a> {
    pub(super) file: &'a Path,
    /// Actions expanded so far (bounded by `MAX_ACTIONS`).
    pub(super) actions: u64,
    /// Streams the steps so far queue work on (`main` always exists).
    pub(super) streams: std::collections::BTreeSet<String>,
    pub(super) total_bytes: u64,
    /// The run's rank (`comm` sizes its buffers by the rank count).
    pub(super) rank: Rank,
    pub(super) live: super::live_set::LiveSet,
    /// Groups allocated with `count = "fill"`: their members are known only at run time.
    pub(super) filled: std::collections::BTreeSet<String>,
    /// Graphs, the capture in progress, and the names graphs allocate.
    pub(super) graphs: graphs::GraphBook,
    /// Host and stream time the actions so far state (sleeps and spins), in nanoseconds.
    pub(super) stated_ns: u64,
    /// Steps walked so far that expanded to no action (bounded by `MAX_STEP_ACTIONS`, so a
    /// repeat of such a step ends).
    pub(super) idle_steps: u64,
    /// The taker of the actions declined one: the error that unwinds is not the workload's.
    pub(super) halted: bool,
    /// Whether periods shown to repeat exactly are counted instead of walked (`forward`; the
    /// check's walk only: a run makes every action).
    pub(super) fast_forward: bool,
    /// Whether a size or bound so far depended on the device's total (a share of it, a
    /// `count = "fill"`): if none did, a walk for another total differs only in which
    /// allocations exceed it.
    pub(super) by_total: std::cell::Cell<bool>,
    /// The largest single allocation so far.
    pub(super) largest: u64,
    /// Whether this is the check's walk, whose taker gathers `Facts` (and reads few labels).
    pub(super) check_walk: bool,
    /// The `[expect] oom` step the check looks for, and the phase being walked: a label
    /// counted but not made may be it.
    pub(super) oom_at: Option<&'a str>,
    pub(super) phase: &'a str,
    /// Whether `oom_at` names an action counted but not made.
    pub(super) oom_at_skipped: bool,
}

impl Names<'_> {
    /// The bytes of `size` on this device (noting whether they depend on its total).
    pub(super) fn bytes(&self, size: &crate::units::SizeSpec) -> u64 {
        if matches!(size, crate::units::SizeSpec::PercentOfTotal(_)) {
            self.by_total.set(true);
        }
        size.resolve(self.total_bytes)
    }

    /// Actions `first..=last` of the step labelled `label` were counted, not made: notes
    /// whether the `[expect] oom` step names one of them.
    pub(super) fn skipped(&mut self, label: &str, first: u64, last: u64) {
        let Some(at) = self.oom_at else {
            return;
        };
        let index = at
            .strip_prefix(self.phase)
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|r| r.strip_prefix(label))
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.parse::<u64>().ok().filter(|i| i.to_string() == r));
        if index.is_some_and(|i| (first..=last).contains(&i)) {
            self.oom_at_skipped = true;
        }
    }

    pub(super) fn err(&self, place: &str, msg: impl Into<String>) -> WorkloadError {
        WorkloadError::new(self.file, place, msg)
    }

    /// Exact name if live, else every live member `name[i]` of the group, in index order.
    pub(super) fn resolve(
        &self,
        place: &str,
        op: &str,
        name: &str,
    ) -> Result<Vec<String>, WorkloadError> {
        if self.filled.contains(name) {
            return Err(self.err(
                place,
                format!("{op} of {name:?}: its members are allocated until the device is full, so only `free` can name them"),
            ));
        }
        if self.live.contains_key(name) {
            return Ok(vec![name.to_string()]);
        }
        let members = self.live.members_of(name);
        if members.is_empty() {
            if let Some(why) = self.graphs.why_not_live(name) {
                return Err(self.err(place, format!("{op} of {name:?}: {why}")));
            }
            return Err(self.err(
                place,
                format!("{op} of {name:?}, which is not a live allocation at this point"),
            ));
        }
        Ok(members)
    }

    /// Kernels over several buffers need them live and of one size.
    pub(super) fn same_sizes(
        &self,
        place: &str,
        op: &str,
        names: &[&String],
    ) -> Result<(), WorkloadError> {
        let mut sizes = Vec::new();
        let mut first = None;
        for n in names {
            let l = self.live.get(n).ok_or_else(|| {
                self.err(
                    place,
                    format!("{op} of {n:?}, which is not a live allocation at this point"),
                )
            })?;
            sizes.push(format!("{n} is {} bytes", l.bytes));
            if *first.get_or_insert(l.bytes) != l.bytes {
                return Err(self.err(
                    place,
                    format!("{op} needs buffers of one size: {}", sizes.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Checks one primitive action and updates the live set.
    pub(super) fn check(&mut self, place: &str, action: &Action) -> Result<(), WorkloadError> {
        match action {
            Action::Allocate { name, bytes, .. } => {
                check_name(self, place, name)?;
                if *bytes == 0 {
                    return Err(self.err(place, "size must be above zero"));
                }
                self.largest = self.largest.max(*bytes);
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
                if self.live.len() as u64 >= MAX_LIVE_NAMES {
                    return Err(self.err(
                        place,
                        format!(
                            "{name:?} would be allocation {} live at once, more than the \
                             {MAX_LIVE_NAMES} headroom tracks (each is held for the whole run): \
                             free some first",
                            self.live.len() + 1
                        ),
                    ));
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
                self.by_total.set(true);
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

pub(super) fn check_name(names: &Names, place: &str, name: &str) -> Result<(), WorkloadError> {
    use crate::workload::parse::{MAX_NAME_CHARS, name_start};
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(names.err(
            place,
            format!(
                "name {} is {chars} characters long; a name may have at most {MAX_NAME_CHARS}",
                name_start(name)
            ),
        ));
    }
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
