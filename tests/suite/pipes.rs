//! A reader that goes away ends headroom's output, not its exit code: `headroom run … | head -1`
//! still fails a CI job whose expectation failed.

use std::process::{Command, Stdio};

use crate::common::*;

#[test]
fn a_closed_stdout_keeps_the_exit_code_of_a_failed_expectation() {
    let dir = tempfile::tempdir().unwrap();
    // Two 3 GiB buffers on a 4 GiB card: an OOM nobody expected, exit 1.
    let wl = workload(
        dir.path(),
        "too-big",
        "[[phase]]\nname = \"load\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"3GiB\" },\n  { op = \"allocate\", name = \"b\", size = \"3GiB\" },\n]\n",
    );
    let open = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--allow-oom",
            "--out",
            "open",
        ],
    );
    assert_eq!(open.code, 1, "{}", open.stderr);
    assert!(!open.stdout.is_empty());
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args([
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--allow-oom",
            "--out",
            "closed",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before headroom prints its first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("closed/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["exit_code"], 1);
}
