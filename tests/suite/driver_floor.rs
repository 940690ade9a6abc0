//! The driver floor and the choice of backend, on the fake NVIDIA driver: a present driver that
//! fails is never replaced by the simulator (`--backend auto` included), a machine whose driver
//! sees no device falls back with a note, `--require-gpu` refuses every way to the simulator,
//! a driver below R470 is refused with the branch it needs, and every shipped workload runs its
//! kernels on the floor branch and on R535.

use std::path::Path;
use std::process::Command;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `headroom ARGS` (no backend added) on the fake driver with `env` set.
fn on_fake(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/fake-gpu"))
        .arg(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .current_dir(dir)
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_DRIVER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("scripts/fake-gpu runs");
    let o = Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    o
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_present_driver_that_fails_is_exit_2_under_auto_never_a_simulated_run() {
    let dir = tempfile::tempdir().unwrap();
    let quickstart = root().join("workloads/quickstart.toml");
    for error in [
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "CUDA_ERROR_STUB_LIBRARY",
        "CUDA_ERROR_UNKNOWN",
    ] {
        let out_dir = dir.path().join(error);
        let fault = format!("cuInit@*={error}");
        let env = [("HEADROOM_FAKE_FAULTS", fault.as_str())];
        let run = on_fake(
            dir.path(),
            &[
                "run",
                quickstart.to_str().unwrap(),
                "--out",
                out_dir.to_str().unwrap(),
                "-q",
            ],
            &env,
        );
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
    let quickstart = root().join("workloads/quickstart.toml");
    let env = [("HEADROOM_FAKE_FAULTS", "cuInit@*=CUDA_ERROR_NO_DEVICE")];
    let out_dir = dir.path().join("auto");
    let run = on_fake(
        dir.path(),
        &[
            "run",
            quickstart.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            "-q",
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
        let mut args = vec![
            "run",
            quickstart.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            "-q",
        ];
        args.extend_from_slice(extra);
        let refused = on_fake(dir.path(), &args, &env);
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
    let gpu = on_fake(
        dir.path(),
        &[
            "run",
            quickstart.to_str().unwrap(),
            "--require-gpu",
            "--out",
            out_dir.to_str().unwrap(),
            "-q",
        ],
        &[],
    );
    assert_eq!(gpu.code, 0, "{}", gpu.stderr);
    assert_eq!(summary(&out_dir)["device"]["backend"], "cuda");
}
