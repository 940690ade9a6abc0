//! `headroom merge` of a fleet of 1,000 simulated nodes × 8 GPUs: bounded memory (the
//! child's peak RSS from `wait4`, which includes the parent's resident memory at the spawn:
//! that is why this test is a small binary of its own), a `fleet.md` under 200 lines that says
//! the shared outliers once, nodes in natural order, and duplicate UUIDs found.
//!
//! One node is run for real on the simulator (`8xh100-80g`: card 3 is 128 MiB short, card 5
//! busy); the fleet is that node folder copied 1,000 times with UUIDs of each node's own, but
//! node-7, a copy of node-3 (a GPU counted twice), and one run that says `oom`.

mod common;

use std::path::Path;

use common::fixtures::read;
use common::*;

const NODES: usize = 1000;

/// Far above what the merge holds (about a hundred bytes per GPU besides the binary), far
/// below what holding every run's summary costs.
const RSS_BOUND_BYTES: u64 = 64 * MIB;

/// Runs `headroom ARGS` in `cwd`, its stdout into `stdout`; returns its exit code and peak RSS
/// in bytes.
fn run_measured(cwd: &Path, args: &[&str], stdout: &Path) -> (i32, u64) {
    let (code, _, rss) = common::rusage::headroom_measured(cwd, args, Some(stdout));
    (code, rss)
}

/// The folder of GPU `index` in the template node.
fn template_folder(template: &Path, index: usize) -> String {
    let n: serde_json::Value = serde_json::from_str(&read(&template.join("node.json"))).unwrap();
    n["gpus"][index]["folder"].as_str().unwrap().to_string()
}

/// `uuid` with its last 12 hex digits replaced by `node`'s number: every node's own.
fn node_uuid(uuid: &str, node: usize) -> String {
    format!("{}{node:012x}", &uuid[..uuid.len() - 12])
}

/// Writes `fleet/node-<i>/` for every i: the template's files with node i's UUIDs (node-7's
/// are node-3's; node-42's GPU 0 says `oom`). The template must be on the same file system (its CSVs are linked).
fn generate(template: &Path, fleet: &Path) -> Vec<String> {
    let node_json = read(&template.join("node.json"));
    let n: serde_json::Value = serde_json::from_str(&node_json).unwrap();
    let gpus = n["gpus"].as_array().unwrap();
    let uuids: Vec<String> = gpus
        .iter()
        .map(|g| g["uuid"].as_str().unwrap().to_string())
        .collect();
    let folders: Vec<(String, bool)> = gpus
        .iter()
        .map(|g| {
            (
                g["folder"].as_str().unwrap().to_string(),
                g["outcome"] == "ran",
            )
        })
        .collect();
    let files: Vec<Vec<(&str, String)>> = folders
        .iter()
        .map(|(f, ran)| {
            if !ran {
                return vec![];
            }
            ["summary.json", "timeline.csv", "events.csv"]
                .iter()
                .map(|name| (*name, read(&template.join(f).join(name))))
                .collect()
        })
        .collect();
    for i in 0..NODES {
        let as_node = if i == 7 { 3 } else { i };
        let subst = |text: &str| {
            let mut t = text.to_string();
            for u in &uuids {
                t = t.replace(u.as_str(), &node_uuid(u, as_node));
            }
            t
        };
        let dir = fleet.join(format!("node-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("node.json"), subst(&node_json)).unwrap();
        for ((folder, _), fs) in folders.iter().zip(&files) {
            let g = dir.join(folder);
            std::fs::create_dir(&g).unwrap();
            for (name, text) in fs {
                if *name == "summary.json" {
                    let mut text = subst(text);
                    if i == 42 && folder.starts_with("gpu0-") {
                        // One run of the fleet ended otherwise than the rest.
                        text = text.replacen("\"status\": \"completed\"", "\"status\": \"oom\"", 1);
                    }
                    std::fs::write(g.join(name), text).unwrap();
                } else {
                    // The CSVs hold no UUID: one copy, linked into every node.
                    std::fs::hard_link(template.join(folder).join(name), g.join(name)).unwrap();
                }
            }
        }
    }
    uuids
}

#[test]
fn a_thousand_nodes_merge_in_bounded_memory_into_a_short_report() {
    // 25,000 files: in memory where there is a tmpfs (a disk's metadata makes writing and
    // removing them take most of a minute).
    let tmp = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let wl = workload(
        tmp.path(),
        "small",
        "[[phase]]\nname = \"load\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"1GiB\" }]\n",
    );
    let template = tmp.path().join("template");
    let r = headroom(
        tmp.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "8xh100-80g",
            "--device",
            "all",
            "-q",
            "--out",
            template.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let fleet = tmp.path().join("fleet");
    let uuids = generate(&template, &fleet);
    let csv = tmp.path().join("fleet.csv");
    let md_path = tmp.path().join("fleet.md");
    let t0 = std::time::Instant::now();
    let (code, rss) = run_measured(
        tmp.path(),
        &[
            "merge",
            fleet.to_str().unwrap(),
            "--out",
            csv.to_str().unwrap(),
        ],
        &md_path,
    );
    assert_eq!(code, 0);
    let md = read(&md_path);
    eprintln!(
        "merge of {NODES} nodes: {:?}, peak RSS {:.1} MiB, fleet.md {} lines",
        t0.elapsed(),
        rss as f64 / MIB as f64,
        md.lines().count()
    );
    assert!(rss < RSS_BOUND_BYTES, "peak RSS {rss} B");
    assert!(md.lines().count() < 200, "{md}");
    assert!(
        md.starts_with("## headroom merge: 7000 runs on 1000 nodes, 1 GPU model/driver group\n"),
        "{md}"
    );
    // The shared outliers, once each.
    let short = "- GPU index 3: CUDA-visible total 128.00 MiB below the median (79.19 GiB) on 1000/1000 nodes\n";
    assert_eq!(md.matches(short).count(), 1, "{md}");
    assert_eq!(
        md.matches("GPU index 3").count(),
        2,
        "total and headroom: {md}"
    );
    assert!(
        md.contains("- GPU index 5 not run on 1000/1000 nodes: in use by pid 4242 (20.00 GiB)"),
        "{md}"
    );
    let odd = format!(
        "- status oom on 1/7000 runs (node-42/{}); the others completed\n",
        template_folder(&template, 0)
    );
    assert!(md.contains(&odd), "{md}");
    // node-7 holds node-3's GPUs: eight UUIDs twice, five named, the rest counted.
    let dup0 = format!(
        "- duplicate UUID {} on 2 GPUs (node-3 GPU 0, node-7 GPU 0)",
        node_uuid(&uuids[0], 3)
    );
    assert!(md.contains(&dup0), "{md}");
    assert_eq!(md.matches("- duplicate UUID").count(), 5, "{md}");
    assert!(
        md.contains("- and 3 more UUIDs found on more than one GPU (8 duplicated in all"),
        "{md}"
    );
    // The roll-up: one row per figure, the spread of the total is the short card's 128 MiB.
    assert!(
        md.contains(
            "| CUDA-visible total | 7000 | 79.06 GiB | 79.19 GiB | 79.19 GiB | 128.00 MiB |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| true peak `own_bytes` | 7000 | 1.00 GiB | 1.00 GiB | 1.00 GiB | 0 B |"),
        "{md}"
    );
    // One CSV row per GPU run, nodes in natural order (node-9 before node-10), raw bytes.
    let rows = csv_rows(&csv);
    assert_eq!(rows.len(), 7000);
    let node_of = |i: usize| {
        Path::new(&rows[i]["node"])
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    assert_eq!(node_of(0), "node-0");
    assert_eq!(node_of(9 * 7), "node-9");
    assert_eq!(node_of(10 * 7), "node-10");
    assert_eq!(node_of(6999), "node-999");
    assert_eq!(
        rows[3 * 7 + 3]["device_total_bytes"],
        (80961 * MIB).to_string()
    );
    assert_eq!(rows[0]["peak_own_bytes"], GIB.to_string());
}
