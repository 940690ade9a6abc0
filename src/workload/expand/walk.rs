//! The walk over a parsed file: phase by phase, each action handed on as it is made and
//! checked against everything before it, the actions themselves never kept.

use std::path::Path;

use super::{Emitter, Names, Planned};
use crate::workload::parse::{FileWorkload, WorkloadError};
use crate::workload::rank::Rank;
use crate::workload::{Phase, Workload};

/// Walks a parsed file phase by phase, handing on each action as it is made and checking it
/// against everything before it: only the live names are held, never the actions.
pub struct Expander<'w> {
    file: &'w FileWorkload,
    names: Names<'w>,
    /// The phase the next call expands.
    next: usize,
}

impl<'w> Expander<'w> {
    pub fn new(file: &'w FileWorkload, path: &'w Path, total_bytes: u64, rank: Rank) -> Self {
        Expander {
            file,
            names: Names {
                file: path,
                actions: 0,
                streams: std::collections::BTreeSet::from(["main".to_string()]),
                total_bytes,
                rank,
                live: Default::default(),
                filled: Default::default(),
                graphs: Default::default(),
                stated_ns: 0,
                idle_steps: 0,
                halted: false,
                fast_forward: false,
                by_total: Default::default(),
                largest: 0,
                check_walk: false,
                oom_at: None,
                phase: "",
                oom_at_skipped: false,
            },
            next: 0,
        }
    }

    /// The check's expander: periods shown to repeat exactly are counted, not made
    /// (`forward`), and a label counted may be the `[expect] oom` step (`oom_at`).
    fn checking(
        file: &'w FileWorkload,
        path: &'w Path,
        total_bytes: u64,
        rank: Rank,
        oom_at: Option<&'w str>,
    ) -> Self {
        let mut ex = Expander::new(file, path, total_bytes, rank);
        ex.names.fast_forward = true;
        ex.names.check_walk = true;
        ex.names.oom_at = oom_at;
        ex
    }

    /// Actions expanded so far, those counted and not made included.
    fn actions(&self) -> u64 {
        self.names.actions
    }

    /// Expands the next phase (phases come in order), each action to `take`. `Ok(false)` when
    /// `take` declined one: the rest of the phase is not expanded.
    pub fn phase(&mut self, take: &mut dyn FnMut(Planned) -> bool) -> Result<bool, WorkloadError> {
        let file = self.file;
        let pi = self.next;
        self.next += 1;
        let (phase_name, steps) = &file.phases[pi];
        self.names.phase = phase_name;
        for (pos, step) in steps {
            let mut e = Emitter {
                names: &mut self.names,
                place: format!(
                    "phase {} ({phase_name:?}), step {pos} ({})",
                    pi + 1,
                    step.op()
                ),
                label: crate::workload::step_id::of_step(*pos),
                origin: step.op(),
                take: &mut *take,
                emitted: 0,
                multi: false,
                continue_on_oom: false,
            };
            match e.step(step) {
                Ok(()) => {}
                Err(_) if self.names.halted => return Ok(false),
                Err(err) => return Err(err),
            }
        }
        Ok(true)
    }
}

/// Expands a parsed file once, checking every action and keeping only what the run needs to
/// know before it starts (`Facts`); the run expands it again as it goes.
pub fn expand(
    file: FileWorkload,
    path: &Path,
    total_bytes: u64,
    rank: Rank,
) -> Result<Workload, WorkloadError> {
    expand_with(file, path, total_bytes, rank, true)
}

/// `expand`, counting what repeats exactly (`forward`) or, with `forward` false, making and
/// checking every action: the two must agree on everything (tests compare them).
pub fn expand_with(
    file: FileWorkload,
    path: &Path,
    total_bytes: u64,
    rank: Rank,
    forward: bool,
) -> Result<Workload, WorkloadError> {
    let source = std::sync::Arc::new(crate::workload::Source {
        file,
        path: path.to_path_buf(),
        total_bytes,
        rank,
    });
    let mut facts = crate::workload::facts::Gather::new(&source.file.expect.oom);
    let mut phases = Vec::new();
    let oom_at = match &source.file.expect.oom {
        crate::workload::OomExpectation::At(at) => Some(at.as_str()),
        _ => None,
    };
    let mut ex = Expander::checking(&source.file, &source.path, total_bytes, rank, oom_at);
    ex.names.fast_forward = forward;
    for (phase_name, _) in &source.file.phases {
        let before = ex.actions();
        // An action counted and not made is one like another already noted: it adds
        // nothing to the facts but its label.
        ex.phase(&mut |p| {
            facts.note(phase_name, &p);
            true
        })?;
        phases.push(Phase {
            name: phase_name.clone(),
            planned: ex.actions() - before,
        });
    }
    if let Some(at) = oom_at
        && !facts.oom_at_found()
        && !ex.names.oom_at_skipped
    {
        return Err(WorkloadError::new(
            path,
            "[expect]",
            format!(
                "oom = {at:?} names no step; write \"phase name/step id\" (e.g. \"decode/s3\")"
            ),
        ));
    }
    let f = &source.file;
    Ok(Workload {
        name: f.name.clone(),
        description: f.description.clone(),
        min_total_bytes: f.min_total_bytes,
        file: path.to_path_buf(),
        settings: f.settings.clone(),
        allocator: f.allocator.clone(),
        phases,
        expect: f.expect.clone(),
        facts: facts.finish(),
        source: source.clone(),
        any_total: (!ex.names.by_total.get()).then_some(ex.names.largest),
    })
}
