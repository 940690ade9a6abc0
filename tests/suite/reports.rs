//! The reports derived from a run (plots, trace, report.md, junit.xml), `headroom report`,
//! `compare` and `merge`, on the committed fixture folders and on fresh simulator runs.
//!
//! The fixtures in `tests/fixtures/runs/` are `tests/fixtures/fleet.toml` run on the simulated
//! tiny-4g (it ends in an OOM) and h100-80g (it fits), with wall-clock timestamps and the pid
//! normalized. Regenerate them, and the snapshots, with
//! `cargo test --test suite -- --ignored --exact reports::regenerate` (then review the diff).

use std::path::Path;

use crate::common::fixtures::*;
use crate::common::*;

const FIXED_UTC: &str = "2026-01-01T00:00:00.000Z";
const FIXED_PID: u64 = 4242;
const FIXTURE_RUNS: [(&str, &str); 2] = [("tiny-4g", "tiny-4g"), ("h100-80g", "h100-80g")];

/// junit.xml names the folder it was written in; the snapshot uses a fixed one.
fn junit_normalized(dir: &Path) -> String {
    read(&dir.join("junit.xml")).replace(&dir.display().to_string(), "RESULTS")
}

#[test]
#[ignore = "rewrites tests/fixtures; run on purpose after a format change"]
fn regenerate() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, profile) in FIXTURE_RUNS {
        let out = tmp.path().join(name);
        let r = headroom(
            &root(),
            &[
                "run",
                "tests/fixtures/fleet.toml",
                "--profile",
                profile,
                "--out",
                out.to_str().unwrap(),
                "-q",
            ],
        );
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        // Every wall-clock timestamp, wherever it is quoted (OOM findings quote theirs).
        let mut text = read(&out.join("summary.json"));
        let s: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut stamps = vec![s["started_utc"].clone(), s["finished_utc"].clone()];
        stamps.extend(
            s["ooms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["utc"].clone()),
        );
        for stamp in stamps.iter().filter_map(|v| v.as_str()) {
            text = text.replace(stamp, FIXED_UTC);
        }
        let mut s: serde_json::Value = serde_json::from_str(&text).unwrap();
        for oom in s["ooms"].as_array_mut().unwrap() {
            for p in oom["processes"].as_array_mut().into_iter().flatten() {
                if p["is_self"] == true {
                    p["pid"] = FIXED_PID.into();
                }
            }
        }
        for p in s["idle"]["processes"].as_array_mut().into_iter().flatten() {
            if p["is_self"] == true {
                p["pid"] = FIXED_PID.into();
            }
        }
        let to = fixture(name);
        std::fs::create_dir_all(&to).unwrap();
        let mut text = serde_json::to_string_pretty(&s).unwrap();
        text.push('\n');
        std::fs::write(to.join("summary.json"), text).unwrap();
        for f in ["timeline.csv", "events.csv"] {
            std::fs::copy(out.join(f), to.join(f)).unwrap();
        }
    }
    let snaps = root().join("tests/fixtures/snapshots");
    std::fs::create_dir_all(&snaps).unwrap();
    for (name, _) in FIXTURE_RUNS {
        let dir = copy_fixture(name, tmp.path().join("copies").as_path());
        let r = headroom(&root(), &["report", dir.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        std::fs::write(
            snaps.join(format!("{name}.report.md")),
            read(&dir.join("report.md")),
        )
        .unwrap();
        std::fs::write(
            snaps.join(format!("{name}.junit.xml")),
            junit_normalized(&dir),
        )
        .unwrap();
        std::fs::write(
            snaps.join(format!("{name}.timeline.svg")),
            read(&dir.join("timeline.svg")),
        )
        .unwrap();
    }
    let cmp = |extra: &str| {
        let mut args = vec![
            "compare",
            "tests/fixtures/runs/tiny-4g",
            "tests/fixtures/runs/h100-80g",
        ];
        if !extra.is_empty() {
            args.push(extra);
        }
        headroom(&root(), &args).stdout
    };
    std::fs::write(snaps.join("compare.txt"), cmp("")).unwrap();
    std::fs::write(snaps.join("compare.md"), cmp("--markdown")).unwrap();
    let m = headroom(&root(), &["merge", "tests/fixtures/runs"]);
    std::fs::write(snaps.join("merge.md"), m.stdout).unwrap();
}

#[test]
fn report_md_of_the_fixture_matches_its_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, _) in FIXTURE_RUNS {
        let dir = copy_fixture(name, tmp.path());
        let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_snapshot(&format!("{name}.report.md"), &read(&dir.join("report.md")));
        assert_snapshot(&format!("{name}.junit.xml"), &junit_normalized(&dir));
    }
}

#[test]
fn the_oom_report_carries_diagnosis_evidence_and_failed_expectation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("tiny-4g", tmp.path());
    assert_eq!(
        headroom(tmp.path(), &["report", dir.to_str().unwrap()]).code,
        0
    );
    let md = read(&dir.join("report.md"));
    assert!(md.contains("### OOM 1 · peak/s1 · allocate `act`"), "{md}");
    assert!(md.contains("**Observation:** A small workload fits, a larger one does not"));
    assert!(md.contains("| requested | 1887436800 | 1.76 GiB |"), "{md}");
    assert!(
        md.contains("| oom | no OOM | OOM at peak/s1 | **FAILED** |"),
        "{md}"
    );
    assert!(md.contains("| started (UTC) | 2026-01-01T00:00:00.000Z |"));
    let junit = read(&dir.join("junit.xml"));
    assert!(
        junit.contains(r#"tests="2" failures="1" errors="0""#),
        "{junit}"
    );
    assert!(
        junit.contains(
            r#"<failure message="expected no OOM, actual OOM at peak/s1" type="expectation">"#
        ),
        "{junit}"
    );
    assert!(
        junit.contains(r#"name="peak own_bytes" time="0"></testcase>"#),
        "{junit}"
    );
}

#[test]
fn a_bad_events_row_is_named_by_file_line_field_and_value_and_nothing_is_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("tiny-4g", tmp.path());
    let events = dir.join("events.csv");
    let text = read(&events);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Line 3 (the second event): its latency made unreadable.
    let mut cells: Vec<&str> = lines[2].split(',').collect();
    cells[8] = "12x";
    lines[2] = cells.join(",");
    let bad = lines.join("\n") + "\n";
    std::fs::write(&events, &bad).unwrap();
    let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "{}: line 3: field \"latency_ns\": \"12x\" is not a count",
            events.display()
        )),
        "{}",
        r.stderr
    );
    assert_eq!(read(&events), bad);
    assert!(!dir.join("report.md").exists(), "a report from a bad file");
}

#[test]
fn the_trace_has_a_counter_per_view_phase_slices_and_event_instants() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("tiny-4g", tmp.path());
    assert_eq!(
        headroom(tmp.path(), &["report", dir.to_str().unwrap()]).code,
        0
    );
    let t: serde_json::Value = serde_json::from_str(&read(&dir.join("trace.json"))).unwrap();
    assert_eq!(t["otherData"]["format_version"], 2);
    assert_eq!(t["displayTimeUnit"], "ms");
    let ev = t["traceEvents"].as_array().unwrap();
    for e in ev {
        assert!(e["pid"].is_u64(), "{e}");
        if e["ph"] != "M" {
            assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
        }
    }
    let of = |ph: &'static str| ev.iter().filter(move |e| e["ph"] == ph);
    let names = |ph: &'static str| {
        let mut n: Vec<String> = of(ph)
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n.dedup();
        n
    };
    assert_eq!(
        names("C"),
        [
            "alloc_active_bytes",
            "alloc_allocated_bytes",
            "alloc_inactive_split_bytes",
            "alloc_largest_free_bytes",
            "alloc_requested_bytes",
            "alloc_reserved_bytes",
            "device_used_bytes",
            "own_bytes"
        ]
    );
    let meta = names("M");
    assert!(
        meta.contains(&"process_name".to_string()) && meta.contains(&"thread_name".to_string())
    );
    let phases: Vec<&serde_json::Value> = of("X").filter(|e| e["cat"] == "phase").collect();
    assert_eq!(
        phases
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["weights", "spike", "peak"]
    );
    assert_eq!(phases[0]["dur"].as_f64().unwrap(), 1_100_336.0);
    let cats: Vec<&str> = of("i").map(|e| e["cat"].as_str().unwrap()).collect();
    for c in ["allocate", "free", "oom"] {
        assert!(cats.contains(&c), "{c} in {cats:?}");
    }
    let oom = of("i")
        .find(|e| e["cat"] == "oom" && e["args"]["requested_bytes"].is_u64())
        .unwrap();
    assert_eq!(oom["args"]["requested_bytes"], 1800 * MIB);
    // The counter reaches the true peak of summary.json.
    let peak = of("C")
        .filter(|e| e["name"] == "device_used_bytes")
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .max();
    let s: serde_json::Value = serde_json::from_str(&read(&dir.join("summary.json"))).unwrap();
    assert_eq!(
        peak,
        s["peaks"]["run"]["device_used_bytes"]["bytes"].as_u64()
    );
}

#[test]
fn the_plot_has_every_series_and_its_marks() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, _) in FIXTURE_RUNS {
        let dir = copy_fixture(name, tmp.path());
        assert_eq!(
            headroom(tmp.path(), &["report", dir.to_str().unwrap()]).code,
            0
        );
        let svg = read(&dir.join("timeline.svg"));
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        for id in [
            "series-device_used_bytes",
            "series-alloc_reserved_bytes",
            "series-alloc_allocated_bytes",
            "series-own_bytes",
            "mark-true-peak",
            "mark-poll-1hz",
            "line-poll-1hz",
            "mark-idle",
            "phases",
        ] {
            assert_eq!(
                svg.matches(&format!("id=\"{id}\"")).count(),
                1,
                "{name}: {id}"
            );
        }
        // Peaks are labelled in binary units; time is in seconds.
        assert!(svg.contains(">true peak "), "{name}");
        assert!(svg.contains("> s</text>") || svg.contains(" s</text>"));
        let oom = svg.contains("id=\"mark-oom-1\"");
        assert_eq!(oom, name == "tiny-4g", "{name}: OOM mark");
        let png = std::fs::read(dir.join("timeline.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height, big-endian, right after the chunk header.
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 1920);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 1080);
    }
    // The tiny-4g run's 1 Hz poll saw 2.25 GiB; its true peak was 3.25 GiB.
    let svg = read(&tmp.path().join("tiny-4g/timeline.svg"));
    assert!(svg.contains("1 Hz poll peak 2.25 GiB"), "{svg}");
    assert!(svg.contains("true peak 3.25 GiB"));
    assert!(svg.contains("OOM: act 1.76 GiB asked"));
}

#[test]
fn report_regenerates_the_same_files_and_never_touches_the_originals() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("tiny-4g", tmp.path());
    let originals: Vec<Vec<u8>> = ["summary.json", "timeline.csv", "events.csv"]
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("report.md, junit.xml, trace.json, timeline.svg, timeline.png")
    );
    let derived = [
        "report.md",
        "junit.xml",
        "trace.json",
        "timeline.svg",
        "timeline.png",
    ];
    let first: Vec<Vec<u8>> = derived
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    assert_eq!(
        headroom(tmp.path(), &["report", dir.to_str().unwrap()]).code,
        0
    );
    for (f, before) in derived.iter().zip(&first) {
        assert_eq!(
            &std::fs::read(dir.join(f)).unwrap(),
            before,
            "{f} is deterministic"
        );
    }
    for (f, before) in ["summary.json", "timeline.csv", "events.csv"]
        .iter()
        .zip(&originals)
    {
        assert_eq!(
            &std::fs::read(dir.join(f)).unwrap(),
            before,
            "{f} unchanged"
        );
    }
}

#[test]
fn a_folder_missing_a_file_or_of_another_format_exits_2_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("tiny-4g", tmp.path());
    std::fs::remove_file(dir.join("timeline.csv")).unwrap();
    let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains(dir.to_str().unwrap()), "{}", r.stderr);
    assert!(r.stderr.contains("timeline.csv is missing"), "{}", r.stderr);
    assert!(
        !dir.join("report.md").exists(),
        "nothing written for a bad folder"
    );
    let r = headroom(
        tmp.path(),
        &[
            "compare",
            dir.to_str().unwrap(),
            fixture("h100-80g").to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("timeline.csv is missing"), "{}", r.stderr);

    for (version, word) in [(3, "newer"), (1, "older")] {
        let dir = copy_fixture("h100-80g", &tmp.path().join(format!("v{version}")));
        let path = dir.join("summary.json");
        let text = read(&path).replacen(
            "\"format_version\": 2",
            &format!("\"format_version\": {version}"),
            1,
        );
        std::fs::write(&path, &text).unwrap();
        let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
        assert_eq!(r.code, 2);
        assert!(r.stderr.contains(path.to_str().unwrap()), "{}", r.stderr);
        assert!(
            r.stderr.contains(&format!("format_version {version}")) && r.stderr.contains(word),
            "{}",
            r.stderr
        );
        assert_eq!(read(&path), text, "the summary is left as it was");
        let r = headroom(tmp.path(), &["merge", dir.to_str().unwrap()]);
        assert_eq!(r.code, 2, "{}", r.stderr);
    }

    let dir = copy_fixture("h100-80g", &tmp.path().join("cols"));
    let tl = read(&dir.join("timeline.csv")).replacen("own_bytes", "mine_bytes", 1);
    std::fs::write(dir.join("timeline.csv"), tl).unwrap();
    let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("timeline.csv: columns do not match format_version 2: column 6 should be \"own_bytes\", found \"mine_bytes\""),
        "{}",
        r.stderr
    );
}

#[test]
fn every_run_writes_its_reports_and_exit_codes_follow_the_expectations() {
    let tmp = tempfile::tempdir().unwrap();
    let body = "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"1536MiB\" }, { op = \"sleep\", for = \"10ms\" }]\n";
    let held = workload(
        tmp.path(),
        "held",
        &format!("{body}\n[expect.peak]\nown_bytes = \"2GiB\"\n"),
    );
    let (out, _, dir) = run_tiny(tmp.path(), &held, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        !out.stderr.contains("steps ·"),
        "no progress bar off a terminal: {}",
        out.stderr
    );
    for f in [
        "timeline.svg",
        "timeline.png",
        "trace.json",
        "report.md",
        "junit.xml",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    assert!(read(&dir.join("junit.xml")).contains(r#"tests="2" failures="0""#));

    let want_oom = workload(
        tmp.path(),
        "want-oom",
        &format!("{body}\n[expect]\noom = true\n"),
    );
    let (out, _, dir) = run_tiny(tmp.path(), &want_oom, &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        read(&dir.join("junit.xml"))
            .contains(r#"<failure message="expected an OOM, actual no OOM""#)
    );

    let too_big = workload(
        tmp.path(),
        "too-big",
        &format!("{body}\n[expect.peak]\nown_bytes = \"1GiB\"\n"),
    );
    let (out, _, dir) = run_tiny(tmp.path(), &too_big, &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let junit = read(&dir.join("junit.xml"));
    assert!(
        junit.contains(
            r#"<failure message="expected ≤ 1073741824 (1.00 GiB), actual 1610612736 (1.50 GiB)""#
        ),
        "{junit}"
    );
    assert!(read(&dir.join("report.md")).contains(
        "| peak own_bytes | ≤ 1073741824 (1.00 GiB) | 1610612736 (1.50 GiB) | **FAILED** |"
    ));
}

#[test]
fn a_run_that_could_not_finish_is_an_error_case_in_junit() {
    let tmp = tempfile::tempdir().unwrap();
    let wl = workload(
        tmp.path(),
        "floor",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"3700MiB\" }]\n",
    );
    let (out, _, dir) = run_tiny(tmp.path(), &wl, &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    let junit = read(&dir.join("junit.xml"));
    assert!(junit.contains(r#"errors="1""#), "{junit}");
    assert!(
        junit.contains(r#"type="could-not-run">the run ended stopped_at_floor"#),
        "{junit}"
    );
}

#[test]
fn a_plan_validation_run_draws_the_plan_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("h100-80g", tmp.path());
    let path = dir.join("summary.json");
    let mut s: serde_json::Value = serde_json::from_str(&read(&path)).unwrap();
    s["plan"] = serde_json::json!({
        "capacity_bytes": 5 * GIB,
        "margin_line_bytes": 4 * GIB + 512 * MIB,
        "kv_budget_bytes": GIB,
        "label": "safety margin 512 MiB"
    });
    std::fs::write(&path, serde_json::to_string_pretty(&s).unwrap()).unwrap();
    let r = headroom(tmp.path(), &["report", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = read(&dir.join("timeline.svg"));
    assert_eq!(svg.matches("id=\"plan\"").count(), 1);
    assert!(
        svg.contains("margin line 4.50 GiB (safety margin 512 MiB)"),
        "{svg}"
    );
    assert!(svg.contains("planned KV budget 1.00 GiB"));
    assert!(svg.contains("plan capacity 5.00 GiB"));
    let md = read(&dir.join("report.md"));
    assert!(
        md.contains("Plan (safety margin 512 MiB): capacity 5.00 GiB, margin line 4.50 GiB"),
        "{md}"
    );
}
