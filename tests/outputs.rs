//! Outputs never damage anything: a run writes only into a new or empty folder, a user's
//! files (and a `.tmp` beside a merged CSV) are left alone, and a planted link is never
//! written through.

mod common;

use common::*;

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
