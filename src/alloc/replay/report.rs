//! What a replay reports: the structs (serialized for machines) and a text form for people.

use std::fmt;

use serde::Serialize;

use crate::alloc::{AllocStats, OomRequest};

use super::fidelity::Fidelity;
use crate::units::Bytes;

/// Which log format a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Headroom,
    Rmm,
    /// A PyTorch memory snapshot's trace (`torch.cuda.memory._dump_snapshot`).
    TorchSnapshot,
}

impl LogFormat {
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Headroom => "headroom",
            LogFormat::Rmm => "RMM",
            LogFormat::TorchSnapshot => "PyTorch snapshot",
        }
    }

    /// What a position in the source is called: a log's line, a snapshot's trace entry.
    pub fn position_word(self) -> &'static str {
        match self {
            LogFormat::TorchSnapshot => "entry",
            _ => "line",
        }
    }

    /// `entries` or `lines`.
    pub fn position_words(self) -> &'static str {
        match self {
            LogFormat::TorchSnapshot => "entries",
            _ => "lines",
        }
    }
}

/// A line skipped under `BadRowPolicy::Collect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BadRow {
    pub line: u64,
    pub message: String,
}

/// The highest value of a view and the log line where it was first reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Peak {
    pub bytes: u64,
    pub line: u64,
}

impl Peak {
    pub(super) fn see(&mut self, bytes: u64, line: u64) {
        if bytes > self.bytes {
            *self = Peak { bytes, line };
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ReplayPeaks {
    pub alloc_allocated: Peak,
    pub alloc_reserved: Peak,
    pub alloc_requested: Peak,
    /// Whole device, all processes (`cuMemGetInfo`).
    pub device_used: Peak,
}

/// The allocation the allocator refused, and the views at that moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ReplayFailure {
    pub line: u64,
    pub requested_bytes: u64,
    /// The stream as the log names it.
    pub log_stream: String,
    pub error: String,
    /// The allocator's evidence (rounding, driver request, steps taken).
    pub oom: Option<OomRequest>,
    pub alloc_allocated_bytes: u64,
    pub alloc_reserved_bytes: u64,
    pub device_used_bytes: u64,
    pub device_free_bytes: u64,
    /// Where the program made the request (a snapshot's stack frame), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ReplayReport {
    /// The log's file name (or what the caller called the input).
    pub source: String,
    pub format: LogFormat,
    /// The allocator and its settings.
    pub allocator: String,
    /// The device and, on the simulator, its profile.
    pub device: String,
    /// Every allocation of the log succeeded.
    pub fits: bool,
    /// Log lines applied (allocations, frees, record_stream, empty_cache).
    pub events: u64,
    pub allocations: u64,
    pub frees: u64,
    /// Failure lines in the log itself.
    pub logged_failures: u64,
    /// Allocations the log says were refused and that were refused again.
    pub failures_still_refused: u64,
    /// Lines of allocations the log says were refused that this replay could serve (each is
    /// freed at once: the logged program never had it).
    pub failures_now_served: Vec<u64>,
    /// Device used before the first event (context and other processes included).
    pub device_used_idle_bytes: u64,
    pub peaks: ReplayPeaks,
    pub first_failure: Option<ReplayFailure>,
    /// The allocator's counters after the last event replayed.
    pub final_stats: AllocStats,
    /// Device time the replay took (virtual on the simulator).
    pub device_ns: u64,
    pub bad_rows: Vec<BadRow>,
    /// How many of the recording allocator's segment decisions the replay made again (a
    /// snapshot replayed with the caching allocator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Fidelity>,
    /// Where the replay's segments went: at the trace's recorded addresses, or from which
    /// entry on at the replay's own (a trace replayed with its recorded decisions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<super::placement::PlacementReport>,
    /// The allocator's counters once the trace's deferred frees completed, before its memory
    /// was given back (not written out).
    #[serde(skip)]
    pub stats_at_end: crate::alloc::AllocStats,
    /// What the reader or the replay could not carry over, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ReplayReport {
    /// `line` or `entry`.
    pub fn position_word(&self) -> &'static str {
        self.format.position_word()
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snapshot = self.format == LogFormat::TorchSnapshot;
        let w = self.position_word();
        if snapshot {
            writeln!(
                f,
                "replay of {} ({}) with the {} allocator on {}",
                self.source,
                self.format.name(),
                self.allocator,
                self.device
            )?;
            writeln!(
                f,
                "{} requests replayed: {} allocations, {} frees; {} requests the recording allocator refused (OOM)",
                self.events, self.allocations, self.frees, self.logged_failures
            )?;
        } else {
            writeln!(
                f,
                "replay of {} ({} log) with the {} allocator on {}",
                self.source,
                self.format.name(),
                self.allocator,
                self.device
            )?;
            writeln!(
                f,
                "{} events replayed: {} allocations, {} frees; {} failure lines in the log",
                self.events, self.allocations, self.frees, self.logged_failures
            )?;
        }
        let retried = self.failures_still_refused + self.failures_now_served.len() as u64;
        if retried > 0 {
            writeln!(
                f,
                "the {}'s {retried} refused allocations, tried again: {} refused again, {} served now{}",
                if snapshot { "trace" } else { "log" },
                self.failures_still_refused,
                self.failures_now_served.len(),
                if self.failures_now_served.is_empty() {
                    String::new()
                } else {
                    let lines: Vec<String> = self
                        .failures_now_served
                        .iter()
                        .map(|l| l.to_string())
                        .collect();
                    format!(" ({} {})", self.format.position_words(), lines.join(", "))
                }
            )?;
        }
        match &self.first_failure {
            None => writeln!(f, "result: fits")?,
            Some(x) => writeln!(
                f,
                "result: does NOT fit — out of memory at {w} {} ({} requested on {} stream {}){}",
                x.line,
                Bytes(x.requested_bytes),
                if snapshot { "PyTorch" } else { "log" },
                x.log_stream,
                x.origin
                    .as_ref()
                    .map(|o| format!(", made at {o}"))
                    .unwrap_or_default()
            )?,
        }
        writeln!(f, "peaks ({w} first reached):")?;
        let p = &self.peaks;
        for (name, peak) in [
            ("alloc_allocated", p.alloc_allocated),
            ("alloc_reserved", p.alloc_reserved),
            ("alloc_requested", p.alloc_requested),
            ("device_used", p.device_used),
        ] {
            writeln!(
                f,
                "  {name:<16} {:>12}  ({w} {})",
                Bytes(peak.bytes).to_string(),
                peak.line
            )?;
        }
        writeln!(
            f,
            "  device_used before the replay: {}",
            Bytes(self.device_used_idle_bytes)
        )?;
        if let Some(x) = &self.first_failure {
            writeln!(f, "at the failure:")?;
            writeln!(
                f,
                "  alloc_allocated {}, alloc_reserved {}, device_used {}, device free {}",
                Bytes(x.alloc_allocated_bytes),
                Bytes(x.alloc_reserved_bytes),
                Bytes(x.device_used_bytes),
                Bytes(x.device_free_bytes)
            )?;
            match &x.oom {
                Some(o) => {
                    writeln!(
                        f,
                        "  request {} ({} bytes), rounded {}, driver asked for {}, {} pool",
                        Bytes(o.requested_bytes),
                        o.requested_bytes,
                        Bytes(o.rounded_bytes),
                        Bytes(o.driver_request_bytes),
                        o.pool
                    )?;
                    for (i, step) in o.retries.iter().enumerate() {
                        writeln!(f, "  {}. {step}", i + 1)?;
                    }
                }
                None => writeln!(f, "  {}", x.error)?,
            }
        }
        if let Some(fid) = &self.fidelity {
            write!(f, "{fid}")?;
        }
        if let Some(p) = &self.placement {
            write!(f, "{p}")?;
        }
        if !self.bad_rows.is_empty() {
            writeln!(
                f,
                "{} bad {} skipped:",
                self.bad_rows.len(),
                self.format.position_words()
            )?;
            for b in self.bad_rows.iter().take(10) {
                writeln!(f, "  {w} {}: {}", b.line, b.message)?;
            }
            if self.bad_rows.len() > 10 {
                writeln!(f, "  … and {} more", self.bad_rows.len() - 10)?;
            }
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}
