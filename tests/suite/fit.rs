//! Workloads that do not fit the device: a card below a workload's stated minimum total, and a
//! device without a driver capability a workload needs (memory pools, virtual memory
//! management), on the simulator (a profile's `[capabilities]`) and on the fake driver
//! (`HEADROOM_FAKE_DISABLE`). Each is refused before the first step, naming what is missing
//! (exit 2, nothing written), or with `--skip-unfit` recorded as a `skipped` run with the
//! reason in summary.json, report.md and junit.xml (exit 0).

use std::path::{Path, PathBuf};
use std::process::Command;

use headroom::device::profile::SimProfile;
use headroom::workload::WorkloadFile;

use crate::common::*;

const POOLS: &str = "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED";
const VMM: &str = "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn summary(dir: &Path) -> serde_json::Value {
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    schema::check("summary", &s, &dir.display().to_string());
    s
}

/// `headroom run WL ARGS --out OUT -q` from the repository root, on the fake driver when `env`
/// is given (with `--backend cuda`).
fn run(wl: &str, out: &Path, args: &[&str], fake_env: Option<&[(&str, &str)]>) -> Out {
    let mut cmd = match fake_env {
        None => Command::new(env!("CARGO_BIN_EXE_headroom")),
        Some(env) => {
            let mut c = Command::new("bash");
            c.arg(root().join("scripts/fake-gpu"))
                .arg(env!("CARGO_BIN_EXE_headroom"))
                .env_remove("HEADROOM_FAKE_STATE");
            for (k, v) in env {
                c.env(k, v);
            }
            c
        }
    };
    cmd.args(["run", wl, "--out", out.to_str().unwrap(), "-q"])
        .args(args)
        .current_dir(root());
    if fake_env.is_some() {
        cmd.args(["--backend", "cuda"]);
    }
    let o = cmd.output().unwrap();
    let out = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    out
}

/// Checks a skipped run's folder: status, reason, every phase skipped, nothing recorded but
/// the idle reading, and the reports saying so.
fn assert_skipped(dir: &Path, reason: &str) {
    let s = summary(dir);
    assert_eq!(s["status"], "skipped");
    assert_eq!(s["exit_code"], 0);
    assert_eq!(s["status_detail"].as_str().unwrap(), reason);
    assert!(
        s["phases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["status"] == "skipped" && p["actions_run"] == 0),
        "{s}"
    );
    assert_eq!(s["peaks"]["run"], serde_json::json!({}));
    let timeline = csv_rows(&dir.join("timeline.csv"));
    assert_eq!(timeline.len(), 1);
    assert_eq!(timeline[0]["source"], "idle");
    assert!(csv_rows(&dir.join("events.csv")).is_empty());
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(
        junit.contains(r#"skipped="1""#) && junit.contains(r#"failures="0" errors="0""#),
        "{junit}"
    );
    let escaped = reason.replace('"', "&quot;");
    assert!(
        junit.contains(&format!(r#"<skipped message="skipped: {escaped}"/>"#)),
        "{junit}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("| status | skipped (exit 0): "), "{md}");
    // The folder is a complete run folder: its reports can be written again.
    let again = headroom(root(), &["report", dir.to_str().unwrap()]);
    assert_eq!(again.code, 0, "{}", again.stderr);
}

#[test]
fn a_card_below_a_workloads_minimum_refuses_it_or_skips_it_with_both_totals() {
    let tmp = tempfile::tempdir().unwrap();
    let min = WorkloadFile::read(&root().join("workloads/serving.toml"))
        .unwrap()
        .min_total_bytes()
        .expect("serving.toml states its minimum");
    let t4 = SimProfile::resolve("t4-16g").unwrap().memory.total_bytes.0;
    assert!(t4 < min);
    let reason = format!(
        "the workload needs a device of at least 25.00 GiB ({min} bytes) CUDA-visible \
         ([workload] min_total_bytes); Tesla T4 (simulated) has 14.58 GiB ({t4} bytes)"
    );
    let refused = tmp.path().join("refused");
    let o = run(
        "workloads/serving.toml",
        &refused,
        &["--profile", "t4-16g"],
        None,
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "workloads/serving.toml: does not fit this device: {reason}; pass --skip-unfit"
        )),
        "{}",
        o.stderr
    );
    assert!(!refused.exists(), "a refused run writes nothing");

    let skipped = tmp.path().join("skipped");
    let o = run(
        "workloads/serving.toml",
        &skipped,
        &["--profile", "t4-16g", "--skip-unfit"],
        None,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Under -q a skip (exit 0) prints nothing; the reason is in the folder.
    assert_eq!(o.stderr, "");
    assert_skipped(&skipped, &reason);
    let s = summary(&skipped);
    assert_eq!(u(&s["device"]["total_bytes"]), t4);
    assert_eq!(
        u(&s["idle"]["after_context"]["device_free_bytes"]),
        t4 - 300 * MIB,
        "the idle reading after t4-16g's 300 MiB context"
    );

    // On a card at its minimum it runs.
    let a100 = tmp.path().join("a100");
    let o = run(
        "workloads/serving.toml",
        &a100,
        &["--profile", "a100-40g", "--skip-unfit"],
        None,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(summary(&a100)["status"], "completed");

    let bad = workload(
        tmp.path(),
        "zero",
        "min_total_bytes = 0\n[[phase]]\nname = \"a\"\nsteps = [{ op = \"sleep\", for = \"1ms\" }]\n",
    );
    let o = headroom(
        tmp.path(),
        &["run", bad.to_str().unwrap(), "--profile", "tiny-4g"],
    );
    assert_eq!(o.code, 2);
    assert!(
        o.stderr
            .contains("zero.toml: [workload] min_total_bytes: 0 B says nothing"),
        "{}",
        o.stderr
    );
}

/// tiny-4g without the capabilities `disabled` names (`[capabilities]` set false).
fn profile_without(dir: &Path, disabled: &[&str]) -> PathBuf {
    let text = std::fs::read_to_string(root().join("profiles/tiny-4g.toml")).unwrap();
    let table: String = disabled.iter().map(|k| format!("{k} = false\n")).collect();
    let path = dir.join("tiny-without.toml");
    std::fs::write(&path, format!("{text}\n[capabilities]\n{table}")).unwrap();
    path
}

/// The workloads that need a capability, each with the feature and attribute its reason names.
fn needing(dir: &Path) -> Vec<(String, &'static str, &'static str)> {
    let expandable = workload(
        dir,
        "expandable",
        "[allocator]\nkind = \"caching\"\nexpandable_segments = true\n\n[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"64MiB\" }]\n",
    );
    vec![
        (
            "workloads/pool-reuse.toml".into(),
            "the pool allocator",
            POOLS,
        ),
        (
            "workloads/oom/graph-pool.toml".into(),
            "graph memory nodes",
            POOLS,
        ),
        (expandable.display().to_string(), "expandable segments", VMM),
    ]
}

#[test]
fn a_device_without_a_capability_refuses_what_needs_it_and_runs_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let profile = profile_without(
        tmp.path(),
        &[
            "memory_pools_supported",
            "virtual_memory_management_supported",
        ],
    );
    let p = profile.to_str().unwrap();
    for (i, (wl, feature, attribute)) in needing(tmp.path()).into_iter().enumerate() {
        let refused = tmp.path().join(format!("refused-{i}"));
        let o = run(&wl, &refused, &["--profile", p], None);
        assert_eq!(o.code, 2, "{wl}: {}", o.stderr);
        let said = format!("{wl}: does not fit this device: {feature}");
        let lacks = format!("needs {attribute}, which tiny 4 GiB GPU (simulated) reports as 0");
        assert!(
            o.stderr.contains(&said) && o.stderr.contains(&lacks),
            "{wl}: {}",
            o.stderr
        );
        assert!(!refused.exists());
        let skipped = tmp.path().join(format!("skipped-{i}"));
        let o = run(&wl, &skipped, &["--profile", p, "--skip-unfit"], None);
        assert_eq!(o.code, 0, "{wl}: {}", o.stderr);
        let reason = summary(&skipped)["status_detail"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            reason.starts_with(feature) && reason.ends_with(&lacks),
            "{reason}"
        );
        assert_skipped(&skipped, &reason);
    }
    // What needs neither runs as on any tiny-4g, and the device's capabilities are recorded.
    let plain = tmp.path().join("plain");
    let o = run("workloads/quickstart.toml", &plain, &["--profile", p], None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s = summary(&plain);
    assert_eq!(s["status"], "completed");
    assert_eq!(
        s["device"]["capabilities"],
        serde_json::json!({"memory_pools_supported": false, "virtual_memory_management_supported": false})
    );
    // Calibrating such a device measures everything but the pool, and the profile it writes
    // keeps the capabilities: the calibrated simulator skips what the device skipped.
    let calibrated = tmp.path().join("calibrated.toml");
    let o = headroom(
        tmp.path(),
        &[
            "calibrate",
            "--profile",
            p,
            "--out",
            calibrated.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&calibrated).unwrap();
    assert!(
        text.contains("memory_pools_supported = false")
            && text.contains("virtual_memory_management_supported = false")
            && text.contains("NOT MEASURED: the device has no memory pools"),
        "{text}"
    );
    let again = tmp.path().join("again");
    let o = run(
        "workloads/pool-reuse.toml",
        &again,
        &["--profile", calibrated.to_str().unwrap(), "--skip-unfit"],
        None,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(summary(&again)["status"], "skipped");
}
#[test]
fn the_fake_driver_without_pools_or_vmm_gives_the_same_refusals_and_skips() {
    let tmp = tempfile::tempdir().unwrap();
    for (disable, keep) in [("memory_pools", VMM), ("vmm", POOLS)] {
        let env: &[(&str, &str)] = &[("HEADROOM_FAKE_DISABLE", disable)];
        for (i, (wl, feature, attribute)) in needing(tmp.path()).into_iter().enumerate() {
            let out = tmp.path().join(format!("{disable}-{i}"));
            let o = run(&wl, &out, &["--skip-unfit"], Some(env));
            assert_eq!(o.code, 0, "{wl}: {}", o.stderr);
            let s = summary(&out);
            assert_eq!(s["device"]["backend"], "cuda");
            if attribute == keep {
                // The capability the fake still has: the workload runs.
                assert_eq!(s["status"], "completed", "{wl} with {disable} off: {s}");
                continue;
            }
            let reason = s["status_detail"].as_str().unwrap().to_string();
            assert!(
                reason.starts_with(feature)
                    && reason.contains(&format!("needs {attribute}, which "))
                    && reason.ends_with("(fake driver) reports as 0"),
                "{reason}"
            );
            assert_skipped(&out, &reason);
            let refused = tmp.path().join(format!("{disable}-{i}-refused"));
            let o = run(&wl, &refused, &[], Some(env));
            assert_eq!(o.code, 2, "{wl}: {}", o.stderr);
            assert!(o.stderr.contains(attribute), "{}", o.stderr);
            assert!(!refused.exists());
        }
    }
}
