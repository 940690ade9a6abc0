//! `headroom watch --torch`: the user's own PyTorch job, every view at one timestamp. The
//! bootstrap (a `sitecustomize.py` that chains the user's own, and `_headroom_torch.py`,
//! embedded here) is written to a temporary folder put first on the job's `PYTHONPATH`; in
//! every process that imports torch and uses CUDA it records PyTorch's memory history and
//! dumps snapshots (at an OOM, at exit, on a mark, on SIGUSR2) into a folder headroom gives
//! it. At the end (`finish`) the snapshots move into the watch's folder under `torch/`, each is
//! imported, and `instants` lines them up with the device's readings.

mod instants;
mod section;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::report::summary::Summary;
use crate::report::watch::WatchSection;

/// The bootstrap's files, as they are written for the job.
const FILES: [(&str, &str); 2] = [
    (
        "sitecustomize.py",
        include_str!("bootstrap/sitecustomize.py"),
    ),
    (
        "_headroom_torch.py",
        include_str!("bootstrap/_headroom_torch.py"),
    ),
];

/// The folder the snapshots go to inside the watch's folder.
pub const SNAPSHOTS_DIR: &str = "torch";

/// The bootstrap written for one watch, removed when dropped.
pub struct Bootstrap {
    root: PathBuf,
    code_dir: PathBuf,
    snapshots_dir: PathBuf,
    max_entries: u64,
}

impl Bootstrap {
    /// Writes the bootstrap to a new temporary folder.
    pub fn prepare(max_entries: u64) -> anyhow::Result<Bootstrap> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let root =
            std::env::temp_dir().join(format!("headroom-torch-{}-{nanos}", std::process::id()));
        let code_dir = root.join("bootstrap");
        let snapshots_dir = root.join("snapshots");
        for d in [&code_dir, &snapshots_dir] {
            std::fs::create_dir_all(d)
                .with_context(|| format!("cannot create {} for --torch", d.display()))?;
        }
        for (name, text) in FILES {
            let path = code_dir.join(name);
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(Bootstrap {
            root,
            code_dir,
            snapshots_dir,
            max_entries,
        })
    }

    /// The job's environment: the bootstrap first on `PYTHONPATH` (the job's own entries kept
    /// after it), where to put snapshots, how many entries to keep.
    pub fn job_env(&self) -> Vec<(OsString, OsString)> {
        let mut path = self.code_dir.clone().into_os_string();
        if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(old);
        }
        vec![
            ("PYTHONPATH".into(), path),
            (
                "HEADROOM_TORCH_DIR".into(),
                self.snapshots_dir.clone().into_os_string(),
            ),
            (
                "HEADROOM_TORCH_MAX_ENTRIES".into(),
                self.max_entries.to_string().into(),
            ),
        ]
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// What the job's processes left: snapshots and notes, by file name.
struct Left {
    snapshots: Vec<PathBuf>,
    notes: Vec<(String, String)>,
}

/// Moves what the job left into `<watch folder>/torch/`.
fn collect(b: &Bootstrap, watch_dir: &Path) -> anyhow::Result<Left> {
    let dest = watch_dir.join(SNAPSHOTS_DIR);
    let mut names: Vec<PathBuf> = std::fs::read_dir(&b.snapshots_dir)
        .with_context(|| format!("cannot read {}", b.snapshots_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    let mut left = Left {
        snapshots: Vec::new(),
        notes: Vec::new(),
    };
    if names.is_empty() {
        return Ok(left);
    }
    std::fs::create_dir_all(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    for p in names {
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".notes") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let who = name.trim_end_matches(".notes").to_string();
            left.notes
                .extend(text.lines().map(|l| (who.clone(), l.to_string())));
        }
        let to = dest.join(&name);
        if std::fs::rename(&p, &to).is_err() {
            std::fs::copy(&p, &to)
                .with_context(|| format!("cannot copy {} to {}", p.display(), to.display()))?;
        }
        if name.ends_with(".pickle") {
            left.snapshots.push(to);
        }
    }
    Ok(left)
}

/// The notes a person should read (the routine ones stay in the `.notes` files).
fn worth_saying(line: &str) -> bool {
    !(line.starts_with("recording ") || line.starts_with("snapshot ") || line.starts_with("oom "))
}

/// After the watch: the snapshots moved into the watch's folder, each imported, the report
/// section written (`torch.md`, appended to `report.md`), notes said.
pub fn finish(
    b: &Bootstrap,
    watch_dir: &Path,
    summary: &Summary,
    watch: &WatchSection,
) -> anyhow::Result<()> {
    let left = collect(b, watch_dir)?;
    for (who, line) in left.notes.iter().filter(|(_, l)| worth_saying(l)) {
        crate::output::note(&format!("torch ({who}): {line}"));
    }
    if left.snapshots.is_empty() {
        crate::output::note(
            "no CUDA snapshot was taken: no process of the job initialized CUDA through torch",
        );
        return Ok(());
    }
    // NVML's figure for the job is one process's only when the job ran one on the GPU.
    let one_process = watch.job_processes.len() <= 1;
    let text = section::write(
        watch_dir,
        (summary, one_process),
        &left.snapshots,
        &left.notes,
    )?;
    for name in ["torch.md", "report.md"] {
        let path = watch_dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        std::io::Write::write_all(&mut f, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    crate::output::note(&format!(
        "{} PyTorch snapshot(s) in {}, lined up with the device's readings in torch.md",
        left.snapshots.len(),
        watch_dir.join(SNAPSHOTS_DIR).display()
    ));
    Ok(())
}
