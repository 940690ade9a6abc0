//! The watchdog over the whole process life, on the fake NVIDIA driver with a call that never
//! returns (`HEADROOM_FAKE_FAULTS=API@N=hang:forever`): before the first step (`cuInit`, the
//! primary context, the module load, the idle `cuMemGetInfo`, NVML's process list), in `hold`'s
//! allocation and in `watch`'s process list. Each ends at the watchdog with exit 2 and the
//! call named; a first SIGTERM ends each within the signal bound (exit 130).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");

/// headroom's stated bound from a first signal to the exit, while a call is stuck
/// (`watchdog::SIGNAL_BOUND_NS`), plus what a loaded test machine may add.
/// The 2 s promised: `watchdog::SIGNAL_BOUND_NS` (1.5 s) and the record written.
const SIGNAL_BOUND: Duration = Duration::from_secs(2);
const SCHEDULING_SLACK: Duration = Duration::from_secs(3);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fake_cmd(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/fake-gpu"))
        .arg(HR)
        .args(args)
        .current_dir(dir)
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_DRIVER")
        .env_remove("HEADROOM_WATCHDOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
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

/// A workload that loads a kernel (so a module load happens before the first step) or not.
fn workload_in(dir: &Path, kernels: bool) -> PathBuf {
    let touch = if kernels {
        "\n  { op = \"touch\", name = \"a\" },"
    } else {
        ""
    };
    workload(
        dir,
        "stuck",
        &format!(
            "[[phase]]\nname = \"p\"\nsteps = [\n  {{ op = \"allocate\", name = \"a\", size = \
             \"64MiB\" }},{touch}\n  {{ op = \"free\", name = \"a\" }},\n]\n"
        ),
    )
}

/// The command for one stuck call: `run` of a workload, `hold`, or `watch` of a sleep.
fn command_for(dir: &Path, which: &str) -> Vec<String> {
    let out = dir.join("out").display().to_string();
    match which {
        "hold" => ["hold", "64MiB", "--for", "30s", "--backend", "cuda"]
            .map(String::from)
            .to_vec(),
        "watch" => [
            "watch",
            "--backend",
            "cuda",
            "-q",
            "--out",
            &out,
            "--",
            "sleep",
            "30",
        ]
        .map(String::from)
        .to_vec(),
        kernels => {
            let wl = workload_in(dir, kernels == "run-kernels");
            vec![
                "run".into(),
                wl.display().to_string(),
                "--backend".into(),
                "cuda".into(),
                "-q".into(),
                "--out".into(),
                out,
            ]
        }
    }
}

/// Each call that used to hang headroom for ever, with the command it hangs and the name
/// headroom gives it. The idle reading is the second `cuMemGetInfo` (the first reads the
/// total at open), in a workload without kernels.
const STUCK: &[(&str, &str, &str)] = &[
    ("cuInit@1=hang:forever", "run", "cuInit"),
    (
        "cuDevicePrimaryCtxRetain@1=hang:forever",
        "run",
        "cuDevicePrimaryCtxRetain",
    ),
    (
        "cuModuleLoadDataEx@1=hang:forever",
        "run-kernels",
        "cuModuleLoadDataEx",
    ),
    ("cuMemGetInfo_v2@2=hang:forever", "run", "cuMemGetInfo"),
    (
        "nvmlDeviceGetComputeRunningProcesses_v2@1=hang:forever",
        "run",
        "nvmlDeviceGetComputeRunningProcesses",
    ),
    ("cuMemAlloc_v2@1=hang:forever", "hold", "cuMemAlloc"),
    (
        "nvmlDeviceGetComputeRunningProcesses_v2@1=hang:forever",
        "watch",
        "nvmlDeviceGetComputeRunningProcesses",
    ),
];

#[test]
fn a_call_that_never_returns_ends_at_the_watchdog_naming_it() {
    // All at once: each waits for its own watchdog.
    let started = Instant::now();
    let running: Vec<_> = STUCK
        .iter()
        .map(|(fault, which, call)| {
            let dir = tempfile::tempdir().unwrap();
            let args = command_for(dir.path(), which);
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            if which.starts_with("run") {
                args.extend(["--watchdog", "1s"]);
            }
            let env = [
                ("HEADROOM_FAKE_FAULTS", *fault),
                ("HEADROOM_WATCHDOG", "1s"),
            ];
            let child = fake_cmd(dir.path(), &args, &env).spawn().unwrap();
            (dir, child, fault, which, call)
        })
        .collect();
    for (_dir, child, fault, which, call) in running {
        let out = finish(child);
        assert_eq!(out.code, 2, "{which} with {fault}: {}", out.stderr);
        assert!(
            out.stderr.contains("wedged")
                && out.stderr.contains(call)
                && out.stderr.contains("within 1.0 s"),
            "{which} with {fault}: {}",
            out.stderr
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_first_sigterm_ends_a_stuck_call_within_the_bound() {
    // The watchdog's own budget (120 s by default) is far away: only the signal ends them.
    let running: Vec<_> = STUCK
        .iter()
        .map(|(fault, which, call)| {
            let dir = tempfile::tempdir().unwrap();
            let args = command_for(dir.path(), which);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env = [("HEADROOM_FAKE_FAULTS", *fault)];
            let child = fake_cmd(dir.path(), &args, &env).spawn().unwrap();
            (dir, child, fault, which, call)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    let signalled = Instant::now();
    for (_, child, ..) in &running {
        // SAFETY: kill only sends a signal to our own child (scripts/fake-gpu execs headroom).
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    }
    for (_dir, child, fault, which, call) in running {
        let out = finish(child);
        let took = signalled.elapsed();
        assert!(
            took < SIGNAL_BOUND + SCHEDULING_SLACK,
            "{which} with {fault}: {took:?}; {}",
            out.stderr
        );
        assert_eq!(out.code, 130, "{which} with {fault}: {}", out.stderr);
        assert!(
            out.stderr.contains(call) && out.stderr.contains("after the signal"),
            "{which} with {fault}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_run_stuck_inside_a_step_keeps_its_phases_as_events_csv_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "in-step",
        r#"[[phase]]
name = "first"
steps = [{ op = "allocate", name = "a", size = "64MiB", via = "driver" }]

[[phase]]
name = "stuck"
steps = [
  { op = "allocate", name = "b", size = "64MiB", via = "driver" },
  { op = "allocate", name = "c", size = "64MiB", via = "driver" },
  { op = "synchronize", stream = "main" },
  { op = "free", name = "a" },
]

[[phase]]
name = "later"
steps = [{ op = "free", name = "b" }]
"#,
    );
    let out_dir = dir.path().join("out");
    let args = [
        "run",
        wl.to_str().unwrap(),
        "--backend",
        "cuda",
        "-q",
        "--watchdog",
        "1s",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let env = [("HEADROOM_FAKE_FAULTS", "cuStreamSynchronize@1=hang:forever")];
    let out = finish(fake_cmd(dir.path(), &args, &env).spawn().unwrap());
    assert_eq!(out.code, 2, "{}", out.stderr);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["status"], "failed");
    let detail = s["status_detail"].as_str().unwrap();
    assert!(
        detail.contains("step s3 (synchronize) in cuStreamSynchronize"),
        "{detail}"
    );
    let phases: Vec<(&str, u64)> = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["status"].as_str().unwrap(), u(&p["actions_run"])))
        .collect();
    assert_eq!(
        phases,
        vec![("completed", 1), ("stopped", 2), ("skipped", 0)]
    );
    let rows = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(rows.last().unwrap()["result"], "wedged");
    // The stopped phase's times are its first and last rows' (the stuck step's).
    let stuck = &s["phases"][1];
    let t = |r: &std::collections::HashMap<String, String>| r["t_ns"].parse::<u64>().unwrap();
    let first = rows.iter().find(|r| r["phase"] == "stuck").unwrap();
    assert_eq!(u(&stuck["start_ns"]), t(first), "{stuck}");
    assert_eq!(u(&stuck["end_ns"]), t(rows.last().unwrap()), "{stuck}");
}
