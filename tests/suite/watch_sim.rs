//! `headroom watch` without a driver: a usage script replayed on the simulated device gives
//! exact peaks and polled replays, phases marked through the FIFO, a failing job's status;
//! the Python mark helper on its own; and every refusal, with exit 2.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

const SCRIPT: &str = r#"usage = [
  { at = "0ms", job_used = "0B" },
  { at = "50ms", job_used = "1280MiB" },
  { at = "250ms", job_used = "512MiB" },
]
"#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn script(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("usage.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// `headroom watch --profile tiny-4g --sim-script S --out <dir>/out -q -- JOB…`.
fn sim_watch(dir: &Path, usage: &str, job: &[&str]) -> (Out, serde_json::Value, PathBuf) {
    let s = script(dir, usage);
    let out = dir.join("out");
    let mut args = vec![
        "watch",
        "--profile",
        "tiny-4g",
        "--sim-script",
        s.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
        "--",
    ];
    args.extend_from_slice(job);
    let o = headroom(dir, &args);
    let summary = std::fs::read_to_string(out.join("summary.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    if !summary.is_null() {
        crate::common::schema::check("summary", &summary, "a watch's summary.json");
    }
    (o, summary, out)
}

#[test]
fn a_usage_script_replays_to_exact_peaks_and_polls() {
    let dir = tempfile::tempdir().unwrap();
    let (o, s, out) = sim_watch(dir.path(), SCRIPT, &["sleep", "0.5"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let spike = 1280 * MIB;
    for v in ["device_used_bytes", "job_used_bytes"] {
        assert_eq!(u(&s["peaks"]["run"][v]["bytes"]), spike, "{v}");
        assert_eq!(u(&s["peaks"]["polled"]["10hz"]["peaks"][v]), spike, "{v}");
    }
    let span = u(&s["end_ns"]) - u(&s["start_ns"]);
    assert!(span < 1_000_000_000, "the job took {span} ns");
    assert_eq!(
        u(&s["peaks"]["polled"]["1hz"]["peaks"]["device_used_bytes"]),
        0
    );
    assert_eq!(
        u(&s["peaks"]["polled"]["1hz"]["peaks"]["job_used_bytes"]),
        0
    );
    assert_eq!(s["device"]["backend"], "sim");
    assert_eq!(s["watch"]["sampling"]["modeled"], true);
    assert_eq!(s["sampler"]["modeled"], true);
    assert_eq!(s["release"]["within_one_page"], true);
    let last = csv_rows(&out.join("timeline.csv")).pop().unwrap();
    assert_eq!(last["source"], "final");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("Modeled"), "{report}");
}

#[test]
fn phases_come_from_lines_written_to_headroom_mark() {
    let dir = tempfile::tempdir().unwrap();
    let usage = r#"usage = [
  { at = "50ms", job_used = "1GiB" },
  { at = "150ms", job_used = "0B" },
  { at = "300ms", job_used = "512MiB" },
]
"#;
    let job = r#"echo load > "$HEADROOM_MARK"; sleep 0.2; printf 'step\n' >> "$HEADROOM_MARK"; sleep 0.3"#;
    let (o, s, _) = sim_watch(dir.path(), usage, &["sh", "-c", job]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let phases = s["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2, "{phases:?}");
    assert_eq!(phases[0]["name"], "load");
    assert_eq!(u(&phases[0]["peaks"]["job_used_bytes"]["bytes"]), GIB);
    assert_eq!(phases[1]["name"], "step");
    assert_eq!(u(&phases[1]["peaks"]["job_used_bytes"]["bytes"]), 512 * MIB);
    assert!(u(&phases[0]["end_ns"]) <= u(&phases[1]["start_ns"]));
}

#[test]
fn a_failing_job_sets_headroom_s_exit_code_and_fails_junit() {
    let dir = tempfile::tempdir().unwrap();
    let (o, s, out) = sim_watch(dir.path(), SCRIPT, &["sh", "-c", "echo to-stdout; exit 3"]);
    assert_eq!(o.code, 3);
    assert_eq!(o.stdout, "to-stdout\n");
    assert_eq!(s["status"], "failed");
    assert_eq!(s["watch"]["job"]["exit"]["code"], 3);
    let held: Vec<bool> = s["expectations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["held"].as_bool().unwrap())
        .collect();
    assert_eq!(held, [false, true]);
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(junit.contains("failures=\"1\""), "{junit}");
}

#[test]
fn bad_input_is_refused_with_exit_2_and_no_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = script(d, SCRIPT);
    let good = good.to_str().unwrap();
    let bad = d.join("bad.toml");
    std::fs::write(&bad, "usage = [{ at = \"1ms\", job = \"1GiB\" }]").unwrap();
    let out = d.join("never");
    let o = out.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["watch"], "required"),
        (
            &["watch", "--pid", "1", "--", "true"],
            "cannot be used with",
        ),
        (&["watch", "--pid", "4194304"], "no such process"),
        (
            &["watch", "--profile", "tiny-4g", "--out", o, "--", "true"],
            "--sim-script",
        ),
        (
            &[
                "watch",
                "--sim-script",
                bad.to_str().unwrap(),
                "--out",
                o,
                "--",
                "true",
            ],
            "bad.toml",
        ),
        (
            &[
                "watch",
                "--sim-script",
                good,
                "--backend",
                "cuda",
                "--out",
                o,
                "--",
                "true",
            ],
            "--backend cuda",
        ),
        (
            &[
                "watch",
                "--sim-script",
                good,
                "--cuda-info",
                "--out",
                o,
                "--",
                "true",
            ],
            "--cuda-info",
        ),
        (
            &[
                "watch",
                "--sim-script",
                good,
                "--interval",
                "1",
                "--out",
                o,
                "--",
                "true",
            ],
            "no unit",
        ),
        (
            &[
                "watch",
                "--sim-script",
                good,
                "--process-interval",
                "0ns",
                "--out",
                o,
                "--",
                "true",
            ],
            "above zero",
        ),
        (
            &[
                "watch",
                "--sim-script",
                good,
                "--out",
                o,
                "--",
                "/no/such/command",
            ],
            "cannot start /no/such/command",
        ),
    ];
    for (args, needle) in cases {
        let r = headroom(d, args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
        assert!(!out.exists(), "{args:?} left a folder");
    }
    // A folder holding a run is never written into.
    let (first, _, folder) = sim_watch(d, SCRIPT, &["true"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let r = headroom(
        d,
        &[
            "watch",
            "--sim-script",
            good,
            "--out",
            folder.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("never overwritten"), "{}", r.stderr);
}

/// The mark helper, run from Python on its own.
fn python(code: &str, mark: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(format!(
            "import sys; sys.path.insert(0, {:?}); from headroom_mark import mark\n{code}",
            root().join("docs").to_str().unwrap()
        ))
        .env_remove("HEADROOM_MARK");
    if let Some(p) = mark {
        cmd.env("HEADROOM_MARK", p);
    }
    cmd.output().unwrap()
}

#[test]
fn the_python_mark_helper_writes_lines_and_never_fails_or_blocks() {
    let dir = tempfile::tempdir().unwrap();
    // Unset: nothing happens.
    let o = python("mark('load'); print('ok')", None);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A file: one line per mark, a name with line breaks kept on one line.
    let file = dir.path().join("marks.txt");
    let o = python("mark('load'); mark('step\\n2'); mark(3)", Some(&file));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !file.exists(),
        "the helper must not create a file: headroom makes the FIFO"
    );
    std::fs::write(&file, "").unwrap();
    let o = python("mark('load'); mark('step\\n2'); mark(3)", Some(&file));
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "load\nstep 2\n3\n");
    // A FIFO nobody reads (headroom gone): returns at once.
    let fifo = dir.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let t0 = Instant::now();
    let o = python("mark('late'); print('ok')", Some(&fifo));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n");
    assert!(t0.elapsed() < Duration::from_secs(20));
}
