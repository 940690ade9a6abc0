//! Workload files: named phases of steps, as written in TOML, and the checks that run before
//! anything touches the device.
//!
//! A workload is read in stages so that every error can name its place: the file, then each
//! phase, then each step (`parse`); patterns expand into primitive actions and every name's
//! lifetime is checked (`expand`). Nothing is allocated until all of it has passed.
//!
//! Expanded actions are not kept: the check walks them once and keeps what the run must know
//! beforehand (`facts`), and the run expands the file again as it goes, phase by phase, so its
//! memory does not grow with the number of steps.

pub mod action;
pub mod expand;
pub mod facts;
pub mod fit;
pub mod parse;
pub mod rank;
pub mod step;
pub mod step_id;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::alloc::AllocatorSpec;

pub use expand::{Action, Planned, Via};
pub use rank::Rank;
pub use step::Step;

/// A workload, parsed and expanded, ready to run.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub name: String,
    pub description: String,
    /// The smallest CUDA-visible total the workload states it fits on.
    pub min_total_bytes: Option<u64>,
    pub file: PathBuf,
    pub settings: Settings,
    pub allocator: AllocatorSpec,
    pub phases: Vec<Phase>,
    pub expect: Expect,
    /// What is known of every action before the run.
    #[serde(skip)]
    pub facts: facts::Facts,
    /// The parsed file, to expand again as the run goes.
    #[serde(skip)]
    source: std::sync::Arc<Source>,
    /// When no size or bound depended on the device's total: the largest single allocation
    /// (the walk for any total at least this large is this one).
    #[serde(skip)]
    any_total: Option<u64>,
}

/// A parsed file with what its expansion was resolved against.
#[derive(Debug)]
struct Source {
    file: parse::FileWorkload,
    path: PathBuf,
    total_bytes: u64,
    rank: Rank,
}

/// Run settings a workload may set (the command line can override them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// Background sampler interval; 0 reads as fast as the query allows.
    pub sample_interval_ns: u64,
    /// Free memory a step may not go below unless OOM is allowed (None: the default floor).
    pub keep_free_bytes: Option<u64>,
    /// Lets steps go past free memory (and into OOM).
    pub allow_oom: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sample_interval_ns: 1_000_000,
            keep_free_bytes: None,
            allow_oom: false,
        }
    }
}

/// What the workload expects of its run, checked at the end (exit code 1 if any fails).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Expect {
    pub oom: OomExpectation,
    /// Upper bounds on the true run peak of views, by view key.
    pub max_peak_bytes: Vec<(crate::record::View, u64)>,
    /// Device free memory at the run's device-used peak must stay at or above this.
    pub min_headroom_bytes: Option<u64>,
    /// Most `verify` mismatches allowed in total.
    pub max_mismatches: Option<u64>,
}

/// The name of member `index` of the group `group`: `w[3]`.
pub fn member_name(group: &str, index: impl Into<u64>) -> String {
    let mut buf = [0; 20];
    let digits = crate::record::timeline::decimal(index.into(), &mut buf);
    let mut name = String::with_capacity(group.len() + digits.len() + 2);
    name.push_str(group);
    name.push('[');
    name.push_str(digits);
    name.push(']');
    name
}

/// The index of `name` as a member of `group` (`w[3]` → 3), if it is one.
pub fn member_index(group: &str, name: &str) -> Option<u64> {
    name.strip_prefix(group)?
        .strip_prefix('[')?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Whether the run should end in an out-of-memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OomExpectation {
    /// An OOM fails the run (the default).
    #[default]
    None,
    /// The run must hit an OOM somewhere.
    Any,
    /// The run must hit an OOM at this step (`phase/step label`).
    At(String),
}

impl OomExpectation {
    /// Whether an OOM at `phase`/`step` is the one expected (`At` names a step or a step
    /// whose actions it expanded to: `load/3` matches `load/3.12`).
    pub fn matches(&self, phase: &str, step: &str) -> bool {
        match self {
            OomExpectation::None => false,
            OomExpectation::Any => true,
            OomExpectation::At(at) => {
                let full = format!("{phase}/{step}");
                full == *at || full.starts_with(&format!("{at}."))
            }
        }
    }
}

/// One named phase and how many primitive actions it expands to (they are made as the run
/// goes: `Workload::expander`).
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: String,
    pub planned: u64,
}

/// A workload file read and parsed once, to be expanded for a device (sizes given as a share
/// of the device resolve against its total).
#[derive(Debug, Clone)]
pub struct WorkloadFile {
    path: std::path::PathBuf,
    parsed: parse::FileWorkload,
    /// The rank it was read for (`{rank}` replaced; `comm` sizes by the rank count).
    rank: Rank,
    /// What `check` found, kept when no size or bound depended on the device's total, so
    /// that `expand` for a device that holds its largest allocation need not walk it again.
    checked: std::sync::OnceLock<Workload>,
}

impl WorkloadFile {
    /// Reads and parses `path`: every key, size and step is checked.
    pub fn read(path: &Path) -> Result<WorkloadFile, parse::WorkloadError> {
        WorkloadFile::read_ranked(path, Rank::SINGLE)
    }

    /// `read` for one rank of a node or fleet: `{rank}` and `{rank_count}` in the file are
    /// replaced with its numbers before it is parsed. A `path` that names no file but a shipped
    /// workload (`quickstart`, `oom/fragmentation`) reads that one.
    pub fn read_ranked(path: &Path, rank: Rank) -> Result<WorkloadFile, parse::WorkloadError> {
        use crate::shipped::{self, Kind};
        if let Some(text) = shipped::text_for(path, Kind::Workload) {
            return WorkloadFile::from_text(text, path, rank);
        }
        let text = parse::read_bounded(path).map_err(|mut e| {
            e.message
                .push_str(&shipped::not_found_hint(path, Kind::Workload));
            e
        })?;
        WorkloadFile::from_text(&text, path, rank)
    }

    /// `read_ranked` of text already read from `path` (which errors name).
    pub fn from_text(
        text: &str,
        path: &Path,
        rank: Rank,
    ) -> Result<WorkloadFile, parse::WorkloadError> {
        // What parsing would cost is bounded before anything is parsed.
        parse::check_step_count(text, path)?;
        Ok(WorkloadFile {
            path: path.to_path_buf(),
            parsed: parse::parse(&rank.substitute(text), path)?,
            rank,
            checked: std::sync::OnceLock::new(),
        })
    }

    /// The workload for a device of `total_bytes` (CUDA-visible): every action expanded and
    /// checked, no single allocation above the total.
    pub fn expand(&self, total_bytes: u64) -> Result<Workload, parse::WorkloadError> {
        if let Some(w) = self.checked.get()
            && w.any_total.is_some_and(|largest| largest <= total_bytes)
        {
            // The walk `check` made is the one for this total: only the total differs.
            return Ok(w.for_total(total_bytes));
        }
        expand::expand(self.parsed.clone(), &self.path, total_bytes, self.rank)
    }

    /// `expand` with every action made and checked, none counted (`expand::forward`): what
    /// `expand` must agree with exactly, for tests.
    #[doc(hidden)]
    pub fn expand_every_action(&self, total_bytes: u64) -> Result<Workload, parse::WorkloadError> {
        expand::expand_with(
            self.parsed.clone(),
            &self.path,
            total_bytes,
            self.rank,
            false,
        )
    }

    /// The smallest CUDA-visible total the file states it fits on (`[workload]
    /// min_total_bytes`).
    pub fn min_total_bytes(&self) -> Option<u64> {
        self.parsed.min_total_bytes
    }

    /// Everything that can be checked before a device is known (an expansion against an
    /// unbounded device), so a bad file is refused before any GPU is touched.
    pub fn check(&self) -> Result<(), parse::WorkloadError> {
        let w = expand::expand(self.parsed.clone(), &self.path, u64::MAX, self.rank)?;
        if w.any_total.is_some() {
            let _ = self.checked.set(w);
        }
        Ok(())
    }
}

impl Workload {
    /// Reads, parses and expands a workload file. `total_bytes` is the device's CUDA-visible
    /// total, for the check that no single allocation exceeds it.
    pub fn load(path: &Path, total_bytes: u64) -> Result<Workload, parse::WorkloadError> {
        WorkloadFile::read(path)?.expand(total_bytes)
    }

    /// `load` for one rank of a node or fleet: `{rank}` and `{rank_count}` in the file are
    /// replaced with its numbers before it is parsed.
    pub fn load_ranked(
        path: &Path,
        total_bytes: u64,
        rank: Rank,
    ) -> Result<Workload, parse::WorkloadError> {
        WorkloadFile::read_ranked(path, rank)?.expand(total_bytes)
    }

    pub fn from_toml(
        text: &str,
        path: &Path,
        total_bytes: u64,
    ) -> Result<Workload, parse::WorkloadError> {
        Workload::from_toml_ranked(text, path, total_bytes, Rank::SINGLE)
    }

    /// Parses and expands text whose `{rank}` placeholders are already replaced.
    pub fn from_toml_ranked(
        text: &str,
        path: &Path,
        total_bytes: u64,
        rank: Rank,
    ) -> Result<Workload, parse::WorkloadError> {
        let file = parse::parse(text, path)?;
        expand::expand(file, path, total_bytes, rank)
    }

    /// The largest sum of bytes the workload's own allocations hold at once, as planned
    /// (requested sizes, before any rounding; allocations filled at run time not counted).
    pub fn planned_peak_bytes(&self) -> u64 {
        let mut live = std::collections::HashMap::new();
        // Wide: sizes resolved against an unbounded device may sum past `u64::MAX`.
        let (mut live_bytes, mut peak) = (0u128, 0u128);
        let mut ex = self.expander();
        for _ in &self.phases {
            ex.phase(&mut |p| {
                match p.action {
                    Action::Allocate { name, bytes, .. } => {
                        let old = live.insert(name, bytes).unwrap_or(0);
                        live_bytes = live_bytes - u128::from(old) + u128::from(bytes);
                    }
                    Action::Free { name } => {
                        live_bytes -= u128::from(live.remove(&name).unwrap_or(0));
                    }
                    _ => return true,
                }
                peak = peak.max(live_bytes);
                true
            })
            .expect("the workload expanded once already");
        }
        u64::try_from(peak).unwrap_or(u64::MAX)
    }

    /// This workload for a device of `total_bytes`, when its walk did not depend on the total
    /// (`any_total`).
    fn for_total(&self, total_bytes: u64) -> Workload {
        let s = &self.source;
        Workload {
            source: std::sync::Arc::new(Source {
                file: s.file.clone(),
                path: s.path.clone(),
                total_bytes,
                rank: s.rank,
            }),
            ..self.clone()
        }
    }

    /// The actions again, phase by phase, as they are made: a run holds only the one it runs.
    pub fn expander(&self) -> expand::Expander<'_> {
        let s = &*self.source;
        expand::Expander::new(&s.file, &s.path, s.total_bytes, s.rank)
    }

    /// Every planned action, phase by phase, all made at once (for tests and tools that look
    /// at a small workload whole; a run uses `expander`).
    pub fn actions(&self) -> std::vec::IntoIter<(usize, Planned)> {
        let mut out = Vec::new();
        let mut ex = self.expander();
        for pi in 0..self.phases.len() {
            ex.phase(&mut |p| {
                out.push((pi, p));
                true
            })
            .expect("the workload expanded once already");
        }
        out.into_iter()
    }

    /// The planned actions of phase `index`, all made at once (see `actions`).
    pub fn phase_actions(&self, index: usize) -> Vec<Planned> {
        self.actions()
            .filter(|(pi, _)| *pi == index)
            .map(|(_, p)| p)
            .collect()
    }
}
