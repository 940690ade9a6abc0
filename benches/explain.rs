//! `explain` on a large log with sparse out-of-memory messages: a training log of ordinary
//! lines (~110 bytes each) with a PyTorch or CUDA message every 100,000 lines, explained the
//! way `headroom explain FILE` streams it (1 MiB pieces, each made text with stray bytes
//! replaced, into the stream scanner; every message found explained). Throughput is in bytes
//! of log: compare `explain/sparse-log` with `grep -c 'out of memory'` on the same file (the
//! bench writes it to `target/explain-bench.log` and prints the grep figure when grep exists).
//! Before it, the shape of the lines: 10^6 "CUDA out of memory. Tried to allocate 20.00 MiB."
//! fragments on one line against 10^6 one-fragment lines, each read the same way, the faster of
//! two tries of each printed with their ratio (the bound: at most 3×).

use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use headroom::oom_message::StreamScanner;

/// The log's size.
const LOG_BYTES: usize = 256 << 20;
/// One message every this many lines.
const EVERY_LINES: usize = 100_000;
const PIECE_BYTES: usize = 1 << 20;

const MESSAGES: [&str; 2] = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total \
     capacity of 79.19 GiB of which 6.00 MiB is free. Including non-PyTorch memory, this process \
     has 79.18 GiB memory in use. Of the allocated memory 78.20 GiB is allocated by PyTorch, and \
     395.42 MiB is reserved by PyTorch but unallocated.",
    "RuntimeError: CUDA error: out of memory",
];

fn log() -> Vec<u8> {
    let mut out = Vec::with_capacity(LOG_BYTES + 4096);
    let mut i = 0usize;
    while out.len() < LOG_BYTES {
        i += 1;
        if i % EVERY_LINES == 0 {
            out.extend_from_slice(MESSAGES[(i / EVERY_LINES) % 2].as_bytes());
            out.push(b'\n');
        } else {
            let _ = writeln!(
                out,
                "2024-05-01 12:00:{:02} INFO trainer step {i} loss 0.{:04} lr 3.0e-4 grad_norm 0.91 tokens/s 10432",
                i % 60,
                (i * 7919) % 10_000
            );
        }
    }
    out
}

/// What `explain FILE` does with the text, minus the printing: the number of messages.
fn explain_log(bytes: &[u8]) -> usize {
    let mut scanner = StreamScanner::new();
    let mut earlier = Vec::new();
    let mut count = 0;
    let mut explain = |settled: headroom::oom_message::Settled| {
        for m in settled.messages {
            let e = headroom::explain::explain(m, &earlier);
            count += 1;
            earlier.push(e);
            if earlier.len() > 16 {
                earlier.remove(0);
            }
        }
    };
    let mut at = 0;
    while at < bytes.len() {
        let mut end = (at + PIECE_BYTES).min(bytes.len());
        if let Some(i) = bytes[at..end].iter().rposition(|&b| b == b'\n') {
            end = at + i + 1;
        }
        let piece = String::from_utf8_lossy(&bytes[at..end]);
        explain(scanner.push(&piece));
        at = end;
    }
    explain(scanner.finish());
    count
}

/// `grep -c` on the same log, for the comparison (seconds, or `None` without grep).
fn grep_seconds(bytes: &[u8]) -> Option<f64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/explain-bench.log");
    std::fs::write(&path, bytes).ok()?;
    let _ = std::process::Command::new("grep")
        .args(["-c", "out of memory"])
        .arg(&path)
        .output()
        .ok()?;
    let t0 = Instant::now();
    let out = std::process::Command::new("grep")
        .args(["-c", "out of memory"])
        .arg(&path)
        .output()
        .ok()?;
    let secs = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    out.status.success().then_some(secs)
}

/// The messages the stream scanner finds in `text`, fed in 1 MiB pieces as `explain FILE`
/// feeds it (the reading alone: what the shape of the lines changes).
fn scan_count(text: &str) -> usize {
    let mut scanner = StreamScanner::new();
    let mut count = 0;
    let mut at = 0;
    while at < text.len() {
        let mut end = (at + PIECE_BYTES).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        count += scanner.push(&text[at..end]).messages.len();
        at = end;
    }
    count + scanner.finish().messages.len()
}

/// Seconds `scan_count` takes on `text`, the faster of two tries, and the messages found.
fn timed(text: &str) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut found = 0;
    for _ in 0..2 {
        let t0 = Instant::now();
        found = black_box(scan_count(text));
        best = best.min(t0.elapsed().as_secs_f64());
    }
    (best, found)
}

/// 10^6 fragments on one line against 10^6 one-fragment lines.
fn line_against_lines() {
    const FRAGMENTS: usize = 1_000_000;
    let fragment = "CUDA out of memory. Tried to allocate 20.00 MiB. ";
    let one_line = format!("{}\n", fragment.repeat(FRAGMENTS));
    let many_lines = format!("{fragment}\n").repeat(FRAGMENTS);
    let (line, found_line) = timed(&one_line);
    let (lines, found_lines) = timed(&many_lines);
    assert_eq!(found_line, FRAGMENTS);
    assert_eq!(found_lines, FRAGMENTS);
    println!(
        "10^6 fragments on one line ({} MB): {line:.2} s; 10^6 one-fragment lines: {lines:.2} s; ratio {:.2}",
        one_line.len() / 1_000_000,
        line / lines
    );
}

fn bench(c: &mut Criterion) {
    // `cargo bench` passes `--bench`; the test-mode run in CI (`cargo test --all-targets`)
    // does not, and skips these 200 MB of reading.
    if std::env::args().any(|a| a == "--bench") {
        line_against_lines();
    }
    let bytes = log();
    let expected = bytes.len() / 110 / EVERY_LINES;
    let found = explain_log(&bytes);
    assert!(
        found + 1 >= expected && found > 0,
        "{found} messages, about {expected} expected"
    );
    if let Some(s) = grep_seconds(&bytes) {
        println!(
            "grep -c 'out of memory' on the same {} MB: {:.3} s, {:.0} MB/s",
            bytes.len() / 1_000_000,
            s,
            bytes.len() as f64 / s / 1e6
        );
    }
    let mut g = c.benchmark_group("explain");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("sparse-log", |b| b.iter(|| black_box(explain_log(&bytes))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
