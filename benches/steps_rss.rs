//! Peak memory of a run against its number of steps: `headroom run` of 10^5, 10^6 and 10^7 steps (an
//! allocation touched over and over, on the simulated device), each reported with its wall time
//! and the child's peak resident set size (from `wait4`). The run makes its actions as it goes,
//! so the peak must not grow with the steps: it fails when any run takes 100 MB or more.
//!
//! `cargo bench --bench steps_rss`; `RSS_STEPS=N,M` for other counts (10^7 is the action
//! bound). Under `cargo test` (no `--bench` argument) it runs 10^4 steps, to check that it
//! works.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

// The wait4 helper the tests use.
#[allow(dead_code)]
#[path = "../tests/common/rusage.rs"]
mod rusage;

/// Peak resident set size any run may reach.
const RSS_MAX_BYTES: u64 = 100_000_000;

/// `steps` steps: one allocation, then touches of it.
fn workload(steps: u64) -> String {
    format!(
        r#"[workload]
name = "steps-{steps}"

[[phase]]
name = "p"
steps = [
  {{ op = "allocate", name = "w", size = "4KiB" }},
  {{ op = "repeat", times = {}, steps = [{{ op = "touch", name = "w" }}] }},
]
"#,
        steps - 1
    )
}

// The child is reaped by `wait4`, which also gives its resource usage.
#[allow(clippy::zombie_processes)]
fn run(dir: &Path, steps: u64) -> (i32, Duration, u64) {
    let wl = dir.join(format!("steps-{steps}.toml"));
    std::fs::write(&wl, workload(steps)).unwrap();
    let out = dir.join(format!("out-{steps}"));
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args([
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "-q",
            "--out",
        ])
        .arg(&out)
        .spawn()
        .unwrap();
    let (code, rss) = rusage::wait_measured(child);
    let wall = started.elapsed();
    // A run of 10^7 steps writes about 1.4 GB of CSV: gone before the next.
    let _ = std::fs::remove_dir_all(&out);
    (code, wall, rss)
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let sizes: Vec<u64> = if benching {
        std::env::var("RSS_STEPS")
            .unwrap_or_else(|_| "100000,1000000,10000000".into())
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("RSS_STEPS: step counts, comma separated")
            })
            .collect()
    } else {
        vec![10_000]
    };
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    println!("     steps  wall (s)  peak RSS (bytes)");
    for steps in sizes {
        let (code, wall, rss) = run(dir.path(), steps);
        println!("{steps:>10}  {:>8.1}  {rss:>16}", wall.as_secs_f64());
        if code != 0 {
            failed.push(format!("{steps} steps: exit {code}"));
        }
        if rss >= RSS_MAX_BYTES {
            failed.push(format!("{steps} steps: peak RSS {rss} bytes"));
        }
    }
    if !failed.is_empty() {
        eprintln!("step-count memory targets missed: {}", failed.join("; "));
        std::process::exit(1);
    }
}
