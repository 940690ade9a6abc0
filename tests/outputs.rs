//! The files people open, as the tools they open them with read them: report.md with names
//! that look like HTML or carry terminal control characters, step ids no CSV reader takes for
//! numbers, and a trace that keeps every free.

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A copy of a committed fixture run's three original files in `dir`.
fn copy_fixture(name: &str, dir: &Path) -> PathBuf {
    let to = dir.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for f in ["summary.json", "timeline.csv", "events.csv"] {
        std::fs::copy(
            root().join("tests/fixtures/runs").join(name).join(f),
            to.join(f),
        )
        .unwrap();
    }
    to
}

#[test]
fn report_md_keeps_names_as_text_and_lists_every_file() {
    let tmp = tempfile::tempdir().unwrap();
    let wl = workload(
        tmp.path(),
        "html",
        "[[phase]]\nname = \"<script>alert(1)</script>\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"64MiB\" },\n  { op = \"free\", name = \"a\" },\n]\n",
    );
    let (out, _, dir) = run_tiny(tmp.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(!md.contains("<script>"), "{md}");
    assert!(md.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{md}");
    assert!(md.contains("`alloc-log.csv`"), "{md}");
    assert!(dir.join("alloc-log.csv").is_file());
}

#[test]
fn control_characters_never_reach_report_md_or_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    // A folder written by another tool (or an older headroom) with an escape in its text.
    let dir = copy_fixture("tiny-4g", tmp.path());
    let path = dir.join("summary.json");
    let mut s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    s["workload"]["description"] = "clears \u{1b}[2J the <b>screen</b>".into();
    std::fs::write(&path, serde_json::to_string_pretty(&s).unwrap()).unwrap();
    let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(!md.contains('\u{1b}'), "{md}");
    assert!(
        md.contains("clears \\u{1b}[2J the &lt;b&gt;screen&lt;/b&gt;"),
        "{md}"
    );

    // A workload cannot name a phase with one in the first place.
    let wl = workload(
        tmp.path(),
        "esc",
        "[[phase]]\nname = \"a\\u001b[2J\"\nsteps = [{ op = \"sleep\", for = \"1ms\" }]\n",
    );
    let (out, _, _) = run_tiny(tmp.path(), &wl, &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("esc.toml") && out.stderr.contains("control character"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains('\u{1b}'), "{}", out.stderr);
}
