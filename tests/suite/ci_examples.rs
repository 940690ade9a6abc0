//! The CI examples users copy (docs/ci/: a GitHub Actions workflow, GitLab CI jobs, the workload
//! they gate on) hold up: the workflow passes actionlint with ShellCheck on its scripts, both
//! files parse with the uploads, reports and retries docs/ci.md describes, and their gate
//! scripts run as written on the fake driver: exit 0 with report.md in the job summary and
//! junit.xml where the upload and the JUnit report look; exit 1 and 2 reported as findings and
//! as infrastructure. docs/ci.md shows these files and no copy of their own.

use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> Yaml {
    let path = root().join("docs/ci").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut docs = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    assert_eq!(docs.len(), 1, "{name}: one document");
    docs.remove(0)
}

fn strs(y: &Yaml) -> Vec<&str> {
    y.as_vec()
        .map(|v| v.iter().filter_map(Yaml::as_str).collect())
        .unwrap_or_default()
}

/// A step of the workflow's job by its name.
fn step<'a>(wf: &'a Yaml, job: &str, name: &str) -> &'a Yaml {
    wf["jobs"][job]["steps"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|s| s["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("job {job} has no step named {name:?}"))
}

fn run_bash(cwd: &Path, script: &str, fake: bool, env: &[(&str, &str)]) -> Out {
    let file = cwd.join(format!("step-{}.sh", std::process::id()));
    let bin = env!("CARGO_BIN_EXE_headroom");
    let script = script.replace("./target/release/headroom", bin);
    std::fs::write(&file, script).unwrap();
    let mut cmd = Command::new("bash");
    if fake {
        cmd.arg(root().join("scripts/fake-gpu")).arg("bash");
    }
    // GitHub's `shell: bash` and GitLab's script lines both stop at the first failing command.
    cmd.args(["--noprofile", "--norc", "-eo", "pipefail"])
        .arg(&file)
        .current_dir(cwd)
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A folder where the examples' relative paths resolve: docs/ links to the repository's.
fn job_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("docs"), tmp.path().join("docs")).unwrap();
    tmp
}

/// Whether `path` (relative, `/`-separated) matches a GitLab artifact pattern whose `*` stands
/// for one path segment.
fn matches(pattern: &str, path: &str) -> bool {
    let (p, s): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    p.len() == s.len() && p.iter().zip(&s).all(|(a, b)| *a == "*" || a == b)
}

#[test]
fn the_workflow_passes_actionlint_with_shellcheck() {
    let lint = |args: &[&str]| {
        Command::new("bash")
            .arg(root().join("scripts/actionlint"))
            .args(args)
            .current_dir(root())
            .output()
            .unwrap()
    };
    let out = lint(&[
        "-config-file",
        "docs/ci/actionlint.yaml",
        "docs/ci/github-actions.yml",
    ]);
    if out.status.code() == Some(4) {
        crate::common::skip::missing(
            "ci_examples: actionlint",
            String::from_utf8_lossy(&out.stderr).trim(),
        );
        return;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The linter really ran: without the runner's label it refuses the same file, and ShellCheck
    // sees into the scripts.
    let out = lint(&["docs/ci/github-actions.yml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(r#"label "gpu" is unknown"#), "{text}");
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken.yml");
    let wf = std::fs::read_to_string(root().join("docs/ci/github-actions.yml")).unwrap();
    std::fs::write(
        &broken,
        wf.replace(
            r#"cat "$OUT/memory-gate/report.md""#,
            "cat $OUT/memory-gate/report.md",
        ),
    )
    .unwrap();
    let out = lint(&[
        "-config-file",
        root().join("docs/ci/actionlint.yaml").to_str().unwrap(),
        broken.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("SC2086"), "{text}");
}

#[test]
fn the_workflow_requires_the_gpu_and_uploads_whatever_the_exit_code() {
    let wf = load("github-actions.yml");
    assert!(
        !wf["on"]["pull_request"].is_badvalue(),
        "runs on pull requests"
    );
    for job in ["memory-gate", "gpu-check"] {
        let j = &wf["jobs"][job];
        let labels = strs(&j["runs-on"]);
        assert!(
            labels.contains(&"self-hosted") && labels.contains(&"gpu"),
            "{job}: {labels:?}"
        );
        let steps = j["steps"].as_vec().unwrap();
        let uploads: Vec<&Yaml> = steps
            .iter()
            .filter(|s| {
                s["uses"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
            })
            .collect();
        assert!(!uploads.is_empty(), "{job} uploads nothing");
        for u in &uploads {
            assert_eq!(u["if"].as_str(), Some("always()"), "{job}: {u:?}");
        }
        let devices = step(&wf, job, "The GPU and its driver")["run"]
            .as_str()
            .unwrap();
        assert_eq!(devices, "./target/release/headroom devices --backend cuda");
    }
    let gate = step(&wf, "memory-gate", "Memory gate")["run"]
        .as_str()
        .unwrap();
    assert!(gate.contains("--require-gpu"), "{gate}");
    assert!(gate.contains(r#">>"$GITHUB_STEP_SUMMARY""#), "{gate}");
    let junit = step(&wf, "memory-gate", "Upload the JUnit file");
    assert_eq!(
        junit["with"]["path"].as_str(),
        Some("${{ env.OUT }}/memory-gate/junit.xml")
    );
    let check = step(&wf, "gpu-check", "Every GPU check")["run"]
        .as_str()
        .unwrap();
    assert!(
        check.contains(r#"scripts/gpu-check "$OUT/gpu-check""#),
        "{check}"
    );
}

#[test]
fn the_gitlab_jobs_report_junit_and_retry_only_exit_2() {
    let ci = load("gitlab-ci.yml");
    let base = &ci[".headroom-gpu"];
    assert_eq!(strs(&base["tags"]), ["gpu"]);
    assert_eq!(base["retry"]["max"].as_i64(), Some(1));
    assert_eq!(base["retry"]["when"].as_str(), Some("script_failure"));
    assert_eq!(
        base["retry"]["exit_codes"],
        Yaml::Array(vec![Yaml::Integer(2)])
    );
    assert_eq!(
        strs(&base["before_script"]),
        [
            "cargo build --release --locked",
            "./target/release/headroom devices --backend cuda"
        ]
    );
    for job in ["headroom-memory-gate", "headroom-gpu-check"] {
        let j = &ci[job];
        assert_eq!(j["extends"].as_str(), Some(".headroom-gpu"), "{job}");
        assert_eq!(j["artifacts"]["when"].as_str(), Some("always"), "{job}");
        assert_eq!(strs(&j["artifacts"]["paths"]), ["results/"], "{job}");
        assert!(
            j["artifacts"]["reports"]["junit"].as_str().is_some(),
            "{job}"
        );
    }
}

/// The GitHub gate step run in `dir` as attempt `attempt` (OUT=results/1-ATTEMPT): its output,
/// the memory gate's folder and the job summary it wrote.
fn github_gate(dir: &Path, attempt: u32, wl: Option<&Path>, fake: bool) -> (Out, PathBuf, String) {
    let wf = load("github-actions.yml");
    let mut script = step(&wf, "memory-gate", "Memory gate")["run"]
        .as_str()
        .unwrap()
        .to_string();
    if let Some(wl) = wl {
        script = script.replace("docs/ci/memory-gate.toml", wl.to_str().unwrap());
    }
    let summary = dir.join(format!("step-summary-{attempt}.md"));
    let out_dir = format!("results/1-{attempt}");
    let out = run_bash(
        dir,
        &script,
        fake,
        &[
            ("OUT", out_dir.as_str()),
            ("GITHUB_STEP_SUMMARY", summary.to_str().unwrap()),
        ],
    );
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    (out, dir.join(out_dir).join("memory-gate"), text)
}

#[test]
fn the_github_gate_step_runs_as_written_on_the_fake_driver() {
    let tmp = job_dir();
    let dir = tmp.path();
    let (out, gate, step_summary) = github_gate(dir, 1, None, true);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("every expectation held on the GPU"),
        "{}",
        out.stdout
    );
    assert_eq!(
        step_summary,
        std::fs::read_to_string(gate.join("report.md")).unwrap()
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(gate.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["device"]["backend"], "cuda");
    let sim = headroom(dir, &["devices", "--backend", "sim", "--json"]);
    let sim: serde_json::Value = serde_json::from_str(&sim.stdout).unwrap();
    let tiny = sim["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tiny-4g")
        .unwrap();
    assert_eq!(s["device"]["total_bytes"], tiny["total_bytes"]);
    // The same allocations as on the simulated card of the same size.
    let sim_out = dir.join("sim");
    let r = headroom(
        dir,
        &[
            "run",
            "docs/ci/memory-gate.toml",
            "--profile",
            "tiny-4g",
            "--out",
            sim_out.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sim_s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sim_out.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(
        s["peaks"]["run"]["own_bytes"]["bytes"],
        sim_s["peaks"]["run"]["own_bytes"]["bytes"]
    );
    // The JUnit file is where the upload step looks (env.OUT = results/1-1 here).
    let junit = std::fs::read_to_string(gate.join("junit.xml")).unwrap();
    assert!(
        junit.contains("<property name=\"backend\" value=\"cuda\"/>"),
        "{junit}"
    );
    assert!(junit.contains("tests=\"2\" failures=\"0\""), "{junit}");

    // Exit 1: an expectation failed, reported as a finding, the report still in the summary.
    let failing = dir.join("failing.toml");
    let text = std::fs::read_to_string(root().join("docs/ci/memory-gate.toml")).unwrap();
    assert!(text.contains("min_headroom = \"512MiB\""));
    std::fs::write(
        &failing,
        text.replace("min_headroom = \"512MiB\"", "min_headroom = \"1TiB\""),
    )
    .unwrap();
    let (out, gate, step_summary) = github_gate(dir, 2, Some(&failing), true);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("::error title=headroom::an expectation failed"),
        "{}",
        out.stdout
    );
    assert_eq!(
        step_summary,
        std::fs::read_to_string(gate.join("report.md")).unwrap()
    );

    // Exit 2: no GPU here without the fake driver, so --require-gpu refuses to simulate.
    let (out, gate, step_summary) = github_gate(dir, 3, None, false);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("::error title=headroom::could not run"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr
            .contains("--require-gpu: refusing to run on the simulated device"),
        "{}",
        out.stderr
    );
    assert!(!gate.join("summary.json").exists());
    assert_eq!(step_summary, "");
}

#[test]
fn the_gitlab_gate_job_runs_as_written_on_the_fake_driver() {
    let ci = load("gitlab-ci.yml");
    let job = &ci["headroom-memory-gate"];
    let base = &ci[".headroom-gpu"];
    let lines: Vec<&str> = strs(&base["before_script"])
        .into_iter()
        .chain(strs(&job["script"]))
        // The test binary stands in for the release build.
        .filter(|l| !l.starts_with("cargo build"))
        .collect();
    let tmp = job_dir();
    let dir = tmp.path();
    let out = run_bash(dir, &lines.join("\n"), true, &[("CI_JOB_ID", "77")]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("GPU 0:"), "{}", out.stdout);
    let pattern = job["artifacts"]["reports"]["junit"].as_str().unwrap();
    let junit = "results/77/memory-gate/junit.xml";
    assert!(matches(pattern, junit), "{pattern} does not match {junit}");
    let text = std::fs::read_to_string(dir.join(junit)).unwrap();
    assert!(text.contains("tests=\"2\" failures=\"0\""), "{text}");
    let check = ci["headroom-gpu-check"]["artifacts"]["reports"]["junit"]
        .as_str()
        .unwrap();
    assert!(
        matches(
            check,
            "results/78/gpu-check/cuda/20261201T000000Z-quickstart/junit.xml"
        ),
        "{check}"
    );
}

#[test]
fn docs_ci_shows_the_files_and_no_copy_of_its_own() {
    let text = std::fs::read_to_string(root().join("docs/ci.md")).unwrap();
    for file in [
        "github-actions.yml",
        "gitlab-ci.yml",
        "memory-gate.toml",
        "actionlint.yaml",
    ] {
        assert!(
            text.contains(&format!("(ci/{file})")),
            "docs/ci.md does not link docs/ci/{file}"
        );
    }
    assert!(
        !text.contains("```yaml"),
        "docs/ci.md keeps its own copy of a CI file"
    );
}
