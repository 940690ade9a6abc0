//! `scripts/gpu-check` for real on the fake NVIDIA driver (`tests/fake-gpu`, through
//! `scripts/fake-gpu`), and its crosscheck against the simulator with the same profile.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The whole GPU check, not a dry run: calibrate, bandwidth, the sampler, every shipped
/// workload on the cuda backend and on the calibrated simulator, a plan, and the crosscheck;
/// then every workload on the simulator with the same built-in profile, which must agree too.
#[test]
fn the_gpu_check_runs_on_the_fake_driver_and_agrees_with_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("check");
    let env = [
        ("HEADROOM", env!("CARGO_BIN_EXE_headroom")),
        ("HEADROOM_FAKE_PROFILE", "h100-80g"),
        ("BANDWIDTH_SIZE", "256MiB"),
    ];
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/fake-gpu"))
        .arg("bash")
        .arg(root().join("scripts/gpu-check"))
        .arg(&out_dir)
        .current_dir(root())
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("DEVICE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(out_dir.join("gpu-check.log")).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{log}");
    assert!(!log.contains("panicked"), "{log}");
    let runs: Vec<PathBuf> = std::fs::read_dir(out_dir.join("cuda"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for run in &runs {
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(s["device"]["backend"], "cuda", "{}", run.display());
    }
    // The same workloads on the built-in profile the fake ran.
    let sim = dir.path().join("sim-h100");
    for d in ["workloads", "workloads/patterns", "workloads/oom"] {
        for e in std::fs::read_dir(root().join(d)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let o = headroom(
                    root(),
                    &[
                        "run",
                        p.to_str().unwrap(),
                        "--profile",
                        "h100-80g",
                        "--results",
                        sim.to_str().unwrap(),
                        "-q",
                    ],
                );
                assert!(o.code <= 1, "{}: {}", p.display(), o.stderr);
            }
        }
    }
    let cross = headroom(
        root(),
        &[
            "crosscheck",
            out_dir.join("cuda").to_str().unwrap(),
            sim.to_str().unwrap(),
        ],
    );
    assert_eq!(cross.code, 0, "{}\n{}", cross.stdout, cross.stderr);
    // The fake driver grows its pool before making another stream wait, as the simulator does.
    assert!(
        cross.stdout.lines().any(|l| l.starts_with("pool-reuse")
            && l.contains("pool_reserved_bytes")
            && l.trim_end().ends_with("yes")),
        "{}",
        cross.stdout
    );
    assert_eq!(runs.len(), std::fs::read_dir(&sim).unwrap().count());
    // The watch of a small CUDA job: `headroom hold 512MiB` and its context (h100-80g's
    // 512 MiB), seen through NVML by a headroom that took no device memory itself.
    let w: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("watch/summary.json")).unwrap())
            .unwrap();
    assert_eq!(w["exit_code"], 0, "{w}");
    assert_eq!(w["watch"]["sampling"]["device_view"], "nvml");
    assert_eq!(u(&w["peaks"]["run"]["job_used_bytes"]["bytes"]), 1024 * MIB);
    assert_eq!(
        u(&w["peaks"]["run"]["device_used_bytes"]["bytes"]),
        1024 * MIB
    );
}
