//! `watch` on the fake NVIDIA driver with an NVML call that never returns
//! (`HEADROOM_FAKE_FAULTS=API@N=hang:forever`), one test per call a watch makes: before the
//! folder is begun (NVML's open, the idle readings, the process list's measured cost) the watch
//! ends at the watchdog (or, after a SIGTERM, within the signal bound) with a folder made from
//! what it had: `failed` (`interrupted`), the call named, the idle reading once taken; once it
//! is begun (the samplers' readings while the job runs, the release reading after it) the
//! folder ends `failed` (or `interrupted` after a SIGTERM, within the signal bound) with the
//! call named, the readings so far, the job's own exit when it had exited, and the derived
//! reports.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");

/// headroom's bound from a first signal to the exit while a call is stuck, plus what a
/// loaded test machine may add.
/// The 2 s promised: `watchdog::SIGNAL_BOUND_NS` (1.5 s) and the record written.
const SIGNAL_BOUND: Duration = Duration::from_secs(2);
const SCHEDULING_SLACK: Duration = Duration::from_secs(3);

/// A watch of `job` with `fault`, its folder at `DIR/out`.
fn watch(dir: &Path, fault: &str, budget: Option<&str>, extra: &[&str], job: &[&str]) -> Child {
    let out = dir.join("out");
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fake-gpu"))
        .arg(HR)
        .args(["watch", "--backend", "cuda", "-q", "--out"])
        .arg(&out)
        .args(extra)
        .arg("--")
        .args(job)
        .current_dir(dir)
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_DRIVER")
        .env_remove("HEADROOM_WATCHDOG")
        .env("HEADROOM_FAKE_FAULTS", fault)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(b) = budget {
        cmd.env("HEADROOM_WATCHDOG", b);
    }
    cmd.spawn().unwrap()
}

fn finish(child: Child) -> Out {
    let o = child.wait_with_output().unwrap();
    let out = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    out
}

/// The folder a stuck watch left: its status, the call named in the detail and in the last
/// event row, the readings so far, the derived reports.
fn check_folder(dir: &Path, status: &str, exit_code: i64, call: &str) -> serde_json::Value {
    let out = dir.join("out");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["status"], status, "{s}");
    assert_eq!(s["exit_code"], exit_code, "{s}");
    let detail = s["status_detail"].as_str().unwrap();
    assert!(detail.contains(call), "{detail}");
    let rows = csv_rows(&out.join("events.csv"));
    assert_eq!(rows[0]["op"], "start", "{rows:?}");
    let last = rows.last().unwrap();
    assert_eq!((&*last["op"], &*last["name"]), ("call", call), "{rows:?}");
    assert_eq!(
        last["result"],
        if status == "failed" {
            "wedged"
        } else {
            "interrupted"
        }
    );
    // The readings so far: the idle row and the job's start at least, on the watch's clock.
    let timeline = csv_rows(&out.join("timeline.csv"));
    assert!(timeline.len() >= 2, "{timeline:?}");
    assert_eq!(timeline[0]["source"], "idle");
    assert_eq!(u(&s["idle"]["after_context"]["device_free_bytes"]), 4 << 30);
    let t_last: u64 = last["t_ns"].parse().unwrap();
    let t_start: u64 = rows[0]["t_ns"].parse().unwrap();
    assert!(t_last > t_start, "{rows:?}");
    for report in ["report.md", "junit.xml", "trace.json", "timeline.svg"] {
        assert!(out.join(report).is_file(), "{report} not written");
    }
    s
}

/// Each NVML call made before the folder is begun, with the idle reading the folder keeps
/// (taken before the call, or not yet): NVML's open, the process list's measured cost (9
/// lists), the idle readings (memory, then its process list, then the total), and the
/// reading at the job's start, made once the (empty) folder exists.
const BEFORE_THE_FOLDER: &[(&str, &str, bool)] = &[
    ("nvmlInit_v2@1=hang:forever", "nvmlInit_v2", false),
    ("nvmlShutdown@1=hang:forever", "nvmlShutdown", false),
    (
        "nvmlDeviceGetHandleByUUID@1=hang:forever",
        "nvmlDeviceGetHandleByUUID",
        false,
    ),
    (
        "nvmlSystemGetDriverVersion@1=hang:forever",
        "nvmlSystemGetDriverVersion",
        false,
    ),
    (
        "nvmlDeviceGetComputeRunningProcesses_v2@1=hang:forever",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        false,
    ),
    (
        "nvmlDeviceGetMemoryInfo_v2@1=hang:forever",
        "nvmlDeviceGetMemoryInfo_v2",
        false,
    ),
    (
        "nvmlDeviceGetComputeRunningProcesses_v2@10=hang:forever",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        true,
    ),
    (
        "nvmlDeviceGetMemoryInfo_v2@2=hang:forever",
        "nvmlDeviceGetMemoryInfo_v2",
        true,
    ),
    (
        "nvmlDeviceGetMemoryInfo_v2@3=hang:forever",
        "nvmlDeviceGetMemoryInfo_v2",
        true,
    ),
];

/// The folder a watch stuck before its job started left: `status` with the call named, the
/// call's row, no job, and the idle reading when it had been taken.
fn check_early_folder(dir: &Path, status: &str, exit_code: i64, call: &str, idle: bool) {
    let out = dir.join("out");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["status"], status, "{call}: {s}");
    assert_eq!(s["exit_code"], exit_code, "{call}: {s}");
    let detail = s["status_detail"].as_str().unwrap();
    assert!(detail.contains(call), "{call}: {detail}");
    assert!(!s["finished_utc"].is_null(), "{call}: {s}");
    // NVML's open, its handle and its close are first asked by the device's facts (NVML says
    // what the UUID is): before them the device is known by its index alone.
    if !idle && ["nvmlInit_v2", "nvmlDeviceGetHandleByUUID", "nvmlShutdown"].contains(&call) {
        assert!(s["device"]["total_bytes"].is_null(), "{call}: {s}");
    } else {
        assert_eq!(u(&s["device"]["total_bytes"]), 4 << 30, "{call}: {s}");
    }
    let rows = csv_rows(&out.join("events.csv"));
    assert_eq!(rows.len(), 1, "{call}: no job started: {rows:?}");
    assert_eq!(
        (&*rows[0]["op"], &*rows[0]["name"]),
        ("call", call),
        "{rows:?}"
    );
    let result = if status == "failed" {
        "wedged"
    } else {
        "interrupted"
    };
    assert_eq!(rows[0]["result"], result, "{call}: {rows:?}");
    let timeline = csv_rows(&out.join("timeline.csv"));
    if idle {
        assert_eq!(timeline.len(), 1, "{call}: {timeline:?}");
        assert_eq!(timeline[0]["source"], "idle");
        assert_eq!(timeline[0]["device_free_bytes"], (4u64 << 30).to_string());
        assert_eq!(u(&s["idle"]["after_context"]["device_free_bytes"]), 4 << 30);
    } else {
        assert!(timeline.is_empty(), "{call}: {timeline:?}");
        assert!(s["idle"].is_null(), "{call}: {s}");
    }
}

#[test]
fn a_call_stuck_before_the_folder_ends_at_the_watchdog_with_a_failed_folder_naming_it() {
    let running: Vec<_> = BEFORE_THE_FOLDER
        .iter()
        .map(|(fault, call, idle)| {
            let dir = tempfile::tempdir().unwrap();
            let child = watch(dir.path(), fault, Some("1s"), &[], &["sleep", "5"]);
            (dir, child, call, idle, fault)
        })
        .collect();
    for (dir, child, call, idle, fault) in running {
        let out = finish(child);
        assert_eq!(out.code, 2, "{fault}: {}", out.stderr);
        assert!(
            out.stderr
                .contains(&format!("the driver call {call} did not return")),
            "{fault}: {}",
            out.stderr
        );
        check_early_folder(dir.path(), "failed", 2, call, *idle);
    }
}

#[test]
fn a_sigterm_during_a_call_stuck_before_the_folder_ends_within_the_bound() {
    let stuck = [
        ("nvmlInit_v2@1=hang:forever", "nvmlInit_v2", false),
        (
            "nvmlDeviceGetComputeRunningProcesses_v2@1=hang:forever",
            "nvmlDeviceGetComputeRunningProcesses_v2",
            false,
        ),
        (
            "nvmlDeviceGetMemoryInfo_v2@2=hang:forever",
            "nvmlDeviceGetMemoryInfo_v2",
            true,
        ),
    ];
    // No budget: only the signal ends them.
    let running: Vec<_> = stuck
        .iter()
        .map(|(fault, call, idle)| {
            let dir = tempfile::tempdir().unwrap();
            let child = watch(dir.path(), fault, None, &[], &["sleep", "30"]);
            (dir, child, call, idle)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let signalled = Instant::now();
    for (_, child, _, _) in &running {
        // SAFETY: kill only sends a signal to our own child (scripts/fake-gpu execs headroom).
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    }
    for (dir, child, call, idle) in running {
        let out = finish(child);
        let took = signalled.elapsed();
        assert!(took < SIGNAL_BOUND + SCHEDULING_SLACK, "{call}: {took:?}");
        assert_eq!(out.code, 130, "{call}: {}", out.stderr);
        check_early_folder(dir.path(), "interrupted", 130, call, *idle);
    }
}

#[test]
fn a_sampler_stuck_while_the_job_runs_leaves_the_folder_failed_with_the_readings() {
    // The device sampler's memory reading and the process list, well after their first calls
    // (9 measured lists of two calls each, and the idle one, come before the job).
    let stuck = [
        (
            "nvmlDeviceGetMemoryInfo_v2@30=hang:forever",
            "nvmlDeviceGetMemoryInfo_v2",
        ),
        (
            "nvmlDeviceGetComputeRunningProcesses_v2@40=hang:forever",
            "nvmlDeviceGetComputeRunningProcesses_v2",
        ),
    ];
    let running: Vec<_> = stuck
        .iter()
        .map(|(fault, call)| {
            let dir = tempfile::tempdir().unwrap();
            let extra = ["--interval", "10ms", "--process-interval", "10ms"];
            let child = watch(dir.path(), fault, Some("1s"), &extra, &["sleep", "4"]);
            (dir, child, call)
        })
        .collect();
    for (dir, child, call) in running {
        let started = Instant::now();
        let out = finish(child);
        assert_eq!(out.code, 2, "{call}: {}", out.stderr);
        // The job (4 s) was still running when the watchdog fired: no exit of its own.
        assert!(started.elapsed() < Duration::from_secs(4), "{call}");
        let s = check_folder(dir.path(), "failed", 2, call);
        assert!(s["watch"]["job"]["exit"].is_null(), "{call}: {s}");
    }
}

#[test]
fn a_release_reading_stuck_after_the_job_keeps_the_jobs_exit() {
    // Slow samplers: the device is read when the folder is begun, by each sampler's first
    // tick, and once more after the job (`exit 3` a second in), the sixth memory reading in all.
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--interval", "10s", "--process-interval", "10s"];
    let child = watch(
        dir.path(),
        "nvmlDeviceGetMemoryInfo_v2@6=hang:forever",
        Some("1s"),
        &extra,
        &["sh", "-c", "sleep 1; exit 3"],
    );
    let out = finish(child);
    assert_eq!(out.code, 2, "{}", out.stderr);
    let s = check_folder(dir.path(), "failed", 2, "nvmlDeviceGetMemoryInfo_v2");
    assert_eq!(s["watch"]["job"]["exit"]["code"], 3, "{s}");
    let rows = csv_rows(&dir.path().join("out/events.csv"));
    assert!(
        rows.iter()
            .any(|r| r["op"] == "exit" && r["detail"].contains("status 3")),
        "{rows:?}"
    );
}

#[test]
fn a_sigterm_during_a_stuck_sampler_ends_the_watch_within_the_bound() {
    let stuck = [
        (
            "nvmlDeviceGetMemoryInfo_v2@30=hang:forever",
            "nvmlDeviceGetMemoryInfo_v2",
        ),
        (
            "nvmlDeviceGetComputeRunningProcesses_v2@40=hang:forever",
            "nvmlDeviceGetComputeRunningProcesses_v2",
        ),
    ];
    // No budget set: the default (120 s) is far away, only the signal ends them.
    let running: Vec<_> = stuck
        .iter()
        .map(|(fault, call)| {
            let dir = tempfile::tempdir().unwrap();
            let extra = ["--interval", "10ms", "--process-interval", "10ms"];
            let child = watch(dir.path(), fault, None, &extra, &["sleep", "30"]);
            (dir, child, call)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let signalled = Instant::now();
    for (_, child, _) in &running {
        // SAFETY: kill only sends a signal to our own child (scripts/fake-gpu execs headroom).
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    }
    for (dir, child, call) in running {
        let out = finish(child);
        let took = signalled.elapsed();
        assert!(took < SIGNAL_BOUND + SCHEDULING_SLACK, "{call}: {took:?}");
        assert_eq!(out.code, 130, "{call}: {}", out.stderr);
        let s = check_folder(dir.path(), "interrupted", 130, call);
        // The job got the signal and ended by it before the watchdog gave up on the call.
        assert_eq!(s["watch"]["job"]["exit"]["signal"], libc::SIGTERM, "{s}");
    }
}

#[test]
fn nvml_closing_stuck_after_the_watch_leaves_it_failed_with_everything_recorded() {
    // NVML is opened (and closed) once for the device's facts, then once for the watch: its
    // second close comes after the folder is written.
    let dir = tempfile::tempdir().unwrap();
    let child = watch(
        dir.path(),
        "nvmlShutdown@2=hang:forever",
        Some("1s"),
        &[],
        &["sh", "-c", "sleep 0.5; exit 3"],
    );
    let out = finish(child);
    assert_eq!(out.code, 2, "{}", out.stderr);
    let s = check_folder(dir.path(), "failed", 2, "nvmlShutdown");
    assert_eq!(s["watch"]["job"]["exit"]["code"], 3, "{s}");
    let rows = csv_rows(&dir.path().join("out/events.csv"));
    assert!(rows.iter().any(|r| r["op"] == "release"), "{rows:?}");
}
