//! `headroom watch` on the fake NVIDIA driver (`scripts/fake-gpu`): a `headroom hold` child of
//! known size is the job, so every peak is exact (its bytes plus its context, tiny-4g's
//! 256 MiB); phases marked from Python, out-of-memory messages in the job's stderr, signals,
//! exit statuses, --pid and --cuda-info.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/fake-gpu CMD…` with a fresh shared state.
fn fake_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/fake-gpu"))
        .args(args)
        .current_dir(root())
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_MARK");
    cmd
}

fn out_of(o: std::process::Output) -> Out {
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// `headroom watch --out <dir>/out -q WATCH_ARGS -- JOB…` on the fake.
fn watch(dir: &Path, watch_args: &[&str], job: &[&str]) -> (Out, serde_json::Value, PathBuf) {
    let out_dir = dir.join("out");
    let mut args = vec![HR, "watch", "--out", out_dir.to_str().unwrap(), "-q"];
    args.extend_from_slice(watch_args);
    args.push("--");
    args.extend_from_slice(job);
    let o = out_of(fake_cmd(&args).output().unwrap());
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    let s = if out_dir.join("summary.json").is_file() {
        summary(&out_dir)
    } else {
        serde_json::Value::Null
    };
    (o, s, out_dir)
}

fn peak(s: &serde_json::Value, view: &str) -> u64 {
    u(&s["peaks"]["run"][view]["bytes"])
}

fn polled(s: &serde_json::Value, poller: &str, view: &str) -> u64 {
    u(&s["peaks"]["polled"][poller]["peaks"][view])
}

/// The watch must end within a second for the 1 Hz poller to have had a single tick.
fn under_a_second(s: &serde_json::Value) {
    let span = u(&s["end_ns"]) - u(&s["start_ns"]);
    assert!(
        span < 1_000_000_000,
        "the job took {span} ns: too slow a machine for this test"
    );
}

#[test]
fn a_hold_child_peaks_at_its_bytes_and_context_and_a_1hz_poll_misses_it() {
    let dir = tempfile::tempdir().unwrap();
    let (o, s, out) = watch(
        dir.path(),
        &[],
        &[HR, "hold", "1GiB", "--for", "200ms", "--backend", "cuda"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let job = GIB + CTX;
    assert_eq!(peak(&s, "device_used_bytes"), job);
    assert_eq!(peak(&s, "job_used_bytes"), job);
    assert_eq!(u(&s["idle"]["after_context"]["device_used_bytes"]), 0);
    under_a_second(&s);
    // The 1 Hz poller ticks once, at the start, before the job took anything.
    assert_eq!(u(&s["peaks"]["polled"]["1hz"]["ticks"]), 1);
    assert_eq!(polled(&s, "1hz", "device_used_bytes"), 0);
    assert_eq!(polled(&s, "1hz", "job_used_bytes"), 0);
    assert_eq!(polled(&s, "10hz", "device_used_bytes"), job);
    assert_eq!(polled(&s, "10hz", "job_used_bytes"), job);
    let w = &s["watch"];
    assert_eq!(w["job"]["exit"]["status"], 0);
    assert_eq!(w["job"]["attached"], false);
    assert_eq!(w["sampling"]["device_view"], "nvml");
    assert_eq!(u(&w["job_processes"][0]["peak_used_bytes"]), job);
    assert!(u(&w["sampling"]["process_list"]["interval_ns"]) >= 10_000_000);
    assert!(u(&w["sampling"]["process_list"]["stats"]["readings"]) > 0);
    assert!(u(&s["sampler"]["readings"]) > u(&w["sampling"]["process_list"]["stats"]["readings"]));
    assert!(w["sampling"]["process_list"]["resolution_note"].is_string());
    assert!(u(&s["latency"]["nvml_memory_info"]["count"]) > 0);
    assert_eq!(s["release"]["within_one_page"], true);
    assert_eq!(s["status"], "completed");
    assert_eq!(s["exit_code"], 0);
    // The same folder as a run's.
    for f in [
        "timeline.csv",
        "events.csv",
        "report.md",
        "junit.xml",
        "trace.json",
        "timeline.svg",
        "timeline.png",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let rows = csv_rows(&out.join("timeline.csv"));
    let job_rows = rows
        .iter()
        .filter(|r| !r["job_used_bytes"].is_empty())
        .count();
    assert!(job_rows > 0 && job_rows < rows.len());
    assert!(rows.iter().any(|r| r["job_used_bytes"] == job.to_string()));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("| `job_used_bytes` |"), "{report}");
    assert!(report.contains("1.25 GiB"), "{report}");
    assert!(report.contains("**Resolution:**"), "{report}");
    let events = csv_rows(&out.join("events.csv"));
    let ops: Vec<&str> = events.iter().map(|e| e["op"].as_str()).collect();
    assert_eq!(ops, ["start", "exit", "release"]);
    // `headroom report` writes the same report again from the folder.
    std::fs::remove_file(out.join("report.md")).unwrap();
    let r = headroom(dir.path(), &["report", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(out.join("report.md")).unwrap(),
        report
    );
}

#[test]
fn phases_marked_from_python_get_their_own_peaks() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.py");
    std::fs::write(
        &script,
        r#"import subprocess, sys
sys.path.insert(0, sys.argv[1])
from headroom_mark import mark
hold = lambda size: subprocess.run([sys.argv[2], "hold", size, "--for", "150ms", "--backend", "cuda"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
mark("load")
hold("256MiB")
mark("step 1")
hold("512MiB")
mark("")
"#,
    )
    .unwrap();
    let docs = root().join("docs");
    let (o, s, out) = watch(
        dir.path(),
        &[],
        &[
            "python3",
            script.to_str().unwrap(),
            docs.to_str().unwrap(),
            HR,
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let phases = s["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["load", "step 1"]);
    for (p, bytes) in phases.iter().zip([256 * MIB + CTX, 512 * MIB + CTX]) {
        assert_eq!(u(&p["peaks"]["job_used_bytes"]["bytes"]), bytes, "{p}");
        assert_eq!(u(&p["peaks"]["device_used_bytes"]["bytes"]), bytes, "{p}");
        assert_eq!(p["status"], "completed");
    }
    // Each hold is a grandchild: two processes of the job.
    assert_eq!(s["watch"]["job_processes"].as_array().unwrap().len(), 2);
    assert_eq!(u(&s["watch"]["marks"]["lines"]), 3);
    // The FIFO is gone.
    let fifo = s["watch"]["marks"]["path"].as_str().unwrap();
    assert!(!Path::new(fifo).exists());
    let rows = csv_rows(&out.join("timeline.csv"));
    assert!(rows.iter().any(|r| r["phase"] == "step 1"));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("| step 1 | completed |"), "{report}");
}

#[test]
fn stderr_passes_through_unchanged_and_each_message_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = root().join("tests/fixtures/oom-messages");
    let mut expected = Vec::new();
    for f in ["pytorch-two-processes.log", "pytorch-legacy.log"] {
        expected.extend(std::fs::read(fixtures.join(f)).unwrap());
    }
    // Not UTF-8, and no newline at the end.
    expected.extend_from_slice(b"\xff\xfe partial \x1b[0m");
    let blob = dir.path().join("stderr.bin");
    std::fs::write(&blob, &expected).unwrap();
    let cat = format!("cat '{}' >&2; exit 3", blob.display());
    let out_dir = dir.path().join("out");
    let o = fake_cmd(&[
        HR,
        "watch",
        "-q",
        "--out",
        out_dir.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &cat,
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        o.stderr, expected,
        "stderr was not passed through byte for byte"
    );
    let s = summary(&out_dir);
    assert_eq!(s["status"], "oom");
    assert_eq!(s["exit_code"], 3);
    let ooms = s["watch"]["ooms"].as_array().unwrap();
    let formats: Vec<&str> = ooms.iter().map(|m| m["format"].as_str().unwrap()).collect();
    assert_eq!(formats, ["pytorch-caching", "pytorch-caching-legacy"]);
    for (m, f) in ooms.iter().zip(["pytorch-two-processes", "pytorch-legacy"]) {
        let exp: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures.join(format!("{f}.expected.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(m["cause"], exp["messages"][0]["cause"], "{f}");
        assert_eq!(
            m["explanation"]["message"]["requested"]["low"],
            exp["messages"][0]["figures"]["requested"][0],
            "{f}"
        );
        assert!(m["at"]["device_free_bytes"].is_u64(), "{m}");
        assert!(m["t_ns"].as_u64().unwrap() >= u(&s["start_ns"]));
        assert!(!m["next_checks"].as_array().unwrap().is_empty());
        // The fixtures are from bigger GPUs than tiny-4g: said, and nothing else compared.
        assert!(
            m["measured"][0].as_str().unwrap().contains("another GPU"),
            "{m}"
        );
    }
    assert_eq!(ooms[0]["stderr_line"], 1);
    assert_eq!(ooms[1]["stderr_line"], 2);
    let events = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(events.iter().filter(|e| e["op"] == "oom").count(), 2);
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        report.contains("### OOM 2 · stderr line 2 · pytorch-caching-legacy"),
        "{report}"
    );
    let junit = std::fs::read_to_string(out_dir.join("junit.xml")).unwrap();
    assert!(junit.contains("failures=\"2\""), "{junit}");
}

#[test]
fn sigint_to_headroom_reaches_the_job_and_headroom_exits_with_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let job = r#"trap 'echo got INT >&2; exit 7' INT; echo ready >&2; sleep 20 & wait"#;
    let mut child = fake_cmd(&[
        HR,
        "watch",
        "-q",
        "--out",
        out_dir.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        job,
    ])
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // scripts/fake-gpu execs headroom: the pid is headroom's once the job says it is ready.
    let mut err = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while !String::from_utf8_lossy(&seen).contains("ready") {
        let mut b = [0u8; 256];
        let n = err.read(&mut b).unwrap();
        assert!(
            n > 0 && t0.elapsed() < Duration::from_secs(120),
            "{}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&b[..n]);
    }
    // SAFETY: kill only sends SIGINT to the watch started above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(7), "{rest}");
    assert!(rest.contains("got INT"), "{rest}");
    let s = summary(&out_dir);
    let sig = &s["watch"]["job"]["signals"][0];
    assert_eq!(sig["signal"], "SIGINT");
    assert_eq!(sig["origin"], "process");
    assert_eq!(sig["forwarded"], true);
    assert_eq!(s["watch"]["job"]["ended_by"], "signal");
    assert_eq!(s["status"], "interrupted");
    assert_eq!(s["exit_code"], 7);
}

#[test]
fn a_job_killed_by_a_signal_makes_headroom_exit_128_plus_it() {
    let dir = tempfile::tempdir().unwrap();
    let (o, s, _) = watch(dir.path(), &[], &["sh", "-c", "kill -9 $$"]);
    assert_eq!(o.code, 137, "{}", o.stderr);
    assert_eq!(s["watch"]["job"]["exit"]["signal"], 9);
    assert_eq!(s["watch"]["job"]["exit"]["status"], 137);
    assert_eq!(s["status"], "failed");
    assert!(s["status_detail"].as_str().unwrap().contains("SIGKILL"));
}

#[test]
fn duration_ends_a_launched_job_with_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (o, s, _) = watch(dir.path(), &["--duration", "300ms"], &["sleep", "30"]);
    assert_eq!(o.code, 128 + 15, "{}", o.stderr);
    assert_eq!(s["watch"]["job"]["ended_by"], "duration");
    assert_eq!(s["watch"]["job"]["signals"][0]["origin"], "duration");
    assert_eq!(s["watch"]["job"]["signals"][0]["signal"], "SIGTERM");
}

#[test]
fn attach_to_a_running_process_and_leave_it_running() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let script = format!(
        r#"{HR} hold 512MiB --for 20s --backend cuda > '{d}/hold.out' 2>/dev/null &
pid=$!
until grep -q holding '{d}/hold.out'; do sleep 0.05; done
{HR} watch --pid $pid --duration 400ms --out '{d}/out' -q
rc=$?
kill -0 $pid && echo still-running
kill $pid
exit $rc"#
    );
    let o = out_of(fake_cmd(&["bash", "-c", &script]).output().unwrap());
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("still-running"), "{}", o.stdout);
    let s = summary(&dir.path().join("out"));
    let job = 512 * MIB + CTX;
    assert_eq!(peak(&s, "job_used_bytes"), job);
    assert_eq!(peak(&s, "device_used_bytes"), job);
    assert_eq!(u(&s["idle"]["after_context"]["device_used_bytes"]), job);
    let w = &s["watch"];
    assert_eq!(w["job"]["attached"], true);
    assert_eq!(u(&w["job"]["job_used_at_start_bytes"]), job);
    assert_eq!(w["job"]["ended_by"], "duration");
    assert!(w["job"]["exit"].is_null());
    // Still running: nothing to give back yet, and no expectation on a status it cannot see.
    assert!(s["release"].is_null());
    assert_eq!(s["expectations"].as_array().unwrap().len(), 0);
    assert_eq!(s["exit_code"], 0);
}

#[test]
fn a_driver_without_a_process_list_still_gives_the_device_view() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let o = out_of(
        fake_cmd(&[
            HR,
            "watch",
            "-q",
            "--out",
            out_dir.to_str().unwrap(),
            "--",
            HR,
            "hold",
            "256MiB",
            "--for",
            "200ms",
            "--backend",
            "cuda",
        ])
        .env(
            "HEADROOM_FAKE_FAULTS",
            "nvmlDeviceGetComputeRunningProcesses_v2@*=NVML_ERROR_NOT_SUPPORTED",
        )
        .output()
        .unwrap(),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("job_used_bytes will not be recorded"),
        "{}",
        o.stderr
    );
    let s = summary(&out_dir);
    assert_eq!(peak(&s, "device_used_bytes"), 256 * MIB + CTX);
    assert!(s["peaks"]["run"]["job_used_bytes"].is_null());
    let pl = &s["watch"]["sampling"]["process_list"];
    assert!(
        pl["interval_reason"]
            .as_str()
            .unwrap()
            .starts_with("not read"),
        "{pl}"
    );
    assert!(pl["resolution_note"].is_null());
}

#[test]
fn cuda_info_reports_what_headroom_s_own_context_costs() {
    let dir = tempfile::tempdir().unwrap();
    let (o, s, _) = watch(
        dir.path(),
        &["--cuda-info"],
        &[HR, "hold", "256MiB", "--for", "200ms", "--backend", "cuda"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let w = &s["watch"];
    assert_eq!(w["sampling"]["device_view"], "cuda");
    assert_eq!(u(&w["cuda_context"]["cost_bytes"]), CTX);
    assert_eq!(u(&s["idle"]["context_overhead_bytes"]), CTX);
    assert_eq!(u(&s["idle"]["after_context"]["device_used_bytes"]), CTX);
    // headroom's own context is the device's, never the job's.
    assert_eq!(peak(&s, "job_used_bytes"), 256 * MIB + CTX);
    assert_eq!(peak(&s, "device_used_bytes"), 256 * MIB + 2 * CTX);
    assert!(u(&s["latency"]["mem_get_info"]["count"]) > 0);
}

#[test]
fn an_orphan_the_job_double_forked_is_counted_as_the_job() {
    // The subshell starts the hold and exits at once: the hold is re-parented to headroom (a
    // child subreaper while it watches), never to the job; it is told to outlive its first
    // parent (the job's own parent, headroom, is the one it watches).
    let dir = tempfile::tempdir().unwrap();
    let job = format!(
        "(HEADROOM_PARENT_PID=$PPID {HR} hold 512MiB --for 3s --backend cuda > '{}/hold.out' 2>&1 &); \
         until grep -q holding '{}/hold.out'; do sleep 0.05; done; sleep 0.5",
        dir.path().display(),
        dir.path().display()
    );
    let (o, s, _) = watch(dir.path(), &[], &["bash", "-c", &job]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(peak(&s, "job_used_bytes"), 512 * MIB + CTX);
    assert_eq!(peak(&s, "device_used_bytes"), 512 * MIB + CTX);
}
