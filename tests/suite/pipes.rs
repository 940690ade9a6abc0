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

/// Runs `sh -c SCRIPT` in `dir` with `$H` naming the binary; returns (exit code, stdout,
/// stderr).
fn sh(dir: &std::path::Path, script: &str) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("H", env!("CARGO_BIN_EXE_headroom"))
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const USAGE: &str =
    "usage = [{ at = \"0ms\", job_used = \"0B\" }, { at = \"20ms\", job_used = \"64MiB\" }]\n";

#[test]
fn head_keeps_the_exit_code_and_a_closed_or_full_stderr_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    // `run --expect-oom | head -1` on a run that does not OOM: 1, the first line printed.
    let (code, out, err) = sh(
        dir.path(),
        &format!(
            "$H run {root}/workloads/quickstart.toml --profile tiny-4g --expect-oom --out a | head -1; exit ${{PIPESTATUS[0]}}"
        ),
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("headroom · quickstart"), "{out}");
    // A watch whose stderr reader is gone exits with the job's own status, not a panic's 101.
    std::fs::write(dir.path().join("u.toml"), USAGE).unwrap();
    let (code, _, err) = sh(
        dir.path(),
        "$H watch --profile tiny-4g --sim-script u.toml --out w -- sh -c 'echo to-stderr >&2; sleep 0.2; exit 3' 2>&1 | true; exit ${PIPESTATUS[0]}",
    );
    assert_eq!(code, 3, "{err}");
    // A full stderr: errors and tables are dropped, the exit codes stay.
    for (script, want) in [
        ("$H run missing.toml 2>/dev/full", 2),
        (
            "$H watch --profile tiny-4g --sim-script u.toml --out w2 -- sh -c 'exit 4' 2>/dev/full",
            4,
        ),
        (
            &format!(
                "$H run {root}/workloads/quickstart.toml --profile tiny-4g --out b 2>/dev/full >/dev/null"
            ),
            0,
        ),
    ] {
        let (code, _, err) = sh(dir.path(), script);
        assert_eq!(code, want, "{script}: {err}");
    }
}

#[test]
fn watch_json_prints_one_document_and_the_jobs_stdout_goes_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("u.toml"), USAGE).unwrap();
    let (code, out, err) = sh(
        dir.path(),
        "$H watch --json --profile tiny-4g --sim-script u.toml --out w -- sh -c 'echo hello'",
    );
    assert_eq!(code, 0, "{err}");
    let mut docs = serde_json::Deserializer::from_str(&out).into_iter::<serde_json::Value>();
    let doc = docs.next().unwrap().unwrap();
    assert!(docs.next().is_none(), "one document: {out}");
    assert_eq!(doc["status"], "completed");
    assert_eq!(doc["watch"]["job"]["exit"]["status"], 0, "{doc}");
    assert_eq!(err.lines().filter(|l| *l == "hello").count(), 1, "{err}");
    crate::common::schema::check("summary", &doc, "watch --json");
}

/// Every print of the crate goes through `src/output.rs`: no print macro anywhere else (the
/// same rule clippy's `print_stdout` and `print_stderr` enforce, kept by a test too so a
/// new file cannot opt out).
#[test]
fn no_print_macro_outside_the_one_writer() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("src/output.rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let code = line.split("//").next().unwrap();
                    if ["println", "print", "eprintln", "eprint", "dbg"]
                        .iter()
                        .any(|m| called(code, m))
                    {
                        found.push(format!("{}:{}", p.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "print macros outside src/output.rs: {found:?}"
    );
}

/// Whether `code` calls the macro `name!(` (not as the tail of a longer name).
fn called(code: &str, name: &str) -> bool {
    code.match_indices(&format!("{name}!(")).any(|(at, _)| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Every `--json` prints exactly one JSON document on stdout and nothing else, whatever the
/// outcome (an OOM, a failed plan, a message explained or not recognized).
#[test]
fn every_json_flag_prints_exactly_one_document() {
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    std::fs::write(dir.path().join("u.toml"), USAGE).unwrap();
    std::fs::write(dir.path().join("msg.log"), "nothing to see here\n").unwrap();
    let quick = format!("{root}/workloads/quickstart.toml");
    let frag = format!("{root}/workloads/oom/fragmentation.toml");
    let plan = format!("{root}/workloads/plans/tiny.toml");
    let fixture = format!("{root}/tests/fixtures/runs");
    let cases: Vec<Vec<String>> = [
        vec![
            "run",
            &quick,
            "--profile",
            "tiny-4g",
            "--out",
            "r1",
            "--json",
        ],
        vec![
            "run",
            &frag,
            "--profile",
            "tiny-4g",
            "--out",
            "r2",
            "--json",
        ],
        vec![
            "validate",
            &plan,
            "--profile",
            "tiny-4g",
            "--out",
            "v",
            "--json",
        ],
        vec![
            "bandwidth",
            "--size",
            "64MiB",
            "--profile",
            "tiny-4g",
            "--json",
        ],
        vec!["devices", "--json"],
        vec!["plan", &plan, "--json"],
        vec![
            "compare",
            &format!("{fixture}/tiny-4g"),
            &format!("{fixture}/h100-80g"),
            "--json",
        ],
        vec![
            "replay",
            "r1/alloc-log.csv",
            "--profile",
            "tiny-4g",
            "--json",
        ],
        vec![
            "explain",
            "--json",
            "CUDA out of memory. Tried to allocate 20.00 MiB",
        ],
        vec!["explain", "--json", "--file", "msg.log"],
        vec![
            "watch",
            "--json",
            "--profile",
            "tiny-4g",
            "--sim-script",
            "u.toml",
            "--out",
            "w",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2",
        ],
    ]
    .iter()
    .map(|c| c.iter().map(|s| s.to_string()).collect())
    .collect();
    for args in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = headroom(dir.path(), &a);
        assert!(o.code <= 1, "{a:?}: {}", o.stderr);
        let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&o.stdout)
            .into_iter::<serde_json::Value>()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{a:?}: {e}: {}", o.stdout));
        assert_eq!(docs.len(), 1, "{a:?}: {}", o.stdout);
    }
}
