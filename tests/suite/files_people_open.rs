//! The files people open, as the tools they open them with read them: report.md with names
//! that look like HTML or carry terminal control characters, step ids no CSV reader takes for
//! numbers, and a trace that keeps every free.

use crate::common::fixtures::copy_fixture;
use crate::common::*;

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

#[test]
fn step_ids_are_never_read_as_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    // Step 1 expands to 24 actions: s1.1 … s1.24, where s1.1 and s1.10 must stay apart.
    let wl = workload(
        tmp.path(),
        "ids",
        "[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"repeat\", times = 12, steps = [{ op = \"allocate\", name = \"a\", size = \"2MiB\" }, { op = \"free\", name = \"a\" }] },\n  { op = \"allocate\", name = \"b\", size = \"95% of total\" },\n]\n\n[expect]\noom = \"p/2\"\n",
    );
    let (out, s, dir) = run_tiny(tmp.path(), &wl, &["--allow-oom"]);
    assert_eq!(
        out.code, 0,
        "the old spelling p/2 still names step s2: {}",
        out.stderr
    );
    assert_eq!(s["ooms"][0]["step"], "s2");
    let rows = csv_rows(&dir.join("events.csv"));
    let ids: Vec<&str> = rows.iter().map(|r| r["step"].as_str()).collect();
    assert_eq!(ids.len(), 25, "{ids:?}");
    for id in &ids {
        assert!(id.parse::<f64>().is_err(), "{id} reads as a number");
    }
    let distinct: std::collections::BTreeSet<&&str> = ids.iter().collect();
    assert_eq!(distinct.len(), 25);
    assert_eq!(
        (ids[0], ids[9], ids[23], ids[24]),
        ("s1.1", "s1.10", "s1.24", "s2")
    );
}

#[test]
fn a_bounded_trace_aggregates_and_keeps_every_free_and_every_oom() {
    let tmp = tempfile::tempdir().unwrap();
    // 150 allocate/free pairs on two streams, then an OOM: 301 events.
    let wl = workload(
        tmp.path(),
        "churn",
        "[[phase]]\nname = \"churn\"\nsteps = [\n  { op = \"repeat\", times = 75, steps = [\n    { op = \"allocate\", name = \"a\", size = \"2MiB\" }, { op = \"free\", name = \"a\" },\n    { op = \"allocate\", name = \"b\", size = \"4MiB\", stream = \"side\" }, { op = \"free\", name = \"b\" },\n  ] },\n]\n\n[[phase]]\nname = \"too-big\"\nsteps = [{ op = \"allocate\", name = \"c\", size = \"95% of total\" }]\n",
    );
    let (out, _, dir) = run_tiny(tmp.path(), &wl, &["--allow-oom"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let run = headroom::report::rundata::RunData::load(&dir).unwrap();
    assert_eq!(run.events.len(), 301);
    let text = headroom::report::trace::render_bounded(&run, 40).unwrap();
    let t: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let evs = t["traceEvents"].as_array().unwrap();
    let one_by_one = evs
        .iter()
        .filter(|e| {
            !matches!(
                e["cat"].as_str(),
                Some("memory" | "__metadata" | "phase" | "reading")
            )
        })
        .filter(|e| !(e["cat"] == "oom" && e["tid"] == 2))
        .count();
    assert!(one_by_one <= 40, "bounded: {one_by_one}");
    // Every allocate and free is counted, none dropped by parity.
    let mut counted: std::collections::BTreeMap<String, u64> = Default::default();
    for e in evs.iter().filter(|e| e["cat"] == "aggregate") {
        for (op, v) in e["args"]["ops"].as_object().unwrap() {
            *counted.entry(op.clone()).or_default() += v["count"].as_u64().unwrap();
        }
    }
    assert_eq!(counted["allocate"], 150, "{counted:?}");
    assert_eq!(counted["free"], 150, "{counted:?}");
    let bytes: u64 = evs
        .iter()
        .filter(|e| e["cat"] == "aggregate")
        .filter_map(|e| e["args"]["ops"]["free"]["requested_bytes"].as_u64())
        .sum();
    assert_eq!(bytes, 75 * 2 * MIB + 75 * 4 * MIB);
    // The OOM and both phases are kept as they are, and the file says what was done.
    assert_eq!(evs.iter().filter(|e| e["cat"] == "oom").count(), 2);
    assert_eq!(evs.iter().filter(|e| e["cat"] == "phase").count(), 2);
    let other = &t["otherData"];
    assert_eq!(
        (
            other["events_aggregated"].as_u64(),
            other["events_in_trace"].as_u64()
        ),
        (Some(300), Some(1))
    );
    assert!(
        other["aggregation"]
            .as_str()
            .unwrap()
            .contains("events.csv has each event")
    );
    // Metadata events carry Chrome's category.
    let meta: Vec<&serde_json::Value> = evs.iter().filter(|e| e["ph"] == "M").collect();
    assert!(meta.len() >= 5);
    assert!(meta.iter().all(|e| e["cat"] == "__metadata"), "{meta:?}");
    // Unbounded (the default limit), every event is there one by one.
    let full: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    let frees = full["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "free")
        .count();
    assert_eq!(frees, 150);
}
