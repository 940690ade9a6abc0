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
