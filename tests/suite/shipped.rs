//! The workloads and plans compiled into the binary: every one runs by its name from a folder
//! that holds no workload file, `headroom workloads` lists each in one line, `workloads show`
//! prints the file as the repository has it, and a file at the path given still wins.

use std::path::Path;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// The one result folder under `results`.
fn only_folder(results: &Path) -> std::path::PathBuf {
    let mut dirs: Vec<_> = std::fs::read_dir(results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.pop().unwrap()
}

#[test]
fn every_shipped_workload_and_plan_runs_by_name_from_any_folder() {
    let listing = headroom(root(), &["workloads"]);
    assert_eq!(listing.code, 0, "{}", listing.stderr);
    let lines: Vec<&str> = listing.stdout.lines().collect();
    assert_eq!(lines.len(), headroom::shipped::SHIPPED.len());
    for s in headroom::shipped::SHIPPED {
        let name = s.name.strip_prefix("plans/").unwrap_or(s.name);
        // The smallest simulated card each fits on, so the whole loop stays within seconds.
        let profile = match name {
            "serving" => "a100-40g",
            "comm" => "t4-16g",
            "article" => "h100-80g",
            _ => "tiny-4g",
        };
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("`headroom workloads` has no line for {name}"));
        assert!(line.contains(&s.description()), "{line}");
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().join("r");
        let r = results.to_str().unwrap();
        let cmd = match s.kind {
            headroom::shipped::Kind::Workload => "run",
            headroom::shipped::Kind::Plan => "validate",
        };
        let o = headroom(
            dir.path(),
            &[cmd, name, "--profile", profile, "--quiet", "--results", r],
        );
        // Each plan fails a claim on the card it runs on here (exit 1: the findings are the
        // point of it, as its file says); every workload holds its expectations.
        let want = if ["card", "tiny", "article"].contains(&name) {
            1
        } else {
            0
        };
        assert_eq!(o.code, want, "{cmd} {name}: {}", o.stderr);
        let folder = only_folder(&results);
        if s.kind == headroom::shipped::Kind::Workload {
            let text: toml::Table = s.text.parse().unwrap();
            let wname = text["workload"]["name"].as_str().unwrap();
            assert_eq!(summary(&folder)["workload"]["name"], wname, "{name}");
        } else {
            assert!(folder.join("validation.json").is_file(), "{name}");
        }
        let shown = headroom(dir.path(), &["workloads", "show", name]);
        assert_eq!(shown.stdout, s.text, "{name}");
    }
}

#[test]
fn a_run_by_name_is_the_run_of_the_file_and_a_file_wins() {
    let dir = tempfile::tempdir().unwrap();
    let by = |cwd: &Path, arg: &str, results: &str| {
        let o = headroom(
            cwd,
            &[
                "run",
                arg,
                "--profile",
                "tiny-4g",
                "--quiet",
                "--results",
                dir.path().join(results).to_str().unwrap(),
            ],
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        summary(&only_folder(&dir.path().join(results)))
    };
    let name = by(dir.path(), "quickstart", "name");
    let file = by(root(), "workloads/quickstart.toml", "file");
    // The simulator is byte-exact: the same peaks, phase by phase.
    assert_eq!(name["peaks"], file["peaks"]);
    assert_eq!(
        u(&name["peaks"]["run"]["device_used_bytes"]["bytes"]),
        2 * GIB + 512 * MIB + CTX
    );
    // A file named like a shipped workload is the one run.
    let mine = dir.path().join("quickstart");
    std::fs::write(
        &mine,
        "[workload]\nname = \"mine\"\n[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", \
         name = \"a\", size = \"64MiB\" }]\n",
    )
    .unwrap();
    assert_eq!(
        by(dir.path(), "quickstart", "mine")["workload"]["name"],
        "mine"
    );
    // Neither a file nor a shipped name: the error names both.
    let o = headroom(dir.path(), &["run", "oom/nope"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("oom/nope: cannot read the file")
            && o.stderr
                .contains("nor is it the name of a shipped workload"),
        "{}",
        o.stderr
    );
    // `plan` takes a shipped plan's name too: the article's arithmetic, 80 − 48 − 20 − 4 GiB.
    let o = headroom(dir.path(), &["plan", "article", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let plan: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(u(&plan["kv_budget_bytes"]), 8 * GIB);
    assert_eq!(u(&plan["requests"]), 16);
    let o = headroom(dir.path(), &["plan", "nope"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("nor is it the name of a shipped plan"),
        "{}",
        o.stderr
    );
    let o = headroom(dir.path(), &["workloads", "show", "nope"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("\"nope\"") && o.stderr.contains("oom/fragmentation"));
}
