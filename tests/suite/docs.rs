//! The README agrees with the files: every `result` value of events.csv is listed, the columns
//! of alloc-log.csv are the ones the logging adaptor writes, `replay --help` uses the header's
//! names, and what it says of `format_version` is what the files carry.

use std::path::Path;

use crate::common::*;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

#[test]
fn every_events_result_is_listed_in_the_readme() {
    let text = readme();
    for (value, _) in headroom::record::timeline::EVENT_RESULTS {
        assert!(
            text.contains(&format!("| `{value}` |")),
            "README lists no result `{value}`"
        );
    }
}

#[test]
fn the_alloc_log_columns_are_documented_as_written() {
    let text = readme();
    let cols = headroom::alloc::adaptors::LOG_HEADER;
    let at = text
        .find("`alloc-log.csv` columns")
        .expect("the README documents alloc-log.csv's columns");
    let section = &text[at..at + 800.min(text.len() - at)];
    let mut last = 0;
    for c in cols {
        let i = section[last..]
            .find(&format!("`{c}`"))
            .unwrap_or_else(|| panic!("column `{c}` missing or out of order"));
        last += i;
    }
    let help = headroom(Path::new(env!("CARGO_MANIFEST_DIR")), &["replay", "--help"]);
    assert!(help.stdout.contains(&cols.join(",")), "{}", help.stdout);
    assert!(!help.stdout.contains("t_ns,event"), "{}", help.stdout);
}

#[test]
fn format_version_is_where_the_readme_says() {
    let text = readme();
    assert!(!text.contains("Every output carries its"));
    assert!(text.contains("the CSVs carry none of their own"));
    let tmp = tempfile::tempdir().unwrap();
    let wl = workload(
        tmp.path(),
        "fv",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"sleep\", for = \"1ms\" }]\n",
    );
    let (out, s, dir) = run_tiny(tmp.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = s["format_version"].as_u64().unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    assert_eq!(trace["otherData"]["format_version"].as_u64(), Some(v));
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(
        junit.contains(&format!("name=\"format_version\" value=\"{v}\"")),
        "{junit}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains(&format!("format_version {v}")));
    for csv in ["events.csv", "timeline.csv", "alloc-log.csv"] {
        let head = std::fs::read_to_string(dir.join(csv)).unwrap();
        assert!(
            !head.lines().next().unwrap().contains("format_version"),
            "{csv}"
        );
    }
}

#[test]
fn the_readme_states_the_driver_floor_headroom_enforces() {
    use headroom::device::floor;
    let text = readme();
    let v = floor::FLOOR_CUDA_VERSION;
    let floor_text = format!(
        "R{} (CUDA {}, `cuDriverGetVersion` {v})",
        floor::floor_branch(),
        floor::cuda_version_text(v)
    );
    let at = text
        .find("## On a real GPU")
        .expect("the README has an On a real GPU section");
    assert!(
        text[at..].contains(&floor_text),
        "README lacks {floor_text}"
    );
    assert!(
        !text.contains("R550 or newer"),
        "README names another floor"
    );
}
