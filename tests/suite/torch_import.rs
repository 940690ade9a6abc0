//! `headroom import torch` and `headroom replay SNAPSHOT` on the built fixtures
//! (tests/fixtures/torch, made by scripts/build-torch-snapshot-fixtures from a port of
//! PyTorch's allocator): every file a run writes, PyTorch's segment decisions reproduced
//! exactly, the numbers the port computed, and refusals of bad and malicious input.

use std::path::{Path, PathBuf};

use crate::common::{GIB, MIB, csv_rows, headroom, u};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/torch")
        .join(name)
}

/// What the generator computed for each fixture.
fn facts(name: &str, device: u32) -> Value {
    let text = std::fs::read_to_string(fixture("built-fixtures.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(all["built_not_recorded"], true);
    all["fixtures"][name]["devices"][device.to_string()].clone()
}

/// Imports `name` into `<tmp>/out`; returns the folder of each device and its summary.
fn import(tmp: &Path, name: &str) -> Vec<(PathBuf, Value)> {
    let out = tmp.join("out");
    let r = headroom(
        tmp,
        &[
            "import",
            "torch",
            fixture(name).to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let dirs: Vec<PathBuf> = if out.join("summary.json").exists() {
        vec![out]
    } else {
        let mut d: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        d.sort();
        d
    };
    dirs.into_iter()
        .map(|d| {
            let s = serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap())
                .unwrap();
            crate::common::schema::check("summary", &s, "an imported summary.json");
            (d, s)
        })
        .collect()
}

fn peak(s: &Value, view: &str) -> u64 {
    u(&s["peaks"]["run"][view]["bytes"])
}

/// Every file a run writes is there, and the replay made PyTorch's decisions exactly.
fn check_traced(dir: &Path, s: &Value, name: &str, device: u32) {
    for f in [
        "timeline.csv",
        "events.csv",
        "alloc-log.csv",
        "summary.json",
        "report.md",
        "trace.json",
        "timeline.svg",
        "timeline.png",
        "junit.xml",
    ] {
        assert!(
            dir.join(f).is_file(),
            "{name}: {f} missing in {}",
            dir.display()
        );
    }
    let f = facts(name, device);
    let i = &s["import"];
    assert_eq!(i["kind"], "PyTorch memory snapshot");
    assert_eq!(u(&i["device_index"]), device as u64);
    assert_eq!(u(&i["trace_entries"]), u(&f["entries"]), "{name}");
    assert_eq!(i["actions"], f["actions"], "{name}");
    let fid = &i["fidelity"];
    let decisions = u(&f["segment_decisions"]);
    assert_eq!(u(&fid["recorded_decisions"]), decisions, "{name}: {fid}");
    assert_eq!(u(&fid["reproduced_decisions"]), decisions, "{name}: {fid}");
    assert_eq!(u(&fid["extra_decisions"]), 0, "{name}: {fid}");
    assert_eq!(u(&fid["divergent_requests"]), 0, "{name}: {fid}");
    assert!(fid["first_divergence"].is_null());
    // PyTorch's own reserved peak, and the model's, are the port's to the byte.
    let reserved_peak = u(&f["reserved_peak_bytes"]);
    assert_eq!(
        u(&i["pytorch_reserved_peak_bytes"]),
        reserved_peak,
        "{name}"
    );
    assert_eq!(peak(s, "alloc_reserved_bytes"), reserved_peak, "{name}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains(&format!(
            "**Segments reproduced: 100% ({decisions}/{decisions})**"
        )),
        "{name}: {report}"
    );
    // One events.csv row per trace entry (small traces are not thinned).
    assert_eq!(
        csv_rows(&dir.join("events.csv")).len() as u64,
        u(&f["entries"]),
        "{name}"
    );
}

#[test]
fn every_traced_fixture_imports_with_pytorchs_decisions_reproduced() {
    for name in [
        "built-train-fragmentation.pickle",
        "built-two-streams.pickle",
        "built-two-streams.json",
        "built-expandable-segments.pickle",
        "built-old-format.pickle",
        "built-oom.pickle",
        "built-oom-max-split.pickle",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let folders = import(tmp.path(), name);
        assert_eq!(folders.len(), 1, "{name}");
        check_traced(&folders[0].0, &folders[0].1, name, 0);
    }
}

#[test]
fn an_oom_snapshot_is_replayed_on_its_own_capacity_and_the_oom_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let folders = import(tmp.path(), "built-oom.pickle");
    let (dir, s) = &folders[0];
    // The generator's device: 2 GiB; PyTorch's reserved + device_free at the OOM says so, and
    // the replay device is sized so. The snapshot does not record a total: the summary's is
    // null, and timeline.csv leaves the modeled free memory (and device used) empty.
    assert!(s["device"]["total_bytes"].is_null(), "{}", s["device"]);
    let note = s["import"]["device_note"].as_str().unwrap();
    assert!(note.contains(&format!("({} bytes)", 2 * GIB)), "{note}");
    let rows = csv_rows(&dir.join("timeline.csv"));
    assert!(rows.len() > 2);
    for r in &rows {
        assert_eq!(
            (
                r["device_free_bytes"].as_str(),
                r["device_used_bytes"].as_str()
            ),
            ("", ""),
            "{r:?}"
        );
    }
    assert!(rows.iter().any(|r| !r["alloc_reserved_bytes"].is_empty()));
    assert!(s["peaks"]["run"].get("device_used_bytes").is_none());
    assert_eq!(s["status"], "oom");
    assert_eq!(s["exit_code"], 0);
    let ooms = s["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1);
    let o = &ooms[0];
    // The request PyTorch refused, rounded (1300 MiB), on the default stream.
    assert_eq!(u(&o["rounded_bytes"]), 1300 * MIB);
    assert_eq!(o["step"], "entry 329");
    assert_eq!(o["name"], "train.py:42 (step)");
    assert_eq!(o["stream"], "0x0");
    // Its retry chain released the cached segments PyTorch released.
    let retries = o["retries"].as_array().unwrap();
    assert!(
        retries
            .iter()
            .any(|r| r["text"].as_str().unwrap().contains("released 9 segments")),
        "{retries:?}"
    );
    assert!(
        o["diagnosis"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f
                .as_str()
                .unwrap()
                .contains("PyTorch itself refused this request")),
        "{o}"
    );
    // Who held the memory at the OOM, by the user's line.
    let at_oom = &s["import"]["at_first_oom"];
    assert_eq!(u(&at_oom["entry"]), 329);
    assert_eq!(at_oom["by_origin"][0]["origin"], "train.py:40 (step)");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("### Who held memory at the first OOM (entry 329)"));
    assert!(report.contains("/home/user/project/train.py:40 (step)"));
    // The OOM is an event row with PyTorch's device_free.
    let rows = csv_rows(&dir.join("events.csv"));
    let oom_row = rows.iter().find(|r| r["result"] == "oom").unwrap();
    assert_eq!(oom_row["op"], "oom");
    assert_eq!(oom_row["requested_bytes"], (1300 * MIB).to_string());
}

#[test]
fn two_devices_make_two_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let folders = import(tmp.path(), "built-two-devices.pickle");
    assert_eq!(folders.len(), 2);
    assert!(folders[0].0.ends_with("device-0") && folders[1].0.ends_with("device-1"));
    check_traced(&folders[0].0, &folders[0].1, "built-two-devices.pickle", 0);
    check_traced(&folders[1].0, &folders[1].1, "built-two-devices.pickle", 1);
}

#[test]
fn a_snapshot_without_history_shows_its_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let folders = import(tmp.path(), "built-no-history.pickle");
    let (dir, s) = &folders[0];
    let i = &s["import"];
    assert_eq!(u(&i["trace_entries"]), 0);
    assert!(i["fidelity"].is_null());
    // The state its segments show: the port's final reserved bytes.
    let f = facts("built-no-history.pickle", 0);
    assert_eq!(
        peak(s, "alloc_reserved_bytes"),
        u(&f["reserved_final_bytes"])
    );
    assert!(peak(s, "alloc_allocated_bytes") > 0);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("no history was recorded"), "{report}");
    assert!(report.contains("Who held memory"), "{report}");
}

#[test]
fn the_json_form_gives_the_pickles_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let a = import(tmp.path(), "built-two-streams.pickle");
    let tmp2 = tempfile::tempdir().unwrap();
    let b = import(tmp2.path(), "built-two-streams.json");
    assert_eq!(a[0].1["peaks"]["run"], b[0].1["peaks"]["run"]);
    assert_eq!(a[0].1["import"]["fidelity"], b[0].1["import"]["fidelity"]);
    assert_eq!(b[0].1["import"]["encoding"], "JSON");
    assert_eq!(a[0].1["import"]["encoding"], "pickle (protocol 5)");
    // Each reader gives the numbers the generator computed for its file: the trace's entries
    // and actions, PyTorch's reserved peak reproduced, and every segment decision made again.
    for (name, (_, s)) in [
        ("built-two-streams.pickle", &a[0]),
        ("built-two-streams.json", &b[0]),
    ] {
        let f = facts(name, 0);
        let i = &s["import"];
        assert_eq!(i["trace_entries"], f["entries"], "{name}");
        assert_eq!(i["actions"], f["actions"], "{name}");
        assert_eq!(
            u(&i["pytorch_reserved_peak_bytes"]),
            u(&f["reserved_peak_bytes"]),
            "{name}"
        );
        assert_eq!(
            peak(s, "alloc_reserved_bytes"),
            u(&f["reserved_peak_bytes"]),
            "{name}"
        );
        assert_eq!(
            i["fidelity"]["reproduced_decisions"], f["segment_decisions"],
            "{name}"
        );
        assert_eq!(
            i["fidelity"]["recorded_decisions"], f["segment_decisions"],
            "{name}"
        );
        assert_eq!(i["fidelity"]["divergent_requests"], 0, "{name}");
    }
}

#[test]
fn an_import_never_overwrites_a_run_folder() {
    let tmp = tempfile::tempdir().unwrap();
    import(tmp.path(), "built-oom.pickle");
    let out = tmp.path().join("out");
    let before = std::fs::read(out.join("summary.json")).unwrap();
    let r = headroom(
        tmp.path(),
        &[
            "import",
            "torch",
            fixture("built-train-fragmentation.pickle")
                .to_str()
                .unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("never overwritten"), "{}", r.stderr);
    assert_eq!(std::fs::read(out.join("summary.json")).unwrap(), before);
}

/// `pickle.dumps` of an object whose `__reduce__` is `os.system("touch MARKER")`.
const EVIL4: &[u8] = b"\x80\x04\x959\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x1etouch /tmp/headroom-pickle-ran\x94\x85\x94R\x94.";

#[test]
fn a_malicious_snapshot_is_refused_and_nothing_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = Path::new("/tmp/headroom-pickle-ran");
    let _ = std::fs::remove_file(marker);
    let evil = tmp.path().join("snapshot.pickle");
    std::fs::write(&evil, EVIL4).unwrap();
    for args in [
        vec!["import", "torch", evil.to_str().unwrap()],
        vec!["replay", evil.to_str().unwrap()],
    ] {
        let r = headroom(tmp.path(), &args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr
                .contains("byte 28: opcode STACK_GLOBAL (0x93) is refused"),
            "{}",
            r.stderr
        );
        assert!(r.stderr.contains(evil.to_str().unwrap()), "{}", r.stderr);
    }
    assert!(!marker.exists(), "the pickle's payload ran");
    assert!(
        !tmp.path().join("results").exists(),
        "an output folder was made"
    );
}

#[test]
fn bad_snapshots_are_named_with_the_place() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str); 3] = [
        ("truncated.pickle", &EVIL4[..20], "truncated"),
        (
            "notasnapshot.json",
            br#"{"device_traces": [[{"action": "alloc", "size": 5}]], "segments": []}"#,
            "device_traces[0][0]: a `alloc` entry without `addr`",
        ),
        ("list.json", br#"[1, 2]"#, "not a PyTorch memory snapshot"),
    ];
    for (file, bytes, want) in cases {
        let p = tmp.path().join(file);
        std::fs::write(&p, bytes).unwrap();
        let r = headroom(tmp.path(), &["import", "torch", p.to_str().unwrap()]);
        assert_eq!(r.code, 2, "{file}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{file}: {}", r.stderr);
        assert!(r.stderr.contains(file), "{file}: {}", r.stderr);
    }
}

fn replay_json(args: &[&str]) -> (i32, Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = vec!["replay"];
    a.extend_from_slice(args);
    a.push("--json");
    let r = headroom(tmp.path(), &a);
    let v = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
    if !v.is_null() {
        crate::common::schema::check("replay-snapshot", &v, "replay SNAPSHOT --json");
    }
    (r.code, v, r.stderr)
}

#[test]
fn replaying_a_snapshot_says_whether_it_fits_and_how_faithfully() {
    let oom = fixture("built-oom.pickle");
    let (code, v, err) = replay_json(&[oom.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let r = &v[0]["replay"];
    assert_eq!(r["format"], "torch_snapshot");
    assert_eq!(r["fits"], false);
    assert_eq!(u(&r["first_failure"]["line"]), 329);
    assert_eq!(r["first_failure"]["origin"], "train.py:42 (step)");
    assert_eq!(u(&r["first_failure"]["requested_bytes"]), 1300 * MIB);
    assert_eq!(u(&r["fidelity"]["reproduced_decisions"]), 70);
    assert_eq!(u(&r["fidelity"]["recorded_decisions"]), 70);
    // On a big card the same step fits.
    let (code, v, err) = replay_json(&["--profile", "h100-80g", oom.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v[0]["replay"]["fits"], true);
    // Text for people.
    let tmp = tempfile::tempdir().unwrap();
    let t = headroom(tmp.path(), &["replay", oom.to_str().unwrap()]);
    assert!(
        t.stdout
            .contains("result: does NOT fit — out of memory at entry 329"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout.contains("segments reproduced: 100% (70/70)"),
        "{}",
        t.stdout
    );
    // Other allocators replay the same requests.
    for alloc in ["pool", "direct"] {
        let (code, v, err) = replay_json(&[
            "--allocator",
            alloc,
            "--profile",
            "h100-80g",
            fixture("built-two-streams.pickle").to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{alloc}: {err}");
        assert!(v[0]["replay"]["fidelity"].is_null());
        assert_eq!(u(&v[0]["replay"]["allocations"]), 31);
    }
}

#[test]
fn find_capacity_brackets_the_smallest_device() {
    let (code, v, err) = replay_json(&[
        "--find-capacity",
        fixture("built-oom.pickle").to_str().unwrap(),
    ]);
    // The question was the size, and it was answered: exit 0, although the snapshot's own
    // card (below) is too small.
    assert_eq!(code, 0, "{err}");
    assert_eq!(v[0]["replay"]["fits"], false);
    let c = &v[0]["find_capacity"];
    let fits = u(&c["fits_at_bytes"]);
    let refused = u(&c["refused_at_bytes"]);
    assert_eq!(fits - refused, 2 * MIB, "{c}");
    // It did not fit on its own 2 GiB, so it needs more.
    assert!(fits > 2 * GIB, "{c}");
    // It needs at least the bytes it asked for at the peak of live memory plus the request.
    assert!(
        u(&c["allocator_capacity_bytes"]) == fits,
        "no context on this device: {c}"
    );
    assert!(c["refusal"]["line"].as_u64().is_some(), "{c}");
}

#[test]
fn try_settings_compares_a_grid() {
    let (code, v, err) = replay_json(&[
        "--try-settings",
        fixture("built-oom.pickle").to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let rows = v[0]["try_settings"].as_array().unwrap();
    let changes: Vec<&str> = rows.iter().map(|r| r["change"].as_str().unwrap()).collect();
    assert_eq!(
        changes,
        [
            "as recorded",
            "expandable_segments:True",
            "max_split_size_mb:128",
            "max_split_size_mb:512",
            "per_process_memory_fraction:1.0,garbage_collection_threshold:0.8"
        ]
    );
    let first = &rows[0];
    assert_eq!(first["fits"], false);
    assert_eq!(u(&first["refused_at"]), 329);
    let f = facts("built-oom.pickle", 0);
    assert_eq!(
        u(&first["reserved_peak_bytes"]),
        u(&f["reserved_peak_bytes"])
    );
    assert_eq!(
        u(&first["fragmentation_at_peak_bytes"]),
        u(&first["reserved_peak_bytes"]) - u(&first["allocated_at_reserved_peak_bytes"])
    );
    // Text: the table.
    let tmp = tempfile::tempdir().unwrap();
    let t = headroom(
        tmp.path(),
        &[
            "replay",
            "--try-settings",
            fixture("built-oom.pickle").to_str().unwrap(),
        ],
    );
    assert!(t.stdout.contains("settings tried on"), "{}", t.stdout);
    assert!(t.stdout.contains("no (entry 329)"), "{}", t.stdout);
}

#[test]
fn what_if_flags_are_for_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log.csv");
    std::fs::write(
        &log,
        "t_ns,action,ptr,bytes,stream,detail\n1,allocate,0x10,512,0,\n",
    )
    .unwrap();
    let r = headroom(
        tmp.path(),
        &["replay", "--find-capacity", log.to_str().unwrap()],
    );
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("apply to PyTorch snapshots"),
        "{}",
        r.stderr
    );
}

/// Real snapshots, from a folder of them (`HEADROOM_TORCH_SNAPSHOTS`; recorded with
/// scripts/record-torch-snapshots on a GPU): every traced device replays with PyTorch's own
/// decisions made again. Ignored, since no machine without a GPU has such a folder: run it
/// with `HEADROOM_TORCH_SNAPSHOTS=DIR cargo test --test suite -- --ignored recorded_snapshots`.
#[test]
#[ignore = "needs snapshots recorded on a GPU: HEADROOM_TORCH_SNAPSHOTS=DIR cargo test --test suite -- --ignored recorded_snapshots"]
fn recorded_snapshots_reproduce_pytorchs_decisions() {
    let dir = std::env::var("HEADROOM_TORCH_SNAPSHOTS")
        .expect("HEADROOM_TORCH_SNAPSHOTS names the folder of recorded snapshots");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let snapshot = matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("pickle" | "json")
        );
        if !snapshot || p.ends_with("built-fixtures.json") {
            continue;
        }
        let (code, v, err) = replay_json(&[p.to_str().unwrap()]);
        if v.is_null() {
            // A snapshot without history has nothing to replay.
            assert!(err.contains("has no trace"), "{}: {err}", p.display());
            continue;
        }
        for d in v.as_array().unwrap() {
            let f = &d["replay"]["fidelity"];
            assert_eq!(
                f["divergent_requests"],
                0,
                "{} device {}: {f} (exit {code})",
                p.display(),
                d["device"]
            );
            n += 1;
        }
    }
    assert!(n > 0, "no traced device in the snapshots of {dir}");
    eprintln!("{n} recorded traces reproduced");
}

#[test]
fn every_reader_of_an_imports_idle_reading_says_it_is_not_in_the_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, s) = import(tmp.path(), "built-oom.pickle").remove(0);
    assert!(s["idle"].is_null(), "{}", s["idle"]);
    let total = 8 * GIB;
    let given = tmp.path().join("given");
    let r = headroom(
        tmp.path(),
        &[
            "import",
            "torch",
            fixture("built-oom.pickle").to_str().unwrap(),
            "--out",
            given.to_str().unwrap(),
            "--device-total",
            &total.to_string(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (p, g) = (plain.to_str().unwrap(), given.to_str().unwrap());
    // compare: the idle rows are empty for the plain import, and each side says why.
    let r = headroom(tmp.path(), &["compare", p, g]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].ends_with(" · idle reading not in the snapshot"),
        "{}",
        r.stdout
    );
    let derived = format!("derived from --device-total {total}");
    assert!(
        lines[1].ends_with(&format!(" · idle reading {derived}")),
        "{}",
        r.stdout
    );
    let free = lines
        .iter()
        .find(|l| l.starts_with("device_free_bytes"))
        .unwrap();
    let cells: Vec<&str> = free.split_whitespace().collect();
    assert_eq!(cells[1], "-", "{free}");
    // merge: the idle and headroom cells say it too, never a figure.
    let csv = tmp.path().join("merged.csv");
    let r = headroom(tmp.path(), &["merge", p, g, "--out", csv.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = r.stdout.lines().find(|l| l.starts_with("| out |")).unwrap();
    assert_eq!(row.matches("| not in the snapshot |").count(), 2, "{row}");
    let rows = csv_rows(&csv);
    assert_eq!(rows[0]["idle_device_free_bytes"], "");
    assert_eq!(rows[0]["headroom_at_peak_bytes"], "");
    assert_eq!(
        rows[1]["idle_device_free_bytes"].parse::<u64>().unwrap(),
        total
    );
    // The plot and the trace: no idle line, no idle reading event.
    let svg = std::fs::read_to_string(plain.join("timeline.svg")).unwrap();
    assert!(svg.contains("idle reading not in the snapshot"));
    assert!(!svg.contains("mark-idle"));
    let trace = std::fs::read_to_string(plain.join("trace.json")).unwrap();
    assert!(!trace.contains("\"idle reading\""));
    let trace = std::fs::read_to_string(given.join("trace.json")).unwrap();
    assert!(trace.contains(&derived));
}
