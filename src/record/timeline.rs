//! `timeline.csv` and `events.csv`, written as the run goes, with peaks folded in on the way.
//!
//! Readings arrive from two places (event readings on the run's thread, sampler readings from
//! a background thread on a real GPU), so they can arrive slightly out of order. The recorder
//! holds them in a small reorder buffer and writes everything older than a watermark in time
//! order; peaks and poller replays see the same ordered stream as the file.
//!
//! The file holds a row only where something changed: a sampler reading equal to the reading
//! before it (same phase, device free and every view) is not written, except the last one
//! before a change, so each value's first and last sighting are both in the file. Peaks and
//! pollers see every reading, written or not; an hour at 1 ms is a few rows per change, not
//! 3.6 million.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

use crate::record::peaks::{PeakSet, Poller};
use crate::record::{NO_PHASE, Reading, Source, View};

/// The format version written into every output; bumped when a column or key changes meaning.
pub const FORMAT_VERSION: u32 = 2;

/// Pollers replayed over every run: what a dashboard at that rate would have shown.
pub const POLLERS: &[(&str, u64)] = &[("1hz", 1_000_000_000), ("10hz", 100_000_000)];

/// A buffered reading, ordered earliest first (ties in arrival order).
struct Pending {
    reading: Reading,
    seq: u64,
}

impl Pending {
    fn key(&self) -> (u64, u64) {
        (self.reading.t_ns, self.seq)
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key().cmp(&self.key())
    }
}

pub struct Recorder {
    out: BufWriter<File>,
    /// Phase names as CSV cells (quoted where needed).
    phase_cells: Vec<String>,
    line: Vec<u8>,
    total_bytes: u64,
    pending: BinaryHeap<Pending>,
    seq: u64,
    pub run: PeakSet,
    pub phases: Vec<PeakSet>,
    pub pollers: Vec<Poller>,
    pub rows_written: u64,
    /// Every reading folded into the peaks, written to the file or not.
    pub readings_seen: u64,
    last_written_ns: u64,
    /// The reading that set the values the file shows now (written, or held below).
    last_values: Option<Reading>,
    /// A sampler reading equal to `last_values`, not written unless a change follows it.
    held: Option<Reading>,
    /// The device's free memory is not known (an import whose evidence does not record the
    /// device): `device_free_bytes` and `device_used_bytes` are written empty.
    free_unknown: bool,
}

impl Recorder {
    /// Creates `timeline.csv` in `dir`; `start_ns` is when the workload's first phase begins.
    pub fn create(
        dir: &Path,
        phase_names: Vec<String>,
        total_bytes: u64,
        start_ns: u64,
    ) -> std::io::Result<Recorder> {
        let file = File::create_new(dir.join("timeline.csv"))?;
        let mut out = BufWriter::with_capacity(1 << 16, file);
        let mut header = vec!["t_ns", "phase", "source", "device_free_bytes"];
        header.extend(View::ALL.iter().map(|v| v.key()));
        writeln!(out, "{}", header.join(","))?;
        // The header reaches the file at once: a killed run's timeline still has it.
        out.flush()?;
        let n = phase_names.len();
        Ok(Recorder {
            out,
            phase_cells: phase_names.iter().map(|p| csv_cell(p)).collect(),
            line: Vec::with_capacity(256),
            total_bytes,
            pending: BinaryHeap::new(),
            seq: 0,
            run: PeakSet::default(),
            phases: vec![PeakSet::default(); n],
            pollers: POLLERS
                .iter()
                .map(|(name, p)| Poller::new(name, *p, start_ns))
                .collect(),
            rows_written: 0,
            readings_seen: 0,
            last_written_ns: 0,
            last_values: None,
            held: None,
            free_unknown: false,
        })
    }

    /// From now on the device's free memory (and so device used) is written as not known.
    pub fn free_not_recorded(&mut self) {
        self.free_unknown = true;
    }

    /// Adds a phase after the start (a watched job names its phases as it goes); returns its
    /// index for the readings taken in it.
    pub fn add_phase(&mut self, name: &str) -> u32 {
        self.phase_cells.push(csv_cell(name));
        self.phases.push(PeakSet::default());
        (self.phases.len() - 1) as u32
    }

    /// Adds a reading; it is written once the watermark passes it.
    pub fn push(&mut self, mut r: Reading) {
        if self.free_unknown {
            r.views.clear(View::DeviceUsed);
        } else {
            r.views.set(
                View::DeviceUsed,
                self.total_bytes.saturating_sub(r.device_free_bytes),
            );
        }
        self.pending.push(Pending {
            reading: r,
            seq: self.seq,
        });
        self.seq += 1;
    }

    /// Writes every buffered reading taken at or before `watermark_ns`, in time order.
    pub fn release_until(&mut self, watermark_ns: u64) -> std::io::Result<()> {
        while self
            .pending
            .peek()
            .is_some_and(|p| p.reading.t_ns <= watermark_ns)
        {
            let p = self.pending.pop().expect("peeked");
            self.write(&p.reading)?;
        }
        Ok(())
    }

    /// Writes everything buffered (the last unchanged reading too) and flushes the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.release_until(u64::MAX)?;
        if let Some(h) = self.held.take() {
            self.write_row(&h)?;
        }
        self.out.flush()
    }

    /// Folds `r` into the peaks and pollers; writes its row when it changes what the file
    /// shows (or is not a sampler reading).
    fn write(&mut self, r: &Reading) -> std::io::Result<()> {
        self.readings_seen += 1;
        if matches!(r.source, Source::Sampler | Source::Event) {
            self.run.observe(r);
            if let Some(p) = self.phases.get_mut(r.phase as usize) {
                p.observe(r);
            }
            for poller in &mut self.pollers {
                poller.observe(r);
            }
        }
        self.last_written_ns = self.last_written_ns.max(r.t_ns);
        let unchanged = self.last_values.is_some_and(|last| same_values(&last, r));
        if r.source == Source::Sampler && unchanged {
            self.held = Some(*r);
            return Ok(());
        }
        if let Some(h) = self.held.take() {
            self.write_row(&h)?;
        }
        if !unchanged {
            self.last_values = Some(*r);
        }
        self.write_row(r)
    }

    fn write_row(&mut self, r: &Reading) -> std::io::Result<()> {
        let phase = if r.phase == NO_PHASE {
            ""
        } else {
            self.phase_cells
                .get(r.phase as usize)
                .map_or("", String::as_str)
        };
        // The hot path of every reading: digits by hand, no formatting machinery.
        let line = &mut self.line;
        line.clear();
        push_u64(line, r.t_ns);
        line.push(b',');
        line.extend_from_slice(phase.as_bytes());
        line.push(b',');
        line.extend_from_slice(r.source.as_str().as_bytes());
        line.push(b',');
        if !self.free_unknown {
            push_u64(line, r.device_free_bytes);
        }
        for v in View::ALL {
            line.push(b',');
            if let Some(x) = r.views.get(v) {
                push_u64(line, x);
            }
        }
        line.push(b'\n');
        self.out.write_all(line)?;
        self.rows_written += 1;
        Ok(())
    }
}

/// Whether two readings show the same phase, device free memory and views.
fn same_values(a: &Reading, b: &Reading) -> bool {
    a.phase == b.phase && a.device_free_bytes == b.device_free_bytes && a.views == b.views
}

/// Appends the decimal digits of `v` (no allocation: the CSV writers' integer cells).
pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(decimal(v, &mut [0; 20]).as_bytes());
}

/// The decimal digits of `v`, written into `buf` (names and labels built without `format!`).
pub(crate) fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).expect("ASCII digits")
}

/// A CSV cell: quoted when it holds a comma, quote or line break.
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// What became of one row's action: `events.csv`'s `result` column, written as its word
/// (`EVENT_RESULTS` says what each means).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventResult {
    Ok,
    Oom,
    Full,
    Stopped,
    Skipped,
    Error,
    Wedged,
    Interrupted,
}

impl EventResult {
    /// Every result, in `EVENT_RESULTS`'s order.
    pub const ALL: [EventResult; 8] = [
        EventResult::Ok,
        EventResult::Oom,
        EventResult::Full,
        EventResult::Stopped,
        EventResult::Skipped,
        EventResult::Error,
        EventResult::Wedged,
        EventResult::Interrupted,
    ];

    /// The word `events.csv` holds.
    pub const fn word(self) -> &'static str {
        EVENT_RESULTS[self as usize].0
    }
}

/// Every value of `events.csv`'s `result` column, with what it means, in `EventResult`'s
/// order: the one list docs/formats.md's table is checked against.
pub const EVENT_RESULTS: [(&str, &str); 8] = [
    ("ok", "the action completed"),
    (
        "oom",
        "the request was refused for lack of memory (recorded with its evidence in `summary.json`)",
    ),
    (
        "full",
        "the refusal that ends an `allocate` with `count = \"fill\"`: the device is full, as asked",
    ),
    (
        "stopped",
        "not run: the step would have gone below the free-memory floor, or the run was interrupted",
    ),
    (
        "skipped",
        "not run: the step uses an allocation that failed earlier (`detail` names it)",
    ),
    (
        "error",
        "the call failed other than by running out of memory (a driver error, a bad address)",
    ),
    (
        "wedged",
        "the driver call did not return within the watchdog (`--watchdog`): the run ended there with exit 2",
    ),
    (
        "interrupted",
        "a signal ended the run while this driver call was still running: the run ended there with exit 130",
    ),
];

/// docs/formats.md's table of `result` values, as `EVENT_RESULTS` gives it.
pub fn event_results_table() -> String {
    let mut t = String::from("| `result` | meaning |\n| --- | --- |\n");
    for (v, m) in EVENT_RESULTS {
        t.push_str(&format!("| `{v}` | {m} |\n"));
    }
    t
}

/// The columns of `events.csv`, `EventRow`'s fields in order.
pub const EVENT_HEADER: [&str; 12] = [
    "t_ns",
    "phase",
    "step",
    "op",
    "name",
    "stream",
    "requested_bytes",
    "size_bytes",
    "latency_ns",
    "result",
    "device_free_bytes",
    "detail",
];

/// One row of `events.csv`: an allocate, free, launch, sync or failure.
#[derive(Debug, Clone, Serialize)]
pub struct EventRow<'a> {
    pub t_ns: u64,
    pub phase: &'a str,
    pub step: &'a str,
    pub op: &'a str,
    pub name: &'a str,
    pub stream: &'a str,
    pub requested_bytes: Option<u64>,
    pub size_bytes: Option<u64>,
    pub latency_ns: u64,
    pub result: EventResult,
    pub device_free_bytes: Option<u64>,
    pub detail: &'a str,
}

pub struct EventLog {
    csv: csv::Writer<BufWriter<File>>,
    pub rows_written: u64,
    /// Write each row through to the file as it comes (see `set_flush_each_row`).
    flush_each_row: bool,
}

impl EventLog {
    /// Creates `events.csv` with its header, written through at once (a run killed before
    /// its first event still leaves a file a CSV reader opens).
    pub fn create(dir: &Path) -> std::io::Result<EventLog> {
        let file = File::create_new(dir.join("events.csv"))?;
        let mut csv = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(BufWriter::new(file));
        csv.write_record(EVENT_HEADER)
            .map_err(std::io::Error::other)?;
        csv.flush()?;
        Ok(EventLog {
            csv,
            rows_written: 0,
            flush_each_row: false,
        })
    }

    /// Hands every row to the file as soon as it is written (not synced to disk): the file
    /// then always ends with a whole row, which the watchdog may append to.
    pub fn set_flush_each_row(&mut self, on: bool) {
        self.flush_each_row = on;
    }

    pub fn write(&mut self, row: &EventRow) -> std::io::Result<()> {
        let _io = events_io();
        self.csv.serialize(row).map_err(std::io::Error::other)?;
        if self.flush_each_row {
            self.csv.flush()?;
        }
        self.rows_written += 1;
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.csv.flush()?;
        self.csv.get_ref().get_ref().sync_data()
    }
}

/// Held while a row is written to `events.csv`: by the `EventLog` for each row, and by
/// `append_event_row` for a row added from another thread (the watchdog's, when it ends a run
/// stuck in a call), so that one never lands inside the other.
static EVENTS_IO: Mutex<()> = Mutex::new(());

fn events_io() -> MutexGuard<'static, ()> {
    EVENTS_IO.lock().unwrap_or_else(|e| e.into_inner())
}

/// Appends one row to the `events.csv` at `path` (whole, never inside a row an `EventLog` is
/// writing), without a header.
pub fn append_event_row(path: &Path, row: &EventRow) -> std::io::Result<()> {
    let _io = events_io();
    let file = std::fs::OpenOptions::new().append(true).open(path)?;
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(file);
    w.serialize(row).map_err(std::io::Error::other)?;
    w.flush()
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ViewSet;

    #[test]
    fn out_of_order_readings_are_written_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = Recorder::create(dir.path(), vec!["a".into()], 100, 0).unwrap();
        let r = |t, free, src| Reading {
            t_ns: t,
            phase: 0,
            source: src,
            device_free_bytes: free,
            views: ViewSet::default(),
        };
        rec.push(r(30, 40, Source::Event));
        rec.push(r(10, 90, Source::Sampler));
        rec.push(r(20, 70, Source::Sampler));
        rec.release_until(25).unwrap();
        assert_eq!(rec.rows_written, 2);
        rec.flush().unwrap();
        let text = std::fs::read_to_string(dir.path().join("timeline.csv")).unwrap();
        let times: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap())
            .collect();
        assert_eq!(times, ["10", "20", "30"]);
        assert_eq!(rec.run.get(View::DeviceUsed).unwrap().bytes, 60);
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .starts_with("10,a,sampler,90,10,")
        );
    }

    #[test]
    fn unchanged_sampler_readings_are_left_out_but_every_peak_and_edge_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = Recorder::create(dir.path(), vec!["a".into()], 1000, 0).unwrap();
        let r = |t, free, src| Reading {
            t_ns: t,
            phase: 0,
            source: src,
            device_free_bytes: free,
            views: ViewSet::default(),
        };
        // 900 free from t=0 to t=99, a one-reading dip to 300 at t=100, 800 after it.
        rec.push(r(0, 900, Source::Event));
        for t in 1..100 {
            rec.push(r(t, 900, Source::Sampler));
        }
        rec.push(r(100, 300, Source::Sampler));
        for t in 101..200 {
            rec.push(r(t, 800, Source::Sampler));
        }
        rec.push(r(200, 800, Source::Event));
        rec.push(r(201, 800, Source::Sampler));
        rec.flush().unwrap();
        let text = std::fs::read_to_string(dir.path().join("timeline.csv")).unwrap();
        let rows: Vec<(u64, u64)> = text
            .lines()
            .skip(1)
            .map(|l| {
                let c: Vec<&str> = l.split(',').collect();
                (c[0].parse().unwrap(), c[3].parse().unwrap())
            })
            .collect();
        assert_eq!(
            rows,
            [
                (0, 900),
                (99, 900),
                (100, 300),
                (101, 800),
                (199, 800),
                (200, 800),
                (201, 800)
            ]
        );
        assert_eq!(rec.rows_written, 7);
        assert_eq!(rec.readings_seen, 202);
        let peak = rec.run.get(View::DeviceUsed).unwrap();
        assert_eq!((peak.bytes, peak.t_ns), (700, 100));
        assert_eq!(rec.run.readings(), 202);
    }

    #[test]
    fn never_overwrites_an_existing_timeline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("timeline.csv"), "keep").unwrap();
        assert!(Recorder::create(dir.path(), vec![], 1, 0).is_err());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("timeline.csv")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn the_events_header_names_every_field_in_order_and_is_on_disk_at_creation() {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(EventRow {
            t_ns: 1,
            phase: "p",
            step: "0",
            op: "allocate",
            name: "a",
            stream: "0",
            requested_bytes: Some(2),
            size_bytes: Some(2),
            latency_ns: 3,
            result: EventResult::Ok,
            device_free_bytes: Some(4),
            detail: "",
        })
        .unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next().unwrap(), EVENT_HEADER.join(","));
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::create(dir.path()).unwrap();
        let on_disk = std::fs::read_to_string(dir.path().join("events.csv")).unwrap();
        assert_eq!(on_disk, format!("{}\n", EVENT_HEADER.join(",")));
        drop(log);
        let rec = Recorder::create(dir.path(), vec![], 1 << 30, 0).unwrap();
        let on_disk = std::fs::read_to_string(dir.path().join("timeline.csv")).unwrap();
        assert!(on_disk.starts_with("t_ns,phase,source,") && on_disk.ends_with("_bytes\n"));
        drop(rec);
    }

    #[test]
    fn every_result_is_written_as_its_word_in_event_results() {
        assert_eq!(EventResult::ALL.len(), EVENT_RESULTS.len());
        for (r, (word, _)) in EventResult::ALL.iter().zip(EVENT_RESULTS) {
            assert_eq!(r.word(), word);
            let mut w = csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(Vec::new());
            w.serialize((r,)).unwrap();
            let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
            assert_eq!(text, format!("{word}\n"), "{r:?}");
        }
    }
}
