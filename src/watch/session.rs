//! The watch's record while the job runs: every reading, mark and message goes through here
//! into `timeline.csv`, `events.csv`, the phases and the watch section, as it arrives.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::{Instant, SystemTime};

use crate::explain::Explanation;
use crate::folder::RunFolder;
use crate::record::peaks::Poller;
use crate::record::timeline::{EventResult, EventRow, POLLERS};
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};
use crate::report::summary::PhaseStatus;
use crate::report::watch::{JobProcess, MAX_JOB_PROCESSES, ViewsAt, WatchSection};
use crate::units::utc_timestamp;
use crate::watch::Msg;
use crate::watch::marks::Mark;
use crate::watch::sampling::JobReading;
use crate::watch::stderr::StderrOom;

/// Readings kept for the views at a message's instant: the last two seconds.
const RECENT_NS: u64 = 2_000_000_000;
/// …and never more than this many.
const RECENT_MAX: usize = 1 << 16;
/// A message waits this long for the readings taken before it (sent by other threads).
const OOM_SLACK_NS: u64 = 20_000_000;
/// Messages recorded in full; more are counted.
pub const MAX_OOMS: usize = 100;

pub struct Session {
    pub origin: Instant,
    /// Wall-clock time at `origin`, for UTC stamps.
    pub origin_wall: SystemTime,
    /// The result folder every reading, row and phase goes into.
    pub folder: RunFolder,
    pub watch: WatchSection,
    /// `(t_ns, device free)` of recent readings, oldest first.
    recent: VecDeque<(u64, u64)>,
    /// Recent process-list readings, oldest first.
    recent_jobs: VecDeque<JobReading>,
    /// Pollers replayed over the process-list readings alone (`job_used_bytes` is read at
    /// its own rate; the device pollers must not see it only by chance).
    pub job_pollers: Vec<Poller>,
    job_processes: BTreeMap<u32, JobProcess>,
    /// Listed PIDs not visible here that were not on the device at the idle reading.
    pub unseen: BTreeSet<u32>,
    idle_pids: HashSet<u32>,
    last_job: Option<(u64, Option<u64>)>,
    last_change_ns: Option<u64>,
    pub job_changes: u64,
    pub shortest_change_ns: Option<u64>,
    explanations: Vec<Explanation>,
    pub ooms_beyond_limit: u64,
    current_phase: Option<usize>,
    pub stderr_closed: bool,
    pending_ooms: Vec<StderrOom>,
    /// How far behind the clock rows are written (readings from two threads are reordered).
    pub slack_ns: u64,
    pub total_bytes: u64,
}

/// What a session starts from.
pub struct Start {
    pub origin: Instant,
    pub origin_wall: SystemTime,
    pub folder: RunFolder,
    pub watch: WatchSection,
    /// PIDs on the device at the idle reading.
    pub idle_pids: HashSet<u32>,
    /// When the job started (the pollers' first tick).
    pub start_ns: u64,
    /// The total the recorder derives device used from.
    pub total_bytes: u64,
    /// The job's memory at the start, when known (0 for a job not started yet): the job
    /// pollers' first tick sees it.
    pub start_job_bytes: Option<u64>,
    /// Device free at the start.
    pub start_free_bytes: u64,
}

impl Session {
    pub fn new(s: Start) -> Session {
        let mut job_pollers: Vec<Poller> = POLLERS
            .iter()
            .map(|(n, p)| Poller::new(n, *p, s.start_ns))
            .collect();
        if let Some(b) = s.start_job_bytes {
            let r = Reading {
                t_ns: s.start_ns,
                phase: NO_PHASE,
                source: Source::Sampler,
                device_free_bytes: s.start_free_bytes,
                views: ViewSet::default().with(View::JobUsed, b),
            };
            for p in &mut job_pollers {
                p.observe(&r);
            }
        }
        Session {
            origin: s.origin,
            origin_wall: s.origin_wall,
            folder: s.folder,
            watch: s.watch,
            recent: VecDeque::new(),
            recent_jobs: VecDeque::new(),
            job_pollers,
            job_processes: BTreeMap::new(),
            unseen: BTreeSet::new(),
            idle_pids: s.idle_pids,
            last_job: None,
            last_change_ns: None,
            job_changes: 0,
            shortest_change_ns: None,
            explanations: Vec::new(),
            ooms_beyond_limit: 0,
            current_phase: None,
            stderr_closed: false,
            pending_ooms: Vec::new(),
            slack_ns: 50_000_000,
            total_bytes: s.total_bytes,
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    pub fn utc_at(&self, t_ns: u64) -> String {
        utc_timestamp(self.origin_wall + std::time::Duration::from_nanos(t_ns))
    }

    pub fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Reading(r) => self.on_reading(r),
            Msg::Job(j) => self.on_job(j),
            Msg::Mark(m) => self.on_mark(m),
            // Held until the readings taken before it have arrived from the samplers.
            Msg::Oom(o) => self.pending_ooms.push(*o),
            Msg::StderrClosed => self.stderr_closed = true,
        }
    }

    pub fn on_reading(&mut self, r: Reading) {
        self.recent.push_back((r.t_ns, r.device_free_bytes));
        while self.recent.len() > RECENT_MAX
            || self
                .recent
                .front()
                .is_some_and(|(t, _)| t + RECENT_NS < r.t_ns)
        {
            self.recent.pop_front();
        }
        self.folder.record_mut().reading(r);
    }

    fn on_job(&mut self, j: JobReading) {
        let job = j.job_used_bytes();
        let mut views = ViewSet::default();
        if let Some(b) = job {
            views.set(View::JobUsed, b);
        }
        let r = Reading {
            t_ns: j.t_ns,
            phase: j.phase,
            source: Source::Sampler,
            device_free_bytes: j.device_free_bytes,
            views,
        };
        for p in &mut self.job_pollers {
            p.observe(&r);
        }
        self.on_reading(r);
        if self.last_job.is_some_and(|(_, v)| v != job) {
            if let Some(prev) = self.last_change_ns {
                let gap = j.t_ns.saturating_sub(prev);
                self.shortest_change_ns = Some(self.shortest_change_ns.map_or(gap, |s| s.min(gap)));
            }
            self.last_change_ns = Some(j.t_ns);
            self.job_changes += 1;
        }
        self.last_job = Some((j.t_ns, job));
        for &(pid, bytes) in &j.members {
            if let Some(p) = self.job_processes.get_mut(&pid) {
                p.peak_used_bytes = p.peak_used_bytes.max(bytes.unwrap_or(0));
                p.last_seen_ns = j.t_ns;
            } else if self.job_processes.len() < MAX_JOB_PROCESSES {
                self.job_processes.insert(
                    pid,
                    JobProcess {
                        pid,
                        peak_used_bytes: bytes.unwrap_or(0),
                        first_seen_ns: j.t_ns,
                        last_seen_ns: j.t_ns,
                    },
                );
            }
        }
        for pid in &j.unseen {
            if !self.idle_pids.contains(pid) {
                self.unseen.insert(*pid);
            }
        }
        self.recent_jobs.push_back(j);
        if self.recent_jobs.len() > 64 {
            self.recent_jobs.pop_front();
        }
    }

    /// The job's processes, by first sight.
    pub fn job_processes(&self) -> Vec<JobProcess> {
        let mut v: Vec<JobProcess> = self.job_processes.values().copied().collect();
        v.sort_by_key(|p| (p.first_seen_ns, p.pid));
        v
    }

    fn event(&mut self, t_ns: u64, op: &str, name: &str, result: EventResult, detail: &str) {
        let phase = self
            .current_phase
            .map(|i| self.folder.summary().phases()[i].name.clone())
            .unwrap_or_default();
        let free = self.recent.back().map(|r| r.1);
        let row = EventRow {
            t_ns,
            phase: &phase,
            step: "",
            op,
            name,
            stream: "job",
            requested_bytes: None,
            size_bytes: None,
            latency_ns: 0,
            result,
            device_free_bytes: free,
            detail,
        };
        if let Err(e) = self.folder.record_mut().event(&row) {
            crate::errln!("warning: writing events.csv: {e}");
        }
    }

    /// Writes an event row of the job (`start`, `signal`, `exit`, `release`).
    pub fn job_event(
        &mut self,
        t_ns: u64,
        op: &str,
        name: &str,
        result: EventResult,
        detail: &str,
    ) {
        self.event(t_ns, op, name, result, detail);
    }

    fn close_phase(&mut self, t_ns: u64) {
        if let Some(i) = self.current_phase.take() {
            let status = match self.folder.summary().phases()[i].status {
                PhaseStatus::Running => PhaseStatus::Completed,
                s => s,
            };
            self.folder.phase_ended(i, t_ns, status);
        }
    }

    fn on_mark(&mut self, m: Mark) {
        self.watch.marks.lines += 1;
        if m.beyond_limit {
            self.watch.marks.beyond_limit += 1;
            self.event(
                m.t_ns,
                "mark",
                &m.line,
                EventResult::Ok,
                "past the phase limit: not a new phase",
            );
            return;
        }
        self.close_phase(m.t_ns);
        match &m.phase {
            Some((i, name)) => {
                let index = self.folder.phase_begun(name, m.t_ns);
                debug_assert_eq!(index, *i);
                self.current_phase = Some(index as usize);
                let detail = if *name == m.line.trim() {
                    String::new()
                } else {
                    format!("written as {:?}", m.line)
                };
                self.event(m.t_ns, "mark", name, EventResult::Ok, &detail);
            }
            None => self.event(
                m.t_ns,
                "mark",
                "",
                EventResult::Ok,
                "an empty line: the phase ends",
            ),
        }
    }

    /// headroom's readings at `t_ns`: the latest at or before it, and the highest device
    /// used in the second before.
    fn views_at(&self, t_ns: u64) -> ViewsAt {
        let total = self.total_bytes;
        let at = self.recent.iter().rev().find(|(t, _)| *t <= t_ns);
        let max_used = self
            .recent
            .iter()
            .filter(|(t, _)| *t <= t_ns && t + 1_000_000_000 >= t_ns)
            .map(|(_, free)| total.saturating_sub(*free))
            .max();
        let job = self.recent_jobs.iter().rev().find(|j| j.t_ns <= t_ns);
        ViewsAt {
            device_reading_t_ns: at.map(|r| r.0),
            device_free_bytes: at.map(|r| r.1),
            device_used_bytes: at.map(|r| total.saturating_sub(r.1)),
            device_used_max_last_second_bytes: max_used,
            job_reading_t_ns: job.map(|j| j.t_ns),
            job_used_bytes: job.and_then(JobReading::job_used_bytes),
            processes: job.map(|j| j.processes.clone()),
        }
    }

    fn on_oom(&mut self, o: StderrOom) {
        if self.watch.ooms.len() >= MAX_OOMS {
            self.ooms_beyond_limit += 1;
            return;
        }
        let t_ns = o.t_ns;
        let phases = &self.folder.summary().phases();
        let phase_index = phases
            .iter()
            .rposition(|p| p.start_ns.is_some_and(|s| s <= t_ns));
        let phase = phase_index
            .filter(|&i| phases[i].end_ns.is_none_or(|e| e >= t_ns))
            .map(|i| phases[i].name.clone());
        let cx = crate::watch::evidence::Context {
            utc: self.utc_at(t_ns),
            phase: phase.clone(),
            at: self.views_at(t_ns),
            device_total_bytes: self.folder.summary().device().total_bytes,
            earlier: &self.explanations,
        };
        let (record, explanation) = crate::watch::evidence::record(o, cx);
        let detail = format!("stderr line {}: {}", record.stderr_line, record.summary);
        self.event(t_ns, "oom", &record.format, EventResult::Oom, &detail);
        if let Some(name) = &phase {
            self.folder.phase_oom(name);
        }
        self.explanations.push(explanation);
        self.watch.ooms.push(record);
    }

    /// Records the messages whose readings have all arrived (all of them when `all`).
    pub fn settle_ooms(&mut self, all: bool) {
        let wm = self.now_ns().saturating_sub(OOM_SLACK_NS);
        let (ready, wait): (Vec<StderrOom>, Vec<StderrOom>) =
            std::mem::take(&mut self.pending_ooms)
                .into_iter()
                .partition(|o| all || o.t_ns <= wm);
        self.pending_ooms = wait;
        for o in ready {
            self.on_oom(o);
        }
    }

    /// Records settled messages and writes the rows older than the reorder slack.
    pub fn pump(&mut self) {
        self.settle_ooms(false);
        let wm = self.now_ns().saturating_sub(self.slack_ns);
        if let Err(e) = self.folder.record_mut().release_until(wm) {
            crate::errln!("warning: writing timeline.csv: {e}");
        }
    }

    /// What is known so far into `summary.json` (the peaks, the job's processes and, once it
    /// has exited, its exit), with every row held on disk when `flush`: what the watchdog's
    /// record starts from if a driver call never returns.
    pub fn checkpoint(&mut self, flush: bool) {
        if flush {
            self.folder.record_mut().flush_timeline().ok();
        }
        self.watch.job_processes = self.job_processes();
        self.folder.fill_peaks();
        self.folder.set_watch(self.watch.clone());
        self.folder.checkpoint();
    }

    /// The job ended at `t_ns`: the phase running then ends too.
    pub fn end_phases(&mut self, t_ns: u64) {
        self.close_phase(t_ns);
    }

    /// The phase running now, if any.
    pub fn phase_now(&self) -> u32 {
        self.current_phase.map_or(NO_PHASE, |i| i as u32)
    }
}
