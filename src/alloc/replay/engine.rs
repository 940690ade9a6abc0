//! The replay itself: reads the log line by line, maps the log's addresses and streams to
//! the replay's own, applies each event to the allocator and keeps the peaks.

use std::io::{self, Read};

use crate::alloc::adaptors::LOG_HEADER;
use crate::alloc::ptr_map::PtrMap;
use crate::alloc::{AllocError, Allocator, OomRequest};
use crate::device::prelude::*;
use crate::device::{DevPtr, DeviceError, StreamId};

use super::parse::{Event, LogStream, parse_headroom, parse_rmm};
use super::{
    BadRow, BadRowPolicy, LogFormat, RMM_HEADER, ReplayError, ReplayFailure, ReplayOptions,
    ReplayPeaks, ReplayReport,
};

/// What one applied event came to.
#[derive(Debug, Clone)]
pub(super) enum Step {
    /// An allocation was served; the allocator accounts this many bytes for it.
    Served(u64),
    /// The allocator refused an allocation.
    Refused(Box<OomRequest>),
    /// A free, a record_stream or an empty_cache was applied.
    Done,
    /// A bad line, noted and skipped.
    Skipped,
}

/// The state of one replay.
pub(super) struct Replay<'a> {
    source_name: String,
    alloc: &'a mut dyn Allocator,
    dev: &'a mut dyn AllocDevice,
    opts: ReplayOptions,
    format: LogFormat,
    report: ReplayReport,
    /// Log address → (replayed address, line allocated).
    /// The log's address → ours, the line that allocated it and the bytes it asked for.
    live: PtrMap<(DevPtr, u64, u64)>,
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
    pub(super) fn new(
        source_name: &str,
        alloc: &'a mut dyn Allocator,
        allocator_name: &str,
        dev: &'a mut dyn AllocDevice,
        opts: &ReplayOptions,
    ) -> Result<Replay<'a>, ReplayError> {
        Self::with_format(
            source_name,
            LogFormat::Headroom,
            alloc,
            allocator_name,
            dev,
            opts,
        )
    }

    /// A replay of a source in `format` (messages name its positions accordingly).
    pub(super) fn with_format(
        source_name: &str,
        format: LogFormat,
        alloc: &'a mut dyn Allocator,
        allocator_name: &str,
        dev: &'a mut dyn AllocDevice,
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
                format,
                allocator: allocator_name.to_string(),
                device,
                fits: true,
                events: 0,
                allocations: 0,
                frees: 0,
                logged_failures: 0,
                failures_still_refused: 0,
                failures_now_served: Vec::new(),
                device_used_idle_bytes: used,
                peaks,
                first_failure: None,
                final_stats: stats,
                device_ns: 0,
                bad_rows: Vec::new(),
                fidelity: None,
                placement: None,
                stats_at_end: stats,
                notes: Vec::new(),
            },
            alloc,
            dev,
            opts: opts.clone(),
            format,
            live: PtrMap::default(),
            freed: PtrMap::default(),
            streams: vec![(0, StreamId::MAIN)],
            log_origin_ns: None,
            last_log_ns: 0,
            last_reserved: stats.reserved_bytes,
        })
    }

    pub(super) fn run<R: Read>(mut self, input: R) -> Result<ReplayReport, ReplayError> {
        // Every line bounded: a file that is not a log (one huge line, a binary) is refused
        // at 64 KiB, not read whole.
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(crate::bounded::BoundedLines::new(
                input,
                crate::bounded::TABLE_LINE_MAX_BYTES,
            ));
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
                LogFormat::Rmm | LogFormat::TorchSnapshot => parse_rmm(&record, self.opts.pace),
            };
            let (time_ns, event) = match parsed {
                Ok(x) => x,
                Err(message) => {
                    self.bad_row(line, message)?;
                    continue;
                }
            };
            if let Some(t) = time_ns {
                // headroom's log is written in time order: a row earlier than the one before
                // it is a log put together wrong (RMM's time of day wraps, `pace_to` knows).
                if self.format == LogFormat::Headroom && t < self.last_log_ns {
                    let msg = format!(
                        "t_ns {t} is earlier than the {} before it: the log's time runs backwards",
                        self.last_log_ns
                    );
                    self.bad_row(line, msg)?;
                    continue;
                }
                self.pace_to(t);
            }
            if !self.apply(line, event)? {
                break;
            }
        }
        Ok(self.finish())
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
            // Quoted printably and cut: the header of a file that is no log can be anything.
            let joined: Vec<&[u8]> = header.iter().collect();
            Err(self.format_error(format!(
                "unknown log format: the header is `{}`; expected headroom's `{}` or RMM's `{}`",
                crate::bounded::quote(&joined.join(&b","[..])),
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
        if self.format == LogFormat::Rmm && t.saturating_add(DAY_NS / 2) < self.last_log_ns {
            let days = (self.last_log_ns - t) / DAY_NS + 1;
            t = t.saturating_add(DAY_NS.saturating_mul(days));
        }
        self.last_log_ns = self.last_log_ns.max(t);
        let origin = *self.log_origin_ns.get_or_insert(t);
        // Saturating: a log time near 2^64 ns must not wrap the device clock back.
        let target = self.start_ns.saturating_add(t.saturating_sub(origin));
        let now = self.dev.now_ns();
        if target > now {
            self.dev.sleep(target - now);
        }
    }

    fn stream(&mut self, label: LogStream) -> Result<StreamId, DeviceError> {
        let label = label.id;
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
        let step = match event {
            Event::LoggedFailure => {
                self.report.logged_failures += 1;
                return Ok(true);
            }
            Event::FailedAllocate { bytes, stream } => {
                // Refused again is the log's own failure, not the replay's: go on.
                self.retry_refused(line, bytes, stream, false)?;
                return Ok(true);
            }
            Event::Allocate { ptr, bytes, stream } => self.allocate(line, ptr, bytes, stream)?,
            Event::Free { ptr, bytes } => self.free(line, ptr, bytes)?,
            Event::RecordStream { ptr, stream } => self.record_stream(line, ptr, stream)?,
            Event::EmptyCache => self.empty_cache(line)?,
        };
        Ok(!matches!(step, Step::Refused(_)))
    }

    /// The log stream `label` is the device stream `stream` (instead of a new one).
    pub(super) fn bind_stream(&mut self, label: u64, stream: StreamId) {
        self.streams.retain(|(l, _)| *l != label);
        self.streams.push((label, stream));
    }

    fn device_stream(&mut self, line: u64, label: LogStream) -> Result<StreamId, ReplayError> {
        self.stream(label)
            .map_err(|e| self.alloc_error(line, AllocError::Device(e)))
    }

    /// A request the log says was refused: tried again, and freed at once if it fits (the
    /// logged program never had it). With `counts_against_fit`, a second refusal is the
    /// replay's failure (a snapshot's OOM: the step did not fit).
    pub(super) fn retry_refused(
        &mut self,
        line: u64,
        bytes: u64,
        stream: LogStream,
        counts_against_fit: bool,
    ) -> Result<Step, ReplayError> {
        self.report.logged_failures += 1;
        let s = self.device_stream(line, stream)?;
        let step = match self.alloc.allocate(self.dev, bytes, s) {
            Ok(b) => {
                self.observe(line)?;
                self.alloc
                    .free(self.dev, b.ptr)
                    .map_err(|e| self.alloc_error(line, e))?;
                self.report.failures_now_served.push(line);
                Step::Served(b.size_bytes)
            }
            Err(AllocError::OutOfMemory(o)) => {
                self.report.failures_still_refused += 1;
                if counts_against_fit {
                    self.fail(line, bytes, stream, AllocError::OutOfMemory(o.clone()))?;
                }
                Step::Refused(o)
            }
            Err(e) => return Err(self.alloc_error(line, e)),
        };
        self.report.events += 1;
        self.observe(line)?;
        Ok(step)
    }

    /// An allocation of the log, under the log's address `ptr`.
    pub(super) fn allocate(
        &mut self,
        line: u64,
        ptr: u64,
        bytes: u64,
        stream: LogStream,
    ) -> Result<Step, ReplayError> {
        if let Some((_, since, _)) = self.live.get(&ptr) {
            let msg = format!(
                "allocation at {ptr:#x}, which is still live since {} {since} (a free is missing)",
                self.report.position_word()
            );
            self.bad_row(line, msg)?;
            return Ok(Step::Skipped);
        }
        let s = self.device_stream(line, stream)?;
        let step = match self.alloc.allocate(self.dev, bytes, s) {
            Ok(b) => {
                self.live.insert(ptr, (b.ptr, line, bytes));
                self.freed.remove(&ptr);
                self.report.allocations += 1;
                Step::Served(b.size_bytes)
            }
            Err(AllocError::OutOfMemory(o)) => {
                self.fail(line, bytes, stream, AllocError::OutOfMemory(o.clone()))?;
                return Ok(Step::Refused(o));
            }
            Err(e) => return Err(self.alloc_error(line, e)),
        };
        self.report.events += 1;
        self.observe(line)?;
        Ok(step)
    }

    /// A free of the log's address `ptr`.
    /// A free of the log's address `ptr`; `bytes`, where the log gives the size freed, must
    /// be the size that was allocated there.
    pub(super) fn free(
        &mut self,
        line: u64,
        ptr: u64,
        bytes: Option<u64>,
    ) -> Result<Step, ReplayError> {
        if let (Some(freed), Some(&(_, since, allocated))) = (bytes, self.live.get(&ptr))
            && freed != allocated
        {
            let word = self.report.position_word();
            self.bad_row(
                line,
                format!(
                    "free of {ptr:#x} names {freed} bytes, but {word} {since} allocated {allocated} bytes there"
                ),
            )?;
            return Ok(Step::Skipped);
        }
        let Some((ours, _, _)) = self.live.remove(&ptr) else {
            let word = self.report.position_word();
            let msg = match self.freed.get(&ptr) {
                Some(at) => format!("double free of {ptr:#x}, already freed at {word} {at}"),
                None => format!("free of {ptr:#x}, which no earlier {word} allocated"),
            };
            self.bad_row(line, msg)?;
            return Ok(Step::Skipped);
        };
        self.freed.insert(ptr, line);
        self.alloc
            .free(self.dev, ours)
            .map_err(|e| self.alloc_error(line, e))?;
        self.report.frees += 1;
        self.report.events += 1;
        self.observe(line)?;
        Ok(Step::Done)
    }

    /// The block at the log's address `ptr` is also used on `stream`.
    pub(super) fn record_stream(
        &mut self,
        line: u64,
        ptr: u64,
        stream: LogStream,
    ) -> Result<Step, ReplayError> {
        let Some(&(ours, _, _)) = self.live.get(&ptr) else {
            self.bad_row(
                line,
                format!("record_stream on {ptr:#x}, which is not live"),
            )?;
            return Ok(Step::Skipped);
        };
        let s = self.device_stream(line, stream)?;
        self.alloc
            .record_stream(self.dev, ours, s)
            .map_err(|e| self.alloc_error(line, e))?;
        self.report.events += 1;
        self.observe(line)?;
        Ok(Step::Done)
    }

    pub(super) fn empty_cache(&mut self, line: u64) -> Result<Step, ReplayError> {
        self.alloc
            .empty_cache(self.dev)
            .map_err(|e| self.alloc_error(line, e))?;
        self.report.events += 1;
        self.observe(line)?;
        Ok(Step::Done)
    }

    /// Calls `f` with the allocator and the device as they are now.
    pub(super) fn with_state<T>(
        &mut self,
        f: impl FnOnce(&dyn Allocator, &mut dyn AllocDevice) -> T,
    ) -> T {
        f(&*self.alloc, &mut *self.dev)
    }

    /// The allocator's address of the block the log knows as `ptr`, while it is live.
    pub(super) fn ours(&self, ptr: u64) -> Option<u64> {
        self.live.get(&ptr).map(|(ours, _, _)| *ours)
    }

    pub(super) fn report_mut(&mut self) -> &mut ReplayReport {
        &mut self.report
    }

    /// The report once the last event is applied.
    pub(super) fn finish(mut self) -> ReplayReport {
        self.report.final_stats = self.alloc.stats();
        self.report.device_ns = self.dev.now_ns() - self.start_ns;
        self.report
    }

    /// Updates the peaks after an event.
    fn observe(&mut self, line: u64) -> Result<(), ReplayError> {
        let (allocated, reserved, requested) = self.alloc.byte_counters();
        let p = &mut self.report.peaks;
        p.alloc_allocated.see(allocated, line);
        p.alloc_reserved.see(reserved, line);
        p.alloc_requested.see(requested, line);
        if reserved != self.last_reserved {
            self.last_reserved = reserved;
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
        stream: LogStream,
        e: AllocError,
    ) -> Result<(), ReplayError> {
        let s = self.alloc.stats();
        let m = self.dev.mem_info().map_err(ReplayError::Device)?;
        self.report.fits = false;
        if self.report.first_failure.is_some() {
            return Ok(());
        }
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
            origin: None,
        });
        Ok(())
    }
}
