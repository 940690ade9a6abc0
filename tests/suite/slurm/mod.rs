//! docs/fleet/slurm.sh on a real Slurm: Debian's `slurm-wlm` and `munge` (installed with apt
//! when this runs as root and they are missing), one node on the loopback interface only, with
//! eight placeholder GPUs. The test starts `munged`, `slurmctld` and `slurmd` itself and stops
//! them by their PIDs whatever happens (every process of the cluster carries a marker in its
//! environment, and none is left). It runs the two `sbatch` lines of docs/fleet.md as written,
//! with only the documented settings, on a 4-task array, and checks the node folders and the
//! merge; then, on the fake NVIDIA driver (where steps take real time), `scancel` of a running
//! task and a task past `--time`: both record every GPU's run `interrupted` with the phase it
//! finished. Where Slurm cannot be had the test says why and passes nothing else.
//!
//! `.ci/run` runs it beside the rest of the tests (it is ignored in a plain `cargo test`).

mod cluster;

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use cluster::{Cluster, marked, sh, slurm_available};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The two `sbatch` lines of docs/fleet.md's Slurm section, as written.
fn documented_lines() -> (String, String) {
    let doc = std::fs::read_to_string(root().join("docs/fleet.md")).unwrap();
    let script = std::fs::read_to_string(root().join("docs/fleet/slurm.sh")).unwrap();
    let first = doc
        .lines()
        .find(|l| l.starts_with("jid=$(sbatch"))
        .expect("docs/fleet.md: jid=$(sbatch …")
        .to_string();
    let second = doc
        .lines()
        .find(|l| l.starts_with("env -u SBATCH_ARRAY_INX sbatch --dependency="))
        .expect("docs/fleet.md: env -u SBATCH_ARRAY_INX sbatch --dependency=…")
        .to_string();
    let command = |l: &str| l.split("  #").next().unwrap().trim().to_string();
    for l in [&first, &second] {
        assert!(
            script.contains(&format!("#   {}", command(l))),
            "slurm.sh's header differs from docs/fleet.md: {l}"
        );
    }
    (first, second)
}

/// A slow two-phase workload on the fake driver: `load` finishes at once, `serve` takes minutes
/// in 50 ms steps.
const SLOW: &str = "[[phase]]\nname = \"load\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"128MiB\" }]\n\n[[phase]]\nname = \"serve\"\nsteps = [\n { op = \"repeat\", times = 4000, steps = [{ op = \"spin\", for = \"50ms\" }, { op = \"synchronize\" }] },\n]\n";

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// Every GPU of a node folder recorded `interrupted`, `load` completed and `serve` stopped.
fn assert_interrupted(node: &Path) {
    let n = json(&node.join("node.json"));
    assert_eq!(n["status"], "interrupted", "{}: {n}", node.display());
    assert_eq!(n["exit_code"], 130, "{}", node.display());
    for g in n["gpus"].as_array().unwrap() {
        let what = format!("{} GPU {}", node.display(), g["index"]);
        assert_eq!(
            (
                g["outcome"].as_str(),
                g["exit_code"].as_i64(),
                g["status"].as_str()
            ),
            (Some("ran"), Some(130), Some("interrupted")),
            "{what}: {g}"
        );
        let s = json(
            &node
                .join(g["folder"].as_str().unwrap())
                .join("summary.json"),
        );
        assert_eq!(s["status"], "interrupted", "{what}");
        assert_eq!(s["phases"][0]["name"], "load");
        assert_eq!(s["phases"][0]["status"], "completed", "{what}");
        assert_eq!(
            s["phases"][0]["peaks"]["own_bytes"]["bytes"],
            128 * MIB,
            "{what}"
        );
        assert_eq!(s["phases"][1]["status"], "stopped", "{what}");
    }
}

#[test]
#[ignore = "a real Slurm, about 90 s and mostly waiting on its one-minute time limit: .ci/run \
            runs it beside the other tests; alone: cargo test --test suite -- --ignored slurm::"]
fn the_documented_slurm_array_runs_on_a_real_slurm_and_scancel_and_time_limits_interrupt() {
    if let Err(why) = slurm_available() {
        crate::common::skip::missing("slurm: the real-Slurm test (slurm-wlm, munge)", &why);
        return;
    }
    let t0 = Instant::now();
    let mut cluster = Cluster::start();
    eprintln!("slurm: cluster up in {:?}", t0.elapsed());
    let home = cluster.path().join("home");
    let results = cluster.path().join("results");
    // The README's install step puts the binary in $CARGO_HOME/bin (~/.cargo/bin); this is the
    // test build's binary placed there, without the release build.
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_headroom"), bin.join("headroom")).unwrap();
    let submit = |extra: &[(&str, String)], script: &str| {
        let mut c = cluster.command("bash");
        c.args(["-c", script])
            .current_dir(root())
            .env("HOME", &home)
            .env_remove("CARGO_HOME")
            .env("RESULTS", &results);
        for (k, v) in extra {
            c.env(k, v);
        }
        sh(&mut c)
    };
    let before: Vec<_> = std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();

    // The documented lines, a 4-task array (sbatch's SBATCH_ARRAY_INX overrides the script's
    // --array), the simulator as the device. WORKLOAD: quickstart, the smallest shipped one.
    let (first, second) = documented_lines();
    let r = submit(
        &[
            (
                "HEADROOM_DEVICE_ARGS",
                "--profile 8xh100-80g --device all".into(),
            ),
            ("WORKLOAD", "workloads/quickstart.toml".into()),
        ],
        &format!(
            "set -euo pipefail\nexport SBATCH_ARRAY_INX=0-3\n{first}\n{second}\necho \"$jid\"\n"
        ),
    );
    assert_eq!(r.code, 0, "{}{}", r.stderr, cluster.logs());
    let jid = r.stdout.lines().last().unwrap().trim().to_string();
    cluster.wait_for_queue_empty(Duration::from_secs(180));
    eprintln!("slurm: 4 tasks and the merge done at {:?}", t0.elapsed());
    let job = results.join(&jid);
    for task in 0..4 {
        assert_eq!(
            cluster.job_state(&format!("{jid}_{task}")),
            "COMPLETED",
            "task {task}"
        );
        let n = json(&job.join(format!("node-{task}/node.json")));
        assert_eq!(
            (n["status"].as_str(), n["exit_code"].as_i64()),
            (Some("completed"), Some(0))
        );
        let gpus = n["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 8);
        assert_eq!(gpus.iter().filter(|g| g["outcome"] == "ran").count(), 7);
        for g in gpus.iter().filter(|g| g["outcome"] == "ran") {
            let dir = job
                .join(format!("node-{task}"))
                .join(g["folder"].as_str().unwrap());
            let s = json(&dir.join("summary.json"));
            assert_eq!(s["status"], "completed", "{}", dir.display());
            assert_eq!(s["workload"]["name"], "quickstart");
        }
        assert_eq!(
            gpus[5]["outcome"], "skipped",
            "card 5 is busy on 8xh100-80g"
        );
        assert!(job.join(format!("logs/task-{task}.log")).is_file());
    }
    let rows = csv_rows(&job.join("fleet.csv"));
    assert_eq!(rows.len(), 28);
    let uuids: std::collections::BTreeSet<&str> = rows.iter().map(|r| r["uuid"].as_str()).collect();
    assert_eq!(uuids.len(), 28, "every node's GPUs have UUIDs of their own");
    let md = std::fs::read_to_string(job.join("fleet.md")).unwrap();
    assert!(
        md.starts_with("## headroom merge: 28 runs on 4 nodes, 1 GPU model/driver group\n"),
        "{md}"
    );
    assert!(
        md.contains("- GPU index 3: CUDA-visible total 128.00 MiB below the median (79.19 GiB) on 4/4 nodes\n"),
        "{md}"
    );
    assert!(
        md.contains("- GPU index 5 not run on 4/4 nodes: in use by pid 4242"),
        "{md}"
    );
    assert!(!md.contains("duplicate UUID"), "{md}");
    assert!(
        std::fs::read_to_string(job.join("logs/merge.log"))
            .unwrap()
            .contains("wrote ")
    );
    let after: Vec<_> = std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let new: Vec<_> = after.iter().filter(|f| !before.contains(f)).collect();
    assert!(
        new.is_empty(),
        "the jobs wrote into the submit folder: {new:?}"
    );

    // scancel of a running task and a task past --time, on the fake driver's 2-GPU node.
    let node = cluster.path().join("2xtiny.toml");
    std::fs::write(
        &node,
        "[node]\nname = \"2xtiny\"\nbase = \"tiny-4g\"\ndevices = 2\n",
    )
    .unwrap();
    let slow = workload(cluster.path(), "slow", SLOW);
    let r = submit(
        &[
            ("HEADROOM_DEVICE_ARGS", "--backend cuda --device all".into()),
            ("HEADROOM_FAKE_PROFILE", node.display().to_string()),
            ("WORKLOAD", slow.display().to_string()),
        ],
        &format!(
            "exec bash {} sbatch --parsable --array=0-1 --time=1 docs/fleet/slurm.sh",
            root().join("scripts/fake-gpu").display()
        ),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let jid = r.stdout.trim().to_string();
    let job = results.join(&jid);
    let serving = |task: u32| {
        let n = job.join(format!("node-{task}"));
        std::fs::read_to_string(n.join("node.json")).is_ok_and(|t| {
            serde_json::from_str::<serde_json::Value>(&t).is_ok_and(|v| {
                v["gpus"].as_array().unwrap().iter().all(|g| {
                    g["pid"].is_u64()
                        && std::fs::read_to_string(
                            n.join(g["folder"].as_str().unwrap()).join("events.csv"),
                        )
                        .is_ok_and(|e| e.contains("serve"))
                })
            })
        })
    };
    let t1 = Instant::now();
    while !serving(0) {
        assert!(
            t1.elapsed() < Duration::from_secs(60),
            "task 0 never served\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = sh(cluster.command("scancel").arg(format!("{jid}_0")));
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Task 1 then runs until its one-minute limit (Slurm checks limits every 30 s).
    cluster.wait_for_queue_empty(Duration::from_secs(180));
    eprintln!("slurm: scancel and time limit done at {:?}", t0.elapsed());
    assert_eq!(cluster.job_state(&format!("{jid}_0")), "CANCELLED");
    assert_eq!(cluster.job_state(&format!("{jid}_1")), "TIMEOUT");
    assert_interrupted(&job.join("node-0"));
    assert_interrupted(&job.join("node-1"));

    let left = cluster.stop();
    assert!(
        left.is_empty(),
        "processes left after the daemons stopped: {left:?}"
    );
    assert!(marked(cluster.path()).is_empty());
    let _ = writeln!(
        std::io::stderr(),
        "slurm: real Slurm: 4 array tasks and the merge as documented, scancel and a time limit \
         interrupted, no process left; {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_merge_run_as_an_array_merges_in_its_first_task_only() {
    // No Slurm needed: the script's merge branch with a stand-in binary that records its call.
    let tmp = tempfile::tempdir().unwrap();
    let calls = tmp.path().join("calls");
    let bin = tmp.path().join("headroom");
    std::fs::write(
        &bin,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\n", calls.display()),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for task in ["3", "1", "2"] {
        let r = sh(std::process::Command::new("bash")
            .arg(root().join("docs/fleet/slurm.sh"))
            .args(["merge", "77"])
            .env("RESULTS", tmp.path())
            .env("HEADROOM", &bin)
            .env("SLURM_ARRAY_TASK_ID", task)
            .env("SLURM_ARRAY_TASK_MIN", "1"));
        assert_eq!(r.code, 0, "task {task}: {}", r.stderr);
    }
    let merged = std::fs::read_to_string(&calls).unwrap();
    let dir = tmp.path().join("77");
    assert_eq!(
        merged,
        format!(
            "merge {} --skip-incomplete --out {}/fleet.csv --force\n",
            dir.display(),
            dir.display()
        )
    );
}
