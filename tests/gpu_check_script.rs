//! `scripts/gpu-check` run end to end against a simulated device (its dry-run mode): every
//! step runs, and the calibrated simulator agrees with the device it measured.

use std::path::Path;
use std::process::Command;

#[test]
fn the_gpu_check_script_runs_dry_on_the_simulator() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("check");
    let out = Command::new("bash")
        .arg(root.join("scripts/gpu-check"))
        .arg(&out_dir)
        .env("HEADROOM", env!("CARGO_BIN_EXE_headroom"))
        .env("DEVICE", "--profile h100-80g")
        .current_dir(root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "devices.json",
        "profile.toml",
        "bandwidth.json",
        "crosscheck.csv",
        "crosscheck.txt",
        "gpu-check.log",
        "watch/summary.json",
        "watch/report.md",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
    }
    let runs = |d: &str| std::fs::read_dir(out_dir.join(d)).unwrap().count();
    let shipped = ["workloads", "workloads/patterns", "workloads/oom"]
        .iter()
        .map(|d| {
            std::fs::read_dir(root.join(d))
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "toml")
                })
                .count()
        })
        .sum::<usize>();
    assert_eq!(runs("cuda"), shipped);
    assert_eq!(runs("sim"), shipped);
    assert!(
        stdout.contains("oom-pending-free") && !stdout.contains(" NO"),
        "{stdout}"
    );
    // The pool's reuse order (grow before waiting on another stream) is in the crosscheck.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("pool-reuse") && l.contains("pool_reserved_bytes")),
        "{stdout}"
    );
    // The watch of a scripted job on the simulated device: its 1 GiB, exactly.
    let w: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("watch/summary.json")).unwrap())
            .unwrap();
    assert_eq!(w["peaks"]["run"]["job_used_bytes"]["bytes"], 1u64 << 30);
    assert_eq!(w["exit_code"], 0);
}
