//! Reading a workload file of many written steps: the one-pass reader (`parse_one_pass`)
//! against the `toml` crate's document (`parse_general`), each reading the file in a process
//! of its own (this bench runs itself again), with its wall time and peak resident set size
//! (from `wait4`).
//!
//! `cargo bench --bench parse` reads 2,000,000 written steps (a file of 93 MB: the most steps
//! headroom parses), three rounds alternating the two readers, and prints each round and the
//! ratios; `PARSE_STEPS=N` for another count. Under `cargo test` (no `--bench` argument) it
//! reads 10,000 steps once with each, to check that it works and that both read the same
//! workload.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use headroom::workload::parse::{parse_general, parse_one_pass};

// The wait4 helper the tests use.
#[allow(dead_code)]
#[path = "../tests/common/rusage.rs"]
mod rusage;

/// Set in the child: which reader to run, on which file.
const CHILD_READER: &str = "HEADROOM_PARSE_BENCH_READER";
const CHILD_FILE: &str = "HEADROOM_PARSE_BENCH_FILE";

/// `steps` written steps: allocate and free pairs, one step a line.
fn workload(steps: u64) -> String {
    let mut text =
        String::from("[workload]\nname = \"written\"\n\n[[phase]]\nname = \"p\"\nsteps = [\n");
    for i in 0..steps / 2 {
        text.push_str(&format!(
            "  {{ op = \"allocate\", name = \"t{i}\", size = \"4KiB\" }},\n  {{ op = \"free\", name = \"t{i}\" }},\n"
        ));
    }
    text.push_str("]\n");
    text
}

/// In the child: reads the file with one reader and prints how many steps it read.
fn child(reader: &str, file: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let path = Path::new(file);
    let w = match reader {
        "one-pass" => parse_one_pass(&text, path).expect("the one-pass reader reads the file"),
        _ => parse_general(&text, path).unwrap(),
    };
    println!("{}", w.phases.iter().map(|(_, s)| s.len()).sum::<usize>());
}

/// Runs this bench again as a child reading `file` with `reader`: its output, wall time and
/// peak RSS.
#[allow(clippy::zombie_processes)]
fn measured(reader: &str, file: &Path) -> (String, Duration, u64) {
    let out = file.with_extension(format!("{reader}.out"));
    let started = Instant::now();
    let child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_READER, reader)
        .env(CHILD_FILE, file)
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    let (code, rss) = rusage::wait_measured(child);
    let wall = started.elapsed();
    assert_eq!(code, 0, "the {reader} reader's process exited {code}");
    (std::fs::read_to_string(&out).unwrap(), wall, rss)
}

fn main() {
    if let (Ok(reader), Ok(file)) = (std::env::var(CHILD_READER), std::env::var(CHILD_FILE)) {
        return child(&reader, &file);
    }
    let benching = std::env::args().any(|a| a == "--bench");
    let steps: u64 = if benching {
        std::env::var("PARSE_STEPS").ok().map_or(2_000_000, |n| {
            n.trim().parse().expect("PARSE_STEPS: a step count")
        })
    } else {
        10_000
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("written.toml");
    let text = workload(steps);
    std::fs::write(&file, &text).unwrap();
    if !benching {
        let path = Path::new("written.toml");
        let one = parse_one_pass(&text, path).map(|w| format!("{w:?}"));
        let general = parse_general(&text, path).map(|w| format!("{w:?}"));
        assert_eq!(
            one,
            general.ok(),
            "the two readers read the file differently"
        );
    }
    println!(
        "{steps} written steps, {} bytes of file; each reader in a process of its own",
        text.len()
    );
    println!("round  reader     wall (s)  peak RSS (bytes)");
    let rounds = if benching { 3 } else { 1 };
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let mut row = Vec::new();
        for reader in ["one-pass", "general"] {
            let (out, wall, rss) = measured(reader, &file);
            assert_eq!(out.trim(), steps.to_string(), "{reader} read {out}");
            println!(
                "{round:>5}  {reader:<9}  {:>8.2}  {rss:>16}",
                wall.as_secs_f64()
            );
            row.push((wall.as_secs_f64(), rss as f64));
        }
        ratios.push((row[1].0 / row[0].0, row[1].1 / row[0].1));
    }
    for (round, (wall, rss)) in ratios.iter().enumerate() {
        println!(
            "round {}: the general reader took {wall:.1}× the one-pass reader's wall time and {rss:.1}× its peak RSS",
            round + 1
        );
    }
}
