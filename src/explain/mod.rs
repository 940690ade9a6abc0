//! The diagnosis of an out-of-memory message: the arithmetic its numbers allow, the cause in
//! the project's vocabulary (the causes `oom::diagnose` gives a run's OOM, plus
//! `fraction-cap`), what the numbers rule out, what they leave undecided, and the next checks
//! as commands to run.
//!
//! Every conclusion is drawn on intervals (`interval`): a case the printed precision cannot
//! decide is reported as undecided, with the two candidates, rather than picked.

mod context;
mod frameworks;
mod generic;
pub mod group;
mod interval;
mod other;
pub mod render;
#[cfg(test)]
mod rule_tests;
mod serving;
mod torch;

use serde::Serialize;

use crate::oom_message::{Detail, OomMessage, Unrecognized};
pub use group::{Groups, Repeat};
pub use interval::{Iv, Verdict};

/// Version of the `--json` layout.
pub const FORMAT_VERSION: u32 = 1;

pub use crate::cause::Cause;

/// The causes `explain` can name: those of `oom::diagnose`, so a message and a reproduction
/// share a word, plus the allocator's own cap.
pub mod cause {
    use super::Cause;

    pub const FRAGMENTATION: Cause = Cause::Fragmentation;
    pub const OTHER_PROCESS: Cause = Cause::OtherProcess;
    pub const OUTSIDE_ALLOCATOR: Cause = Cause::OutsideAllocator;
    pub const GRAPH_POOL: Cause = Cause::GraphPool;
    pub const PENDING_FREE: Cause = Cause::PendingFree;
    pub const HELD_OUTSIDE_ANY_ALLOCATOR: Cause = Cause::HeldOutsideAnyAllocator;
    pub const CAPACITY: Cause = Cause::Capacity;
    /// The allocator's own cap (`set_per_process_memory_fraction`, a BFC limit, JAX's
    /// preallocated fraction) refused the request while the device had room.
    pub const FRACTION_CAP: Cause = Cause::FractionCap;

    /// Every cause `explain` can name.
    pub const ALL: [Cause; 8] = [
        FRAGMENTATION,
        OTHER_PROCESS,
        OUTSIDE_ALLOCATOR,
        GRAPH_POOL,
        PENDING_FREE,
        HELD_OUTSIDE_ANY_ALLOCATOR,
        CAPACITY,
        FRACTION_CAP,
    ];
}

/// The shipped workload that reproduces a cause (`workloads/oom/…`), if one does.
pub fn scenario(cause: Cause) -> Option<&'static str> {
    // A message's "capacity" is demand beyond the card, which peak-not-idle shows.
    cause.scenario()
}

/// One line of arithmetic: a derived figure, how it was derived, and its bounds.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Step {
    /// What the figure is, with its unit in the name (`other_processes_bytes`).
    pub name: String,
    /// How it was computed from the message's figures.
    pub formula: String,
    #[serde(flatten)]
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Value {
    /// Raw bytes, inclusive bounds.
    Bytes { low: i64, high: i64 },
    /// A fraction between 0 and 1, inclusive bounds.
    Fraction { low: f64, high: f64 },
    /// A count (tokens, elements).
    Count { value: u64 },
}

/// A question the numbers cannot settle, and what would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Undecided {
    pub question: String,
    pub candidates: Vec<Cause>,
    pub why: String,
}

/// A command to run next, and what it tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Check {
    /// Where it runs: `shell`, or `python` (a line for the failing program itself).
    pub kind: CheckKind,
    pub command: String,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CheckKind {
    Shell,
    Python,
}

/// The diagnosis of one message.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Explanation {
    pub message: OomMessage,
    /// One sentence for people.
    pub summary: String,
    pub arithmetic: Vec<Step>,
    /// The cause the numbers decide; `None` when they cannot (see `undecided`).
    pub cause: Option<Cause>,
    pub secondary_causes: Vec<Cause>,
    pub ruled_out: Vec<String>,
    pub undecided: Vec<Undecided>,
    /// Facts from the numbers that are not a cause (sentences).
    pub findings: Vec<String>,
    /// Two figures cannot both hold (a finding names them): the cause is undecided unless the
    /// other figures decide it alone.
    pub contradicted: bool,
    pub next_checks: Vec<Check>,
}

/// Everything `explain` says about a text.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Report {
    pub format_version: u32,
    /// One per distinct message, in order of first appearance (a repeated message is
    /// explained once, at its first line).
    pub explanations: Vec<Explanation>,
    /// The messages printed more than once: how often, first and last line.
    pub repeats: Vec<Repeat>,
    /// Lines that mention out-of-memory in a format none of the readers knows.
    pub unrecognized: Vec<Unrecognized>,
    /// The unrecognized lines printed more than once (`message` is the 1-based index in
    /// `unrecognized`).
    pub unrecognized_repeats: Vec<Repeat>,
    /// Unrecognized lines past the first 1,000 of a streamed text, counted but not listed.
    pub unrecognized_left_out: u64,
    pub known_formats: Vec<&'static str>,
}

/// Reads `text` (a message or a whole log) and explains every message in it.
pub fn explain_text(text: &str) -> Report {
    let (messages, unrecognized) = crate::oom_message::scan_text(text);
    let (mut messages_seen, mut lines_seen) = (Groups::new(), Groups::new());
    let distinct = messages
        .into_iter()
        .filter(|m| messages_seen.see_message(m))
        .collect();
    let unrecognized = unrecognized
        .into_iter()
        .filter(|u| lines_seen.see_line(u))
        .collect();
    Report {
        format_version: FORMAT_VERSION,
        explanations: explain_all(distinct),
        repeats: messages_seen.repeats(),
        unrecognized,
        unrecognized_repeats: lines_seen.repeats(),
        unrecognized_left_out: 0,
        known_formats: crate::oom_message::Format::ALL
            .iter()
            .map(|f| f.name())
            .collect(),
    }
}

/// Explains each message; a later message may lean on an earlier one of the same event (a
/// TensorFlow tensor OOM on the BFC allocator message and statistics logged before it).
pub fn explain_all(messages: Vec<OomMessage>) -> Vec<Explanation> {
    let mut out: Vec<Explanation> = Vec::with_capacity(messages.len());
    for m in messages {
        let e = explain(m, &out);
        out.push(e);
    }
    out
}

/// Explains one message; `earlier` holds the explanations of the messages before it.
pub fn explain(message: OomMessage, earlier: &[Explanation]) -> Explanation {
    let mut d = Diagnosis::default();
    match &message.detail {
        Detail::PytorchCaching { .. }
        | Detail::PytorchCachingLegacy { .. }
        | Detail::PytorchCudaMallocAsync { .. } => torch::diagnose(&message.detail, &mut d),
        Detail::VllmStartupFreeMemory { .. }
        | Detail::VllmNoKvCacheMemory {}
        | Detail::VllmKvCacheTooSmall { .. }
        | Detail::VllmMaxSeqLen { .. }
        | Detail::VllmSamplerWarmup { .. } => serving::diagnose(&message.detail, &mut d),
        Detail::PytorchMps { .. }
        | Detail::ThcRuntimeError { .. }
        | Detail::StreamExecutorContext { .. }
        | Detail::GgmlCudaAlloc { .. }
        | Detail::GgmlCudaError { .. }
        | Detail::PaddleOutOfMemory { .. }
        | Detail::CupyOutOfMemory { .. }
        | Detail::OnnxruntimeBfcArena { .. }
        | Detail::XlaAllocateRequest { .. }
        | Detail::TfGpuOomBytes { .. } => frameworks::diagnose(&message.detail, &mut d),
        Detail::Generic { .. } => generic::diagnose(&message.detail, &mut d),
        _ => other::diagnose(&message.detail, earlier, &mut d),
    }
    if let Some(f) = &message.cut_figure {
        let what = f.label.map_or("a figure".to_string(), |l| {
            format!("the {} figure", l.as_str().replace('_', "-"))
        });
        d.findings.push(format!(
            "The text ends inside {what}, cut before its unit: \"{}\" can stand for anything from {} to {} bytes, so it is listed, not used in the arithmetic.",
            f.quantity.printed, f.quantity.bytes.low, f.quantity.bytes.high
        ));
    }
    if !message.nearby.is_empty() {
        const SHOWN: usize = 8;
        let mut shown: Vec<String> = message
            .nearby
            .iter()
            .take(SHOWN)
            .map(|f| f.quantity.printed.clone())
            .collect();
        if message.nearby.len() > SHOWN {
            shown.push(format!("{} more", message.nearby.len() - SHOWN));
        }
        d.findings.push(format!(
            "Sizes on the lines around the message, printed by the program or the log rather than by the message: {}; listed, not used in the arithmetic.",
            shown.join(", ")
        ));
    }
    d.finish(message)
}

/// An explanation under construction.
#[derive(Debug, Default)]
pub(crate) struct Diagnosis {
    pub summary: String,
    pub arithmetic: Vec<Step>,
    pub cause: Option<Cause>,
    pub secondary_causes: Vec<Cause>,
    pub ruled_out: Vec<String>,
    pub undecided: Vec<Undecided>,
    pub findings: Vec<String>,
    pub next_checks: Vec<Check>,
    /// Two figures of the message cannot both hold (a finding names them): the arithmetic that
    /// would name a cause rests on them, so the cause is left undecided.
    pub contradicted: bool,
    /// Causes the figures that do not contradict decide alone (a cap decided by the request,
    /// free memory and the cap, when only the process's own figure is wrong): kept.
    pub contradiction_spares: Vec<Cause>,
}

fn saturating_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl Diagnosis {
    /// Records a derived byte figure and returns it.
    pub fn bytes(&mut self, name: &str, formula: &str, iv: Iv) -> Iv {
        self.arithmetic.push(Step {
            name: name.to_string(),
            formula: formula.to_string(),
            value: Value::Bytes {
                low: saturating_i64(iv.low),
                high: saturating_i64(iv.high),
            },
        });
        iv
    }

    /// Records `part / whole` as a fraction and returns it.
    pub fn fraction(
        &mut self,
        name: &str,
        formula: &str,
        part: Iv,
        whole: Iv,
    ) -> Option<(f64, f64)> {
        let r = part.ratio(whole)?;
        self.arithmetic.push(Step {
            name: name.to_string(),
            formula: formula.to_string(),
            value: Value::Fraction {
                low: r.0,
                high: r.1,
            },
        });
        Some(r)
    }

    pub fn count(&mut self, name: &str, formula: &str, value: u64) {
        self.arithmetic.push(Step {
            name: name.to_string(),
            formula: formula.to_string(),
            value: Value::Count { value },
        });
    }

    pub fn check(&mut self, command: impl Into<String>, why: impl Into<String>) {
        self.push_check(CheckKind::Shell, command.into(), why.into());
    }

    /// A line to add to the failing program.
    pub fn check_python(&mut self, line: impl Into<String>, why: impl Into<String>) {
        self.push_check(CheckKind::Python, line.into(), why.into());
    }

    fn push_check(&mut self, kind: CheckKind, command: String, why: String) {
        if !self.next_checks.iter().any(|c| c.command == command) {
            self.next_checks.push(Check { kind, command, why });
        }
    }

    pub fn undecided(&mut self, question: String, candidates: Vec<Cause>, why: String) {
        self.undecided.push(Undecided {
            question,
            candidates,
            why,
        });
    }

    pub fn secondary(&mut self, cause: Cause) {
        if self.cause != Some(cause) && !self.secondary_causes.contains(&cause) {
            self.secondary_causes.push(cause);
        }
    }

    /// The reproduction of the primary cause first, then the rest in order of insertion.
    fn finish(mut self, message: OomMessage) -> Explanation {
        if self.contradicted
            && self
                .cause
                .is_some_and(|c| !self.contradiction_spares.contains(&c))
            && let Some(c) = self.cause.take()
        {
            let mut candidates = vec![c];
            candidates.append(&mut self.secondary_causes);
            self.undecided(
                "Which cause?".into(),
                candidates,
                "the figures contradict each other (see the findings), and the arithmetic that would name the cause rests on them".into(),
            );
        }
        let mut checks = Vec::new();
        if let Some(path) = self.cause.and_then(scenario) {
            checks.push(Check {
                kind: CheckKind::Shell,
                command: format!("headroom run {path}"),
                why: format!(
                    "reproduces `{}` on this card (or on the simulator without a GPU), with the evidence at the refusal",
                    self.cause.map_or("", |c| c.as_str())
                ),
            });
        }
        if self.cause.is_none() {
            for c in self.undecided.iter().flat_map(|u| u.candidates.iter()) {
                if let Some(path) = scenario(*c)
                    && !checks.iter().any(|k: &Check| k.command.ends_with(path))
                {
                    checks.push(Check {
                        kind: CheckKind::Shell,
                        command: format!("headroom run {path}"),
                        why: format!("reproduces `{c}`, one of the candidates, with the evidence that tells it apart"),
                    });
                }
            }
        }
        checks.append(&mut self.next_checks);
        Explanation {
            message,
            summary: self.summary,
            arithmetic: self.arithmetic,
            cause: self.cause,
            secondary_causes: self.secondary_causes,
            ruled_out: self.ruled_out,
            undecided: self.undecided,
            findings: self.findings,
            contradicted: self.contradicted,
            next_checks: checks,
        }
    }
}

/// The snapshot checks, for the frameworks that can record one (PyTorch, vLLM on PyTorch).
pub(crate) fn snapshot_checks(d: &mut Diagnosis) {
    d.check_python(
        "torch.cuda.memory._record_memory_history(max_entries=1_000_000)",
        "at the start of the program, with torch.cuda.memory._dump_snapshot(\"oom.pickle\") in the except handler: records every allocation and free up to the failure",
    );
    d.check(
        "headroom import torch oom.pickle",
        "turns the snapshot into a headroom allocation log: segments, blocks and the failing request",
    );
    d.check(
        "headroom replay oom.pickle --try-settings",
        "replays the snapshot under other allocator settings and says which would have served the request",
    );
}

/// Who holds memory on the device now, to compare with the message.
pub(crate) fn nvidia_smi_check(d: &mut Diagnosis) {
    d.check(
        "nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
        "lists every process holding memory on the GPUs, by PID, to match against the message",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_named_exists() {
        for c in cause::ALL {
            if let Some(path) = scenario(c) {
                let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
                assert!(full.is_file(), "{path}");
            }
        }
    }
}
