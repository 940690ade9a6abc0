//! The check's fast-forward: once a `repeat`'s round, a `kv` pattern's arrival period, a
//! `workspace` repeat or an inference layer is shown to leave the walk exactly as it found it
//! (the same names live with the same sizes, the same filled groups, streams and graphs; for
//! `kv` and inference layers the same with every index moved on by one), every later one is the
//! same walk again: the check counts them (actions, stated time, steps that make no action,
//! the labels an `[expect] oom` may name) instead of making them, so its cost does not grow
//! with a repeat's or a pattern's count. A run never fast-forwards: it makes every action.
//!
//! Only whole periods that stay within every bound are counted; the walk goes on from there,
//! so a workload refused anywhere is refused at the same action with the same message.

use std::collections::BTreeSet;

use super::live_set::LiveSet;
use super::{Emitter, MAX_ACTIONS, MAX_STEP_ACTIONS, graphs::GraphBook};
use crate::units::MAX_DURATION_NS;

/// The counters a walk adds to as it goes: what a fast-forward moves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counters {
    actions: u64,
    stated_ns: u64,
    idle_steps: u64,
    emitted: u64,
}

/// Everything besides the counters that decides what a round makes and refuses.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shape {
    live: LiveSet,
    filled: BTreeSet<String>,
    streams: BTreeSet<String>,
    graphs: GraphBook,
    continue_on_oom: bool,
}

impl Emitter<'_, '_, '_> {
    pub(super) fn counters(&self) -> Counters {
        Counters {
            actions: self.names.actions,
            stated_ns: self.names.stated_ns,
            idle_steps: self.names.idle_steps,
            emitted: self.emitted as u64,
        }
    }

    /// The walk's state besides its counters (a clone: taken a few times per `repeat`).
    pub(super) fn shape(&self) -> Shape {
        Shape {
            live: self.names.live.clone(),
            filled: self.names.filled.clone(),
            streams: self.names.streams.clone(),
            graphs: self.names.graphs.clone(),
            continue_on_oom: self.continue_on_oom,
        }
    }

    /// How many more periods like the one from `from` to `to` may be counted, at most `most`:
    /// those after which every counter is still within its bound.
    pub(super) fn periods_within_bounds(&self, from: &Counters, to: &Counters, most: u64) -> u64 {
        let room = |now: u64, before: u64, bound: u64| match now - before {
            0 => u64::MAX,
            d => bound.saturating_sub(now) / d,
        };
        most.min(room(to.actions, from.actions, MAX_ACTIONS))
            .min(room(to.stated_ns, from.stated_ns, MAX_DURATION_NS))
            .min(room(to.idle_steps, from.idle_steps, MAX_STEP_ACTIONS))
    }

    /// Counts `k` more periods like the one from `from` to `to`: the counters move on and the
    /// labels of the actions skipped are offered to the `[expect] oom` lookup.
    pub(super) fn count_periods(&mut self, from: &Counters, to: &Counters, k: u64) {
        let step = |now: u64, before: u64| now + (now - before) * k;
        let first = to.emitted + 1;
        self.names.actions = step(to.actions, from.actions);
        self.names.stated_ns = step(to.stated_ns, from.stated_ns);
        self.names.idle_steps = step(to.idle_steps, from.idle_steps);
        let last = step(to.emitted, from.emitted);
        self.emitted = usize::try_from(last).unwrap_or(usize::MAX);
        self.names.skipped(&self.label, first, last);
        #[cfg(test)]
        tests::COUNTED.set(tests::COUNTED.get() + (last + 1 - first));
    }

    /// Whether no name that `prefix` begins, other than those in `own`, is live, pending in
    /// a graph, owned by one or used by one: the names a shifting pattern is about to make
    /// then meet nothing but its own.
    pub(super) fn namespace_free(&self, prefix: &str, own: usize) -> bool {
        let live = self.names.live.count_prefixed(prefix);
        live == own && !self.names.graphs.touches(prefix)
    }
}

/// The most decimal digits an index may have in a name `fixed` characters long besides it
/// (and `MAX_NAME_CHARS` long at most): past it, names are refused.
pub(super) fn largest_index(fixed: usize) -> u64 {
    let digits = crate::workload::parse::MAX_NAME_CHARS.saturating_sub(fixed);
    10u64.checked_pow(digits as u32).map_or(u64::MAX, |p| p - 1)
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
