//! Replays an allocation log against an allocator on a device: does this trace fit, and how
//! high does each memory view go?
//!
//! Two log formats are read, told apart by their header line:
//! - headroom's own (`t_ns,action,ptr,bytes,stream,detail`, written by the logging adaptor);
//! - RMM's `logging_resource_adaptor` (`Thread,Time,Action,Pointer,Size,Stream`; actions
//!   `allocate`, `free` or `deallocate`, and `allocate failure`).
//!
//! Addresses in the log are the original run's: each logged allocation is replayed with the
//! allocator under test and its address mapped to the new one. Streams are mapped likewise
//! (the log's stream 0 is the device's main stream; others are created on first use). Failure
//! lines of the log are counted and skipped. The replay stops at the first allocation the
//! allocator refuses: that is the answer "does not fit", with the evidence.
//!
//! Peaks are exact for the allocator's views (read after every event) and for `device_used`
//! at every event that changed the allocator's reservation; what other processes do between
//! those moments is not sampled.
//!
//! A log holds allocator calls only, not kernels: in a replay no stream has queued work, so a
//! free left pending by `record_stream` completes at the next allocation, whatever the pacing.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use serde::Serialize;

use crate::alloc::adaptors::LOG_HEADER;
use crate::alloc::ptr_map::PtrMap;
use crate::alloc::{AllocError, AllocStats, Allocator, AllocatorSpec, OomRequest};
use crate::device::{DevPtr, Device, DeviceError, StreamId};
use crate::units::Bytes;

/// RMM's header line.
pub const RMM_HEADER: [&str; 6] = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"];

/// Which log format a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Headroom,
    Rmm,
}

impl LogFormat {
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Headroom => "headroom",
            LogFormat::Rmm => "RMM",
        }
    }
}

/// What to do with a line that cannot be read (or contradicts the log, such as a double free).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRowPolicy {
    /// The first bad line is an error (`ReplayError::BadRow`).
    #[default]
    Stop,
    /// Bad lines are skipped and listed in the report (`ReplayReport::bad_rows`).
    Collect,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    pub on_bad_row: BadRowPolicy,
    /// Advance the device clock to follow the log's timestamps (so frees pending on busy
    /// streams complete as they did). Off: events follow each other as fast as the device goes.
    pub pace: bool,
}

/// A line skipped under `BadRowPolicy::Collect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadRow {
    pub line: u64,
    pub message: String,
}

/// The highest value of a view and the log line where it was first reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Peak {
    pub bytes: u64,
    pub line: u64,
}

impl Peak {
    fn see(&mut self, bytes: u64, line: u64) {
        if bytes > self.bytes {
            *self = Peak { bytes, line };
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReplayPeaks {
    pub alloc_allocated: Peak,
    pub alloc_reserved: Peak,
    pub alloc_requested: Peak,
    /// Whole device, all processes (`cuMemGetInfo`).
    pub device_used: Peak,
}

/// The allocation the allocator refused, and the views at that moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// Failure lines in the log itself (skipped).
    pub logged_failures: u64,
    /// Device used before the first event (context and other processes included).
    pub device_used_idle_bytes: u64,
    pub peaks: ReplayPeaks,
    pub first_failure: Option<ReplayFailure>,
    /// The allocator's counters after the last event replayed.
    pub final_stats: AllocStats,
    /// Device time the replay took (virtual on the simulator).
    pub device_ns: u64,
    pub bad_rows: Vec<BadRow>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read {source_name}: {error}")]
    Io {
        source_name: String,
        error: io::Error,
    },
    #[error("{source_name}: {message}")]
    Format {
        source_name: String,
        message: String,
    },
    #[error("{source_name} line {line}: {message}")]
    BadRow {
        source_name: String,
        line: u64,
        message: String,
    },
    /// The allocator or the device failed other than by running out of memory.
    #[error("{source_name} line {line}: {error}")]
    Allocator {
        source_name: String,
        line: u64,
        error: AllocError,
    },
    #[error("cannot build the allocator: {0}")]
    Build(AllocError),
    #[error("cannot read the device: {0}")]
    Device(DeviceError),
}

/// One event of a log, with the log's own names for addresses and streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Allocate { ptr: u64, bytes: u64, stream: u64 },
    Free { ptr: u64 },
    RecordStream { ptr: u64, stream: u64 },
    EmptyCache,
    LoggedFailure,
}

/// Replays the log at `path` with a fresh allocator built from `spec` on `dev`; everything
/// is released at the end.
pub fn replay_file(
    path: &Path,
    spec: &AllocatorSpec,
    dev: &mut dyn Device,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|error| ReplayError::Io {
        source_name: name.clone(),
        error,
    })?;
    replay_reader(
        &name,
        BufReader::with_capacity(1 << 16, file),
        spec,
        dev,
        opts,
    )
}

/// Replays a log read from `input` (named `source_name` in messages) with a fresh allocator
/// built from `spec`; everything is released at the end.
pub fn replay_reader<R: Read>(
    source_name: &str,
    input: R,
    spec: &AllocatorSpec,
    dev: &mut dyn Device,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let mut alloc = spec.build(dev).map_err(ReplayError::Build)?;
    let result = replay_with(
        source_name,
        input,
        alloc.as_mut(),
        &spec.to_string(),
        dev,
        opts,
    );
    let released = alloc.release_all(dev);
    let report = result?;
    released.map_err(|error| ReplayError::Allocator {
        source_name: source_name.to_string(),
        line: 0,
        error,
    })?;
    Ok(report)
}

/// Replays a log against an allocator the caller built (with adaptors, for instance) and
/// still owns: nothing is released at the end. `allocator_name` is how the report names it.
pub fn replay_with<R: Read>(
    source_name: &str,
    input: R,
    alloc: &mut dyn Allocator,
    allocator_name: &str,
    dev: &mut dyn Device,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    Replay::new(source_name, alloc, allocator_name, dev, opts)?.run(input)
}

/// The state of one replay.
struct Replay<'a> {
    source_name: String,
    alloc: &'a mut dyn Allocator,
    dev: &'a mut dyn Device,
    opts: ReplayOptions,
    format: LogFormat,
    report: ReplayReport,
    /// Log address → (replayed address, line allocated).
    live: PtrMap<(DevPtr, u64)>,
    /// Log addresses freed and not allocated again → line freed.
    freed: PtrMap<u64>,
    streams: Vec<(u64, StreamId)>,
    start_ns: u64,
    /// The log time of the first line, for pacing.
    log_origin_ns: Option<u64>,
    last_log_ns: u64,
    last_reserved: u64,
}

impl<'a> Replay<'a> {
    fn new(
        source_name: &str,
        alloc: &'a mut dyn Allocator,
        allocator_name: &str,
        dev: &'a mut dyn Device,
        opts: &ReplayOptions,
    ) -> Result<Replay<'a>, ReplayError> {
        let info = dev.info();
        let device = match &info.profile {
            Some(p) => format!("{} ({} {p})", info.name, info.backend),
            None => format!("{} ({})", info.name, info.backend),
        };
        let used = dev.mem_info().map_err(ReplayError::Device)?.used_bytes();
        let stats = alloc.stats();
        let mut peaks = ReplayPeaks::default();
        peaks.device_used.see(used, 0);
        peaks.alloc_reserved.see(stats.reserved_bytes, 0);
        peaks.alloc_allocated.see(stats.allocated_bytes, 0);
        peaks.alloc_requested.see(stats.requested_bytes, 0);
        Ok(Replay {
            source_name: source_name.to_string(),
            start_ns: dev.now_ns(),
            report: ReplayReport {
                source: source_name.to_string(),
                format: LogFormat::Headroom,
                allocator: allocator_name.to_string(),
                device,
                fits: true,
                events: 0,
                allocations: 0,
                frees: 0,
                logged_failures: 0,
                device_used_idle_bytes: used,
                peaks,
                first_failure: None,
                final_stats: stats,
                device_ns: 0,
                bad_rows: Vec::new(),
            },
            alloc,
            dev,
            opts: opts.clone(),
            format: LogFormat::Headroom,
            live: PtrMap::default(),
            freed: PtrMap::default(),
            streams: vec![(0, StreamId::MAIN)],
            log_origin_ns: None,
            last_log_ns: 0,
            last_reserved: stats.reserved_bytes,
        })
    }

    fn run<R: Read>(mut self, input: R) -> Result<ReplayReport, ReplayError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(input);
        let mut record = csv::ByteRecord::new();
        let name = self.source_name.clone();
        let io_err = |e: csv::Error| ReplayError::Io {
            source_name: name.clone(),
            error: io::Error::other(e),
        };
        if !reader.read_byte_record(&mut record).map_err(io_err)? {
            return Err(self.format_error("the log is empty (no header line)".into()));
        }
        self.format = self.detect(&record)?;
        self.report.format = self.format;
        while reader.read_byte_record(&mut record).map_err(io_err)? {
            let line = record.position().map_or(0, |p| p.line());
            if record.iter().all(|f| f.iter().all(u8::is_ascii_whitespace)) {
                continue;
            }
            let parsed = match self.format {
                LogFormat::Headroom => parse_headroom(&record, self.opts.pace),
                LogFormat::Rmm => parse_rmm(&record, self.opts.pace),
            };
            let (time_ns, event) = match parsed {
                Ok(x) => x,
                Err(message) => {
                    self.bad_row(line, message)?;
                    continue;
                }
            };
            if let Some(t) = time_ns {
                self.pace_to(t);
            }
            if !self.apply(line, event)? {
                break;
            }
        }
        self.report.final_stats = self.alloc.stats();
        self.report.device_ns = self.dev.now_ns() - self.start_ns;
        Ok(self.report)
    }

    fn format_error(&self, message: String) -> ReplayError {
        ReplayError::Format {
            source_name: self.source_name.clone(),
            message,
        }
    }

    fn detect(&self, header: &csv::ByteRecord) -> Result<LogFormat, ReplayError> {
        let fields: Vec<String> = header
            .iter()
            .map(|f| {
                String::from_utf8_lossy(f)
                    .trim()
                    .trim_start_matches('\u{feff}')
                    .to_string()
            })
            .collect();
        if fields == LOG_HEADER {
            Ok(LogFormat::Headroom)
        } else if fields == RMM_HEADER {
            Ok(LogFormat::Rmm)
        } else {
            Err(self.format_error(format!(
                "unknown log format: the header is `{}`; expected headroom's `{}` or RMM's `{}`",
                fields.join(","),
                LOG_HEADER.join(","),
                RMM_HEADER.join(",")
            )))
        }
    }

    /// A line that cannot be used: an error, or noted and skipped.
    fn bad_row(&mut self, line: u64, message: String) -> Result<(), ReplayError> {
        match self.opts.on_bad_row {
            BadRowPolicy::Stop => Err(ReplayError::BadRow {
                source_name: self.source_name.clone(),
                line,
                message,
            }),
            BadRowPolicy::Collect => {
                self.report.bad_rows.push(BadRow { line, message });
                Ok(())
            }
        }
    }

    /// Moves the device clock forward so that events keep the log's spacing.
    fn pace_to(&mut self, mut t: u64) {
        const DAY_NS: u64 = 86_400 * 1_000_000_000;
        // RMM's time of day wraps at midnight: a jump back by more than half a day is one.
        if self.format == LogFormat::Rmm && t + DAY_NS / 2 < self.last_log_ns {
            t += DAY_NS * ((self.last_log_ns - t) / DAY_NS + 1);
        }
        self.last_log_ns = self.last_log_ns.max(t);
        let origin = *self.log_origin_ns.get_or_insert(t);
        let target = self.start_ns + t.saturating_sub(origin);
        let now = self.dev.now_ns();
        if target > now {
            self.dev.sleep(target - now);
        }
    }

    fn stream(&mut self, label: u64) -> Result<StreamId, DeviceError> {
        if let Some((_, s)) = self.streams.iter().find(|(l, _)| *l == label) {
            return Ok(*s);
        }
        let s = self.dev.create_stream()?;
        self.streams.push((label, s));
        Ok(s)
    }

    fn alloc_error(&self, line: u64, error: AllocError) -> ReplayError {
        ReplayError::Allocator {
            source_name: self.source_name.clone(),
            line,
            error,
        }
    }

    /// Applies one event; `Ok(false)` when the allocator refused an allocation (the end).
    fn apply(&mut self, line: u64, event: Event) -> Result<bool, ReplayError> {
        match event {
            Event::LoggedFailure => {
                self.report.logged_failures += 1;
                return Ok(true);
            }
            Event::Allocate { ptr, bytes, stream } => {
                if let Some((_, since)) = self.live.get(&ptr) {
                    let msg = format!(
                        "allocation at {ptr:#x}, which is still live since line {since} (a free is missing)"
                    );
                    self.bad_row(line, msg)?;
                    return Ok(true);
                }
                let s = self
                    .stream(stream)
                    .map_err(|e| self.alloc_error(line, AllocError::Device(e)))?;
                match self.alloc.allocate(self.dev, bytes, s) {
                    Ok(b) => {
                        self.live.insert(ptr, (b.ptr, line));
                        self.freed.remove(&ptr);
                        self.report.allocations += 1;
                    }
                    Err(e) if e.is_oom() => {
                        self.fail(line, bytes, stream, e)?;
                        return Ok(false);
                    }
                    Err(e) => return Err(self.alloc_error(line, e)),
                }
            }
            Event::Free { ptr } => {
                let Some((ours, _)) = self.live.remove(&ptr) else {
                    let msg = match self.freed.get(&ptr) {
                        Some(at) => format!("double free of {ptr:#x}, already freed at line {at}"),
                        None => format!("free of {ptr:#x}, which no earlier line allocated"),
                    };
                    self.bad_row(line, msg)?;
                    return Ok(true);
                };
                self.freed.insert(ptr, line);
                self.alloc
                    .free(self.dev, ours)
                    .map_err(|e| self.alloc_error(line, e))?;
                self.report.frees += 1;
            }
            Event::RecordStream { ptr, stream } => {
                let Some(&(ours, _)) = self.live.get(&ptr) else {
                    self.bad_row(
                        line,
                        format!("record_stream on {ptr:#x}, which is not live"),
                    )?;
                    return Ok(true);
                };
                let s = self
                    .stream(stream)
                    .map_err(|e| self.alloc_error(line, AllocError::Device(e)))?;
                self.alloc
                    .record_stream(self.dev, ours, s)
                    .map_err(|e| self.alloc_error(line, e))?;
            }
            Event::EmptyCache => {
                self.alloc
                    .empty_cache(self.dev)
                    .map_err(|e| self.alloc_error(line, e))?;
            }
        }
        self.report.events += 1;
        self.observe(line)?;
        Ok(true)
    }

    /// Updates the peaks after an event.
    fn observe(&mut self, line: u64) -> Result<(), ReplayError> {
        let s = self.alloc.stats();
        let p = &mut self.report.peaks;
        p.alloc_allocated.see(s.allocated_bytes, line);
        p.alloc_reserved.see(s.reserved_bytes, line);
        p.alloc_requested.see(s.requested_bytes, line);
        if s.reserved_bytes != self.last_reserved {
            self.last_reserved = s.reserved_bytes;
            let used = self
                .dev
                .mem_info()
                .map_err(ReplayError::Device)?
                .used_bytes();
            self.report.peaks.device_used.see(used, line);
        }
        Ok(())
    }

    fn fail(
        &mut self,
        line: u64,
        bytes: u64,
        stream: u64,
        e: AllocError,
    ) -> Result<(), ReplayError> {
        let s = self.alloc.stats();
        let m = self.dev.mem_info().map_err(ReplayError::Device)?;
        self.report.fits = false;
        self.report.first_failure = Some(ReplayFailure {
            line,
            requested_bytes: bytes,
            log_stream: stream.to_string(),
            error: e.to_string(),
            oom: match e {
                AllocError::OutOfMemory(o) => Some(*o),
                _ => None,
            },
            alloc_allocated_bytes: s.allocated_bytes,
            alloc_reserved_bytes: s.reserved_bytes,
            device_used_bytes: m.used_bytes(),
            device_free_bytes: m.free_bytes,
        });
        Ok(())
    }
}

fn field<'r>(r: &'r csv::ByteRecord, i: usize, name: &str) -> Result<&'r str, String> {
    let raw = r.get(i).ok_or_else(|| format!("missing column {name}"))?;
    std::str::from_utf8(raw)
        .map(str::trim)
        .map_err(|_| format!("column {name} is not UTF-8 text"))
}

fn check_width(r: &csv::ByteRecord) -> Result<(), String> {
    if r.len() != 6 {
        return Err(format!("expected 6 columns, found {}", r.len()));
    }
    Ok(())
}

fn parse_u64(v: &str, name: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| format!("{name} {v:?} is not a whole number of bytes"))
}

/// An address: hexadecimal, with or without `0x` (RMM parses it base 16).
fn parse_ptr(v: &str, name: &str) -> Result<u64, String> {
    let hex = v
        .strip_prefix("0x")
        .or_else(|| v.strip_prefix("0X"))
        .unwrap_or(v);
    if hex.is_empty() {
        return Err(format!("{name} is empty"));
    }
    u64::from_str_radix(hex, 16).map_err(|_| format!("{name} {v:?} is not a hexadecimal address"))
}

/// A stream label: `0x`-prefixed hex (RMM's pointer form) or decimal.
fn parse_stream(v: &str, name: &str) -> Result<u64, String> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => {
            u64::from_str_radix(hex, 16).map_err(|_| format!("{name} {v:?} is not a stream"))
        }
        None => v
            .parse()
            .map_err(|_| format!("{name} {v:?} is not a stream")),
    }
}

fn nonzero(bytes: u64) -> Result<u64, String> {
    if bytes == 0 {
        return Err("an allocation of 0 bytes".into());
    }
    Ok(bytes)
}

/// `t_ns,action,ptr,bytes,stream,detail`.
fn parse_headroom(r: &csv::ByteRecord, _pace: bool) -> Result<(Option<u64>, Event), String> {
    check_width(r)?;
    let t = field(r, 0, "t_ns")?;
    let t = t
        .parse::<u64>()
        .map_err(|_| format!("t_ns {t:?} is not a whole number of nanoseconds"))?;
    let action = field(r, 1, "action")?;
    let event = match action {
        "allocate" => Event::Allocate {
            ptr: parse_ptr(field(r, 2, "ptr")?, "ptr")?,
            bytes: nonzero(parse_u64(field(r, 3, "bytes")?, "bytes")?)?,
            stream: parse_stream(field(r, 4, "stream")?, "stream")?,
        },
        "free" => Event::Free {
            ptr: parse_ptr(field(r, 2, "ptr")?, "ptr")?,
        },
        "record_stream" => Event::RecordStream {
            ptr: parse_ptr(field(r, 2, "ptr")?, "ptr")?,
            stream: parse_stream(field(r, 4, "stream")?, "stream")?,
        },
        "empty_cache" => Event::EmptyCache,
        "failure" => Event::LoggedFailure,
        other => {
            return Err(format!(
                "action {other:?} is not one of allocate, free, record_stream, empty_cache, failure"
            ));
        }
    };
    Ok((Some(t), event))
}

/// `Thread,Time,Action,Pointer,Size,Stream`. The time is read only when pacing.
fn parse_rmm(r: &csv::ByteRecord, pace: bool) -> Result<(Option<u64>, Event), String> {
    check_width(r)?;
    let time = if pace {
        Some(parse_rmm_time(field(r, 1, "Time")?)?)
    } else {
        None
    };
    let action = field(r, 2, "Action")?;
    let event = match action {
        "allocate" => Event::Allocate {
            ptr: parse_ptr(field(r, 3, "Pointer")?, "Pointer")?,
            bytes: nonzero(parse_u64(field(r, 4, "Size")?, "Size")?)?,
            stream: parse_stream(field(r, 5, "Stream")?, "Stream")?,
        },
        "free" | "deallocate" => Event::Free {
            ptr: parse_ptr(field(r, 3, "Pointer")?, "Pointer")?,
        },
        "allocate failure" => Event::LoggedFailure,
        other => {
            return Err(format!(
                "Action {other:?} is not one of allocate, free, deallocate, allocate failure"
            ));
        }
    };
    Ok((time, event))
}

/// RMM's time: `HH:MM:SS.ffffff` (or `HH:MM:SS:ffffff`, as older versions wrote it), or
/// seconds since the epoch with a fraction. Returns nanoseconds.
fn parse_rmm_time(v: &str) -> Result<u64, String> {
    let bad = || format!("Time {v:?} is neither HH:MM:SS.ffffff nor seconds");
    let parts: Vec<&str> = v.split(':').collect();
    let (whole_s, frac) = match parts.as_slice() {
        [h, m, s] => {
            let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
            let hms = [*h, *m, sec].map(|x| x.parse::<u64>().ok());
            let [Some(h), Some(m), Some(sec)] = hms else {
                return Err(bad());
            };
            (h * 3600 + m * 60 + sec, frac)
        }
        [h, m, s, us] => {
            let hms = [*h, *m, *s].map(|x| x.parse::<u64>().ok());
            let [Some(h), Some(m), Some(sec)] = hms else {
                return Err(bad());
            };
            (h * 3600 + m * 60 + sec, *us)
        }
        [s] => {
            let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
            (sec.parse::<u64>().map_err(|_| bad())?, frac)
        }
        _ => return Err(bad()),
    };
    if frac.len() > 9 || !frac.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let frac_ns = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().map_err(|_| bad())? * 10u64.pow(9 - frac.len() as u32)
    };
    whole_s
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(frac_ns))
        .ok_or_else(bad)
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            "{} events replayed: {} allocations, {} frees; {} failure lines in the log skipped",
            self.events, self.allocations, self.frees, self.logged_failures
        )?;
        match &self.first_failure {
            None => writeln!(f, "result: fits")?,
            Some(x) => writeln!(
                f,
                "result: does NOT fit — out of memory at line {} ({} requested on log stream {})",
                x.line,
                Bytes(x.requested_bytes),
                x.log_stream
            )?,
        }
        writeln!(f, "peaks (line first reached):")?;
        let p = &self.peaks;
        for (name, peak) in [
            ("alloc_allocated", p.alloc_allocated),
            ("alloc_reserved", p.alloc_reserved),
            ("alloc_requested", p.alloc_requested),
            ("device_used", p.device_used),
        ] {
            writeln!(
                f,
                "  {name:<16} {:>12}  (line {})",
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
        if !self.bad_rows.is_empty() {
            writeln!(f, "{} bad lines skipped:", self.bad_rows.len())?;
            for b in self.bad_rows.iter().take(10) {
                writeln!(f, "  line {}: {}", b.line, b.message)?;
            }
            if self.bad_rows.len() > 10 {
                writeln!(f, "  … and {} more", self.bad_rows.len() - 10)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmm_times() {
        assert_eq!(
            parse_rmm_time("01:02:03.000004").unwrap(),
            3_723_000_004_000
        );
        assert_eq!(
            parse_rmm_time("01:02:03:000004").unwrap(),
            3_723_000_004_000
        );
        assert_eq!(
            parse_rmm_time("1634567890.5").unwrap(),
            1_634_567_890_500_000_000
        );
        assert!(parse_rmm_time("yesterday").is_err());
        assert!(parse_rmm_time("1:2").is_err());
    }

    #[test]
    fn addresses_and_streams() {
        assert_eq!(parse_ptr("0x7f00", "ptr").unwrap(), 0x7f00);
        assert_eq!(parse_ptr("7f00", "ptr").unwrap(), 0x7f00);
        assert!(parse_ptr("0xzz", "ptr").unwrap_err().contains("\"0xzz\""));
        assert_eq!(parse_stream("0x10", "s").unwrap(), 16);
        assert_eq!(parse_stream("10", "s").unwrap(), 10);
    }
}
