//! The documents agree with the files and with each other. The README stays a front door (its
//! size bounded, its set-up commands and Install section present); every relative link in the
//! README, CONTRIBUTING.md and docs/ resolves, down to the heading it names; the guide's table
//! has every command and docs/architecture.md every module of src/. docs/formats.md lists every
//! `result` value of events.csv, the columns of alloc-log.csv as the logging adaptor writes
//! them (and `replay --help` uses the header's names), and says of `format_version` what the
//! files carry; the guide states the driver floor headroom enforces. The run and watch
//! summaries the README and the docs show are what the commands print, line for line.

use std::path::{Path, PathBuf};

use crate::common::*;

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn doc(path: &str) -> String {
    std::fs::read_to_string(manifest().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The README, CONTRIBUTING.md and every Markdown file of docs/, by path from the root.
fn documents() -> Vec<String> {
    let mut out = vec!["README.md".to_string(), "CONTRIBUTING.md".to_string()];
    let mut in_docs: Vec<String> = std::fs::read_dir(manifest().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    in_docs.sort();
    out.extend(in_docs);
    out
}

/// GitHub's anchor for a heading: lower case, backticks and punctuation dropped, spaces as
/// hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every `](target)` of a Markdown text outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

#[test]
fn the_readme_is_a_front_door_with_its_set_up_commands() {
    let text = doc("README.md");
    assert!(
        text.len() <= 15_000,
        "README.md is {} bytes: the reference belongs in docs/",
        text.len()
    );
    for want in [
        "cargo run --release -- run workloads/quickstart.toml",
        "bash .ci/run",
        "\n## Install\n",
        "cargo install --locked --path .",
        "`$CARGO_HOME/bin`",
    ] {
        assert!(text.contains(want), "README.md lacks {want:?}");
    }
    for d in documents().iter().skip(1) {
        assert!(
            text.contains(&format!("]({d})")),
            "README.md does not link {d}"
        );
    }
}

#[test]
fn every_relative_link_in_the_documents_resolves() {
    let mut broken = Vec::new();
    for d in documents() {
        let text = doc(&d);
        let base: PathBuf = manifest().join(&d).parent().unwrap().to_path_buf();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                manifest().join(&d)
            } else {
                base.join(path)
            };
            if !target.exists() {
                broken.push(format!("{d}: {link} (no such file)"));
                continue;
            }
            if let Some(f) = fragment {
                let heads = anchors(&std::fs::read_to_string(&target).unwrap());
                if !heads.iter().any(|h| h == f) {
                    broken.push(format!("{d}: {link} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_guide_lists_every_command_and_the_architecture_every_module() {
    use clap::CommandFactory;
    let guide = doc("docs/guide.md");
    let table = guide
        .split("\n## Commands\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/guide.md has a Commands section");
    let cli = headroom::cli::Cli::command();
    for sub in cli.get_subcommands() {
        let name = sub.get_name();
        if name == "help" {
            continue;
        }
        assert!(
            table.contains(&format!("| `headroom {name}")),
            "docs/guide.md's command table has no row for `headroom {name}`"
        );
    }
    let arch = doc("docs/architecture.md");
    let lib = doc("src/lib.rs");
    for line in lib.lines() {
        let Some(m) = line
            .strip_prefix("pub mod ")
            .and_then(|l| l.strip_suffix(';'))
        else {
            continue;
        };
        let dir = manifest().join("src").join(m).is_dir();
        let want = if dir {
            format!("`src/{m}/")
        } else {
            format!("`src/{m}.rs`")
        };
        assert!(arch.contains(&want), "docs/architecture.md lacks {want}");
    }
}

#[test]
fn every_events_result_is_listed_in_the_formats_page() {
    let text = doc("docs/formats.md");
    for (value, _) in headroom::record::timeline::EVENT_RESULTS {
        assert!(
            text.contains(&format!("| `{value}` |")),
            "docs/formats.md lists no result `{value}`"
        );
    }
}

#[test]
fn the_alloc_log_columns_are_documented_as_written() {
    let text = doc("docs/formats.md");
    let cols = headroom::alloc::adaptors::LOG_HEADER;
    let at = text
        .find("`alloc-log.csv` columns")
        .expect("docs/formats.md documents alloc-log.csv's columns");
    let section = &text[at..at + 800.min(text.len() - at)];
    let mut last = 0;
    for c in cols {
        let i = section[last..]
            .find(&format!("`{c}`"))
            .unwrap_or_else(|| panic!("column `{c}` missing or out of order"));
        last += i;
    }
    let help = headroom(manifest(), &["replay", "--help"]);
    assert!(help.stdout.contains(&cols.join(",")), "{}", help.stdout);
    assert!(!help.stdout.contains("t_ns,event"), "{}", help.stdout);
}

#[test]
fn format_version_is_where_the_formats_page_says() {
    let text = doc("docs/formats.md");
    assert!(!text.contains("Every output carries its"));
    assert!(text.contains("the CSVs carry none of their own"));
    let tmp = tempfile::tempdir().unwrap();
    let wl = workload(
        tmp.path(),
        "fv",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"sleep\", for = \"1ms\" }]\n",
    );
    let (out, s, dir) = run_tiny(tmp.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = s["format_version"].as_u64().unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    assert_eq!(trace["otherData"]["format_version"].as_u64(), Some(v));
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(
        junit.contains(&format!("name=\"format_version\" value=\"{v}\"")),
        "{junit}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains(&format!("format_version {v}")));
    for csv in ["events.csv", "timeline.csv", "alloc-log.csv"] {
        let head = std::fs::read_to_string(dir.join(csv)).unwrap();
        assert!(
            !head.lines().next().unwrap().contains("format_version"),
            "{csv}"
        );
    }
}

#[test]
fn the_guide_states_the_driver_floor_headroom_enforces() {
    use headroom::device::floor;
    let text = doc("docs/guide.md");
    let v = floor::FLOOR_CUDA_VERSION;
    let floor_text = format!(
        "R{} (CUDA {}, `cuDriverGetVersion` {v})",
        floor::floor_branch(),
        floor::cuda_version_text(v)
    );
    let at = text
        .find("## On a real GPU")
        .expect("docs/guide.md has an On a real GPU section");
    assert!(
        text[at..].contains(&floor_text),
        "docs/guide.md lacks {floor_text}"
    );
    for d in documents() {
        assert!(
            !doc(&d).contains("R550 or newer"),
            "{d} names another floor"
        );
    }
}

/// The example blocks of `docs` that begin with `first`: their lines, the `$ command` line and
/// `...` elisions left out.
fn examples(docs: &[&str], first: &str) -> Vec<(String, Vec<String>)> {
    let mut found = vec![];
    for d in docs {
        let text = doc(d);
        for block in text.split("```").skip(1).step_by(2) {
            let lines: Vec<String> = block
                .lines()
                .skip(1)
                .filter(|l| !l.starts_with("$ ") && *l != "...")
                .map(str::to_string)
                .collect();
            if lines.first().is_some_and(|l| l.starts_with(first)) {
                found.push((d.to_string(), lines));
            }
        }
    }
    found
}

/// Every line of `shown` is a line of `printed`, in order.
fn shown_as_printed(doc: &str, shown: &[String], printed: &str) {
    let mut rest = printed.lines();
    for l in shown {
        assert!(
            rest.any(|p| p == l),
            "{doc} shows {l:?}, which is not printed (in this order):\n{printed}"
        );
    }
}

/// The run summary the README and the docs show is what `headroom run` prints, line for line
/// (tables included: one table style for every command).
#[test]
fn the_documented_run_summary_is_what_run_prints() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = headroom(
        dir.path(),
        &[
            "run",
            manifest()
                .join("workloads/quickstart.toml")
                .to_str()
                .unwrap(),
            "--profile",
            "h200",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let printed = format!("{}{}", o.stdout, o.stderr);
    let blocks = examples(
        &["README.md", "docs/formats.md"],
        "headroom · quickstart on NVIDIA H200",
    );
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    for (d, shown) in &blocks {
        shown_as_printed(d, shown, &printed);
    }
}

/// The watch summary the README and the guide show is what `headroom watch` prints on the fake
/// driver, line for line but for the achieved rates and the process list's call cost (`read:`).
#[test]
fn the_documented_watch_summary_is_what_watch_prints() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_headroom")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = std::process::Command::new("bash")
        .arg(manifest().join("scripts/fake-gpu"))
        .args(["headroom", "watch", "--out"])
        .arg(dir.path().join("out"))
        .args([
            "--",
            "headroom",
            "hold",
            "1GiB",
            "--for",
            "300ms",
            "--backend",
            "cuda",
        ])
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_PROFILE")
        .env_remove("HEADROOM_MARK")
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{printed}");
    let blocks = examples(
        &["README.md", "docs/guide.md"],
        "headroom · watch of `headroom hold",
    );
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    for (d, shown) in &blocks {
        let steady: Vec<String> = shown
            .iter()
            .filter(|l| !l.starts_with("read: "))
            .cloned()
            .collect();
        shown_as_printed(d, &steady, &printed);
    }
}
