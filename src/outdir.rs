//! The folder a run writes into, and how any output file is written: a folder is created
//! fresh or must be empty (a user's own files in it are never touched), and a file is written
//! through a temporary file created new (never through a link) and renamed into place, so a
//! reader never sees half of it and a planted link is replaced, not followed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};

/// Files a run writes; a folder holding any of them is an earlier run and is never reused.
pub const RUN_FILES: &[&str] = &["summary.json", "timeline.csv", "events.csv"];

/// What may already be in an `--out` folder: the workload a validation probe wrote there.
const ALLOWED_BEFORE: &[&str] = &["workload.toml"];

/// Creates `out` (which must be missing or empty), or `<root>/<UTC stamp>-<workload>` with a
/// numeric suffix if that name is taken.
pub fn create(
    out: Option<&Path>,
    root: &Path,
    stamp: &str,
    workload: &str,
) -> anyhow::Result<PathBuf> {
    if let Some(dir) = out {
        if let Ok(meta) = std::fs::symlink_metadata(dir) {
            // A link the user names as the folder (results on another disk) is followed; the
            // files inside are still written without following any link.
            if meta.file_type().is_symlink() {
                if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
                    bail!(
                        "--out {}: is a link to {}, which is not a folder",
                        dir.display(),
                        std::fs::read_link(dir)
                            .map(|t| t.display().to_string())
                            .unwrap_or_else(|e| format!("an unreadable target ({e})"))
                    );
                }
            } else if !meta.is_dir() {
                bail!("--out {}: exists and is not a folder", dir.display());
            }
            if let Some(f) = RUN_FILES.iter().find(|f| dir.join(f).exists()) {
                bail!(
                    "--out {}: already holds a run ({f}); results are never overwritten, choose another folder",
                    dir.display()
                );
            }
            let foreign: Vec<String> = std::fs::read_dir(dir)
                .with_context(|| format!("cannot read {}", dir.display()))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !ALLOWED_BEFORE.contains(&n.as_str()))
                .collect();
            if !foreign.is_empty() {
                bail!(
                    "--out {}: is not empty ({}{}); headroom writes only into a new or empty folder, \
                     so nothing of yours is overwritten",
                    dir.display(),
                    foreign
                        .iter()
                        .take(3)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                    if foreign.len() > 3 { ", …" } else { "" }
                );
            }
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        return Ok(dir.to_path_buf());
    }
    let safe: String = workload
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    std::fs::create_dir_all(root).with_context(|| format!("cannot create {}", root.display()))?;
    for n in 1..1000 {
        let name = if n == 1 {
            format!("{stamp}-{safe}")
        } else {
            format!("{stamp}-{safe}-{n}")
        };
        let dir = root.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    bail!("cannot find a free folder name under {}", root.display())
}

/// Writes a file atomically: a temporary file beside it, created new under a name of its own
/// (`.NAME.PID.N.tmp`: never an existing file, never through a link), then renamed over `path`
/// (which replaces a link there instead of following it). On failure the temporary file goes.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{}: not a file name", path.display())))?
        .to_string_lossy()
        .into_owned();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let mut file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = file
            .write_all(bytes)
            .and_then(|_| file.sync_data())
            .and_then(|_| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        return written;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_folder_with_results_and_numbers_collisions() {
        let root = tempfile::tempdir().unwrap();
        let a = create(None, root.path(), "20261129T184000Z", "quick start").unwrap();
        assert!(a.ends_with("20261129T184000Z-quick-start"));
        let b = create(None, root.path(), "20261129T184000Z", "quick start").unwrap();
        assert!(b.ends_with("20261129T184000Z-quick-start-2"));
        std::fs::write(a.join("summary.json"), "{}").unwrap();
        let e = create(Some(&a), root.path(), "x", "y")
            .unwrap_err()
            .to_string();
        assert!(e.contains("never overwritten"), "{e}");
        assert_eq!(
            std::fs::read_to_string(a.join("summary.json")).unwrap(),
            "{}"
        );
        let empty = root.path().join("fresh");
        assert_eq!(create(Some(&empty), root.path(), "x", "y").unwrap(), empty);
        // A folder with anything of the user's in it is refused, and the file left alone.
        let mine = root.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::fs::write(mine.join("report.md"), "my notes").unwrap();
        let e = create(Some(&mine), root.path(), "x", "y")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not empty (report.md)"), "{e}");
        assert_eq!(
            std::fs::read_to_string(mine.join("report.md")).unwrap(),
            "my notes"
        );
        let e = create(Some(Path::new("/")), root.path(), "x", "y").unwrap_err();
        assert!(e.to_string().contains("is not empty"), "{e}");
    }

    #[test]
    fn an_atomic_write_replaces_a_planted_link_and_never_writes_through_one() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        // A link where the output goes, and links where a fixed temporary name would be.
        let out = dir.path().join("summary.json");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("summary.tmp")).unwrap();
        write_atomic(&out, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(
            !std::fs::symlink_metadata(&out)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{}");
        // A failed write (the target is a folder) leaves no temporary file behind.
        let folder = dir.path().join("folder");
        std::fs::create_dir(&folder).unwrap();
        assert!(write_atomic(&folder, b"x").is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && n != "summary.tmp")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
