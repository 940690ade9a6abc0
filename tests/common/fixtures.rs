//! The committed fixture folders (`tests/fixtures/runs/`) and report snapshots
//! (`tests/fixtures/snapshots/`), shared by the report tests.

use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/runs").join(name)
}

/// A copy of a fixture folder (its three original files) in `dir`, to write reports into.
pub fn copy_fixture(name: &str, dir: &Path) -> PathBuf {
    let to = dir.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for f in ["summary.json", "timeline.csv", "events.csv"] {
        std::fs::copy(fixture(name).join(f), to.join(f)).unwrap();
    }
    to
}

/// Compares `actual` with the committed snapshot `tests/fixtures/snapshots/<name>`.
pub fn assert_snapshot(name: &str, actual: &str) {
    let path = root().join("tests/fixtures/snapshots").join(name);
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (regenerate the snapshots)", path.display()));
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .map_or("(length differs)".to_string(), |i| {
                format!("line {}", i + 1)
            });
        panic!(
            "{} differs from the snapshot at {line}:\n--- actual ---\n{actual}",
            path.display()
        );
    }
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
