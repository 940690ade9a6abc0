//! `compare` and `merge` on folders whose names (and workload names) hold terminal escapes and
//! HTML: no raw control character reaches stdout or stderr, and no name becomes markup in the
//! Markdown.

use std::path::{Path, PathBuf};

use crate::common::fixtures::*;
use crate::common::*;

const HOSTILE: &str = "run\u{1b}[2J<b>x<i>&\u{7}";
const WORKLOAD: &str = "w\u{1b}[31m<script>alert(1)</script>";

/// A copy of fixture `name` under `dir/<HOSTILE><suffix>`, its workload renamed `WORKLOAD`.
fn hostile_copy(name: &str, dir: &Path, suffix: &str) -> PathBuf {
    let from = copy_fixture(name, &dir.join("staging"));
    let to = dir.join(format!("{HOSTILE}{suffix}"));
    std::fs::rename(&from, &to).unwrap();
    let path = to.join("summary.json");
    let mut s: serde_json::Value = serde_json::from_str(&read(&path)).unwrap();
    s["workload"]["name"] = WORKLOAD.into();
    std::fs::write(&path, serde_json::to_string_pretty(&s).unwrap()).unwrap();
    to
}

fn no_raw_controls(what: &str, text: &str) {
    assert!(
        !text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "{what} holds a raw control character: {text:?}"
    );
}

fn no_markup(what: &str, text: &str) {
    for tag in ["<b>", "<i>", "<script>", "</script>"] {
        assert!(!text.contains(tag), "{what} holds {tag}: {text}");
    }
}

#[test]
fn compare_and_merge_escape_folder_and_workload_names() {
    let tmp = tempfile::tempdir().unwrap();
    let a = hostile_copy("tiny-4g", tmp.path(), "-a");
    let b = hostile_copy("h100-80g", tmp.path(), "-b");
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());

    let text = headroom(tmp.path(), &["compare", a, b]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    no_raw_controls("compare", &text.stdout);
    assert!(
        text.stdout
            .contains("/run\\u{1b}[2J<b>x<i>&\\u{7}-a · w\\u{1b}[31m<script>"),
        "{}",
        text.stdout
    );
    let md = headroom(tmp.path(), &["compare", a, b, "--markdown"]);
    assert_eq!(md.code, 0, "{}", md.stderr);
    no_raw_controls("compare --markdown", &md.stdout);
    no_markup("compare --markdown", &md.stdout);
    assert!(
        md.stdout
            .contains("run\\u{1b}[2J&lt;b&gt;x&lt;i&gt;&amp;\\u{7}-a · w\\u{1b}[31m&lt;script&gt;"),
        "{}",
        md.stdout
    );

    // A third copy, killed: merge skips it and names it on stderr, escaped too.
    let killed = hostile_copy("tiny-4g", tmp.path(), "-killed");
    let tl = read(&killed.join("timeline.csv"));
    std::fs::write(killed.join("timeline.csv"), &tl[..tl.len() - 3]).unwrap();
    let m = headroom(
        tmp.path(),
        &["merge", tmp.path().to_str().unwrap(), "--skip-incomplete"],
    );
    assert_eq!(m.code, 0, "{}", m.stderr);
    no_raw_controls("merge", &m.stdout);
    no_raw_controls("merge's stderr", &m.stderr);
    no_markup("merge", &m.stdout);
    assert!(
        m.stdout.contains(
            "| run\\u{1b}[2J&lt;b&gt;x&lt;i&gt;&amp;\\u{7}-a | w\\u{1b}[31m&lt;script&gt;alert(1)&lt;/script&gt; | 0 | oom |"
        ),
        "{}",
        m.stdout
    );
    assert!(
        m.stdout.contains(
            "- run\\u{1b}[2J&lt;b&gt;x&lt;i&gt;&amp;\\u{7}-killed: timeline.csv ends mid-row"
        ),
        "{}",
        m.stdout
    );
    assert!(
        m.stderr.contains("skipped ") && m.stderr.contains("run\\u{1b}[2J<b>x<i>&\\u{7}-killed"),
        "{}",
        m.stderr
    );
    // Without --skip-incomplete the error names the folder, escaped.
    let m = headroom(tmp.path(), &["merge", tmp.path().to_str().unwrap()]);
    assert_eq!(m.code, 2);
    no_raw_controls("merge's error", &m.stderr);
    assert!(m.stderr.contains("-killed: incomplete"), "{}", m.stderr);
}
