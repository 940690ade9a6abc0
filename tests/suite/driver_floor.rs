//! The driver floor and the choice of backend, on the fake NVIDIA driver: a present driver that
//! fails is never replaced by the simulator (`--backend auto` included), a machine whose driver
//! sees no device falls back with a note, `--require-gpu` refuses every way to the simulator,
//! a driver below R470 is refused with the branch it needs, and every shipped workload runs its
//! kernels on the floor branch.

use std::path::Path;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `headroom run workloads/quickstart.toml --out OUT -q EXTRA…` on the fake driver.
fn run_quickstart(dir: &Path, out_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Out {
    let wl = root().join("workloads/quickstart.toml");
    let mut args = vec![
        "run",
        wl.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "-q",
    ];
    args.extend_from_slice(extra);
    on_fake(dir, &args, env)
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_present_driver_that_fails_is_exit_2_under_auto_never_a_simulated_run() {
    let dir = tempfile::tempdir().unwrap();
    for error in [
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "CUDA_ERROR_STUB_LIBRARY",
        "CUDA_ERROR_UNKNOWN",
    ] {
        let out_dir = dir.path().join(error);
        let fault = format!("cuInit@*={error}");
        let env = [("HEADROOM_FAKE_FAULTS", fault.as_str())];
        let run = run_quickstart(dir.path(), &out_dir, &[], &env);
        assert_eq!(run.code, 2, "{error}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("cuInit failed: {error}")),
            "{error}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("does not fall back to the simulator"),
            "{}",
            run.stderr
        );
        assert!(
            !out_dir.join("summary.json").exists(),
            "{error}: a result was written"
        );
        let devices = on_fake(dir.path(), &["devices"], &env);
        assert_eq!(devices.code, 2, "{error}: {}", devices.stdout);
        assert!(devices.stderr.contains(error), "{}", devices.stderr);
        // Asked for on purpose, the simulator still runs.
        let sim = on_fake(dir.path(), &["devices", "--backend", "sim"], &env);
        assert_eq!(sim.code, 0, "{}", sim.stderr);
    }
}

#[test]
fn no_device_falls_back_with_a_note_unless_a_gpu_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("HEADROOM_FAKE_FAULTS", "cuInit@*=CUDA_ERROR_NO_DEVICE")];
    let out_dir = dir.path().join("auto");
    // -q prints nothing on success, the note neither; without it the note is there.
    let quiet = run_quickstart(dir.path(), &dir.path().join("quiet"), &[], &env);
    assert_eq!((quiet.code, quiet.stderr.as_str()), (0, ""));
    let wl = root().join("workloads/quickstart.toml");
    let run = on_fake(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "note: the NVIDIA driver did not initialize: cuInit failed: CUDA_ERROR_NO_DEVICE"
        ) && run
            .stderr
            .contains("using the simulated device (profile h200)"),
        "{}",
        run.stderr
    );
    let s = summary(&out_dir);
    assert_eq!(s["device"]["backend"], "sim");
    assert_eq!(s["device"]["profile"], "h200");
    let junit = std::fs::read_to_string(out_dir.join("junit.xml")).unwrap();
    assert!(
        junit.contains(r#"<property name="backend" value="sim"/>"#),
        "{junit}"
    );

    for extra in [&["--require-gpu"][..], &["--backend", "cuda"][..]] {
        let out_dir = dir.path().join(extra.join(""));
        let refused = run_quickstart(dir.path(), &out_dir, extra, &env);
        assert_eq!(refused.code, 2, "{extra:?}: {}", refused.stderr);
        assert!(
            refused.stderr.contains("CUDA_ERROR_NO_DEVICE"),
            "{}",
            refused.stderr
        );
        assert!(!out_dir.join("summary.json").exists());
    }
    let devices = on_fake(dir.path(), &["devices", "--require-gpu"], &env);
    assert_eq!(devices.code, 2, "{}", devices.stdout);
    assert!(
        devices.stderr.contains("--require-gpu"),
        "{}",
        devices.stderr
    );
    let listed = on_fake(dir.path(), &["devices", "--json"], &env);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let v: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(v["backend"], "sim");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("CUDA_ERROR_NO_DEVICE"),
        "{v}"
    );
}

#[test]
fn require_gpu_refuses_a_simulated_device_and_passes_on_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let quickstart = root().join("workloads/quickstart.toml");
    let sim = headroom(
        dir.path(),
        &[
            "run",
            quickstart.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--require-gpu",
            "-q",
        ],
    );
    assert_eq!(sim.code, 2, "{}", sim.stderr);
    assert!(
        sim.stderr
            .contains("--require-gpu: --profile asks for the simulated device"),
        "{}",
        sim.stderr
    );
    let out_dir = dir.path().join("gpu");
    let gpu = run_quickstart(dir.path(), &out_dir, &["--require-gpu"], &[]);
    assert_eq!(gpu.code, 0, "{}", gpu.stderr);
    assert_eq!(summary(&out_dir)["device"]["backend"], "cuda");
}

fn shipped_workloads() -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for d in ["workloads", "workloads/patterns", "workloads/oom"] {
        for e in std::fs::read_dir(root().join(d)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Runs `workloads` on the fake driver of `branch` (h100-80g), one after another.
/// Returns (workload, exit, stderr, summary) per run.
fn shipped_on_branch(
    dir: &Path,
    branch: &str,
    workloads: &[std::path::PathBuf],
) -> Vec<(String, i32, String, serde_json::Value)> {
    workloads
        .iter()
        .map(|wl| {
            let name = wl.file_stem().unwrap().to_string_lossy().into_owned();
            let out_dir = dir.join(format!("{branch}-{name}"));
            let env = [
                ("HEADROOM_FAKE_DRIVER", branch),
                ("HEADROOM_FAKE_PROFILE", "h100-80g"),
                ("HEADROOM_FAKE_TIME_SCALE", "0"),
            ];
            let args = [
                "run",
                wl.to_str().unwrap(),
                "--backend",
                "cuda",
                "--out",
                out_dir.to_str().unwrap(),
                "-q",
            ];
            let out = on_fake(dir, &args, &env);
            let s = std::fs::read_to_string(out_dir.join("summary.json"))
                .map(|t| serde_json::from_str(&t).unwrap())
                .unwrap_or(serde_json::Value::Null);
            (name, out.code, out.stderr, s)
        })
        .collect()
}

#[test]
fn every_shipped_workload_runs_its_kernels_at_the_floor() {
    // R535, the branch most CI runners have, runs every shipped workload in `gpu_check` (the
    // default card) and `gpu_check_cards` (the A100 runs the two too large for it).
    let dir = tempfile::tempdir().unwrap();
    let all = shipped_workloads();
    let (first, second) = all.split_at(all.len() / 2);
    let runs: Vec<_> = std::thread::scope(|s| {
        let a = s.spawn(|| shipped_on_branch(dir.path(), "470", first));
        let b = s.spawn(|| shipped_on_branch(dir.path(), "470", second));
        let mut runs = a.join().unwrap();
        runs.extend(b.join().unwrap());
        runs
    });
    assert_eq!(runs.len(), shipped_workloads().len());
    let mut modules = 0;
    for (name, code, stderr, s) in &runs {
        assert_eq!(*code, 0, "R470 {name}: {stderr}");
        // Exit 0: every expectation held, a deliberate OOM included.
        let status = s["status"].as_str().unwrap_or("none");
        assert!(
            matches!(status, "completed" | "oom"),
            "R470 {name}: {status}"
        );
        assert_eq!(s["device"]["backend"], "cuda");
        let version = s["device"]["driver_version"].as_str().unwrap();
        assert!(version.starts_with("470.256.02"), "{name}: {version}");
        modules += s["idle"]["kernels"]["modules"].as_u64().unwrap_or(0);
    }
    // The kernels the workloads launch were loaded (JIT-compiled by the branch) each time.
    assert!(
        modules >= 10,
        "R470: {modules} kernel modules loaded in all"
    );
}

#[test]
fn a_driver_below_the_floor_is_refused_with_the_branch_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let quickstart = root().join("workloads/quickstart.toml");
    let env = [("HEADROOM_FAKE_DRIVER", "460")];
    let needs =
        "the NVIDIA driver supports CUDA 11.2, R460; headroom needs R470 (CUDA 11.4) or newer";
    for args in [
        &["devices", "--backend", "cuda"][..],
        &["devices"][..],
        &[
            "run",
            quickstart.to_str().unwrap(),
            "--backend",
            "cuda",
            "-q",
        ][..],
        &["run", quickstart.to_str().unwrap(), "-q"][..],
    ] {
        let out = on_fake(dir.path(), args, &env);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stdout);
        assert!(out.stderr.contains(needs), "{args:?}: {}", out.stderr);
    }
    // At the floor, NVML's older functions (memory info v1, process list v2) still read.
    let env = [("HEADROOM_FAKE_DRIVER", "470")];
    let out = on_fake(
        dir.path(),
        &["devices", "--backend", "cuda", "--json"],
        &env,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let gpu = &v["gpus"][0];
    assert_eq!(u(&gpu["total_bytes"]), 4 * GIB);
    assert_eq!(u(&gpu["free_bytes"]), 4 * GIB, "{gpu}");
    assert_eq!(u(&gpu["nvml"]["total_bytes"]), 4 * GIB + 64 * MIB, "{gpu}");
    assert!(gpu["processes"].is_array(), "{gpu}");
}
