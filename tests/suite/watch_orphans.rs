//! `watch` of a job that double-forks its work, on the fake NVIDIA driver: headroom is the
//! job's subreaper, so the orphans are the job's — counted, watched until they end, sent the
//! signal that ended the job — unless `--keep-orphans` leaves them running.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");
const MIB: u64 = 1 << 20;

/// `headroom watch --out DIR/out -q ARGS -- sh -c SCRIPT` on the fake, started.
fn watch(dir: &Path, args: &[&str], script: &str) -> std::process::Child {
    Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fake-gpu"))
        .args([HR, "watch", "-q", "--out"])
        .arg(dir.join("out"))
        .args(args)
        .args(["--", "sh", "-c", script])
        .current_dir(dir)
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_MARK")
        .env_remove("HEADROOM_WATCHDOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: std::process::Child) -> Out {
    let o = child.wait_with_output().unwrap();
    let out = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    out
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("out/summary.json")).unwrap()).unwrap()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        !st.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn pid_in(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_double_forked_hold_is_counted_in_every_run() {
    // The shell exits at once; the subshell's `hold` (told to outlive headroom, not the
    // subshell) is re-parented to headroom and still holding when the shell is gone.
    const RUNS: usize = 10;
    let script = format!(
        "(HEADROOM_PARENT_PID=$PPID {HR} hold 512MiB --for 1s --backend cuda >/dev/null 2>&1 &); \
         exit 0"
    );
    let running: Vec<_> = (0..RUNS)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            let child = watch(dir.path(), &["--backend", "cuda"], &script);
            (dir, child)
        })
        .collect();
    let mut counted = 0;
    for (dir, child) in running {
        let out = finish(child);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stderr.contains("still run and are watched"),
            "{}",
            out.stderr
        );
        let s = summary(dir.path());
        let job_peak = u(&s["peaks"]["run"]["job_used_bytes"]["bytes"]);
        // The hold's 512 MiB and its context, never less.
        assert!(job_peak > 512 * MIB, "job_used_bytes peaked at {job_peak}");
        counted += 1;
        let rows = csv_rows(&dir.path().join("out/events.csv"));
        assert!(
            rows.iter()
                .any(|r| r["op"] == "orphans" && r["detail"] == "the job's last process ended"),
            "{rows:?}"
        );
    }
    assert_eq!(counted, RUNS);
}

#[test]
fn orphans_of_a_job_killed_by_a_signal_get_it_too_and_none_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("orphan.pid");
    let script = format!(
        "(sleep 60 & echo $! > '{}'); sleep 0.3; kill -TERM $$",
        pidfile.display()
    );
    let started = Instant::now();
    let out = finish(watch(dir.path(), &["--backend", "cuda"], &script));
    let orphan = pid_in(&pidfile);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.code, 128 + libc::SIGTERM, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "its processes {orphan} still ran and are sent it too"
        )),
        "{}",
        out.stderr
    );
    assert!(!alive(orphan), "pid {orphan} was left running");
}

#[test]
fn keep_orphans_ends_the_watch_with_the_job_and_leaves_them_running() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("orphan.pid");
    let script = format!("(sleep 60 & echo $! > '{}'); exit 0", pidfile.display());
    let out = finish(watch(
        dir.path(),
        &["--backend", "cuda", "--keep-orphans"],
        &script,
    ));
    let orphan = pid_in(&pidfile);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let left = alive(orphan);
    // SAFETY: kill only sends a signal to the sleep this test's job started.
    unsafe { libc::kill(orphan as i32, libc::SIGKILL) };
    assert!(left, "pid {orphan} was ended despite --keep-orphans");
    assert!(
        out.stderr.contains(&format!(
            "its processes {orphan} still run and are left running"
        )),
        "{}",
        out.stderr
    );
    let rows = csv_rows(&dir.path().join("out/events.csv"));
    assert!(
        rows.iter()
            // `name` names the job, as on its `start` row; the pids are in `detail`.
            .any(|r| r["op"] == "orphans"
                && r["name"] == rows[0]["name"]
                && r["detail"].contains(&orphan.to_string())),
        "{rows:?}"
    );
}
