//! `RunFolder`: the one writer of a result folder that every producer pushes into (`run`, a
//! skipped run, `watch`, `import torch`). A producer says what happened — a reading, an event
//! row, a phase's start and end, an OOM, its status — and the folder alone knows how that is
//! written: `timeline.csv` and `events.csv` as they go, `summary.json` at the start, after each
//! phase and at the end, and the derived reports last (within a budget after a signal).
//!
//! `Record` is the two CSVs created together (with the true peaks and the pollers over the
//! readings); `RunFolder` is a record with its summary. A producer that knows its summary only
//! at the end (an import) fills a `Record` first and makes it a folder then.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;

use crate::oom::OomRecord;
use crate::record::Reading;
use crate::record::View;
use crate::record::peaks::{PeakSet, Poller};
use crate::record::timeline::{EventLog, EventRow, POLLERS, Recorder};
use crate::report::summary::{
    ExpectationResult, MismatchRecord, PhaseStatus, PolledPeaks, Release, RunStatus, Summary,
};
use crate::report::watch::WatchSection;

/// `timeline.csv` and `events.csv` of one folder, created together: what a producer records
/// as it goes.
pub struct Record {
    dir: PathBuf,
    timeline: Recorder,
    events: EventLog,
}

impl Record {
    /// `timeline.csv` (for these phases on a device of `total_bytes`, its clock starting at
    /// `clock_start_ns`) and `events.csv` in `dir`, each error naming its file.
    pub fn create(
        dir: &Path,
        phases: Vec<String>,
        total_bytes: u64,
        clock_start_ns: u64,
    ) -> anyhow::Result<Record> {
        let timeline = Recorder::create(dir, phases, total_bytes, clock_start_ns)
            .with_context(|| format!("cannot create {}", dir.join("timeline.csv").display()))?;
        let events = EventLog::create(dir)
            .with_context(|| format!("cannot create {}", dir.join("events.csv").display()))?;
        Ok(Record {
            dir: dir.to_path_buf(),
            timeline,
            events,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A reading of every view it carries: into the peaks, the pollers and (when it changed
    /// something) a timeline row, written once the watermark passes it.
    pub fn reading(&mut self, r: Reading) {
        self.timeline.push(r);
    }

    /// Writes the timeline's rows up to `watermark_ns` (readings from threads come late).
    pub fn release_until(&mut self, watermark_ns: u64) -> std::io::Result<()> {
        self.timeline.release_until(watermark_ns)
    }

    /// Every timeline row held so far onto disk.
    pub fn flush_timeline(&mut self) -> std::io::Result<()> {
        self.timeline.flush()
    }

    /// Every event row written so far onto disk.
    pub fn flush_events(&mut self) -> std::io::Result<()> {
        self.events.flush()
    }

    /// One row of `events.csv`.
    pub fn event(&mut self, row: &EventRow) -> std::io::Result<()> {
        self.events.write(row)
    }

    /// Each event row reaches the file at once (a real driver's run: one that ends inside a
    /// wedged call keeps every step before it).
    pub fn set_flush_each_row(&mut self, on: bool) {
        self.events.set_flush_each_row(on);
    }

    /// From now on the device's free memory (and so device used) is written as not known (an
    /// import whose evidence does not record the device).
    pub fn free_not_recorded(&mut self) {
        self.timeline.free_not_recorded();
    }

    /// A phase named as it begins (a watch's marks); its index.
    pub fn add_phase(&mut self, name: &str) -> u32 {
        self.timeline.add_phase(name)
    }

    /// The true peaks of every view over the whole record.
    pub fn run_peaks(&self) -> &PeakSet {
        &self.timeline.run
    }

    /// The true peaks of each phase, in order.
    pub fn phase_peaks(&self) -> &[PeakSet] {
        &self.timeline.phases
    }

    /// Rows in `timeline.csv` so far.
    pub fn timeline_rows(&self) -> u64 {
        self.timeline.rows_written
    }

    /// Rows in `events.csv` so far.
    pub fn event_rows(&self) -> u64 {
        self.events.rows_written
    }

    /// What each of `POLLERS` would have reported up to `end_ns`, by poller name.
    pub fn polled_peaks(&mut self, end_ns: u64) -> std::collections::BTreeMap<String, PolledPeaks> {
        crate::folder::records::polled_peaks(&mut self.timeline.pollers, end_ns)
    }

    /// `polled_peaks`, with `job_used_bytes` from `job_pollers` (replayed over the process
    /// list's readings alone, a watch's) instead of the device pollers'.
    pub fn polled_peaks_with_job(
        &mut self,
        job_pollers: &mut [Poller],
        end_ns: u64,
    ) -> std::collections::BTreeMap<String, PolledPeaks> {
        let mut out = std::collections::BTreeMap::new();
        for ((poller, job_poller), (name, period)) in self
            .timeline
            .pollers
            .iter_mut()
            .zip(job_pollers.iter_mut())
            .zip(POLLERS)
        {
            let (seen, ticks) = poller.finish(end_ns);
            let mut peaks = crate::folder::records::peak_bytes(seen);
            peaks.remove(View::JobUsed.key());
            let (job_seen, _) = job_poller.finish(end_ns);
            if let Some(p) = job_seen.get(View::JobUsed) {
                peaks.insert(View::JobUsed.key().to_string(), p.bytes);
            }
            out.insert(
                name.to_string(),
                PolledPeaks {
                    period_ns: *period,
                    ticks,
                    peaks,
                },
            );
        }
        out
    }

    /// The folder's record with its summary: from here the folder writes `summary.json`.
    pub fn with_summary(self, summary: Summary) -> RunFolder {
        RunFolder {
            record: self,
            summary,
            watch: None,
            late: None,
        }
    }
}

/// A result folder being written: its record and its summary.
pub struct RunFolder {
    record: Record,
    summary: Summary,
    /// A watch's section, written into `summary.json` beside the run's keys.
    watch: Option<WatchSection>,
    /// The last summary on disk, for the watchdog's late write (`late_write`).
    late: Option<Arc<Mutex<Summary>>>,
}

impl RunFolder {
    /// Creates the record in `dir` and begins with `summary` (status `running`); nothing is
    /// written to `summary.json` until `write_summary`.
    pub fn create(
        dir: &Path,
        summary: Summary,
        phases: Vec<String>,
        clock_start_ns: u64,
    ) -> anyhow::Result<RunFolder> {
        let total = summary.device().total_bytes;
        Ok(Record::create(dir, phases, total, clock_start_ns)?.with_summary(summary))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.record.dir
    }

    /// The record (`timeline.csv`, `events.csv`).
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The record, to push readings and rows into.
    pub fn record_mut(&mut self) -> &mut Record {
        &mut self.record
    }

    /// The summary as it stands.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The finished folder's summary.
    pub fn into_summary(self) -> Summary {
        self.summary
    }

    /// Writes `summary.json` as it stands (whole, atomically).
    pub fn write_summary(&mut self) -> std::io::Result<()> {
        let whole;
        let on_disk = match &self.watch {
            Some(w) => {
                let mut s = self.summary.clone();
                s.set_watch(Some(w.clone()));
                whole = s;
                &whole
            }
            None => &self.summary,
        };
        if let Some(late) = &self.late {
            *late.lock().unwrap_or_else(|e| e.into_inner()) = on_disk.clone();
        }
        crate::folder::write_summary(self.record.dir(), on_disk)
    }

    /// A handle for a write after the producer can no longer make one (the watchdog's, from
    /// its own thread, when a driver call never returns): it marks the last summary written
    /// and writes it again.
    pub fn late_write(&mut self) -> LateWrite {
        let late = self
            .late
            .get_or_insert_with(|| Arc::new(Mutex::new(self.summary.clone())))
            .clone();
        LateWrite {
            dir: self.dir().to_path_buf(),
            last: late,
        }
    }

    /// Both CSVs flushed and `summary.json` rewritten, so that what happened so far is on
    /// disk (after each phase); a failure is a warning, the next checkpoint tries again.
    pub fn checkpoint(&mut self) {
        if let Err(e) = self
            .record
            .flush_timeline()
            .and_then(|_| self.record.flush_events())
        {
            crate::errln!("warning: flushing results: {e}");
        }
        if let Err(e) = self.write_summary() {
            crate::errln!("warning: writing summary.json: {e}");
        }
    }

    /// Phase `pi` starts at `t_ns`.
    pub fn phase_started(&mut self, pi: usize, t_ns: u64) {
        let p = self.summary.phase_mut(pi);
        p.status = PhaseStatus::Running;
        p.start_ns = Some(t_ns);
    }

    /// One more action of phase `pi` ran.
    pub fn action_ran(&mut self, pi: usize) {
        self.summary.phase_mut(pi).actions_run += 1;
    }

    /// Actions run so far, over every phase.
    pub fn actions_run(&self) -> u64 {
        self.summary.phases().iter().map(|p| p.actions_run).sum()
    }

    /// Phase `pi` ends at `t_ns` with `status` (a watch's phase still `running` completes).
    pub fn phase_ended(&mut self, pi: usize, t_ns: u64, status: PhaseStatus) {
        let p = self.summary.phase_mut(pi);
        p.end_ns = Some(t_ns);
        p.status = status;
    }

    /// Every phase from `pi` on is marked `status` (`skipped`: not run).
    pub fn phases_from(&mut self, pi: usize, status: PhaseStatus) {
        for p in &mut self.summary.phases_mut()[pi..] {
            p.status = status;
        }
    }

    /// A phase that was not planned (a watch's mark) begins at `t_ns`: in the record and in
    /// the summary; its index.
    pub fn phase_begun(&mut self, name: &str, t_ns: u64) -> u32 {
        let index = self.record.add_phase(name);
        self.summary.push_phase(name, t_ns);
        index
    }

    /// The phase named `name` saw an OOM.
    pub fn phase_oom(&mut self, name: &str) {
        if let Some(p) = self
            .summary
            .phases_mut()
            .iter_mut()
            .find(|p| p.name == name)
        {
            p.status = PhaseStatus::Oom;
        }
    }

    /// The peaks, per phase and of the whole record, and the row counts, from the record so
    /// far into the summary (headroom at the device-used peak where the total is known).
    pub fn fill_peaks(&mut self) {
        let s = &mut self.summary;
        let headroom = self
            .record
            .timeline
            .run
            .get(View::DeviceUsed)
            .zip(s.device_total())
            .map(|(p, total)| total.saturating_sub(p.bytes));
        let peaks = s.peaks_mut();
        peaks.run = self.record.timeline.run.to_map();
        peaks.headroom_at_peak_bytes = headroom;
        for (ps, set) in s.phases_mut().iter_mut().zip(&self.record.timeline.phases) {
            ps.peaks = set.to_map();
        }
        self.fill_rows();
    }

    /// The row counts of both CSVs so far, into the summary.
    pub fn fill_rows(&mut self) {
        self.summary.set_rows(
            self.record.timeline.rows_written,
            self.record.events.rows_written,
        );
    }

    /// The pollers see the record up to `end_ns`: their peaks into the summary.
    pub fn close_pollers(&mut self, end_ns: u64) {
        let polled = self.record.polled_peaks(end_ns);
        self.summary.add_polled(polled);
    }

    /// `close_pollers` for a watch: `job_used_bytes` from the process list's own pollers.
    pub fn close_pollers_with_job(&mut self, job_pollers: &mut [Poller], end_ns: u64) {
        let polled = self.record.polled_peaks_with_job(job_pollers, end_ns);
        self.summary.add_polled(polled);
    }

    /// How the run ended so far, and why.
    pub fn set_status(&mut self, status: RunStatus, detail: Option<String>) {
        self.summary.set_status(status, detail);
    }

    /// `what` added to the status detail (after what it says already).
    pub fn add_detail(&mut self, what: String) {
        self.summary.add_detail(what);
    }

    /// The device time at the end.
    pub fn set_end_ns(&mut self, end_ns: u64) {
        self.summary.set_end_ns(end_ns);
    }

    /// What the sampler read and how.
    pub fn set_sampler(&mut self, stats: crate::sampler::SamplerStats) {
        self.summary.set_sampler(stats);
    }

    /// The latency of the producer's own calls, by call.
    pub fn set_latency(
        &mut self,
        latency: std::collections::BTreeMap<String, crate::sampler::Percentiles>,
    ) {
        self.summary.set_latency(latency);
    }

    /// The driver's high-water marks of the stream-ordered pool.
    pub fn set_pool_high_water(&mut self, usage: Option<crate::device::PoolUsage>) {
        self.summary.set_pool_high_water(usage);
    }

    /// The allocator's counters at the end.
    pub fn set_allocator_stats(&mut self, stats: crate::alloc::AllocStats) {
        self.summary.set_allocator_stats(stats);
    }

    /// The graphs' section, where the run has one.
    pub fn set_graphs(&mut self, graphs: Option<crate::report::graphs::GraphsSummary>) {
        self.summary.set_graphs(graphs);
    }

    /// The OOMs so far, each with its evidence.
    pub fn set_ooms(&mut self, ooms: Vec<OomRecord>) {
        self.summary.set_ooms(ooms);
    }

    /// The `verify` mismatches so far.
    pub fn set_mismatches(&mut self, mismatches: Vec<MismatchRecord>) {
        self.summary.set_mismatches(mismatches);
    }

    /// The release check.
    pub fn set_release(&mut self, release: Release) {
        self.summary.set_release(release);
    }

    /// The expectations and whether each held.
    pub fn set_expectations(&mut self, expectations: Vec<ExpectationResult>) {
        self.summary.set_expectations(expectations);
    }

    /// The exit code the producer asks for.
    pub fn set_exit_code(&mut self, code: i32) {
        self.summary.set_exit_code(code);
    }

    /// A watch's section.
    pub fn set_watch(&mut self, watch: WatchSection) {
        self.watch = Some(watch);
    }

    /// The wall-clock time it finished: now.
    pub fn stamp_finished(&mut self) {
        self.set_finished_utc(crate::units::utc_timestamp(std::time::SystemTime::now()));
    }

    /// The wall-clock time it finished, as its evidence records it (an import's trace).
    pub fn set_finished_utc(&mut self, utc: String) {
        self.summary.set_finished_utc(utc);
    }

    /// What an import recorded and could not record.
    pub fn set_import(&mut self, import: crate::report::imported::ImportInfo) {
        self.summary.set_import(import);
    }

    /// The derived reports (`report.md`, the plots, `trace.json`, `junit.xml`) from the
    /// record on disk; after a signal (`interrupted`) each is said on stderr as it starts and
    /// none is started past `reports::INTERRUPTED_REPORTS_BUDGET`.
    pub fn write_reports(&self, interrupted: bool) -> anyhow::Result<()> {
        let (dir, s) = (self.dir(), &self.summary);
        match (&self.watch, interrupted) {
            (Some(w), _) => crate::folder::reports::write_watch(dir, s, w),
            (None, true) => crate::folder::reports::write_interrupted(dir, s),
            (None, false) => crate::folder::reports::write(dir, s),
        }
    }
}

/// What the watchdog may still write into a folder whose producer is stuck: the last summary
/// on disk, marked with how the command ended, and the stuck call's row.
#[derive(Clone)]
pub struct LateWrite {
    dir: PathBuf,
    last: Arc<Mutex<Summary>>,
}

/// How a command ended that its producer could not finish itself.
pub struct LateEnd<'a> {
    pub status: RunStatus,
    pub detail: &'a str,
    pub exit_code: i32,
    /// The row of the call that never returned.
    pub row: EventRow<'a>,
}

impl LateWrite {
    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the producer wrote a summary yet (a command stuck before its record began has
    /// nothing to keep).
    pub fn begun(&self) -> bool {
        self.dir.join(crate::folder::SUMMARY).is_file()
    }

    /// Appends `end.row` to `events.csv` and rewrites `summary.json` from the last one
    /// written: `end`'s status, detail and exit code, the phases as `events.csv` has them.
    /// Each failure is a warning: the process is ending.
    pub fn end(&self, end: LateEnd) {
        let events = self.dir.join("events.csv");
        if let Err(e) = crate::record::timeline::append_event_row(&events, &end.row) {
            crate::errln!("warning: recording the stuck call in events.csv: {e}");
        }
        // The producer's thread may hold the lock while stuck: never wait on it.
        let mut s = match self.last.try_lock() {
            Ok(s) => s.clone(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
            Err(std::sync::TryLockError::WouldBlock) => {
                crate::errln!("warning: summary.json is being written; left as it is");
                return;
            }
        };
        s.set_status(end.status, Some(end.detail.to_string()));
        s.set_exit_code(end.exit_code);
        s.set_finished_utc(crate::units::utc_timestamp(std::time::SystemTime::now()));
        match crate::report::progress::events_progress(&events) {
            Ok(p) => crate::report::progress::apply_events(&mut s, &p),
            Err(e) => crate::errln!("warning: reading events.csv back: {e:#}"),
        }
        if let Err(e) = crate::folder::write_summary(&self.dir, &s) {
            crate::errln!("warning: recording the stuck call in summary.json: {e:#}");
        }
    }
}
