//! A finished run read back from its folder: `summary.json`, `timeline.csv` and `events.csv`,
//! checked against the format version this build writes before anything is derived from them.
//!
//! Reading never writes: the derived reports are rendered from what is loaded here, and the
//! three original files stay as the run left them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::record::timeline::FORMAT_VERSION;
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};
use crate::report::deadline::Deadline;
use crate::report::event_rows::{EventColumns, EventRef};
use crate::report::summary::Summary;
use crate::report::timeline_downsample::Downsample;

/// The files every result folder holds; the rest are derived from them.
pub const ORIGINAL_FILES: [&str; 3] = ["summary.json", "timeline.csv", "events.csv"];

/// A reading's device free memory where timeline.csv leaves it empty.
const FREE_UNKNOWN: u64 = u64::MAX;

/// The rows of `timeline.csv`, one column per field; empty view columns are left out. A long
/// timeline is read through `Downsample`: its rows then hold every extreme of every column, not
/// every row (`reduced` says so).
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// Rows were left out to keep memory bounded (every extreme kept).
    pub reduced: bool,
    pub t_ns: Vec<u64>,
    /// Index into `summary.phases`, or `NO_PHASE` outside every phase.
    pub phase: Vec<u32>,
    pub source: Vec<Source>,
    /// `None` where the folder does not know it (an import whose evidence does not record the
    /// device leaves the column empty).
    pub device_free_bytes: Vec<Option<u64>>,
    /// Indexed by `View::index()`: `None` when the view has no value in any row.
    views: Vec<Option<Vec<Option<u64>>>>,
}

impl Timeline {
    pub fn len(&self) -> usize {
        self.t_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_ns.is_empty()
    }

    /// The column of one view, or `None` when the run never measured it.
    pub fn view(&self, view: View) -> Option<&[Option<u64>]> {
        self.views.get(view.index())?.as_deref()
    }

    /// `(t_ns, bytes)` of every row where `view` has a value, in time order.
    pub fn points(&self, view: View) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.view(view)
            .unwrap_or(&[])
            .iter()
            .zip(&self.t_ns)
            .filter_map(|(v, t)| v.map(|v| (*t, v)))
    }
}

/// One row of `events.csv`, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub t_ns: u64,
    pub phase: String,
    pub step: String,
    pub op: String,
    pub name: String,
    pub stream: String,
    pub requested_bytes: Option<u64>,
    pub size_bytes: Option<u64>,
    pub latency_ns: u64,
    pub result: String,
    pub device_free_bytes: Option<u64>,
    pub detail: String,
}

/// `events.csv` as a run's reports read it: counted and its streams listed in one pass, then
/// read again row by row (`rows`) by what needs every event. Holding no rows, a folder with a
/// million events is read back in bounded memory.
#[derive(Debug, Clone)]
pub struct EventFile {
    pub path: PathBuf,
    count: usize,
    /// Events whose result is not `ok` (OOMs, errors, stops: a run's few).
    pub not_ok: usize,
    /// Every stream the events name, in order of first appearance.
    pub streams: Vec<String>,
    /// When reading the rows again gives up (`OutOfTime`): the folder's reading's deadline.
    deadline: Deadline,
}

impl EventFile {
    fn open(path: &Path, deadline: Deadline) -> anyhow::Result<EventFile> {
        let (mut count, mut not_ok, mut streams) = (0, 0, Vec::<String>::new());
        let mut seen = std::collections::HashSet::new();
        for row in scan(path, deadline, |e| {
            count += 1;
            not_ok += usize::from(e.result() != "ok");
            if seen.insert(e.stream().to_string()) {
                streams.push(e.stream().to_string());
            }
            Ok(())
        })? {
            row?;
        }
        Ok(EventFile {
            path: path.to_path_buf(),
            count,
            not_ok,
            streams,
            deadline,
        })
    }

    /// How many events the run recorded.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every event, in the file's order, read as it is iterated; an `OutOfTime` row once the
    /// deadline the folder was read by passes (a report drawn from them stops there).
    pub fn rows(&self) -> anyhow::Result<impl Iterator<Item = anyhow::Result<Event>> + use<>> {
        scan(&self.path, self.deadline, |row| Ok(row.owned()))
    }
}

/// Every row of the events file at `path`, read as `each` takes it (borrowed from the reader's
/// buffer), with its line named in any error.
fn scan<T, F: FnMut(EventRef<'_>) -> anyhow::Result<T>>(
    path: &Path,
    deadline: Deadline,
    mut each: F,
) -> anyhow::Result<impl Iterator<Item = anyhow::Result<T>> + use<T, F>> {
    let path = path.to_path_buf();
    let mut r = crate::bounded::csv_reader(
        &path,
        crate::bounded::EVENTS_LINE_MAX_BYTES,
        &csv::ReaderBuilder::new(),
    )
    .with_context(|| format!("cannot read {}", path.display()))?;
    let columns = r
        .byte_headers()
        .map_err(anyhow::Error::from)
        .and_then(EventColumns::of)
        .with_context(|| format!("{}: line 1", path.display()))?;
    let mut record = csv::ByteRecord::new();
    let mut line = 1u64;
    Ok(std::iter::from_fn(move || {
        line += 1;
        let row = match r.read_byte_record(&mut record) {
            Ok(false) => return None,
            Ok(true) => {
                if let Err(e) = deadline.check(line - 1) {
                    return Some(Err(e.into()));
                }
                columns.event(&record).and_then(&mut each)
            }
            Err(e) => Err(e.into()),
        };
        Some(row.with_context(|| format!("{}: line {line}", path.display())))
    }))
}

/// Everything a finished run left in its folder.
#[derive(Debug, Clone)]
pub struct RunData {
    pub dir: PathBuf,
    pub summary: Summary,
    pub timeline: Timeline,
    pub events: EventFile,
    /// The watched job's section of `summary.json`, for a `headroom watch` folder.
    pub watch: Option<crate::report::watch::WatchSection>,
}

impl RunData {
    /// Reads and checks a whole result folder.
    pub fn load(dir: &Path) -> anyhow::Result<RunData> {
        let summary = load_summary(dir)?;
        let mut run = Self::with_summary(dir, summary)?;
        run.watch = crate::report::watch::load(dir)?;
        Ok(run)
    }

    /// Reads the CSVs of a folder whose summary is already in hand (a run that just finished).
    pub fn with_summary(dir: &Path, summary: Summary) -> anyhow::Result<RunData> {
        Self::with_summary_by(dir, summary, Deadline::none())
    }

    /// `with_summary`, given up with `OutOfTime` (in the error's chain) once `deadline` passes.
    pub fn with_summary_by(
        dir: &Path,
        summary: Summary,
        deadline: Deadline,
    ) -> anyhow::Result<RunData> {
        check_files(dir)?;
        let timeline = read_timeline(&dir.join("timeline.csv"), &summary, deadline)?;
        let events = EventFile::open(&dir.join("events.csv"), deadline)?;
        Ok(RunData {
            dir: dir.to_path_buf(),
            summary,
            timeline,
            events,
            watch: None,
        })
    }

    /// The earliest time on the run's clock: the idle reading or the first phase.
    pub fn t0_ns(&self) -> u64 {
        let first = self.timeline.t_ns.first().copied().unwrap_or(u64::MAX);
        first
            .min(self.summary.start_ns)
            .min(self.summary.idle_after().map_or(u64::MAX, |i| i.t_ns))
    }

    /// The latest time on the run's clock: the last reading or the end of the run.
    pub fn t1_ns(&self) -> u64 {
        let last = self.timeline.t_ns.last().copied().unwrap_or(0);
        last.max(self.summary.end_ns.unwrap_or(0))
            .max(self.summary.start_ns)
    }
}

/// Fails naming the folder and every original file it lacks.
pub fn check_files(dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        bail!("{}: no such result folder", dir.display());
    }
    let missing: Vec<&str> = ORIGINAL_FILES
        .iter()
        .copied()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "{}: not a complete result folder: {} missing (a run writes {})",
            dir.display(),
            match missing.as_slice() {
                [one] => format!("{one} is"),
                more => format!("{} are", more.join(", ")),
            },
            ORIGINAL_FILES.join(", ")
        );
    }
    Ok(())
}

/// Reads `summary.json` of a result folder, refusing one of another format version.
pub fn load_summary(dir: &Path) -> anyhow::Result<Summary> {
    check_files(dir)?;
    let path = dir.join("summary.json");
    let text = crate::bounded::read_small_text(&path, crate::report::complete::SUMMARY_MAX_BYTES)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not valid JSON", path.display()))?;
    let version = match value.get("format_version") {
        Some(v) => v.as_u64().ok_or_else(|| {
            anyhow::anyhow!(
                "{}: format_version is {v}, not a whole number: not a summary headroom wrote",
                path.display()
            )
        })?,
        None => bail!(
            "{}: has no format_version: not a headroom summary",
            path.display()
        ),
    };
    if version != u64::from(FORMAT_VERSION) {
        let writer = value
            .get("headroom_version")
            .and_then(|v| v.as_str())
            .unwrap_or("an unknown version");
        bail!(
            "{}: format_version {version} (written by headroom {writer}) is {} than the format_version {FORMAT_VERSION} this headroom {} reads; use a matching headroom or run the workload again",
            path.display(),
            if version < u64::from(FORMAT_VERSION) {
                "older"
            } else {
                "newer"
            },
            env!("CARGO_PKG_VERSION")
        );
    }
    serde_json::from_value(value).with_context(|| {
        format!(
            "{}: does not match format_version {FORMAT_VERSION}",
            path.display()
        )
    })
}

/// Views added to format_version 1 after its first release, as its last columns: a timeline
/// written before them lacks those columns, which then read as never measured.
const VIEWS_ADDED_LATER: &[View] = &[View::JobUsed];

/// The header `timeline.csv` has in this format version.
pub fn timeline_header() -> Vec<&'static str> {
    let mut h = vec!["t_ns", "phase", "source", "device_free_bytes"];
    h.extend(View::ALL.iter().map(|v| v.key()));
    h
}

fn read_timeline(path: &Path, summary: &Summary, deadline: Deadline) -> anyhow::Result<Timeline> {
    let mut r = crate::bounded::csv_reader(
        path,
        crate::bounded::TABLE_LINE_MAX_BYTES,
        csv::ReaderBuilder::new().has_headers(true),
    )
    .with_context(|| format!("cannot read {}", path.display()))?;
    let header = r
        .byte_headers()
        .with_context(|| format!("{}: cannot read the header", path.display()))?
        .clone();
    let expected = timeline_header();
    let found: Vec<String> = header
        .iter()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .collect();
    let oldest = expected.len() - VIEWS_ADDED_LATER.len();
    let older_complete = (oldest..expected.len()).contains(&found.len())
        && found.iter().zip(&expected).all(|(f, e)| f == e);
    if found != expected && !older_complete {
        let at = expected
            .iter()
            .zip(&found)
            .position(|(e, f)| e != f)
            .unwrap_or(expected.len().min(found.len()));
        bail!(
            "{}: columns do not match format_version {FORMAT_VERSION}: column {} should be {:?}, found {:?}",
            path.display(),
            at + 1,
            expected.get(at).copied().unwrap_or("(none)"),
            found.get(at).map(String::as_str).unwrap_or("(none)")
        );
    }
    let phase_index: HashMap<&str, u32> = summary
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i as u32))
        .collect();
    let mut rows = Downsample::default();
    let mut record = csv::ByteRecord::new();
    let mut line = 1u64;
    while r
        .read_byte_record(&mut record)
        .with_context(|| format!("{}: cannot read line {}", path.display(), line + 1))?
    {
        line += 1;
        deadline.check(line)?;
        let cell = |i: usize| record.get(i).unwrap_or_default();
        let num = |i: usize| -> anyhow::Result<Option<u64>> {
            let c = cell(i);
            if c.is_empty() {
                return Ok(None);
            }
            std::str::from_utf8(c)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map(Some)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: line {line}, column {}: {:?} is not a whole number",
                        path.display(),
                        expected[i],
                        String::from_utf8_lossy(c)
                    )
                })
        };
        let required = |i: usize| -> anyhow::Result<u64> {
            num(i)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: line {line}, column {} is empty",
                    path.display(),
                    expected[i]
                )
            })
        };
        let t_ns = required(0)?;
        let phase = String::from_utf8_lossy(cell(1));
        let phase = if phase.is_empty() {
            NO_PHASE
        } else {
            *phase_index.get(phase.as_ref()).ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: line {line}: phase {phase:?} is not in summary.json",
                    path.display()
                )
            })?
        };
        let source = String::from_utf8_lossy(cell(2));
        let source = Source::parse(&source).ok_or_else(|| {
            anyhow::anyhow!("{}: line {line}: unknown source {source:?}", path.display())
        })?;
        // Empty: not recorded (an import without a device); held as `FREE_UNKNOWN`.
        let device_free_bytes = num(3)?.unwrap_or(FREE_UNKNOWN);
        let mut views = ViewSet::default();
        for (k, view) in View::ALL.into_iter().enumerate() {
            if let Some(v) = num(4 + k)? {
                views.set(view, v);
            }
        }
        rows.push(Reading {
            t_ns,
            phase,
            source,
            device_free_bytes,
            views,
        });
    }
    Ok(Timeline::from_rows(rows))
}

impl Timeline {
    /// The columns of the rows a downsample kept.
    fn from_rows(rows: Downsample) -> Timeline {
        let reduced = rows.is_reduced();
        let rows = rows.finish();
        let views = View::ALL
            .into_iter()
            .map(|v| {
                let col: Vec<Option<u64>> = rows.iter().map(|r| r.views.get(v)).collect();
                col.iter().any(Option::is_some).then_some(col)
            })
            .collect();
        Timeline {
            reduced,
            t_ns: rows.iter().map(|r| r.t_ns).collect(),
            phase: rows.iter().map(|r| r.phase).collect(),
            source: rows.iter().map(|r| r.source).collect(),
            device_free_bytes: rows
                .iter()
                .map(|r| (r.device_free_bytes != FREE_UNKNOWN).then_some(r.device_free_bytes))
                .collect(),
            views,
        }
    }
}
