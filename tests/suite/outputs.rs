//! Outputs never damage anything: a run writes only into a new or empty folder, a user's
//! files (and a `.tmp` beside a merged CSV) are left alone, and a planted link is never
//! written through. A write that fails (a full disk) is exit 2 naming the file.

use crate::common::*;

fn quick(dir: &std::path::Path) -> std::path::PathBuf {
    workload(
        dir,
        "quick",
        r#"[[phase]]
name = "p"
steps = [{ op = "allocate", name = "a", size = "64MiB" }]
"#,
    )
}

#[test]
fn a_run_refuses_a_folder_holding_a_users_file() {
    let dir = tempfile::tempdir().unwrap();
    let wl = quick(dir.path());
    let out = dir.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("report.md"), "my notes").unwrap();
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("is not empty (report.md)"),
        "{}",
        o.stderr
    );
    assert_eq!(
        std::fs::read_to_string(out.join("report.md")).unwrap(),
        "my notes"
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        1,
        "nothing was added"
    );
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            "/",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--out /: is not empty"), "{}", o.stderr);
}

#[test]
fn merge_leaves_a_users_tmp_file_and_refuses_a_planted_link() {
    let dir = tempfile::tempdir().unwrap();
    let wl = quick(dir.path());
    let run = dir.path().join("run");
    let o = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            run.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::fs::write(dir.path().join("fleet.tmp"), "mine").unwrap();
    let csv = dir.path().join("fleet.csv");
    let o = headroom(
        dir.path(),
        &[
            "merge",
            run.to_str().unwrap(),
            "--out",
            csv.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(std::fs::read_to_string(&csv).unwrap().contains("quick"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("fleet.tmp")).unwrap(),
        "mine"
    );
    // A link where the output goes is refused without --force; with it, it is replaced and
    // its target left alone.
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let linked = dir.path().join("linked.csv");
    std::os::unix::fs::symlink(&victim, &linked).unwrap();
    let o = headroom(
        dir.path(),
        &[
            "merge",
            run.to_str().unwrap(),
            "--out",
            linked.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    let o = headroom(
        dir.path(),
        &[
            "merge",
            run.to_str().unwrap(),
            "--out",
            linked.to_str().unwrap(),
            "--force",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A write that fails part-way (here a file-size limit, as a full disk would) fails the run
/// with exit 2 and a message naming the file; the summary says so, and the device memory was
/// released before.
#[test]
fn a_write_that_fails_names_the_file_and_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    // `ulimit -f 64`: no file may pass 64 KiB; SIGXFSZ ignored, so writes fail with EFBIG.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 64; exec {} run {} --profile tiny-4g --out {} -q",
            env!("CARGO_BIN_EXE_headroom"),
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("workloads/oom/fragmentation.toml")
                .display(),
            out_dir.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let named = ["timeline.csv", "events.csv"]
        .iter()
        .any(|f| stderr.contains(&format!("cannot write {}", out_dir.join(f).display())));
    assert!(named && !stderr.contains("panicked"), "{stderr}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["status"], "failed", "{s}");
    assert!(
        s["status_detail"]
            .as_str()
            .unwrap()
            .contains("cannot write"),
        "{s}"
    );
    assert_eq!(s["exit_code"], 2);
    // Everything the run held was released before the record was written.
    assert_eq!(s["release"]["difference_bytes"], 0, "{}", s["release"]);
}

/// Runs `headroom run WL --profile P --out DIR -q` in `dir` and returns the folder.
fn run_into(dir: &std::path::Path, wl: &str, profile: &str, name: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = dir.join(name);
    let o = headroom(
        dir,
        &[
            "run",
            root.join(wl).to_str().unwrap(),
            "--profile",
            profile,
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
    );
    assert!(o.code <= 1, "{wl}: {}", o.stderr);
    out
}

/// Every CSV has its header from the moment it exists, and each column one type in every
/// run: polars, with its default settings, reads the timelines, events and allocation logs
/// of a completed run, OOM runs of two causes, a pool run, a graph run and a SIGKILLed run,
/// and concatenates each kind.
#[test]
fn polars_reads_and_concatenates_the_csvs_of_different_runs_with_its_defaults() {
    if !crate::common::schema::tools_or_skip("outputs::polars") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut dirs = vec![
        run_into(dir.path(), "workloads/quickstart.toml", "tiny-4g", "quick"),
        run_into(
            dir.path(),
            "workloads/oom/fragmentation.toml",
            "tiny-4g",
            "frag",
        ),
        run_into(
            dir.path(),
            "workloads/oom/pending-free.toml",
            "tiny-4g",
            "pending",
        ),
        run_into(dir.path(), "workloads/pool-reuse.toml", "tiny-4g", "pool"),
        run_into(dir.path(), "workloads/graphs.toml", "tiny-4g", "graphs"),
    ];
    // Killed: filling an 80 GiB device 2 MiB at a time takes seconds; SIGKILL once every
    // file holds rows.
    let killed = dir.path().join("killed");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args([
            "run",
            root.join("workloads/oom/fragmentation.toml")
                .to_str()
                .unwrap(),
        ])
        .args([
            "--profile",
            "h100-80g",
            "--out",
            killed.to_str().unwrap(),
            "-q",
        ])
        .spawn()
        .unwrap();
    let rows = |f: &str| std::fs::read_to_string(killed.join(f)).map_or(0, |t| t.lines().count());
    let t0 = std::time::Instant::now();
    while ["timeline.csv", "events.csv", "alloc-log.csv"]
        .iter()
        .any(|f| rows(f) < 3)
    {
        assert!(t0.elapsed().as_secs() < 60, "the run wrote no rows");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let summary = std::fs::read_to_string(killed.join("summary.json")).unwrap_or_default();
    assert!(!summary.contains("\"status\": \"completed\""));
    dirs.push(killed);

    let script = r#"
import sys, polars as pl
for f in ["timeline", "events", "alloc-log"]:
    frames = [pl.read_csv(d + "/" + f + ".csv") for d in sys.argv[1:]]
    both = pl.concat(frames)
    ints = [c for c, t in both.schema.items() if t == pl.Int64]
    print(f, both.height, sum(x.height for x in frames), ",".join(ints))
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(&dirs)
        .env("PYTHONPATH", crate::common::schema::py_tools().unwrap())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 3, "{text}");
    for l in &lines {
        assert_eq!(l[1], l[2], "every row concatenated: {text}");
    }
    // The byte and time columns are integers, not strings.
    let mut timeline_ints = vec!["t_ns", "device_free_bytes"];
    timeline_ints.extend(
        headroom::record::View::ALL
            .iter()
            .map(|v| v.key())
            .filter(|k| *k != "job_used_bytes"),
    );
    assert_eq!(lines[0][3], timeline_ints.join(","), "{text}");
    assert_eq!(
        lines[1][3], "t_ns,requested_bytes,size_bytes,latency_ns,device_free_bytes",
        "{text}"
    );
    assert_eq!(lines[2][3], "t_ns,bytes,stream", "{text}");
}

/// `headroom validate` leaves a top-level junit.xml with one case per claim of the plan, whose
/// failures are exactly the claims validation.json says failed, and a report.md; its probes'
/// junit.xml files (runs above the limit are meant to fail) count no failure.
#[test]
fn validate_writes_a_junit_whose_failures_are_the_plans_failed_claims() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // tiny.toml forgets the context: 20 planned, 16 fit. From the free reading (3840 MiB)
    // it plans 16 and holds.
    for (name, extra, want_code, want_failed, kv) in [
        (
            "fails",
            &[][..],
            1,
            &["admitted count", "margin at the peak"][..],
            20,
        ),
        ("holds", &["--capacity", "3840MiB"][..], 0, &[][..], 16),
    ] {
        let out = dir.path().join(name);
        let mut args = vec![
            "validate",
            "workloads/plans/tiny.toml",
            "--profile",
            "tiny-4g",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ];
        args.extend_from_slice(extra);
        let r = headroom(root, &args);
        assert_eq!(r.code, want_code, "{name}: {}", r.stderr);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("validation.json")).unwrap())
                .unwrap();
        let claims = v["claims"].as_array().unwrap();
        let failed: Vec<&str> = claims
            .iter()
            .filter(|c| c["held"] == false)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(failed, want_failed, "{name}");
        let names: Vec<&str> = claims.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "admitted count",
                "margin at the peak",
                "category: weights",
                &format!("category: KV, {kv} requests"),
                "category: other peak"
            ],
            "{name}"
        );
        let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
        assert!(
            junit.contains(&format!(
                r#"<testsuites name="headroom validate" tests="5" failures="{}" errors="0">"#,
                failed.len()
            )),
            "{junit}"
        );
        assert_eq!(junit.matches("<testcase ").count(), 5, "{junit}");
        assert_eq!(junit.matches("<failure ").count(), failed.len(), "{junit}");
        for f in &failed {
            let case = junit
                .split("<testcase ")
                .find(|c| c.contains(&format!("name=\"{f}\"")))
                .unwrap();
            assert!(case.contains("<failure "), "{f}: {case}");
        }
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert_eq!(md.matches("**failed**").count(), failed.len(), "{md}");
        let mut probes = 0;
        for p in std::fs::read_dir(&out).unwrap() {
            let j = p.unwrap().path().join("junit.xml");
            if j.is_file() {
                probes += 1;
                let t = std::fs::read_to_string(&j).unwrap();
                assert!(!t.contains("<failure"), "{}: {t}", j.display());
                assert!(t.contains(r#"<property name="validate_probe" value="true"/>"#));
            }
        }
        assert!(probes >= 2, "{name}: {probes} probes");
    }
}
