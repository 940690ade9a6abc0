//! `headroom merge DIR…`: many runs (a fleet run, one per GPU, as a Slurm job array or one
//! Kubernetes Job per GPU) into one CSV row per run and a Markdown table grouped by GPU model
//! and driver, so one bad node or driver stands out.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::node::summary::{NODE_FILE, NodeCommand, NodeStatus, NodeSummary, Outcome};
use crate::record::View;
use crate::record::timeline::FORMAT_VERSION;
use crate::report::complete::{describe, incomplete_reasons};
use crate::report::markdown::{cell, status_name};
use crate::report::rundata::{ORIGINAL_FILES, load_summary};
use crate::report::summary::Summary;
use crate::units::Bytes;

/// A run to merge: where it is and what it found.
#[derive(Debug, Clone)]
pub struct MergedRun {
    pub dir: PathBuf,
    pub summary: Summary,
    /// The node folder it was a GPU of, if any.
    pub node: Option<PathBuf>,
}

/// Everything `merge` read: the runs, what it skipped, and what the nodes said.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    pub runs: Vec<MergedRun>,
    /// Incomplete folders left out under `--skip-incomplete`, with why.
    pub skipped: Vec<(PathBuf, String)>,
    /// Lines from the node folders: GPUs a node skipped or lost, nodes that never finished.
    pub node_notes: Vec<String>,
}

/// A result folder to read, and the node it belongs to.
type Found = (PathBuf, Option<PathBuf>);

fn is_run(p: &Path) -> bool {
    ORIGINAL_FILES.iter().any(|f| p.join(f).exists())
}

fn is_node(p: &Path) -> bool {
    p.join(NODE_FILE).is_file()
}

/// The result folders named by `dirs`: each is a result folder, a node folder (its GPUs'
/// folders), or a folder of those (as `results/` after a fleet run), taken in name order. A
/// sub-folder holding any of a run's files counts, so an incomplete run (a node that crashed)
/// is reported, never silently dropped.
pub fn expand(dirs: &[PathBuf], notes: &mut Vec<String>) -> anyhow::Result<Vec<Found>> {
    let mut out = Vec::new();
    for d in dirs {
        if is_node(d) {
            out.extend(node_runs(d, notes)?);
            continue;
        }
        if is_run(d) || !d.is_dir() {
            out.push((d.clone(), None));
            continue;
        }
        let mut inner: Vec<PathBuf> = std::fs::read_dir(d)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_run(p) || is_node(p))
            .collect();
        if inner.is_empty() {
            // Not a folder of runs either: let the loader name what is missing.
            out.push((d.clone(), None));
        }
        inner.sort();
        for p in inner {
            if is_node(&p) {
                out.extend(node_runs(&p, notes)?);
            } else {
                out.push((p, None));
            }
        }
    }
    Ok(out)
}

/// The GPU folders of a node folder that hold a run; the GPUs it skipped become notes.
fn node_runs(node: &Path, notes: &mut Vec<String>) -> anyhow::Result<Vec<Found>> {
    let n = NodeSummary::load(node)?;
    anyhow::ensure!(
        n.command == NodeCommand::Run,
        "{}: a node folder of `headroom {}`; merge reads runs",
        node.display(),
        n.command.name()
    );
    if n.status == NodeStatus::Running {
        notes.push(format!(
            "{}: the node never finished ({NODE_FILE} still says running); its GPUs are judged one by one",
            node.display()
        ));
    }
    let mut out = Vec::new();
    for g in &n.gpus {
        let dir = node.join(&g.folder);
        if g.outcome == Outcome::Skipped {
            notes.push(format!(
                "{}: GPU {} ({}) was not run: {}",
                node.display(),
                g.gpu.index,
                g.gpu.uuid,
                g.reason.as_deref().unwrap_or("skipped")
            ));
        } else {
            out.push((dir, Some(node.to_path_buf())));
        }
    }
    Ok(out)
}

/// Reads every result folder. An incomplete one (a killed run) fails the merge, naming it,
/// unless `skip_incomplete`, which leaves it out and lists it; a folder of another format
/// version always fails.
pub fn load(dirs: &[PathBuf], skip_incomplete: bool) -> anyhow::Result<Merged> {
    let mut m = Merged::default();
    for (dir, node) in expand(dirs, &mut m.node_notes)? {
        let reasons = incomplete_reasons(&dir);
        if !reasons.is_empty() {
            let why = describe(&reasons);
            if skip_incomplete {
                m.skipped.push((dir, why));
                continue;
            }
            anyhow::bail!(
                "{}: incomplete, not a result: {why}; pass --skip-incomplete to merge the others and list it",
                dir.display()
            );
        }
        let summary = load_summary(&dir)?;
        m.runs.push(MergedRun { dir, summary, node });
    }
    m.runs.sort_by(|a, b| {
        group_key(&a.summary)
            .cmp(&group_key(&b.summary))
            .then(a.dir.cmp(&b.dir))
    });
    Ok(m)
}

fn group_key(s: &Summary) -> (String, String) {
    (s.device.name.clone(), s.device.driver_version.clone())
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

fn poll_1hz(s: &Summary, v: View) -> Option<u64> {
    s.peaks
        .polled
        .get("1hz")
        .and_then(|p| p.peaks.get(v.key()).copied())
}

fn row(r: &MergedRun) -> Vec<String> {
    let s = &r.summary;
    let d = &s.device;
    let idle = &s.idle.after_context;
    let oom = s.ooms.first();
    let mut row = vec![
        FORMAT_VERSION.to_string(),
        r.dir.display().to_string(),
        s.workload.name.clone(),
        d.name.clone(),
        d.driver_version.clone(),
        d.backend.to_string(),
        opt(d.profile.clone()),
        d.index.to_string(),
        opt(d.uuid.clone()),
        d.total_bytes.to_string(),
        s.started_utc.clone(),
        status_name(s),
        opt(s.exit_code),
        idle.device_free_bytes.to_string(),
        idle.device_used_bytes.to_string(),
        opt(s.idle.context_overhead_bytes),
    ];
    row.extend(
        View::ALL
            .iter()
            .map(|v| opt(s.peaks.run.get(v.key()).map(|p| p.bytes))),
    );
    row.extend([
        opt(poll_1hz(s, View::DeviceUsed)),
        opt(poll_1hz(s, View::OwnBytes)),
        opt(s.peaks.headroom_at_peak_bytes),
        s.ooms.len().to_string(),
        opt(oom.map(|o| format!("{}/{}", o.phase, o.step))),
        opt(oom.map(|o| o.requested_bytes)),
        opt(oom.map(|o| o.diagnosis.observation.clone())),
        s.expectations.iter().filter(|e| e.held).count().to_string(),
        s.expectations
            .iter()
            .filter(|e| !e.held)
            .count()
            .to_string(),
        opt(s.release.as_ref().map(|r| r.difference_bytes)),
        opt(r.node.as_ref().map(|n| n.display())),
    ]);
    row
}

/// The merged CSV.
pub fn csv(runs: &[MergedRun]) -> anyhow::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header())?;
    for r in runs {
        w.write_record(row(r))?;
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
}

fn peak(s: &Summary, v: View) -> Option<u64> {
    s.peaks.run.get(v.key()).map(|p| p.bytes)
}

fn human(v: Option<u64>) -> String {
    v.map_or("-".into(), |b| Bytes(b).to_string())
}

/// The merged Markdown: one table per GPU model and driver, the GPUs that differ from the
/// others of their group, and what was skipped.
pub fn markdown(m: &Merged) -> String {
    let runs = &m.runs;
    let mut groups: BTreeMap<(String, String), Vec<&MergedRun>> = BTreeMap::new();
    for r in runs {
        groups.entry(group_key(&r.summary)).or_default().push(r);
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## headroom merge: {} runs, {} GPU model/driver groups",
        runs.len(),
        groups.len()
    );
    for ((device, driver), rs) in &groups {
        let _ = writeln!(
            o,
            "\n### {} · driver {} · {} run{}\n",
            device,
            driver,
            rs.len(),
            if rs.len() == 1 { "" } else { "s" }
        );
        let used: Vec<u64> = rs
            .iter()
            .filter_map(|r| peak(&r.summary, View::DeviceUsed))
            .collect();
        if let (Some(lo), Some(hi)) = (used.iter().min(), used.iter().max())
            && used.len() > 1
        {
            let _ = writeln!(
                o,
                "Peak device used from {} to {} (spread {}); {} of {} runs had an OOM.\n",
                Bytes(*lo),
                Bytes(*hi),
                Bytes(hi - lo),
                rs.iter().filter(|r| !r.summary.ooms.is_empty()).count(),
                rs.len()
            );
        }
        let _ = writeln!(
            o,
            "| run | workload | GPU | status | idle used | peak device used | peak own | 1 Hz poll device used | headroom at peak | OOM | expectations |"
        );
        let _ = writeln!(
            o,
            "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"
        );
        for r in rs {
            let s = &r.summary;
            let name = run_name(r);
            let oom = match s.ooms.first() {
                None => "-".to_string(),
                Some(o) => format!(
                    "{}/{} ({} asked){}",
                    o.phase,
                    o.step,
                    Bytes(o.requested_bytes),
                    if s.ooms.len() > 1 {
                        format!(" +{}", s.ooms.len() - 1)
                    } else {
                        String::new()
                    }
                ),
            };
            let held = s.expectations.iter().filter(|e| e.held).count();
            let _ = writeln!(
                o,
                "| {} | {} | {} | {}{} | {} | {} | {} | {} | {} | {} | {held}/{} held |",
                cell(&name),
                cell(&s.workload.name),
                s.device.index,
                status_name(s),
                s.exit_code.map(|c| format!(" ({c})")).unwrap_or_default(),
                Bytes(s.idle.after_context.device_used_bytes),
                human(peak(s, View::DeviceUsed)),
                human(peak(s, View::OwnBytes)),
                human(poll_1hz(s, View::DeviceUsed)),
                human(s.peaks.headroom_at_peak_bytes),
                cell(&oom),
                s.expectations.len()
            );
        }
        let odd = outliers(rs);
        if !odd.is_empty() {
            let _ = writeln!(o, "\nGPUs that differ from the others of this group:\n");
            for line in odd {
                let _ = writeln!(o, "- {}", cell(&line));
            }
        }
    }
    if !m.skipped.is_empty() {
        let _ = writeln!(o, "\n### Skipped: incomplete ({})\n", m.skipped.len());
        for (dir, why) in &m.skipped {
            let _ = writeln!(o, "- {}: {}", cell(&dir.display().to_string()), cell(why));
        }
    }
    if !m.node_notes.is_empty() {
        let _ = writeln!(o, "\n### From the node folders\n");
        for n in &m.node_notes {
            let _ = writeln!(o, "- {}", cell(n));
        }
    }
    o
}

/// A run's name in the tables: its folder, after its node's when it was a GPU of one.
fn run_name(r: &MergedRun) -> String {
    let base = |p: &Path| {
        p.file_name().map_or(p.display().to_string(), |n| {
            n.to_string_lossy().into_owned()
        })
    };
    match &r.node {
        Some(n) => format!("{}/{}", base(n), base(&r.dir)),
        None => base(&r.dir),
    }
}

/// One figure of a run, for the outlier check.
type Figure = fn(&Summary) -> Option<u64>;

/// Runs of one workload in a group whose figures are further than 64 MiB from the median of
/// those runs (the node summary's rule), one line each.
fn outliers(rs: &[&MergedRun]) -> Vec<String> {
    const THRESHOLD_BYTES: u64 = 64 << 20;
    let mut by_workload: BTreeMap<&str, Vec<&MergedRun>> = BTreeMap::new();
    for r in rs {
        by_workload
            .entry(&r.summary.workload.name)
            .or_default()
            .push(r);
    }
    let mut lines = Vec::new();
    for runs in by_workload.values().filter(|v| v.len() > 1) {
        let figures: [(&str, Figure); 4] = [
            ("CUDA-visible total", |s| Some(s.device.total_bytes)),
            ("idle device used", |s| {
                Some(s.idle.after_context.device_used_bytes)
            }),
            ("peak device used", |s| peak(s, View::DeviceUsed)),
            ("headroom at peak", |s| s.peaks.headroom_at_peak_bytes),
        ];
        for (what, get) in figures {
            let vals: Vec<(&MergedRun, u64)> = runs
                .iter()
                .filter_map(|r| get(&r.summary).map(|v| (*r, v)))
                .collect();
            if vals.len() < 2 {
                continue;
            }
            let mut sorted: Vec<u64> = vals.iter().map(|(_, v)| *v).collect();
            sorted.sort_unstable();
            let median = sorted[sorted.len() / 2];
            for (r, v) in vals {
                if v.abs_diff(median) > THRESHOLD_BYTES {
                    lines.push(format!(
                        "{} (GPU {}, {}): {what} {} is {} {} the median {}",
                        run_name(r),
                        r.summary.device.index,
                        r.summary.device.uuid.as_deref().unwrap_or("no UUID"),
                        Bytes(v),
                        Bytes(v.abs_diff(median)),
                        if v < median { "below" } else { "above" },
                        Bytes(median)
                    ));
                }
            }
        }
    }
    lines
}

/// Writes `bytes` to `path`, refusing to replace an existing file unless `force`.
pub fn write_new(path: &Path, bytes: &[u8], force: bool) -> anyhow::Result<()> {
    if path.exists() && !force {
        anyhow::bail!(
            "{}: already exists; pass --force to replace it",
            path.display()
        );
    }
    crate::outdir::write_atomic(path, bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}
