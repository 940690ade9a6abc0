//! `headroom hold` children: started by a workload, always reaped; and `hold` on its own.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use headroom::tenant::process_alive;

fn wait_gone(pid: u32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !process_alive(pid)
}

#[test]
fn a_workload_tenant_process_is_reaped_when_the_run_ends() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args([
            "run",
            "workloads/oom/other-tenant.toml",
            "--profile",
            "tiny-4g",
            "--out",
            out_dir.to_str().unwrap(),
            "-q",
        ])
        .env("HEADROOM_TENANT_PROCESS", "1")
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = csv_rows(&out_dir.join("events.csv"));
    let tenant = events.iter().find(|e| e["op"] == "tenant").unwrap();
    let detail = &tenant["detail"];
    assert!(detail.starts_with("holding 2147483648 bytes"), "{detail}");
    let pid: u32 = detail
        .split("as pid ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        wait_gone(pid, Duration::from_secs(2)),
        "tenant pid {pid} outlived the run"
    );
}

fn spawn_hold(extra: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["hold", "1GiB", "--for", "60s", "--profile", "tiny-4g"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

#[test]
fn hold_releases_and_exits_on_sigint() {
    let (child, line) = spawn_hold(&[]);
    assert!(line.starts_with("holding 1073741824 bytes"), "{line}");
    let pid = child.id();
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    // Interrupted is exit 130, as for every command; the memory was released first.
    assert_eq!(out.status.code(), Some(130));
    assert!(String::from_utf8_lossy(&out.stderr).contains("released 1.00 GiB (interrupted)"));
}

#[test]
fn hold_exits_when_its_parent_disappears() {
    // A shell starts hold in the background and exits at once: hold is orphaned.
    let exe = env!("CARGO_BIN_EXE_headroom");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("HEADROOM_PARENT_PID=$$ {exe} hold 1GiB --for 60s --profile tiny-4g >/dev/null 2>&1 & echo $!"))

        .output()
        .unwrap();
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(
        wait_gone(pid, Duration::from_secs(5)),
        "orphaned hold pid {pid} kept running"
    );
}

#[test]
fn hold_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = headroom(
        dir.path(),
        &["hold", "12G", "--for", "1s", "--profile", "tiny-4g"],
    );
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("ambiguous"), "{}", out.stderr);
    let out = headroom(
        dir.path(),
        &["hold", "1GiB", "--for", "0s", "--profile", "tiny-4g"],
    );
    assert_eq!(out.code, 2);
}
