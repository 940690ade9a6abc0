//! The folder a run writes into: created fresh, never one that already holds results.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Files a run writes; a folder holding any of them is an earlier run and is never reused.
pub const RUN_FILES: &[&str] = &["summary.json", "timeline.csv", "events.csv"];

/// Creates `out` (which must be missing or empty), or `<root>/<UTC stamp>-<workload>` with a
/// numeric suffix if that name is taken.
pub fn create(
    out: Option<&Path>,
    root: &Path,
    stamp: &str,
    workload: &str,
) -> anyhow::Result<PathBuf> {
    if let Some(dir) = out {
        if dir.exists() {
            if !dir.is_dir() {
                bail!("--out {}: exists and is not a folder", dir.display());
            }
            if let Some(f) = RUN_FILES.iter().find(|f| dir.join(f).exists()) {
                bail!(
                    "--out {}: already holds a run ({f}); results are never overwritten, choose another folder",
                    dir.display()
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

/// Writes a file atomically (temp file, then rename) so a reader never sees half of it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
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
    }
}
