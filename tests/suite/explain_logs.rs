//! `explain` on logs as users have them: the same message printed thousands of times is
//! explained once with its count and first and last line (text and `--json`, whole and
//! streamed), and a line of many messages costs what as many lines do.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use headroom::explain::explain_text;
use headroom::oom_message::StreamScanner;
use serde_json::Value;

const TORCH: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. \
    GPU 0 has a total capacity of 79.19 GiB of which 6.00 MiB is free. Including non-PyTorch \
    memory, this process has 79.18 GiB memory in use. Of the allocated memory 78.20 GiB is \
    allocated by PyTorch, and 395.42 MiB is reserved by PyTorch but unallocated.";
const DRIVER: &str = "RuntimeError: CUDA error: out of memory";
const FILLER: &str =
    "2024-05-01 12:00:01 INFO trainer step 1234 loss 0.1234 lr 3.0e-4 tokens/s 10432";

/// `headroom explain ARGS` with `input` on stdin: stdout and the exit code.
fn explain_stdin(args: &[&str], input: String) -> (String, Option<i32>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("explain")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (String::from_utf8(out.stdout).unwrap(), out.status.code())
}

/// What a generated log holds: per message (TORCH, DRIVER) its count and last line, and the
/// count of unknown lines.
struct Log {
    text: String,
    counts: [u64; 2],
    last_lines: [usize; 2],
    unknown: u64,
}

/// A log of `bytes` bytes: the two messages in turn, each after ten lines of training output,
/// and an unknown wording after every 100 messages.
fn repeated_log(bytes: usize) -> Log {
    let mut log = Log {
        text: String::with_capacity(bytes + 4096),
        counts: [0; 2],
        last_lines: [0; 2],
        unknown: 0,
    };
    let mut line = 0usize;
    let mut messages = 0usize;
    while log.text.len() < bytes {
        for _ in 0..10 {
            log.text.push_str(FILLER);
            log.text.push('\n');
            line += 1;
        }
        let which = messages % 2;
        log.text.push_str([TORCH, DRIVER][which]);
        log.text.push('\n');
        line += 1;
        log.counts[which] += 1;
        log.last_lines[which] = line;
        messages += 1;
        if messages % 100 == 0 {
            log.text.push_str("worker 3: Killed (OOM)\n");
            line += 1;
            log.unknown += 1;
        }
    }
    log
}

#[test]
fn a_27_mb_log_of_repeated_messages_explains_in_under_a_megabyte() {
    let log = repeated_log(27_000_000);
    let (text, code) = explain_stdin(&["-"], log.text.clone());
    assert_eq!(code, Some(0));
    assert!(text.len() < 1 << 20, "{} bytes of text", text.len());
    assert!(text.starts_with("message 1 · line 11 · pytorch-caching"));
    assert!(text.contains("\nmessage 2 · line 22 · cuda-driver"));
    assert!(!text.contains("\nmessage 3 "));
    assert!(text.contains(&format!(
        "message 1: printed {} times, lines 11–{}",
        log.counts[0], log.last_lines[0]
    )));
    assert!(text.contains(&format!(
        "message 2: printed {} times, lines 22–{}",
        log.counts[1], log.last_lines[1]
    )));
    assert!(text.contains(&format!(
        "{} line(s) mention running out of memory",
        log.unknown
    )));
    assert!(text.contains(&format!(
        "line 1101: worker 3: Killed (OOM) (printed {} times, lines 1101–",
        log.unknown
    )));

    // JSON the same, on a shorter log (still past the 4 MiB read whole, so streamed).
    let log = repeated_log(6_000_000);
    let (json, code) = explain_stdin(&["--json", "-"], log.text);
    assert_eq!(code, Some(0));
    assert!(json.len() < 1 << 20, "{} bytes of JSON", json.len());
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["explanations"].as_array().unwrap().len(), 2);
    assert_eq!(v["repeats"][0]["count"], log.counts[0]);
    assert_eq!(v["repeats"][0]["first_line"], 11);
    assert_eq!(v["repeats"][0]["last_line"], log.last_lines[0]);
    assert_eq!(v["repeats"][1]["message"], 2);
    assert_eq!(v["repeats"][1]["count"], log.counts[1]);
    assert_eq!(v["unrecognized"].as_array().unwrap().len(), 1);
    assert_eq!(v["unrecognized_repeats"][0]["count"], log.unknown);
}

#[test]
fn a_short_log_groups_its_repeats_in_the_report() {
    let log = repeated_log(40_000);
    let r = explain_text(&log.text);
    assert_eq!(r.explanations.len(), 2);
    assert_eq!(r.explanations[0].message.span.line, 11);
    assert_eq!(r.explanations[1].message.span.line, 22);
    let counts: Vec<u64> = r.repeats.iter().map(|x| x.count).collect();
    assert_eq!(counts, log.counts);
    let text = headroom::explain::render::render_text(&r);
    assert!(text.contains(&format!(
        "message 1 of 2 · line 11 · pytorch-caching (raised as torch.OutOfMemoryError) · printed {} times, lines 11–{}",
        log.counts[0], log.last_lines[0]
    )));
}

/// The CPU time `work` takes on this thread (the bound is on the work, whatever else the
/// machine runs).
fn cpu_time(work: impl FnOnce()) -> Duration {
    let start = crate::explain::thread_cpu_time();
    work();
    crate::explain::thread_cpu_time() - start
}

/// What `explain FILE` does with a text: 1 MiB pieces into the stream scanner.
fn stream_messages(text: &str) -> usize {
    let mut scanner = StreamScanner::new();
    let mut count = 0;
    let mut at = 0;
    while at < text.len() {
        let end = (at + (1 << 20)).min(text.len());
        count += scanner.push(&text[at..end]).messages.len();
        at = end;
    }
    count + scanner.finish().messages.len()
}

#[test]
fn a_line_of_many_messages_costs_what_as_many_lines_do() {
    // 100,000 fragments (5 MB, past the 4 MiB read whole): before the fix the one line took
    // minutes (every word searched to the end of its line again).
    let fragment = "CUDA out of memory. Tried to allocate 20.00 MiB. ";
    let n = 100_000;
    let one_line = format!("{}\n", fragment.repeat(n));
    let many_lines = format!("{fragment}\n").repeat(n);
    let (mut found_one, mut found_many) = (0, 0);
    let line = cpu_time(|| found_one = stream_messages(&one_line));
    let lines = cpu_time(|| found_many = stream_messages(&many_lines));
    assert_eq!(found_many, n);
    assert_eq!(found_one, n);
    println!("one line {line:?}, {n} lines {lines:?} of CPU");
    assert!(
        line <= lines * 3,
        "one line {line:?}, {n} lines {lines:?} of CPU"
    );
}
