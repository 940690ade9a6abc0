//! `calibrate` writes a profile that `--profile FILE` loads, and `crosscheck` compares runs on
//! two devices: identical when the profile was calibrated from the same device, flagged when
//! it was not.

use std::path::Path;

use crate::common::*;

fn run_all(root: &Path, profile: &str, results: &Path) {
    for w in [
        "workloads/quickstart.toml",
        "workloads/oom/peak-not-idle.toml",
        "workloads/oom/pending-free.toml",
    ] {
        let out = headroom(
            root,
            &[
                "run",
                w,
                "--profile",
                profile,
                "--results",
                results.to_str().unwrap(),
                "-q",
            ],
        );
        assert_eq!(out.code, 0, "{w}: {}", out.stderr);
    }
}

#[test]
fn a_calibrated_simulator_agrees_with_the_device_it_measured() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("tiny-calibrated.toml");
    let out = headroom(
        root,
        &[
            "calibrate",
            "--profile",
            "tiny-4g",
            "--out",
            profile.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("total 4.00 GiB · context 256.00 MiB"),
        "{}",
        out.stdout
    );
    // Never overwritten.
    let again = headroom(
        root,
        &[
            "calibrate",
            "--profile",
            "tiny-4g",
            "--out",
            profile.to_str().unwrap(),
        ],
    );
    assert_eq!(again.code, 2);

    let (real, sim) = (dir.path().join("real"), dir.path().join("sim"));
    run_all(root, "tiny-4g", &real);
    run_all(root, profile.to_str().unwrap(), &sim);
    let csv = dir.path().join("cross.csv");
    let out = headroom(
        root,
        &[
            "crosscheck",
            real.to_str().unwrap(),
            sim.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let rows = csv_rows(&csv);
    assert!(rows.len() >= 6);
    assert!(
        rows.iter().all(|r| r["difference_bytes"] == "0"),
        "{rows:?}"
    );
    assert!(out.stdout.contains("train-step/s1.33"), "{}", out.stdout);
}

#[test]
fn a_simulator_with_the_wrong_context_overhead_is_flagged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root.join("profiles/tiny-4g.toml")).unwrap();
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(
        &wrong,
        text.replace(
            "context_overhead_bytes = \"256MiB\"",
            "context_overhead_bytes = \"512MiB\"",
        ),
    )
    .unwrap();
    let (real, sim) = (dir.path().join("real"), dir.path().join("sim"));
    run_all(root, "tiny-4g", &real);
    run_all(root, wrong.to_str().unwrap(), &sim);
    let out = headroom(
        root,
        &[
            "crosscheck",
            real.to_str().unwrap(),
            sim.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(out.code, 1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let row = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workload"] == "quickstart" && r["view"] == "device_used_bytes")
        .unwrap();
    assert_eq!(row["difference_bytes"], 256 * MIB);
    assert_eq!(row["within_tolerance"], false);
    // With 256 MiB less free, the activation chain fails one layer earlier on the simulator.
    let o = v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["workload"] == "oom-peak-not-idle")
        .unwrap();
    assert_eq!(o["real_oom"], "train-step/s1.33");
    assert_eq!(o["agree"], false);
}
