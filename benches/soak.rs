//! Soak runs measured: `headroom run` of an hour and of ten hours of virtual time at a 1 ms
//! sample interval on the simulated device, each reported with its wall time, the child's peak
//! resident set size (from `wait4`) and the size of everything it wrote. Fails when a run
//! takes 200 MB or more, or an hour's outputs come to 60 MB or more.
//!
//! `cargo bench --bench soak` (both); `SOAK_HOURS=1 cargo bench --bench soak` (one). Under
//! `cargo test` (no `--bench` argument) it runs one minute, to check that it works.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

// The wait4 helper the tests use.
#[allow(dead_code)]
#[path = "../tests/common/rusage.rs"]
mod rusage;

/// Peak resident set size any run may reach.
const RSS_MAX_BYTES: u64 = 200_000_000;
/// What an hour's run may write, every file of its folder together.
const OUTPUT_PER_HOUR_MAX_BYTES: u64 = 60_000_000;

/// A soak workload: every second, 64 MiB allocated for half of it, over a 256 MiB base.
fn workload(minutes: u64) -> String {
    format!(
        r#"[workload]
name = "soak-{minutes}min"

[settings]
sample_interval = "1ms"

[[phase]]
name = "soak"
steps = [
  {{ op = "allocate", name = "base", size = "256MiB" }},
  {{ op = "repeat", times = {}, steps = [
    {{ op = "allocate", name = "w", size = "64MiB" }},
    {{ op = "sleep", for = "500ms" }},
    {{ op = "free", name = "w" }},
    {{ op = "sleep", for = "500ms" }},
  ] }},
  {{ op = "free", name = "base" }},
]
"#,
        minutes * 60
    )
}

struct Measured {
    wall: Duration,
    rss_bytes: u64,
    output_bytes: u64,
    timeline_bytes: u64,
    code: i32,
}

// The child is reaped by `wait4`, which also gives its resource usage.
#[allow(clippy::zombie_processes)]
fn run(dir: &Path, minutes: u64) -> Measured {
    let wl = dir.join(format!("soak-{minutes}min.toml"));
    std::fs::write(&wl, workload(minutes)).unwrap();
    let out = dir.join(format!("out-{minutes}min"));
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
    let (code, rss_bytes) = rusage::wait_measured(child);
    let wall = started.elapsed();
    let size = |f: &str| std::fs::metadata(out.join(f)).map_or(0, |m| m.len());
    let output_bytes = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    Measured {
        wall,
        rss_bytes,
        output_bytes,
        timeline_bytes: size("timeline.csv"),
        code,
    }
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let minutes: Vec<u64> = if benching {
        std::env::var("SOAK_HOURS")
            .unwrap_or_else(|_| "1,10".into())
            .split(',')
            .map(|h| {
                let h: u64 = h
                    .trim()
                    .parse()
                    .expect("SOAK_HOURS: whole hours, comma separated");
                h * 60
            })
            .collect()
    } else {
        vec![1]
    };
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    println!("virtual time  wall (s)  peak RSS (bytes)  outputs (bytes)  timeline.csv (bytes)");
    for min in minutes {
        let m = run(dir.path(), min);
        println!(
            "{:>8} min  {:>8.1}  {:>16}  {:>15}  {:>20}",
            min,
            m.wall.as_secs_f64(),
            m.rss_bytes,
            m.output_bytes,
            m.timeline_bytes
        );
        if m.code != 0 {
            failed.push(format!("{min} min: exit {}", m.code));
        }
        if m.rss_bytes >= RSS_MAX_BYTES {
            failed.push(format!("{min} min: peak RSS {} bytes", m.rss_bytes));
        }
        if m.output_bytes >= min.div_ceil(60) * OUTPUT_PER_HOUR_MAX_BYTES {
            failed.push(format!("{min} min: {} bytes of outputs", m.output_bytes));
        }
        std::fs::remove_dir_all(dir.path().join(format!("out-{min}min"))).unwrap();
    }
    if !failed.is_empty() {
        eprintln!("soak targets missed: {}", failed.join("; "));
        std::process::exit(1);
    }
}
