//! MIG instances as devices: a `[[mig]]` table of a shipped profile as a simulated card
//! (`--profile h200-1g.18gb`), and on the fake driver's MIG mode (`HEADROOM_FAKE_MIG`) every
//! instance listed with its own total, `run` and `watch` on one instance chosen by
//! `CUDA_VISIBLE_DEVICES=MIG-…`, process lists refused without privileges recorded as
//! unavailable, and `--device all` as one worker per instance. Every expected figure is read
//! from the profile's `[[mig]]` table.

use crate::common::*;
use std::path::Path;
use std::process::Command;

const HR: &str = env!("CARGO_BIN_EXE_headroom");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `(total_bytes, multiprocessors)` of `profile`'s `[[mig]]` table for `mig`.
fn mig_table(profile: &str, mig: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(root().join(format!("profiles/{profile}.toml"))).unwrap();
    let t: toml::Table = toml::from_str(&text).unwrap();
    let row = t["mig"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["profile"].as_str() == Some(mig))
        .unwrap_or_else(|| panic!("{profile} has no [[mig]] {mig}"));
    let total = headroom::units::parse_size(row["total_bytes"].as_str().unwrap()).unwrap();
    (total, row["multiprocessors"].as_integer().unwrap() as u64)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn out_of(o: std::process::Output) -> Out {
    let o = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    o
}

const SMALL: &str = "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"512MiB\" }, { op = \"sleep\", for = \"10ms\" }]\n";

#[test]
fn a_mig_profile_is_a_simulated_card_of_that_instance() {
    let dir = tempfile::tempdir().unwrap();
    let (total, sms) = mig_table("h200", "1g.18gb");
    let o = headroom(
        dir.path(),
        &["devices", "--profile", "h200-1g.18gb", "--json"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let g = &json(&o.stdout)["gpus"][0];
    assert_eq!(
        (u(&g["total_bytes"]), u(&g["multiprocessors"])),
        (total, sms)
    );
    assert_eq!(g["mig"]["profile"], "1g.18gb");
    assert!(g["uuid"].as_str().unwrap().starts_with("MIG-"), "{g}");
    assert!(
        g["mig"]["parent_uuid"]
            .as_str()
            .unwrap()
            .starts_with("GPU-"),
        "{g}"
    );

    let wl = workload(dir.path(), "small", SMALL);
    let out = dir.path().join("run");
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "h200-1g.18gb",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s = json(&std::fs::read_to_string(out.join("summary.json")).unwrap());
    assert_eq!(u(&s["device"]["total_bytes"]), total);
    assert_eq!(u(&s["idle"]["after_context"]["device_total_bytes"]), total);
    assert_eq!(s["device"]["mig"]["profile"], "1g.18gb");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("MIG instance 1g.18gb of GPU-"), "{report}");

    // Listed with the built-in profiles; an unknown instance names the ones there are.
    let o = headroom(dir.path(), &["devices", "--backend", "sim", "--json"]);
    let rows = json(&o.stdout)["profiles"].as_array().unwrap().clone();
    let row = rows
        .iter()
        .find(|r| r["name"] == "h100-80g-3g.40gb")
        .unwrap();
    assert_eq!(row["mig_parent"], "h100-80g");
    assert_eq!(u(&row["total_bytes"]), mig_table("h100-80g", "3g.40gb").0);
    let o = headroom(dir.path(), &["devices", "--profile", "h200-2g.18gb"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("\"h200-2g.18gb\"") && o.stderr.contains("1g.18gb, 1g.35gb, 2g.35gb"),
        "{}",
        o.stderr
    );
}
/// The fake driver's MIG mode: one H200 split into two 1g.18gb and a 3g.71gb.
const SPLIT: &str = "1g.18gb,1g.18gb,3g.71gb";

/// `scripts/fake-gpu headroom ARGS…` on an H200 split as `SPLIT`, with `env` set, a fresh
/// state shared by its processes, and no `CUDA_VISIBLE_DEVICES` unless `env` sets it.
fn fake(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Out {
    let state = dir.join("fake-state");
    if !state.exists() {
        std::fs::write(&state, "").unwrap();
    }
    let mut c = Command::new("bash");
    c.arg(root().join("scripts/fake-gpu"))
        .arg(HR)
        .args(args)
        .current_dir(dir)
        .env("HEADROOM_FAKE_PROFILE", "h200")
        .env("HEADROOM_FAKE_MIG", SPLIT)
        .env("HEADROOM_FAKE_STATE", &state)
        .env("HEADROOM_FAKE_RELEASE_DELAY", "0ms")
        .env_remove("HEADROOM_FAKE_PRIVILEGED")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("HEADROOM_RANK")
        .env_remove("HEADROOM_RANK_COUNT")
        .env_remove("HEADROOM_MARK");
    for (k, v) in env {
        c.env(k, v);
    }
    out_of(c.output().unwrap())
}

/// `devices --json` on the split GPU: its rows.
fn instances(dir: &Path, env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let o = fake(dir, env, &["devices", "--backend", "cuda", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    json(&o.stdout)["gpus"].as_array().unwrap().clone()
}

fn summary(dir: &Path) -> serde_json::Value {
    json(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
}

fn refused(why: &serde_json::Value) -> bool {
    why.as_str()
        .is_some_and(|w| w.contains("NVML_ERROR_NO_PERMISSION"))
}

#[test]
fn devices_lists_every_instance_with_its_own_total_and_parent() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = instances(dir.path(), &[]);
    let profiles: Vec<&str> = gpus
        .iter()
        .map(|g| g["mig"]["profile"].as_str().unwrap())
        .collect();
    assert_eq!(profiles, SPLIT.split(',').collect::<Vec<_>>());
    let parent = gpus[0]["mig"]["parent_uuid"].as_str().unwrap();
    assert!(parent.starts_with("GPU-"), "{parent}");
    let mut uuids = std::collections::BTreeSet::new();
    for (i, g) in gpus.iter().enumerate() {
        let (total, sms) = mig_table("h200", profiles[i]);
        assert_eq!(u(&g["index"]), i as u64);
        assert_eq!(
            (u(&g["total_bytes"]), u(&g["multiprocessors"])),
            (total, sms),
            "{g}"
        );
        assert_eq!(u(&g["free_bytes"]), total, "{g}");
        assert_eq!(u(&g["nvml"]["total_bytes"]), total, "{g}");
        assert_eq!(g["mig"]["parent_uuid"], parent);
        assert_eq!(g["mig"]["parent_index"], 0);
        let uuid = g["uuid"].as_str().unwrap();
        assert!(uuid.starts_with("MIG-"), "{uuid}");
        assert_eq!(g["cuda_visible_devices"], uuid);
        assert!(uuids.insert(uuid.to_string()), "{uuid} twice");
        // Without privileges NVML refuses an instance's process list: unavailable, not empty.
        assert!(g["processes"].is_null(), "{g}");
        assert!(refused(&g["processes_unavailable"]), "{g}");
    }
    let o = fake(dir.path(), &[], &["devices", "--backend", "cuda"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("MIG 2: ") && o.stdout.contains("MIG 3g.71gb of GPU 0 (GPU-"));
    assert!(
        o.stdout
            .contains("no process list: nvmlDeviceGetComputeRunningProcesses")
    );

    let privileged = instances(dir.path(), &[("HEADROOM_FAKE_PRIVILEGED", "1")]);
    assert!(
        privileged
            .iter()
            .all(|g| g["processes"] == serde_json::json!([]))
    );
    assert!(
        privileged
            .iter()
            .all(|g| g.get("processes_unavailable").is_none())
    );
    // CUDA_VISIBLE_DEVICES: the driver chooses; headroom lists what it sees, by UUID.
    let third = gpus[2]["uuid"].as_str().unwrap();
    let chosen = instances(dir.path(), &[("CUDA_VISIBLE_DEVICES", third)]);
    assert_eq!(chosen.len(), 1);
    assert_eq!(chosen[0]["uuid"], third);
    assert_eq!(u(&chosen[0]["total_bytes"]), mig_table("h200", "3g.71gb").0);
}

#[test]
fn run_on_one_instance_records_its_own_total_and_no_process_list() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = instances(dir.path(), &[]);
    let third = gpus[2]["uuid"].as_str().unwrap();
    let (total, sms) = mig_table("h200", "3g.71gb");
    let wl = workload(dir.path(), "small", SMALL);
    let out = dir.path().join("run");
    let o = fake(
        dir.path(),
        &[("CUDA_VISIBLE_DEVICES", third)],
        &[
            "run",
            wl.to_str().unwrap(),
            "--backend",
            "cuda",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s = summary(&out);
    let d = &s["device"];
    assert_eq!(d["uuid"], third);
    assert_eq!(
        (u(&d["total_bytes"]), u(&d["multiprocessors"])),
        (total, sms)
    );
    assert_eq!(d["mig"]["profile"], "3g.71gb");
    assert_eq!(d["mig"]["parent_uuid"], gpus[2]["mig"]["parent_uuid"]);
    assert_eq!(u(&s["idle"]["after_context"]["device_total_bytes"]), total);
    assert!(s["idle"]["processes"].is_null());
    assert!(
        refused(&s["idle"]["processes_unavailable"]),
        "{}",
        s["idle"]
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("no process list (nvmlDeviceGetComputeRunningProcesses"));
}

#[test]
fn watch_on_one_instance_exits_0_with_its_total_and_the_process_list_unavailable() {
    // cuDeviceGetUuid (v1) giving the parent's UUID (as assumed) or the instance's own (as v2
    // does): NVML decides which device the bytes are, so both watch the instance.
    for v1 in ["parent", "instance"] {
        watch_on_one_instance(v1);
    }
}

fn watch_on_one_instance(v1: &str) {
    let dir = tempfile::tempdir().unwrap();
    let gpus = instances(dir.path(), &[]);
    let first = gpus[0]["uuid"].as_str().unwrap();
    let parent = gpus[0]["mig"]["parent_uuid"].as_str().unwrap();
    let (total, _) = mig_table("h200", "1g.18gb");
    let out = dir.path().join("watch");
    let o = fake(
        dir.path(),
        &[
            ("CUDA_VISIBLE_DEVICES", first),
            ("HEADROOM_FAKE_MIG_UUID_V1", v1),
        ],
        &[
            "watch",
            "--backend",
            "cuda",
            "--out",
            out.to_str().unwrap(),
            "-q",
            "--",
            HR,
            "hold",
            "256MiB",
            "--for",
            "200ms",
            "--backend",
            "cuda",
        ],
    );
    assert_eq!(o.code, 0, "v1 {v1}: {}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["device"]["uuid"], first);
    assert_eq!(s["device"]["mig"]["parent_uuid"], parent, "v1 {v1}");
    assert_eq!(s["device"]["mig"]["profile"], "1g.18gb", "v1 {v1}");
    assert_eq!(u(&s["device"]["total_bytes"]), total);
    assert_eq!(u(&s["idle"]["after_context"]["device_total_bytes"]), total);
    assert!(
        refused(&s["idle"]["processes_unavailable"]),
        "{}",
        s["idle"]
    );
    // The device view is the instance's own: the job's 256 MiB and its context, nothing else.
    let text = std::fs::read_to_string(root().join("profiles/h200.toml")).unwrap();
    let t: toml::Table = toml::from_str(&text).unwrap();
    let ctx = headroom::units::parse_size(t["memory"]["context_overhead_bytes"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]),
        256 * MIB + ctx,
        "{}",
        s["peaks"]
    );
}

#[test]
fn device_all_runs_one_worker_per_instance_each_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(dir.path(), "small", SMALL);
    let out = dir.path().join("node");
    let o = fake(
        dir.path(),
        &[],
        &[
            "run",
            wl.to_str().unwrap(),
            "--backend",
            "cuda",
            "--device",
            "all",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("no process list ("), "{}", o.stderr);
    let n = json(&std::fs::read_to_string(out.join("node.json")).unwrap());
    let rows = n["gpus"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (i, (r, profile)) in rows.iter().zip(SPLIT.split(',')).enumerate() {
        let uuid = r["uuid"].as_str().unwrap();
        assert_eq!(r["outcome"], "ran", "{r}");
        assert_eq!(u(&r["rank"]), i as u64);
        assert_eq!(r["cuda_visible_devices"], uuid);
        assert_eq!(r["occupancy"]["verdict"], "unknown");
        let s = summary(&out.join(r["folder"].as_str().unwrap()));
        assert_eq!(
            s["device"]["uuid"], uuid,
            "worker {i} opened another device"
        );
        assert_eq!(u(&s["device"]["index"]), 0);
        assert_eq!(u(&s["device"]["total_bytes"]), mig_table("h200", profile).0);
        assert_eq!(u(&r["figures"]["peak_own_bytes"]), 512 * MIB);
    }
    // Instances differ by profile, not by fault: nothing is flagged.
    assert_eq!(n["flags"], serde_json::json!([]), "{}", n["flags"]);
}
