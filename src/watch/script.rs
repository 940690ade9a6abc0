//! A usage script for the simulated device (`watch --sim-script FILE`): what the watched job
//! holds over time, replayed from the moment it starts, so that `watch` runs without a driver
//! with exact, known numbers. A simulated device cannot see another process's memory; the
//! script says what NVML would have listed for the job.
//!
//! ```toml
//! # from each `at` (after the job starts) on, its processes hold `job_used`
//! usage = [
//!   { at = "0ms", job_used = "0B" },
//!   { at = "50ms", job_used = "1280MiB" },
//!   { at = "350ms", job_used = "512MiB" },
//! ]
//! ```

use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::device::NvmlMemory;
use crate::device::ProcessUsage;
use crate::device::profile::SimProfile;
use crate::device::reading::{RawReading, Reader};
use crate::units::{Bytes, DurationNs, Nanos, Size};
use crate::watch::source::ProcessProbe;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    usage: Vec<Row>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    at: DurationNs,
    job_used: Size,
}

/// The largest usage script read (a script is a few lines a step; a workload file's bound is
/// twice this).
const SCRIPT_MAX_BYTES: u64 = 64 << 20;

/// `(from ns after the job's start, bytes)`, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageScript {
    steps: Vec<(u64, u64)>,
}

impl UsageScript {
    pub fn load(path: &Path) -> anyhow::Result<UsageScript> {
        let text = crate::bounded::read_small_text(path, SCRIPT_MAX_BYTES)
            .with_context(|| format!("cannot read the usage script {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses a script; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<UsageScript> {
        // The parser's own message names the place; its quote of the line (which may be the
        // whole file) is left out.
        let f: ScriptFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |s| {
                text.as_bytes()[..s.start.min(text.len())]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1
            });
            anyhow::anyhow!(
                "{origin}: line {line}: not a usage script (usage = [{{ at, job_used }}, …]): {}",
                crate::bounded::quote_str(e.message().trim())
            )
        })?;
        if f.usage.is_empty() {
            bail!("{origin}: `usage` is empty: give at least one {{ at, job_used }} row");
        }
        let mut steps = Vec::with_capacity(f.usage.len());
        for (i, r) in f.usage.iter().enumerate() {
            if let Some(&(prev, _)) = steps.last()
                && r.at.0 <= prev
            {
                bail!(
                    "{origin}: usage row {}: at = {} is not after the row before ({})",
                    i + 1,
                    Nanos(r.at.0),
                    Nanos(prev)
                );
            }
            steps.push((r.at.0, r.job_used.0));
        }
        Ok(UsageScript { steps })
    }

    /// What the job holds `since_start_ns` after it started (nothing before the first row).
    pub fn job_used_at(&self, since_start_ns: u64) -> u64 {
        let n = self.steps.partition_point(|&(at, _)| at <= since_start_ns);
        n.checked_sub(1).map_or(0, |i| self.steps[i].1)
    }

    pub fn peak_bytes(&self) -> u64 {
        self.steps.iter().map(|s| s.1).max().unwrap_or(0)
    }
}

/// The simulated device with a scripted job on it (and the profile's other processes).
#[derive(Debug)]
pub struct SimJob {
    profile: SimProfile,
    script: UsageScript,
    origin: Instant,
    /// When the job started, and its pid.
    started: OnceLock<(Instant, u32)>,
    /// When it ended: its memory is gone from then on.
    ended: OnceLock<Instant>,
}

impl SimJob {
    /// Checks that the script fits on the device beside the profile's other processes.
    pub fn new(profile: SimProfile, script: UsageScript, origin: Instant) -> anyhow::Result<Self> {
        let total = profile.memory.total_bytes.0;
        let others: u64 = profile.other_processes.iter().map(|p| p.bytes.0).sum();
        if script.peak_bytes().saturating_add(others) > total {
            bail!(
                "the usage script's job_used reaches {} but the simulated {} has {} ({} of it held by the profile's other processes)",
                Bytes(script.peak_bytes()),
                profile.name,
                Bytes(total),
                Bytes(others)
            );
        }
        Ok(SimJob {
            profile,
            script,
            origin,
            started: OnceLock::new(),
            ended: OnceLock::new(),
        })
    }

    pub fn profile(&self) -> &SimProfile {
        &self.profile
    }

    /// The job started now as `pid` (attached or launched).
    pub fn start(&self, pid: u32) {
        let _ = self.started.set((Instant::now(), pid));
    }

    /// The job ended now.
    pub fn end(&self) {
        let _ = self.ended.set(Instant::now());
    }

    fn job(&self) -> Option<(u32, u64)> {
        let (t0, pid) = *self.started.get()?;
        if self.ended.get().is_some() {
            return None;
        }
        Some((pid, self.script.job_used_at(t0.elapsed().as_nanos() as u64)))
    }

    fn others(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let t = self.origin.elapsed().as_nanos() as u64;
        self.profile.other_processes.iter().filter_map(move |p| {
            let end = p
                .duration
                .map_or(u64::MAX, |d| p.start.0.saturating_add(d.0));
            (p.start.0 <= t && t < end).then_some((p.pid, p.bytes.0))
        })
    }
}

/// The scripted device as NVML would read it: what the profile's other processes and the
/// job hold now.
impl Reader for SimJob {
    fn read(&self) -> Result<RawReading, String> {
        let used = self.others().map(|(_, b)| b).sum::<u64>() + self.job().map_or(0, |j| j.1);
        let total = self.profile.memory.total_bytes.0;
        let free_bytes = total.saturating_sub(used);
        Ok(RawReading {
            t_ns: self.now_ns(),
            free_bytes,
            total_bytes: total,
            nvml: Some(NvmlMemory {
                total_bytes: total,
                reserved_bytes: Some(0),
                used_bytes: used.min(total),
                free_bytes,
            }),
        })
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

impl ProcessProbe for SimJob {
    fn processes(&self) -> Result<Vec<ProcessUsage>, String> {
        let mut list: Vec<ProcessUsage> = self
            .others()
            .map(|(pid, b)| ProcessUsage {
                pid,
                used_bytes: Some(b),
                is_self: false,
            })
            .collect();
        if let Some((pid, bytes)) = self.job().filter(|j| j.1 > 0) {
            list.push(ProcessUsage {
                pid,
                used_bytes: Some(bytes),
                is_self: false,
            });
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_with_a_long_line_is_refused_in_a_short_message() {
        let text = format!("usage = [\"{}", "\0".repeat(1 << 20));
        let e = format!("{:#}", UsageScript::parse(&text, "s.toml").unwrap_err());
        assert!(e.len() < 1024, "{} bytes", e.len());
        assert!(e.starts_with("s.toml: line 1: not a usage script"), "{e}");
    }

    const SCRIPT: &str = r#"usage = [
  { at = "0ms", job_used = "0B" },
  { at = "50ms", job_used = "1280MiB" },
  { at = "350ms", job_used = "512MiB" },
]"#;

    #[test]
    fn a_script_steps_from_row_to_row() {
        let s = UsageScript::parse(SCRIPT, "s.toml").unwrap();
        assert_eq!(s.job_used_at(0), 0);
        assert_eq!(s.job_used_at(49_999_999), 0);
        assert_eq!(s.job_used_at(50_000_000), 1280 << 20);
        assert_eq!(s.job_used_at(10_000_000_000), 512 << 20);
        assert_eq!(s.peak_bytes(), 1280 << 20);
        let late = UsageScript::parse(r#"usage = [{ at = "1s", job_used = 5 }]"#, "s").unwrap();
        assert_eq!(late.job_used_at(0), 0);
    }

    #[test]
    fn bad_scripts_name_the_row() {
        let e = UsageScript::parse(
            r#"usage = [{ at = "2ms", job_used = "1MiB" }, { at = "1ms", job_used = "0B" }]"#,
            "s.toml",
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("usage row 2"), "{e:#}");
        let e =
            UsageScript::parse(r#"usage = [{ at = "1ms", job = "1GiB" }]"#, "s.toml").unwrap_err();
        assert!(format!("{e:#}").contains("s.toml"), "{e:#}");
        assert!(UsageScript::parse("usage = []", "s").is_err());
        let p = SimProfile::resolve("tiny-4g").unwrap();
        let big =
            UsageScript::parse(r#"usage = [{ at = "0ms", job_used = "5GiB" }]"#, "s").unwrap();
        assert!(SimJob::new(p, big, Instant::now()).is_err());
    }

    #[test]
    fn the_job_holds_memory_between_its_start_and_end() {
        let p = SimProfile::resolve("tiny-4g").unwrap();
        let s = UsageScript::parse(r#"usage = [{ at = "0ms", job_used = "1GiB" }]"#, "s").unwrap();
        let job = SimJob::new(p, s, Instant::now()).unwrap();
        assert_eq!(job.read().unwrap().used_bytes(), 0);
        assert!(job.processes().unwrap().is_empty());
        job.start(77);
        assert_eq!(job.read().unwrap().used_bytes(), 1 << 30);
        assert_eq!(job.read().unwrap().free_bytes, 3 << 30);
        assert_eq!(job.processes().unwrap()[0].pid, 77);
        job.end();
        assert_eq!(job.read().unwrap().used_bytes(), 0);
    }
}
