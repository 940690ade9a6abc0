//! The walk over a parsed file: phase by phase, each action handed on as it is made and
//! checked against everything before it, the actions themselves never kept.

use std::collections::BTreeMap;
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
                live: BTreeMap::new(),
                filled: Default::default(),
                graphs: Default::default(),
                stated_ns: 0,
                idle_steps: 0,
                halted: false,
            },
            next: 0,
        }
    }

    /// Expands the next phase (phases come in order), each action to `take`. `Ok(false)` when
    /// `take` declined one: the rest of the phase is not expanded.
    pub fn phase(&mut self, take: &mut dyn FnMut(Planned) -> bool) -> Result<bool, WorkloadError> {
        let file = self.file;
        let pi = self.next;
        self.next += 1;
        let (phase_name, steps) = &file.phases[pi];
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
    let source = std::sync::Arc::new(crate::workload::Source {
        file,
        path: path.to_path_buf(),
        total_bytes,
        rank,
    });
    let mut facts = crate::workload::facts::Gather::new(&source.file.expect.oom);
    let mut phases = Vec::new();
    let mut ex = Expander::new(&source.file, &source.path, total_bytes, rank);
    for (phase_name, _) in &source.file.phases {
        let mut planned = 0u64;
        ex.phase(&mut |p| {
            planned += 1;
            facts.note(phase_name, &p);
            true
        })?;
        phases.push(Phase {
            name: phase_name.clone(),
            planned,
        });
    }
    if let crate::workload::OomExpectation::At(at) = &source.file.expect.oom
        && !facts.oom_at_found()
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
    })
}
