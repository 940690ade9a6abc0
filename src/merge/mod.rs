//! `headroom merge DIR…`: many runs (a fleet run: node folders from a Slurm job array or a
//! Kubernetes Indexed Job, or single runs) into one CSV row per run and a Markdown report that
//! leads with a roll-up per GPU model and driver and names what stands out once, grouped
//! across nodes.
//!
//! Folders are streamed: each run's summary is read, its CSV row written and a few figures
//! kept (about a hundred bytes per GPU), so a fleet of thousands of GPUs merges in bounded
//! memory. Names in the report are relative to the folders given (`node-3/gpu3-…`), in
//! natural order (node-2 before node-10).

pub mod findings;
pub mod markdown;
pub mod natural;

use std::path::{Path, PathBuf};

use crate::node::summary::{NODE_FILE, NodeCommand, NodeStatus, NodeSummary, Outcome};
use crate::record::View;
use crate::record::timeline::FORMAT_VERSION;
use crate::report::complete::{describe, incomplete_reasons};
use crate::report::markdown::status_name;
use crate::report::rundata::{ORIGINAL_FILES, load_summary};
use crate::report::summary::Summary;

pub use markdown::markdown;
pub use natural::natural_cmp;

/// The figures kept per run for the roll-up and the findings, in this order.
pub const FIGURES: [&str; 4] = [
    "CUDA-visible total",
    "idle device used",
    "headroom at the peak",
    "context overhead",
];

/// What `merge` keeps of one run: its names and a few numbers, never the summary.
#[derive(Debug, Clone)]
pub struct RunRow {
    /// Relative to the folder given: `node-3/gpu3-1a2b3c4d`, or the run folder's name.
    pub name: String,
    /// The node's name when it was a GPU of a node folder.
    pub node: Option<String>,
    pub index: u32,
    pub uuid: Option<String>,
    /// Index into `Merged::groups`.
    pub group: usize,
    /// Index into `Merged::workloads`.
    pub workload: usize,
    pub status: String,
    pub ooms: u32,
    /// `FIGURES`, raw bytes.
    pub figures: [Option<u64>; FIGURES.len()],
    /// The true peak of every view (`View::ALL`), raw bytes.
    pub peaks: [Option<u64>; View::COUNT],
    /// Why the run has no idle reading (`not in the snapshot`), or what it is derived from.
    pub idle_basis: Option<String>,
}

/// A GPU a node did not run, as its node folder says.
#[derive(Debug, Clone)]
pub struct NotRun {
    pub node: String,
    pub index: u32,
    pub uuid: String,
    pub reason: String,
}

/// Everything `merge` read: the runs' rows, what it skipped, and what the nodes said.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    pub runs: Vec<RunRow>,
    /// (GPU model, driver), in first-seen order.
    pub groups: Vec<(String, String)>,
    pub workloads: Vec<String>,
    /// Node folders read.
    pub nodes: usize,
    /// Incomplete folders left out under `--skip-incomplete`: name, why.
    pub skipped: Vec<(String, String)>,
    /// GPUs a node skipped or never ran.
    pub not_run: Vec<NotRun>,
    /// Nodes whose `node.json` still says running.
    pub unfinished_nodes: Vec<String>,
}

/// A result folder to read: where, its name in the report, its node's name and folder.
struct Found {
    dir: PathBuf,
    name: String,
    node: Option<(String, PathBuf)>,
}

fn is_run(p: &Path) -> bool {
    ORIGINAL_FILES.iter().any(|f| p.join(f).exists())
}

fn is_node(p: &Path) -> bool {
    p.join(NODE_FILE).is_file()
}

fn base(p: &Path) -> String {
    p.file_name().map_or(p.display().to_string(), |n| {
        n.to_string_lossy().into_owned()
    })
}

/// The folders `dirs` name, one level: each is a result folder, a node folder, or a folder
/// of those (as `results/` after a fleet run), in natural order. A sub-folder holding any of
/// a run's files counts, so an incomplete run (a node that crashed) is reported, never
/// silently dropped. Returns (folder, its name in the report).
fn units(dirs: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    for d in dirs {
        if is_node(d) || is_run(d) || !d.is_dir() {
            out.push((d.clone(), base(d)));
            continue;
        }
        let mut inner: Vec<(PathBuf, String)> = std::fs::read_dir(d)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_run(p) || is_node(p))
            .map(|p| {
                let n = base(&p);
                (p, n)
            })
            .collect();
        if inner.is_empty() {
            // Not a folder of runs either: let the loader name what is missing.
            out.push((d.clone(), base(d)));
        }
        inner.sort_by(|a, b| natural_cmp(&a.1, &b.1));
        out.extend(inner);
    }
    Ok(out)
}

/// The runs of one unit: a run folder, or a node folder's GPUs (the ones it skipped noted).
fn runs_of(unit: &Path, name: &str, m: &mut Merged) -> anyhow::Result<Vec<Found>> {
    if !is_node(unit) {
        return Ok(vec![Found {
            dir: unit.to_path_buf(),
            name: name.to_string(),
            node: None,
        }]);
    }
    let n = NodeSummary::load(unit)?;
    anyhow::ensure!(
        n.command == NodeCommand::Run,
        "{}: a node folder of `headroom {}`; merge reads runs",
        unit.display(),
        n.command.name()
    );
    m.nodes += 1;
    if n.status == NodeStatus::Running {
        m.unfinished_nodes.push(name.to_string());
    }
    let mut out = Vec::new();
    for g in &n.gpus {
        if g.outcome == Outcome::Skipped {
            m.not_run.push(NotRun {
                node: name.to_string(),
                index: g.gpu.index,
                uuid: g.gpu.uuid.clone(),
                reason: g.reason.clone().unwrap_or_else(|| "skipped".into()),
            });
        } else {
            out.push(Found {
                dir: unit.join(&g.folder),
                name: format!("{name}/{}", g.folder),
                node: Some((name.to_string(), unit.to_path_buf())),
            });
        }
    }
    Ok(out)
}

/// Reads every result folder, one at a time, calling `row` with each run's CSV row as it is
/// read. An incomplete one (a killed run) fails the merge, naming it, unless
/// `skip_incomplete`, which leaves it out, lists it and calls `skipped(dir, why)`; a folder
/// of another format version always fails.
pub fn stream(
    dirs: &[PathBuf],
    skip_incomplete: bool,
    mut row: impl FnMut(Vec<String>) -> anyhow::Result<()>,
    mut skipped: impl FnMut(&Path, &str),
) -> anyhow::Result<Merged> {
    let mut m = Merged::default();
    for (unit, unit_name) in units(dirs)? {
        for f in runs_of(&unit, &unit_name, &mut m)? {
            let reasons = incomplete_reasons(&f.dir);
            if !reasons.is_empty() {
                let why = describe(&reasons);
                if skip_incomplete {
                    skipped(&f.dir, &why);
                    m.skipped.push((f.name, why));
                    continue;
                }
                anyhow::bail!(
                    "{}: incomplete, not a result: {why}; pass --skip-incomplete to merge the others and list it",
                    crate::report::escape::line(&f.dir.display().to_string())
                );
            }
            let summary = load_summary(&f.dir)?;
            row(csv_row(&f, &summary))?;
            let kept = keep(&mut m, f, &summary);
            m.runs.push(kept);
        }
    }
    Ok(m)
}

fn intern(list: &mut Vec<String>, s: &str) -> usize {
    match list.iter().position(|x| x == s) {
        Some(i) => i,
        None => {
            list.push(s.to_string());
            list.len() - 1
        }
    }
}

fn keep(m: &mut Merged, f: Found, s: &Summary) -> RunRow {
    let key = (s.device().name.clone(), s.device().driver_version.clone());
    let group = match m.groups.iter().position(|g| *g == key) {
        Some(i) => i,
        None => {
            m.groups.push(key);
            m.groups.len() - 1
        }
    };
    let workload = intern(&mut m.workloads, &s.workload().name);
    let mut peaks = [None; View::COUNT];
    for (slot, v) in peaks.iter_mut().zip(View::ALL) {
        *slot = peak(s, v);
    }
    RunRow {
        name: f.name,
        node: f.node.map(|(n, _)| n),
        index: s.device().index,
        uuid: s.device().uuid.clone(),
        group,
        workload,
        status: status_name(s),
        ooms: s.ooms().len() as u32,
        figures: [
            s.device_total(),
            s.idle_after().map(|i| i.device_used_bytes),
            s.peaks().headroom_at_peak_bytes,
            s.idle().as_ref().and_then(|i| i.context_overhead_bytes),
        ],
        peaks,
        idle_basis: s.idle_basis_short().map(String::from),
    }
}

/// The CSV header: one row per run, raw bytes, empty where not measured.
pub fn header() -> Vec<String> {
    let mut h: Vec<String> = [
        "format_version",
        "dir",
        "workload",
        "device",
        "driver_version",
        "backend",
        "profile",
        "device_index",
        "uuid",
        "device_total_bytes",
        "started_utc",
        "status",
        "exit_code",
        "idle_device_free_bytes",
        "idle_device_used_bytes",
        "context_overhead_bytes",
    ]
    .map(String::from)
    .to_vec();
    h.extend(View::ALL.iter().map(|v| format!("peak_{}", v.key())));
    h.extend(
        [
            "poll_1hz_device_used_bytes",
            "poll_1hz_own_bytes",
            "headroom_at_peak_bytes",
            "ooms",
            "first_oom_at",
            "first_oom_requested_bytes",
            "first_oom_observation",
            "expectations_held",
            "expectations_failed",
            "release_difference_bytes",
            "node",
        ]
        .map(String::from),
    );
    h
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

pub(crate) fn poll_1hz(s: &Summary, v: View) -> Option<u64> {
    s.peaks()
        .polled
        .get("1hz")
        .and_then(|p| p.peaks.get(v.key()).copied())
}

pub(crate) fn peak(s: &Summary, v: View) -> Option<u64> {
    s.peaks().run.get(v.key()).map(|p| p.bytes)
}

fn csv_row(f: &Found, s: &Summary) -> Vec<String> {
    let d = &s.device();
    let idle = s.idle_after();
    let oom = s.ooms().first();
    let mut row = vec![
        FORMAT_VERSION.to_string(),
        f.dir.display().to_string(),
        s.workload().name.clone(),
        d.name.clone(),
        d.driver_version.clone(),
        d.backend.to_string(),
        opt(d.profile.clone()),
        d.index.to_string(),
        opt(d.uuid.clone()),
        opt(s.device_total()),
        s.started_utc().clone(),
        status_name(s),
        opt(s.exit_code()),
        opt(idle.map(|i| i.device_free_bytes)),
        opt(idle.map(|i| i.device_used_bytes)),
        opt(s.idle().as_ref().and_then(|i| i.context_overhead_bytes)),
    ];
    row.extend(View::ALL.iter().map(|v| opt(peak(s, *v))));
    row.extend([
        opt(poll_1hz(s, View::DeviceUsed)),
        opt(poll_1hz(s, View::OwnBytes)),
        opt(s.peaks().headroom_at_peak_bytes),
        s.ooms().len().to_string(),
        opt(oom.map(|o| format!("{}/{}", o.phase, o.step))),
        opt(oom.map(|o| o.requested_bytes)),
        opt(oom.map(|o| o.diagnosis.observation.clone())),
        s.expectations()
            .iter()
            .filter(|e| e.held)
            .count()
            .to_string(),
        s.expectations()
            .iter()
            .filter(|e| !e.held)
            .count()
            .to_string(),
        opt(s.release().as_ref().map(|r| r.difference_bytes)),
        opt(f.node.as_ref().map(|(_, dir)| dir.display())),
    ]);
    row
}

/// Refuses an existing `path` unless `force` (checked before anything is read).
pub fn check_new(path: &Path, force: bool) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(path).is_ok() && !force {
        anyhow::bail!(
            "{}: already exists; pass --force to replace it",
            path.display()
        );
    }
    Ok(())
}

/// A CSV file written as rows come, under a temporary name beside `path`, and put in place
/// whole by `finish` (a reader never sees half of it; a failed merge leaves nothing).
pub struct CsvFile {
    tmp: PathBuf,
    path: PathBuf,
    w: Option<csv::Writer<std::io::BufWriter<std::fs::File>>>,
}

impl CsvFile {
    pub fn create(path: &Path) -> anyhow::Result<CsvFile> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{}.{}.tmp", base(path), std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", tmp.display()))?;
        let mut w = csv::Writer::from_writer(std::io::BufWriter::new(file));
        w.write_record(header())?;
        Ok(CsvFile {
            tmp,
            path: path.to_path_buf(),
            w: Some(w),
        })
    }

    pub fn row(&mut self, row: &[String]) -> anyhow::Result<()> {
        if let Some(w) = &mut self.w {
            w.write_record(row)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.tmp.display()))?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> anyhow::Result<()> {
        let w = self.w.take().expect("finished once");
        let file = w
            .into_inner()
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.tmp.display()))?
            .into_inner()
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.tmp.display()))?;
        file.sync_data()
            .and_then(|_| std::fs::rename(&self.tmp, &self.path))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.path.display()))
    }
}

impl Drop for CsvFile {
    fn drop(&mut self) {
        if self.w.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
