//! The fleet examples in docs/fleet/: the Kubernetes manifest parsed and checked where it
//! matters, the Slurm script's directives read, and both run on the simulator for a few ranks
//! with the variables the schedulers set (`JOB_COMPLETION_INDEX`, `SLURM_ARRAY_TASK_ID`), one
//! node killed, then merged with `--skip-incomplete`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use yaml_rust2::{Yaml, YamlLoader};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A folder with `bin/headroom`, a two-card simulated node and a small workload.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_headroom"), bin.join("headroom")).unwrap();
        std::fs::write(
            dir.path().join("node.toml"),
            "[node]\nname = \"2xtiny\"\nbase = \"tiny-4g\"\ndevices = 2\n",
        )
        .unwrap();
        workload(
            dir.path(),
            "small",
            "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"256MiB\" }]\n",
        );
        Site { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn results(&self) -> PathBuf {
        self.path().join("results")
    }

    /// `program args…` with headroom on PATH and the simulator as every task's device.
    fn command(&self, program: &str, args: &[&str], env: &[(&str, String)]) -> Out {
        let path = format!(
            "{}:{}",
            self.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new(program);
        c.args(args)
            .current_dir(self.path())
            .env("PATH", path)
            .env("RESULTS", self.results())
            .env("WORKLOAD", self.path().join("small.toml"))
            .env(
                "HEADROOM_DEVICE_ARGS",
                format!(
                    "--profile {} --device all",
                    self.path().join("node.toml").display()
                ),
            )
            .env_remove("HEADROOM_RANK")
            .env_remove("HEADROOM_RANK_COUNT");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Makes a node folder look like its task was killed mid-run: node.json and one GPU's
/// summary still say running, that GPU's timeline ends mid-row.
fn kill_node(node: &Path) {
    let path = node.join("node.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut n: serde_json::Value = serde_json::from_str(&text).unwrap();
    n["status"] = "running".into();
    std::fs::write(&path, serde_json::to_string_pretty(&n).unwrap()).unwrap();
    let gpu = node.join(n["gpus"][1]["folder"].as_str().unwrap());
    let s = std::fs::read_to_string(gpu.join("summary.json")).unwrap();
    std::fs::write(
        gpu.join("summary.json"),
        s.replacen("\"completed\"", "\"running\"", 1),
    )
    .unwrap();
    let tl = std::fs::read_to_string(gpu.join("timeline.csv")).unwrap();
    std::fs::write(gpu.join("timeline.csv"), &tl[..tl.len() - 5]).unwrap();
}

fn script(yaml: &Yaml) -> String {
    let c = &yaml["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"][0].as_str(), Some("/bin/sh"));
    assert_eq!(c["command"][1].as_str(), Some("-c"));
    c["args"][0]
        .as_str()
        .expect("one script in args")
        .to_string()
}

#[test]
fn the_kubernetes_indexed_job_runs_one_node_per_index_and_merges_what_is_left() {
    let text = std::fs::read_to_string(root().join("docs/fleet/job.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).unwrap();
    assert_eq!(docs.len(), 2);
    let (job, merge) = (&docs[0], &docs[1]);
    assert_eq!(job["kind"].as_str(), Some("Job"));
    assert_eq!(job["apiVersion"].as_str(), Some("batch/v1"));
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let completions = spec["completions"].as_i64().unwrap();
    assert_eq!(spec["parallelism"].as_i64(), Some(completions));
    assert_eq!(
        spec["template"]["spec"]["restartPolicy"].as_str(),
        Some("Never")
    );
    let rule = &spec["podFailurePolicy"]["rules"][0];
    assert_eq!(rule["action"].as_str(), Some("FailIndex"));
    assert_eq!(
        rule["onExitCodes"]["values"][0].as_i64(),
        Some(1),
        "a failed expectation is never retried"
    );
    let pod = &spec["template"]["spec"]["containers"][0];
    assert_eq!(
        pod["resources"]["limits"]["nvidia.com/gpu"].as_i64(),
        Some(8)
    );
    assert_eq!(
        pod["volumeMounts"][0]["mountPath"].as_str(),
        Some("/results")
    );
    let run = script(job);
    assert!(
        run.contains("headroom run") && run.contains("$JOB_COMPLETION_INDEX"),
        "{run}"
    );
    assert!(run.contains("--backend cuda --device all"), "{run}");
    assert_eq!(merge["kind"].as_str(), Some("Job"));
    let env = &merge["spec"]["template"]["spec"]["containers"][0]["env"][0];
    assert_eq!(env["name"].as_str(), Some("COMPLETIONS"));
    assert_eq!(
        env["value"].as_str(),
        Some(completions.to_string().as_str())
    );
    let merge_script = script(merge);
    assert!(merge_script.contains("headroom merge") && merge_script.contains("--skip-incomplete"));

    // Three indices on the simulator, as the pods would run them; the third is then killed.
    let site = Site::new();
    for index in 0..3 {
        let r = site.command(
            "sh",
            &["-c", &run],
            &[("JOB_COMPLETION_INDEX", index.to_string())],
        );
        assert_eq!(r.code, 0, "index {index}: {}", r.stderr);
    }
    let fleet = site.results().join("headroom-fleet");
    for index in 0..3 {
        assert!(fleet.join(format!("node-{index}/node.json")).is_file());
    }
    kill_node(&fleet.join("node-2"));
    let r = site.command(
        "sh",
        &["-c", &merge_script],
        &[("COMPLETIONS", "3".into()), ("MERGE_WAIT_S", "0".into())],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = csv_rows(&fleet.join("fleet.csv"));
    assert_eq!(
        rows.len(),
        5,
        "two GPUs of two nodes, one of the killed node's"
    );
    assert!(
        rows.iter()
            .all(|r| r["node"].contains("headroom-fleet/node-"))
    );
    let md = std::fs::read_to_string(fleet.join("fleet.md")).unwrap();
    assert!(md.contains("### Skipped: incomplete (1)"), "{md}");
    assert!(
        md.contains("1 node never finished (node.json still says running; its GPUs are judged one by one): node-2"),
        "{md}"
    );
}

#[test]
fn the_slurm_array_runs_one_node_per_task_and_a_dependent_merge() {
    let text = std::fs::read_to_string(root().join("docs/fleet/slurm.sh")).unwrap();
    let directives: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("#SBATCH "))
        .collect();
    assert!(text.starts_with("#!/usr/bin/env bash\n"));
    assert!(
        directives.iter().any(|d| d.starts_with("--array=0-")),
        "{directives:?}"
    );
    assert!(directives.contains(&"--gpus-per-node=8"), "{directives:?}");
    assert!(directives.contains(&"--exclusive"), "{directives:?}");
    // Slurm stops reading directives at the first command.
    let lines: Vec<&str> = text.lines().collect();
    let first_command = lines
        .iter()
        .position(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap();
    let last_directive = lines
        .iter()
        .rposition(|l| l.starts_with("#SBATCH"))
        .unwrap();
    assert!(last_directive < first_command);

    let site = Site::new();
    let script = root().join("docs/fleet/slurm.sh");
    let script = script.to_str().unwrap();
    for task in 0..3 {
        let r = site.command(
            "bash",
            &[script],
            &[
                ("SLURM_ARRAY_JOB_ID", "77".into()),
                ("SLURM_ARRAY_TASK_ID", task.to_string()),
            ],
        );
        assert_eq!(r.code, 0, "task {task}: {}", r.stderr);
    }
    let job = site.results().join("77");
    kill_node(&job.join("node-1"));
    let r = site.command("bash", &[script, "merge", "77"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Its log, like every task's, is under RESULTS, not where it was submitted from.
    let log = std::fs::read_to_string(job.join("logs/merge.log")).unwrap();
    assert!(
        log.contains("skipped") && log.contains("node-1/gpu1-"),
        "{log}"
    );
    for task in 0..3 {
        assert!(job.join(format!("logs/task-{task}.log")).is_file());
    }
    let rows = csv_rows(&job.join("fleet.csv"));
    assert_eq!(rows.len(), 5);
    // Each array task's simulated node has UUIDs of its own (its rank is part of them).
    let uuids: std::collections::BTreeSet<&str> = rows.iter().map(|r| r["uuid"].as_str()).collect();
    assert_eq!(uuids.len(), 5, "{uuids:?}");
    let md = std::fs::read_to_string(job.join("fleet.md")).unwrap();
    assert!(md.contains("## headroom merge: 5 runs on 3 nodes"), "{md}");
    assert!(!md.contains("duplicate UUID"), "{md}");
    // Outside an array task the script says what it needs.
    let r = site.command("bash", &[script], &[]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("run under sbatch"), "{}", r.stderr);
}

#[test]
fn merge_and_compare_mark_the_killed_fixture_incomplete() {
    let killed = root().join("tests/fixtures/killed/tiny-4g");
    let good = root().join("tests/fixtures/runs/h100-80g");
    let (k, g) = (killed.to_str().unwrap(), good.to_str().unwrap());
    let r = headroom(root(), &["merge", g, k]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains(k)
            && r.stderr.contains("still says \"running\"")
            && r.stderr.contains("timeline.csv ends mid-row")
            && r.stderr.contains("events.csv ends mid-row"),
        "{}",
        r.stderr
    );
    let r = headroom(root(), &["merge", g, k, "--skip-incomplete", "--csv"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout.lines().count(),
        2,
        "the header and the finished run"
    );
    assert!(
        r.stderr.contains(&format!("skipped {k}: incomplete")),
        "{}",
        r.stderr
    );
    for (a, b) in [(k, g), (g, k)] {
        let r = headroom(root(), &["compare", a, b]);
        assert_eq!(r.code, 2);
        assert!(
            r.stderr
                .contains(&format!("{k}: incomplete, not a result to compare")),
            "{}",
            r.stderr
        );
    }
}
