//! Running a command on a node: choose the GPUs, skip the ones others use, start one worker
//! per GPU into `gpu<index>-<uuid prefix>/`, and write the node summary when they have ended.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::{Context, bail};

use crate::device_args::{DeviceArgs, DeviceSelection};
use crate::node::flags::{DEFAULT_THRESHOLD_BYTES, flags, spread};
use crate::node::inventory::{GpuIdentity, Inventory, inventory};
use crate::node::results;
use crate::node::safety::{Occupancy, describe, occupancy};
use crate::node::summary::{
    GpuRow, NODE_FILE, NODE_FORMAT_VERSION, NodeCommand, NodeStatus, NodeSummary, Outcome,
    SKIPPED_FILE, worst_exit,
};
use crate::node::workers::{WorkerSpec, run_all};
use crate::units::{utc_folder_stamp, utc_timestamp};
use crate::workload::Rank;

/// What to run on every GPU of the node.
#[derive(Debug, Clone)]
pub struct NodeJob {
    pub command: NodeCommand,
    /// The workload's or plan's name (the node folder is `node-<label>`).
    pub label: String,
    pub input: Option<PathBuf>,
    /// The worker's subcommand and its arguments, without `--out` and the device arguments.
    pub worker_args: Vec<OsString>,
    /// A workload file to check for every rank before any worker starts (bad input: exit 2
    /// once, not once per GPU).
    pub workload_check: Option<PathBuf>,
    /// The node folder (new or empty), else `<results>/<UTC stamp>-node-<label>/`.
    pub out: Option<PathBuf>,
    pub results_root: PathBuf,
    pub shared_ok: bool,
    pub json: bool,
    pub quiet: bool,
}

/// Runs `job` on the GPUs `dev` selects; returns the worst worker's exit code.
pub fn run_node(
    dev: &DeviceArgs,
    job: &NodeJob,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    let inv = inventory(dev.request())?;
    if let Some(n) = &inv.notice {
        crate::errln!(
            "note: {n}; using the simulated node (profile {})",
            inv.profile.as_deref().unwrap_or_default()
        );
    }
    let chosen = choose(&inv, &dev.device)?;
    let dir = node_folder(job)?;
    let started_utc = utc_timestamp(SystemTime::now());
    let mut rows: Vec<GpuRow> = chosen.iter().map(|g| row(g, job.shared_ok)).collect();
    let say = |line: String| {
        if !job.quiet {
            crate::errln!("{line}");
        }
    };
    announce(&inv, job, &rows, &dir);
    prepare_folders(&dir, &rows)?;
    let runnable: Vec<usize> = (0..rows.len())
        .filter(|i| rows[*i].outcome != Outcome::Skipped)
        .collect();
    if let Some(w) = &job.workload_check {
        let count = runnable.len().max(1) as u32;
        for index in 0..count {
            crate::workload::Workload::load_ranked(w, u64::MAX, Rank { index, count })?;
        }
    }
    let specs = worker_specs(&inv, dev, job, &dir, &mut rows, &runnable);
    let mut summary = node_summary(&inv, dev, job, started_utc, rows);
    for &i in &runnable {
        summary.gpus[i].outcome = Outcome::Running;
    }
    let exits = {
        let mut pids = vec![None; specs.len()];
        let gpus: Vec<(u32, String)> = runnable
            .iter()
            .map(|&i| (summary.gpus[i].gpu.index, summary.gpus[i].gpu.uuid.clone()))
            .collect();
        run_all(
            &specs,
            &interrupted,
            |k, pid| {
                pids[k] = Some(pid);
                say(format!(
                    "GPU {} ({}): worker pid {pid} started",
                    gpus[k].0, gpus[k].1
                ));
                if pids.iter().all(Option::is_some) || k + 1 == specs.len() {
                    for (k, &i) in runnable.iter().enumerate() {
                        summary.gpus[i].pid = pids[k];
                    }
                    if let Err(e) = summary.write(&dir) {
                        crate::errln!("warning: {e:#}");
                    }
                }
            },
            |k, exit| {
                let how = match (exit.code, exit.signal) {
                    (Some(c), _) => format!("exit {c}"),
                    (None, Some(s)) => format!("killed by {}", signal_name(s)),
                    _ => "ended".into(),
                };
                say(format!(
                    "GPU {}: {how} after {}",
                    gpus[k].0,
                    crate::units::Nanos(exit.elapsed_ns)
                ));
            },
        )?
    };
    for (k, &i) in runnable.iter().enumerate() {
        let r = &mut summary.gpus[i];
        outcome(r, &exits[k], job, &dir);
    }
    finish(summary, job, &dir, interrupted.load(Ordering::SeqCst))
}

/// One worker per runnable GPU, ranked in order; each row learns its rank and log.
fn worker_specs(
    inv: &Inventory,
    dev: &DeviceArgs,
    job: &NodeJob,
    dir: &Path,
    rows: &mut [GpuRow],
    runnable: &[usize],
) -> Vec<WorkerSpec> {
    runnable
        .iter()
        .enumerate()
        .map(|(rank, &i)| {
            let r = &mut rows[i];
            r.rank = Some(rank as u32);
            r.log = Some(format!("logs/{}.log", r.folder));
            // A device chosen by UUID is the worker's only CUDA device: device 0.
            let cuda_index = match r.gpu.cuda_visible_devices {
                Some(_) => 0,
                None => r.gpu.index,
            };
            WorkerSpec {
                args: worker_args(
                    inv,
                    dev.profile.as_deref(),
                    job,
                    cuda_index,
                    &dir.join(&r.folder),
                ),
                rank: rank as u32,
                rank_count: runnable.len() as u32,
                log: dir.join("logs").join(format!("{}.log", r.folder)),
                cuda_visible_devices: r.gpu.cuda_visible_devices.clone(),
            }
        })
        .collect()
}

/// The node's record as its workers start: `running`, one row per GPU.
fn node_summary(
    inv: &Inventory,
    dev: &DeviceArgs,
    job: &NodeJob,
    started_utc: String,
    rows: Vec<GpuRow>,
) -> NodeSummary {
    NodeSummary {
        format_version: NODE_FORMAT_VERSION,
        headroom_version: env!("CARGO_PKG_VERSION").into(),
        command: job.command,
        label: job.label.clone(),
        input: job.input.as_ref().map(|p| p.display().to_string()),
        backend: inv.backend,
        profile: inv.profile.clone(),
        selection: dev.device.to_string(),
        shared_ok: job.shared_ok,
        started_utc,
        finished_utc: None,
        status: NodeStatus::Running,
        exit_code: None,
        threshold_bytes: DEFAULT_THRESHOLD_BYTES,
        gpus: rows,
        spread: vec![],
        flags: vec![],
    }
}

/// Says what runs where, and which GPUs are skipped or doubted, on stderr.
fn announce(inv: &Inventory, job: &NodeJob, rows: &[GpuRow], dir: &Path) {
    if !job.quiet {
        crate::errln!(
            "node: {} {} on {} GPU{} ({}) into {}",
            job.command.name(),
            job.label,
            rows.len(),
            if rows.len() == 1 { "" } else { "s" },
            inv.profile
                .as_ref()
                .map_or(inv.backend.to_string(), |p| format!(
                    "{}, profile {p}",
                    inv.backend
                )),
            dir.display()
        );
    }
    for r in rows {
        match (&r.occupancy, r.outcome) {
            (_, Outcome::Skipped) => crate::errln!(
                "GPU {} ({}): skipped: {}",
                r.gpu.index,
                r.gpu.uuid,
                r.reason.as_deref().unwrap_or_default()
            ),
            (Occupancy::Doubted { why }, _) => crate::errln!(
                "note: GPU {}: the driver's process list cannot be trusted here ({why}); \
                 whether other processes use it is not known, and it is not skipped on that evidence",
                r.gpu.index
            ),
            _ => {}
        }
    }
    // One note per reason (every instance of a MIG GPU gives the same one).
    let mut unlisted: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for r in rows.iter().filter(|r| r.occupancy == Occupancy::Unknown) {
        if let Some(why) = &r.gpu.processes_unavailable {
            unlisted
                .entry(why)
                .or_default()
                .push(r.gpu.index.to_string());
        }
    }
    for (why, gpus) in unlisted {
        crate::errln!(
            "note: GPU {}: no process list ({why}); whether other processes use {} is not \
             known, and {} not skipped on that evidence",
            gpus.join(", "),
            if gpus.len() == 1 { "it" } else { "them" },
            if gpus.len() == 1 { "it is" } else { "they are" }
        );
    }
}

/// The node folder's `logs/` and one folder per GPU; a skipped GPU's says why.
fn prepare_folders(dir: &Path, rows: &[GpuRow]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("cannot create {}", dir.join("logs").display()))?;
    for r in rows {
        let gdir = dir.join(&r.folder);
        std::fs::create_dir(&gdir).with_context(|| format!("cannot create {}", gdir.display()))?;
        if r.outcome == Outcome::Skipped {
            let text = serde_json::to_vec_pretty(r)?;
            std::fs::write(gdir.join(SKIPPED_FILE), text)
                .with_context(|| format!("cannot write {}", gdir.join(SKIPPED_FILE).display()))?;
        }
    }
    Ok(())
}

/// A worker's end as its GPU's row: ran (with what its folder holds) or failed, and why.
fn outcome(
    r: &mut GpuRow,
    exit: &Result<crate::node::workers::WorkerExit, String>,
    job: &NodeJob,
    dir: &Path,
) {
    let gdir = dir.join(&r.folder);
    let log = dir.join("logs").join(format!("{}.log", r.folder));
    match exit {
        Err(e) => {
            r.outcome = Outcome::Failed;
            r.reason = Some(format!("the worker could not be started: {e}"));
        }
        Ok(x) => {
            r.pid = Some(x.pid);
            r.exit_code = x.code;
            r.signal = x.signal;
            r.elapsed_ns = Some(x.elapsed_ns);
            let found = results::read(job.command, &gdir);
            let died = x
                .signal
                .map(|s| format!("the worker was killed by {}", signal_name(s)));
            match (found, died) {
                (Ok(f), None) => {
                    r.outcome = Outcome::Ran;
                    results::apply(r, f);
                }
                (found, died) => {
                    r.outcome = Outcome::Failed;
                    // A worker that said why it stopped is believed before what it left.
                    let said = (x.code != Some(0)).then(|| last_error(&log)).flatten();
                    let why = said.or(found.err());
                    r.reason = Some(
                        [died, why]
                            .into_iter()
                            .flatten()
                            .collect::<Vec<_>>()
                            .join("; "),
                    );
                }
            }
        }
    }
}

/// The node's record when every worker has ended: status, exit code, spread and flags, in
/// `node.json` and `node.md`; printed as Markdown or JSON. Returns the node's exit code.
fn finish(
    mut node: NodeSummary,
    job: &NodeJob,
    dir: &Path,
    interrupted: bool,
) -> anyhow::Result<i32> {
    node.status = if interrupted {
        NodeStatus::Interrupted
    } else if node.gpus.iter().any(|g| g.outcome == Outcome::Failed) {
        NodeStatus::Failed
    } else {
        NodeStatus::Completed
    };
    node.finished_utc = Some(utc_timestamp(SystemTime::now()));
    node.exit_code = Some(worst_exit(&node.gpus));
    node.spread = spread(&node.gpus);
    node.flags = flags(&node.gpus, node.threshold_bytes);
    node.write(dir)?;
    let md = crate::node::render::markdown(&node);
    let md_path = dir.join("node.md");
    crate::outdir::write_atomic(&md_path, md.as_bytes())
        .with_context(|| format!("cannot write {}", md_path.display()))?;
    if job.json {
        crate::outln!("{}", serde_json::to_string_pretty(&node)?)?;
    } else if !job.quiet {
        crate::out!("{md}")?;
    }
    Ok(node.exit_code.unwrap_or(2))
}

/// The GPUs `--device` names, in its order.
fn choose<'a>(inv: &'a Inventory, sel: &DeviceSelection) -> anyhow::Result<Vec<&'a GpuIdentity>> {
    let all = &inv.gpus;
    if all.is_empty() {
        bail!("--device {sel}: the driver sees no GPU");
    }
    match sel {
        DeviceSelection::All => Ok(all.iter().collect()),
        DeviceSelection::One(i) => Ok(vec![find(all, *i)?]),
        DeviceSelection::List(l) => l.iter().map(|i| find(all, *i)).collect(),
    }
}

fn find(all: &[GpuIdentity], index: u32) -> anyhow::Result<&GpuIdentity> {
    all.iter().find(|g| g.index == index).ok_or_else(|| {
        anyhow::anyhow!(
            "--device: there is no GPU {index}: the node has {} (0 to {})",
            all.len(),
            all.len() - 1
        )
    })
}

/// The node folder: `--out` (new or empty) or a fresh one under the results folder.
fn node_folder(job: &NodeJob) -> anyhow::Result<PathBuf> {
    if let Some(out) = &job.out
        && out.join(NODE_FILE).exists()
    {
        bail!(
            "--out {}: already holds a node run ({NODE_FILE}); results are never overwritten, choose another folder",
            out.display()
        );
    }
    if let Some(out) = &job.out
        && out.is_dir()
        && std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some())
    {
        bail!(
            "--out {}: is not empty; a node folder holds only what headroom writes, choose a new one",
            out.display()
        );
    }
    crate::outdir::create(
        job.out.as_deref(),
        &job.results_root,
        &utc_folder_stamp(SystemTime::now()),
        &format!("node-{}", job.label),
    )
}

/// A GPU's row before anything runs: skipped when others use it and `--shared-ok` is not set.
fn row(g: &GpuIdentity, shared_ok: bool) -> GpuRow {
    let occ = occupancy(g);
    let (outcome, reason) = match &occ {
        Occupancy::Busy { others } if !shared_ok => (
            Outcome::Skipped,
            Some(format!(
                "in use by {}; headroom does not put a shared GPU under pressure unless you pass --shared-ok",
                describe(others)
            )),
        ),
        _ => (Outcome::Running, None),
    };
    GpuRow {
        gpu: g.clone(),
        rank: None,
        folder: g.folder_name(),
        log: None,
        occupancy: occ,
        outcome,
        reason,
        pid: None,
        exit_code: None,
        signal: None,
        elapsed_ns: None,
        status: None,
        ooms: None,
        first_oom: None,
        figures: Default::default(),
    }
}

/// `--backend B [--profile P] --device N <command args> --out …` for one GPU.
/// `profile_arg` is `--profile` as the user gave it (a name or a path).
fn worker_args(
    inv: &Inventory,
    profile_arg: Option<&str>,
    job: &NodeJob,
    index: u32,
    gdir: &Path,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["--backend".into(), inv.backend.as_str().into()];
    if let Some(p) = profile_arg.or(inv.profile.as_deref()) {
        a.extend(["--profile".into(), p.into()]);
    }
    a.extend(["--device".into(), index.to_string().into()]);
    a.extend(job.worker_args.iter().cloned());
    let out = match job.command {
        NodeCommand::Run | NodeCommand::Validate => gdir.to_path_buf(),
        NodeCommand::Bandwidth => gdir.join("bandwidth.json"),
        NodeCommand::Calibrate => gdir.join("profile.toml"),
    };
    a.extend(["--out".into(), out.into_os_string()]);
    a
}

/// The worker's last `error:` line (or last line) from its log.
fn last_error(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("error:"))
        .or(lines.last())
        .map(|l| l.to_string())
}

fn signal_name(s: i32) -> String {
    let name = match s {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        _ => return format!("signal {s}"),
    };
    format!("signal {s} ({name})")
}
