//! Long snapshots built by scripts/torch_snapshot_long.py (PyTorch's allocator, ported):
//! `empty_cache` with new segments below older ones, a side stream with `record_stream`, a
//! late start, an OOM, and expandable segments. Replayed at the recorded addresses, every
//! segment decision and the reserved peak come out as PyTorch's; every allocation lands at
//! PyTorch's address. Also: a history-less snapshot answered on a card, one JSON document
//! per `import --json`, and CSV columns of one kind.
//!
//! The snapshots are generated once per script version into target/torch-long/ (python3
//! needed: the tests say so and are skipped without it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::common::{headroom, u};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The generated snapshot of about `entries` entries (and its `.expandable.pickle`), or
/// `None` with the reason printed when python3 is missing.
fn long_snapshot(entries: u64) -> Option<PathBuf> {
    static GENERATE: Mutex<()> = Mutex::new(());
    let _one_at_a_time = GENERATE.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = Command::new("python3").arg("--version").output() {
        crate::common::skip::missing(
            "snapshot_fidelity: python3 (scripts/torch_snapshot_long.py)",
            &e.to_string(),
        );
        return None;
    }
    // Named by the generator's sources, so a changed generator makes new files.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in [
        "scripts/torch_snapshot_long.py",
        "scripts/torch_snapshot_model.py",
        "scripts/build-torch-snapshot-fixtures",
    ] {
        for b in std::fs::read(root().join(f)).unwrap() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    let dir = root().join("target/torch-long");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("long-{entries}-{h:016x}.pickle"));
    if !path.exists() {
        let out = Command::new("python3")
            .arg(root().join("scripts/torch_snapshot_long.py"))
            .arg(entries.to_string())
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(path)
}

fn facts(path: &Path) -> Value {
    let text = std::fs::read_to_string(format!("{}.json", path.display())).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["built_not_recorded"], true);
    v["devices"]["0"].clone()
}

fn replay_json(args: &[&str]) -> (i32, Value) {
    let tmp = tempfile::tempdir().unwrap();
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    all.push("--json");
    let r = headroom(tmp.path(), &all);
    assert!(
        r.code == 0 || r.code == 1,
        "{:?}: {}{}",
        args,
        r.stdout,
        r.stderr
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    crate::common::schema::check("replay-snapshot", &v, "replay SNAPSHOT --json");
    (r.code, v)
}

/// Replays `path` and checks it against what the port computed.
fn reproduces_pytorch(path: &Path, with_oom: bool) {
    let f = facts(path);
    let (code, v) = replay_json(&[path.to_str().unwrap()]);
    let r = &v[0]["replay"];
    assert_eq!(code, if with_oom { 1 } else { 0 });
    let fid = &r["fidelity"];
    assert_eq!(u(&fid["recorded_decisions"]), u(&f["segment_decisions"]));
    assert_eq!(u(&fid["reproduced_decisions"]), u(&f["segment_decisions"]));
    assert_eq!(u(&fid["extra_decisions"]), 0);
    assert_eq!(
        u(&fid["divergent_requests"]),
        0,
        "{}",
        fid["first_divergence"]
    );
    assert_eq!(
        u(&r["peaks"]["alloc_reserved"]["bytes"]),
        u(&f["reserved_peak_bytes"])
    );
    let p = &r["placement"];
    assert_eq!(p["placement"], "recorded", "{p}");
    assert_eq!(u(&p["allocations_elsewhere"]), 0, "{p}");
    assert_eq!(u(&p["allocations_compared"]), u(&f["actions"]["alloc"]));
    assert_eq!(u(&p["segments_at_own_address"]), 0);
    if with_oom {
        // The refused request, as PyTorch recorded it.
        assert_eq!(u(&f["actions"]["oom"]), 1);
        assert_eq!(u(&fid["outcome_mismatches"]), 0);
        // The trace starts late: the segments held then were recreated where they were.
        assert!(u(&f["reserved_at_start_bytes"]) > 0);
    }
}

fn expandable(path: &Path) -> PathBuf {
    PathBuf::from(
        path.to_str()
            .unwrap()
            .replace(".pickle", ".expandable.pickle"),
    )
}

#[test]
fn a_200000_entry_trace_is_replayed_as_pytorch_placed_it() {
    let Some(path) = long_snapshot(200_000) else {
        return;
    };
    let f = facts(&path);
    // What makes it hard is there: segments below older ones, two streams, empty_cache.
    assert!(u(&f["entries"]) >= 180_000);
    assert!(u(&f["actions"]["segment_free"]) > 1000);
    reproduces_pytorch(&path, true);
    reproduces_pytorch(&expandable(&path), false);
}

#[test]
fn a_10000_entry_trace_is_replayed_as_pytorch_placed_it() {
    let Some(path) = long_snapshot(10_000) else {
        return;
    };
    reproduces_pytorch(&path, true);
    reproduces_pytorch(&expandable(&path), false);
}

#[test]
fn a_trace_whose_segments_cannot_go_where_recorded_says_from_which_entry_it_is_modeled() {
    // The fixture's expandable segments were reserved on a 16 GiB device; the replay's
    // device is an H200, whose larger reservation covers the next recorded segment.
    let fixture = root().join("tests/fixtures/torch/built-expandable-segments.pickle");
    let (_, v) = replay_json(&[fixture.to_str().unwrap()]);
    let p = &v[0]["replay"]["placement"];
    let at = u(&p["modeled_from_entry"]);
    assert_eq!(p["placement"], format!("modeled from entry {at}"));
    assert!(
        p["modeled_because"]
            .as_str()
            .unwrap()
            .contains("overlaps a segment the replay still holds"),
        "{p}"
    );
    assert_eq!(u(&p["segments_at_own_address"]), 1);
}

/// A copy of the tiny-4g profile with `total` bytes of memory.
fn profile_with(dir: &Path, total: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join("profiles/tiny-4g.toml")).unwrap();
    let text = text.replace(
        "total_bytes = \"4GiB\"",
        &format!("total_bytes = \"{total}\""),
    );
    assert!(text.contains(total));
    let path = dir.join(format!("small-{total}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_snapshot_without_history_is_answered_on_a_card() {
    let fixture = root().join("tests/fixtures/torch/built-no-history.pickle");
    let fixture = fixture.to_str().unwrap();
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/torch/built-fixtures.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    let reserved =
        u(&all["fixtures"]["built-no-history.pickle"]["devices"]["0"]["reserved_final_bytes"]);
    let tmp = tempfile::tempdir().unwrap();
    // Its segments on a 4 GiB card: they fit, the reserved memory is theirs.
    let (code, v) = replay_json(&[fixture, "--profile", "tiny-4g"]);
    assert_eq!(code, 0);
    let r = &v[0]["replay"];
    assert_eq!(r["fits"], true);
    assert_eq!(u(&r["peaks"]["alloc_reserved"]["bytes"]), reserved);
    // On a 1 GiB card (768 MiB after the context) they do not: exit 1.
    let small = profile_with(tmp.path(), "1GiB");
    let (code, v) = replay_json(&[fixture, "--profile", small.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(v[0]["replay"]["fits"], false);
    // The smallest card that holds them holds at least their reserved bytes.
    let (code, v) = replay_json(&[fixture, "--profile", "tiny-4g", "--find-capacity"]);
    assert_eq!(code, 0);
    let c = &v[0]["find_capacity"];
    assert!(c.is_object(), "{v}");
}

#[test]
fn import_json_is_one_document_and_csv_columns_hold_one_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = root().join("tests/fixtures/torch/built-two-devices.pickle");
    let out = tmp.path().join("out");
    let r = headroom(
        tmp.path(),
        &[
            "import",
            "torch",
            fixture.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // One document: an array with a result per device.
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    crate::common::schema::check("import-torch", &v, "import torch --json");
    let devices: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| u(&d["device"]))
        .collect();
    assert_eq!(devices, [0, 1]);
    // Streams are named alike throughout (the two-streams fixture has a non-default one).
    let fixture = root().join("tests/fixtures/torch/built-two-streams.pickle");
    let out = tmp.path().join("streams");
    let r = headroom(
        tmp.path(),
        &[
            "import",
            "torch",
            fixture.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = crate::common::csv_rows(&out.join("events.csv"));
    // A stream is named by its `cudaStream_t` in hex, never a bare number: `events.csv`'s
    // `stream` column is text whoever wrote it (a run's `main`, a watch's `job`).
    let streams: std::collections::BTreeSet<u64> = rows
        .iter()
        .filter(|r| !r["stream"].is_empty())
        .map(|r| {
            let hex = r["stream"].strip_prefix("0x");
            hex.and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or_else(|| panic!("{}", r["stream"]))
        })
        .collect();
    assert_eq!(streams.len(), 2, "{streams:?}");
    assert!(streams.contains(&0));
}

/// Builds the same snapshot as `snapshot_pickler` from the entries in `src` and writes it
/// with `pickle.dump`: key strings and action names shared, each frame dict shared, a new
/// frames list, `"N/A"` and `(0, 0)` per entry.
const PY_DUMP: &str = r#"
import json, pickle, sys
src, depth, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
names, frames = {}, {}
LIN = "/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py"
def fresh(s):
    return s[:1] + s[1:]
def frame(f):
    if f not in frames:
        frames[f] = {"name": fresh("layer_%d" % (f % 7)),
                     "filename": fresh(LIN) if f % 3 == 0 else fresh("/home/user/model/block%d.py" % (f % 11)),
                     "line": 10 + f}
    return frames[f]
entries = []
for a, addr, size, t, st in json.load(open(src)):
    a = names.setdefault(a, a)
    entries.append({"action": a, "addr": addr, "size": size, "stream": 0, "time_us": t,
                    "compile_context": "".join(["N", "/", "A"]), "user_metadata": "",
                    "pool_id": tuple([0, 0]), "frames": [frame(st * 3 + d) for d in range(depth)]})
with open(out, "wb") as f:
    pickle.dump({"segments": [], "device_traces": [entries]}, f, protocol=4)
"#;

#[test]
fn the_benchmarks_pickler_writes_the_bytes_pythons_pickle_dump_writes() {
    use super::snapshot_pickler::{PyEntry, PyPickler};
    if let Err(e) = Command::new("python3").arg("--version").output() {
        crate::common::skip::missing("snapshot_fidelity: python3 (pickle.dump)", &e.to_string());
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let actions = ["alloc", "free_requested", "free_completed"];
    // Enough entries for many frames and batches; one frame per stack takes `APPEND`.
    for (n, depth) in [(4_321usize, 4u32), (1_000, 1), (1, 16)] {
        let entries: Vec<PyEntry> = (0..n as u64)
            .map(|i| PyEntry {
                action: actions[(i % 3) as usize],
                addr: 0x7f00_0000_0000 + (i % 97) * (2 << 20),
                size: [512, 70_000, 3 << 20, 1 << 33][(i % 4) as usize],
                time_us: 1_760_000_000_000_000 + 3 * i as i64,
                stack: (i % 50) as u32,
            })
            .collect();
        let ours = PyPickler::new(Vec::new())
            .snapshot(entries.iter().copied(), n, depth)
            .unwrap();
        let rows: Vec<Value> = entries
            .iter()
            .map(|e| serde_json::json!([e.action, e.addr, e.size, e.time_us, e.stack]))
            .collect();
        let src = tmp.path().join("entries.json");
        std::fs::write(&src, serde_json::to_string(&rows).unwrap()).unwrap();
        let out = tmp.path().join("python.pickle");
        let r = Command::new("python3")
            .args(["-c", PY_DUMP])
            .arg(&src)
            .arg(depth.to_string())
            .arg(&out)
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let python = std::fs::read(&out).unwrap();
        let first_difference = ours.iter().zip(&python).position(|(a, b)| a != b);
        assert_eq!(
            (first_difference, ours.len()),
            (None, python.len()),
            "{n} entries, depth {depth}"
        );
        // Python's frames are there (one about every 64 KiB), and the reader takes them.
        let frames = ours.windows(1).filter(|w| w[0] == 0x95).count();
        assert!(frames as u64 >= ours.len() as u64 / 65_536, "{frames}");
        let snap = headroom::import::torch::read_pickle_bytes(&ours, "python").unwrap();
        assert_eq!(snap.entries.len(), n);
        // Only the first batch of 1,000 (where each stack's frames appear for the first
        // time) is read the slow way: memo ids such as 149 (0x95, FRAME's opcode) and
        // frames between opcodes leave the fast path on.
        assert!(
            snap.slow_entries <= 1_000.min(n as u64),
            "{}",
            snap.slow_entries
        );
    }
}

/// The `oom` entries of a fixture as recorded: (entry, size, device_free).
fn recorded_ooms(path: &Path) -> Vec<(u64, u64, u64)> {
    use headroom::import::torch::{self, Action};
    let snap = torch::read(path).unwrap();
    let t = snap.traced_devices()[0];
    (t.start..t.end)
        .map(|i| (i - t.start, snap.entries.get(i)))
        .filter(|(_, e)| e.action == Action::Oom)
        .map(|(i, e)| (i as u64, e.size, e.addr))
        .collect()
}

#[test]
fn recorded_oom_figures_stay_recorded_and_unknown_ones_stay_unknown() {
    let fixture = root().join("tests/fixtures/torch/built-oom.pickle");
    let recorded = recorded_ooms(&fixture);
    assert_eq!(recorded.len(), 1);
    let (entry, size, free) = recorded[0];
    let tmp = tempfile::tempdir().unwrap();
    let import = |out: &str, extra: &[&str]| -> (PathBuf, Value) {
        let dir = tmp.path().join(out);
        let mut args = vec![
            "import",
            "torch",
            fixture.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let r = headroom(tmp.path(), &args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let s: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        crate::common::schema::check("summary", &s, "an imported summary.json");
        (dir, s)
    };
    let (dir, s) = import("plain", &[]);
    // The OOM as PyTorch recorded it.
    assert_eq!(u(&s["ooms"][0]["device_free_bytes"]), free);
    assert_eq!(u(&s["ooms"][0]["requested_bytes"]), size);
    let ev = &s["import"]["device_evidence"];
    for k in [
        "device_total_bytes",
        "idle_free_bytes",
        "other_processes_bytes",
        "outside_pytorch_bytes",
    ] {
        assert!(ev[k].is_null(), "{k}: {ev}");
    }
    assert!(
        ev["basis"]
            .as_str()
            .unwrap()
            .starts_with("not in the snapshot")
    );
    let o = &ev["recorded_ooms"][0];
    assert_eq!(
        (
            u(&o["entry"]),
            u(&o["requested_bytes"]),
            u(&o["device_free_bytes"])
        ),
        (entry, size, free)
    );
    assert!(o["outside_pytorch_bytes"].is_null());
    // The OOM record itself: no simulated device figures stand in for the run's.
    let oom = &s["ooms"][0];
    for k in [
        "device_total_bytes",
        "idle_device_free_bytes",
        "outside_allocator_bytes",
    ] {
        assert!(oom[k].is_null(), "ooms[0].{k}: {oom}");
    }
    assert!(
        oom["device_evidence_basis"]
            .as_str()
            .unwrap()
            .starts_with("not in the snapshot")
    );
    let findings = oom["diagnosis"]["findings"].to_string();
    assert!(!findings.contains("idle reading's"), "{findings}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("| device total | not in the snapshot |"),
        "{report}"
    );
    assert!(
        report.contains("| outside the allocator | not in the snapshot |"),
        "{report}"
    );
    assert!(
        report.contains("Device total unknown, idle free unknown"),
        "{report}"
    );
    assert!(report.contains("not in the snapshot"), "{report}");
    // No idle reading either: null with the reason, and nothing derived from a device total.
    assert!(s["idle"].is_null(), "idle: {}", s["idle"]);
    assert!(
        s["idle_basis"]
            .as_str()
            .unwrap()
            .starts_with("not in the snapshot")
    );
    assert!(s["peaks"]["headroom_at_peak_bytes"].is_null());
    assert!(
        report.contains("\nIdle reading: not in the snapshot ("),
        "{report}"
    );
    assert!(
        report.contains(
            "Headroom at the device-used peak: unknown (the device total is not in the snapshot)."
        ),
        "{report}"
    );
    // With the device's total given, memory outside PyTorch is derived, and labeled.
    let total = 4u64 << 30;
    let (given_dir, s) = import("given", &["--device-total", &total.to_string()]);
    let idle = &s["idle"]["after_context"];
    assert_eq!(
        (
            u(&idle["device_total_bytes"]),
            u(&idle["device_free_bytes"])
        ),
        (total, total)
    );
    let basis = format!("derived from --device-total {total}");
    assert!(
        s["idle_basis"].as_str().unwrap().starts_with(&basis),
        "{}",
        s["idle_basis"]
    );
    let used_peak = u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]);
    assert_eq!(u(&s["peaks"]["headroom_at_peak_bytes"]), total - used_peak);
    let report = std::fs::read_to_string(given_dir.join("report.md")).unwrap();
    assert!(
        report.contains(&format!(" — not measured: {basis}: ")),
        "{report}"
    );
    assert!(report.contains(&format!(" free ({basis}).")), "{report}");
    let ev = &s["import"]["device_evidence"];
    assert_eq!(u(&ev["device_total_bytes"]), total);
    let o = &ev["recorded_ooms"][0];
    let reserved = u(&o["pytorch_reserved_bytes"]);
    assert_eq!(u(&o["outside_pytorch_bytes"]), total - free - reserved);
    assert_eq!(o["derived_from"], format!("--device-total {total}"));
    // The idle reading derived from the total, the same figure wherever it appears.
    assert_eq!(u(&ev["idle_free_bytes"]), total);
    assert!(ev["other_processes_bytes"].is_null());
    assert!(
        ev["basis"]
            .as_str()
            .unwrap()
            .contains("the idle reading derived from it as the whole total free"),
        "{}",
        ev["basis"]
    );
    let oom = &s["ooms"][0];
    assert_eq!(u(&oom["device_total_bytes"]), total);
    assert_eq!(
        u(&oom["outside_allocator_bytes"]),
        total - free - u(&oom["alloc_reserved_bytes"])
    );
    assert_eq!(u(&oom["idle_device_free_bytes"]), total);
    assert!(
        oom["device_evidence_basis"]
            .as_str()
            .unwrap()
            .contains(&format!("--device-total {total}"))
    );
}

#[test]
fn an_import_writes_the_snapshots_segment_table() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = root().join("tests/fixtures/torch/built-no-history.pickle");
    let out = tmp.path().join("out");
    let r = headroom(
        tmp.path(),
        &[
            "import",
            "torch",
            fixture.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let snap = headroom::import::torch::read(&fixture).unwrap();
    let rows = crate::common::csv_rows(&out.join("segments.csv"));
    assert_eq!(rows.len(), snap.segments.len());
    let total: u64 = rows
        .iter()
        .map(|r| r["total_bytes"].parse::<u64>().unwrap())
        .sum();
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/torch/built-fixtures.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        total,
        u(&all["fixtures"]["built-no-history.pickle"]["devices"]["0"]["reserved_final_bytes"])
    );
    for r in &rows {
        r["address"].parse::<u64>().unwrap();
        r["live_blocks"].parse::<u64>().unwrap();
    }
}
