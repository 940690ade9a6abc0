//! What a run must know of its actions before the first one runs (the kernels to load, the
//! longest spin, whether graphs are used), gathered by the checking expansion so that the
//! actions themselves need not be kept.

use crate::kernels::Module;
use crate::workload::{Action, OomExpectation, Planned};

/// Facts about every action of a workload, in a size independent of their number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The longest `spin` (ns; 0 without one).
    pub longest_spin_ns: u64,
    /// The kernel modules the actions launch, each once, in order of first use.
    pub kernel_modules: Vec<Module>,
    /// Whether any action is a CUDA graph action.
    pub uses_graphs: bool,
    /// The label of the first allocation captured into a graph.
    pub first_graph_allocate: Option<String>,
}

/// Gathers `Facts` one action at a time.
pub(crate) struct Gather<'e> {
    facts: Facts,
    /// The `[expect] oom` step, and whether an action of it was seen.
    oom_at: Option<&'e str>,
    oom_at_found: bool,
}

impl<'e> Gather<'e> {
    pub(crate) fn new(oom: &'e OomExpectation) -> Self {
        Gather {
            facts: Facts::default(),
            oom_at: match oom {
                OomExpectation::At(at) => Some(at),
                _ => None,
            },
            oom_at_found: false,
        }
    }

    /// Notes one action of phase `phase`, in program order.
    pub(crate) fn note(&mut self, phase: &str, p: &Planned) {
        let f = &mut self.facts;
        match &p.action {
            Action::Spin { duration_ns, .. } => {
                f.longest_spin_ns = f.longest_spin_ns.max(*duration_ns);
            }
            Action::GraphAllocate { .. } if f.first_graph_allocate.is_none() => {
                f.first_graph_allocate = Some(p.label.clone());
            }
            _ => {}
        }
        if let Some(m) = p.action.kernel_module()
            && !f.kernel_modules.contains(&m)
        {
            f.kernel_modules.push(m);
        }
        f.uses_graphs |= p.action.is_graph();
        if let Some(at) = self.oom_at
            && !self.oom_at_found
        {
            self.oom_at_found = names_step(at, phase, &p.label);
        }
    }

    /// Whether an action of the `[expect] oom` step was seen.
    pub(crate) fn oom_at_found(&self) -> bool {
        self.oom_at_found
    }

    pub(crate) fn finish(self) -> Facts {
        self.facts
    }
}

/// Whether `at` ("phase/step") names the action `label` of `phase` or the step it came from
/// (`load/3` names `load/3.12`): `OomExpectation::matches`, without building the string.
fn names_step(at: &str, phase: &str, label: &str) -> bool {
    let full = || {
        phase
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(label.bytes())
    };
    let full_len = phase.len() + 1 + label.len();
    match full_len.cmp(&at.len()) {
        std::cmp::Ordering::Equal => full().eq(at.bytes()),
        std::cmp::Ordering::Greater => full()
            .take(at.len() + 1)
            .eq(at.bytes().chain(std::iter::once(b'.'))),
        std::cmp::Ordering::Less => false,
    }
}

#[cfg(test)]
mod tests {
    use super::names_step;

    #[test]
    fn a_step_names_its_actions_and_no_other_step() {
        assert!(names_step("load/s3", "load", "s3"));
        assert!(names_step("load/s3", "load", "s3.12"));
        assert!(!names_step("load/s3", "load", "s31"));
        assert!(!names_step("load/s3", "loader", "s3"));
        assert!(names_step("a/b", "a/b.c", "s1"));
    }
}
