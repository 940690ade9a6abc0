//! `headroom explain`: the fixture corpus (every format, exact byte intervals, the cause), the
//! command's text and JSON, its exit codes, escaping, the line-by-line scanner, and that no
//! input makes it panic or slow down.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use headroom::explain::{explain_text, render};
use headroom::oom_message::{LineScanner, find_all};
use proptest::prelude::*;
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oom-messages")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap()
}

fn logs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

/// The figures of a message as `{name: [low, high]}`, the way the expected files spell them.
fn figures(message: &Value) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for (k, v) in message.as_object().unwrap() {
        if let Some(q) = v.as_object().filter(|q| q.contains_key("printed")) {
            out.insert(k.clone(), serde_json::json!([q["low"], q["high"]]));
        } else if k == "processes" {
            for (i, p) in v.as_array().unwrap().iter().enumerate() {
                let u = &p["used"];
                out.insert(
                    format!("processes[{i}].used"),
                    serde_json::json!([u["low"], u["high"]]),
                );
            }
        } else if k == "figures" {
            // The reading by principle: each figure under its label.
            for (i, f) in v.as_array().unwrap().iter().enumerate() {
                let label = f["label"].as_str().unwrap_or("unlabelled");
                out.insert(
                    format!("figures[{i}].{label}"),
                    serde_json::json!([f["low"], f["high"]]),
                );
            }
        } else if k.ends_with("_bytes") && v.is_u64() {
            out.insert(k.clone(), serde_json::json!([v, v]));
        }
    }
    out
}

#[test]
fn every_fixture_parses_and_diagnoses_as_expected() {
    let logs = logs();
    assert!(logs.len() >= 30, "the corpus shrank: {}", logs.len());
    let mut formats = std::collections::BTreeSet::new();
    for log in logs {
        let name = log.file_name().unwrap().to_string_lossy().into_owned();
        let expected_path = log.with_extension("expected.json");
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(&expected_path).unwrap()).unwrap();
        let report =
            serde_json::to_value(explain_text(&std::fs::read_to_string(&log).unwrap())).unwrap();
        let got = report["explanations"].as_array().unwrap();
        let want = expected["messages"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}: message count");
        for (g, w) in got.iter().zip(want) {
            let m = &g["message"];
            formats.insert(m["format"].as_str().unwrap().to_string());
            assert_eq!(m["format"], w["format"], "{name}");
            assert_eq!(m["line"], w["line"], "{name}");
            assert_eq!(g["cause"], w["cause"], "{name}: cause");
            assert_eq!(g["secondary_causes"], w["secondary_causes"], "{name}");
            let undecided: Vec<Value> = g["undecided"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["candidates"].clone())
                .collect();
            assert_eq!(Value::from(undecided), w["undecided"], "{name}: undecided");
            assert_eq!(
                Value::Object(figures(m)),
                w["figures"],
                "{name}: figures in bytes"
            );
        }
        let lines: Vec<Value> = report["unrecognized"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["line"].clone())
            .collect();
        assert_eq!(Value::from(lines), expected["unrecognized_lines"], "{name}");
    }
    // Every format has at least one fixture here or in the corpus of real reports (which
    // `oom_corpus` holds to at least three each).
    for entry in std::fs::read_dir(fixtures().join("reports/corpus-1")).unwrap() {
        let report = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let report: toml::Value = toml::from_str(&report).unwrap();
        formats.insert(report["format"].as_str().unwrap().to_string());
    }
    for f in headroom::oom_message::Format::ALL {
        assert!(formats.contains(f.name()), "no fixture for {}", f.name());
    }
}

#[test]
fn the_issue_example_reads_to_the_byte() {
    let text = fixture("pytorch-issue19-private-pools.log");
    let report = serde_json::to_value(explain_text(&text)).unwrap();
    let e = &report["explanations"][0];
    let m = &e["message"];
    // 786.00 MiB is [785.995, 786.005] MiB; 79.11 GiB is [79.105, 79.115] GiB.
    assert_eq!(m["requested"]["low"], 824_175_494u64);
    assert_eq!(m["requested"]["high"], 824_185_978u64);
    assert_eq!(m["device_total"]["low"], 84_938_346_988u64);
    assert_eq!(m["device_total"]["high"], 84_949_084_405u64);
    assert_eq!(m["processes"][0]["pid"], 3_270_336);
    assert_eq!(m["raised_as"], "torch.OutOfMemoryError");
    assert_eq!(m["hint"], "expandable-segments");
    assert_eq!(m["truncated"], false);
    assert_eq!(e["cause"], "outside-allocator");
    assert_eq!(e["secondary_causes"], serde_json::json!(["graph-pool"]));
    let step = |name: &str| {
        e["arithmetic"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .clone()
    };
    // this process − reserved = 78.96 GiB − (68.83 GiB + 331.08 MiB), at the bounds.
    let outside = step("outside_allocator_bytes");
    assert_eq!(
        outside["low"],
        84_777_285_714i64 - (73_911_018_455 + 347_167_784)
    );
    assert_eq!(
        outside["high"],
        84_788_023_132i64 - (73_900_281_037 + 347_157_300)
    );
    let share = step("reserved_unallocated_share");
    assert!(share["low"].as_f64().unwrap() > 0.0046 && share["high"].as_f64().unwrap() < 0.0048);
    assert!(
        e["ruled_out"][0]
            .as_str()
            .unwrap()
            .starts_with("not fragmentation: only 331.08 MiB of the 69.15–69.16 GiB reserved is unallocated (0.5%)"),
        "{}",
        e["ruled_out"]
    );
    assert_eq!(
        e["next_checks"][0]["command"],
        "headroom run workloads/oom/outside-allocator.toml"
    );
    let commands: Vec<&str> = e["next_checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    assert!(commands.contains(&"headroom import torch oom.pickle"));
    assert!(commands.contains(&"headroom replay oom.pickle --try-settings"));
    assert!(commands.contains(&"nvidia-smi --query-compute-apps=pid,used_memory --format=csv"));
    // Fragmentation is ruled out, so the allocator setting is not offered.
    assert!(!commands.iter().any(|c| c.contains("expandable_segments")));
}

fn run(args: &[&str], stdin: Option<&str>) -> crate::common::Out {
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    crate::common::Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn the_command_prints_figures_arithmetic_cause_and_checks() {
    let text = fixture("pytorch-issue19-private-pools.log");
    let out = run(&["explain", text.trim()], None);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for want in [
        "message 1 of 1 · line 1 · pytorch-caching (raised as torch.OutOfMemoryError)",
        "requested                   786.00 MiB   824175494–824185978 B",
        "process 3270336              78.96 GiB",
        "outside_allocator_bytes                9.80–9.82 GiB   = this_process − reserved",
        "cause: outside-allocator",
        "also: graph-pool",
        "- not fragmentation: only 331.08 MiB of the 69.15–69.16 GiB reserved is unallocated (0.5%)",
        "Process 3270336 must be this process",
        "$ headroom run workloads/oom/outside-allocator.toml",
        ">>> torch.cuda.memory._record_memory_history(max_entries=1_000_000)",
    ] {
        assert!(
            out.stdout.contains(want),
            "missing {want:?} in\n{}",
            out.stdout
        );
    }
    // The words of an unquoted message are joined back together.
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut args = vec!["explain"];
    args.extend(words);
    let out = run(&args, None);
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("cause: outside-allocator"));
}

#[test]
fn json_has_raw_bytes_intervals_and_a_format_version() {
    let log = fixtures().join("vllm-kv-cache-too-small.log");
    let out = run(
        &["explain", "--json", "--file", log.to_str().unwrap()],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["format_version"], 1);
    let e = &v["explanations"][0];
    assert_eq!(e["message"]["format"], "vllm-kv-cache-too-small");
    assert_eq!(e["message"]["max_model_len"], 131072);
    assert_eq!(e["message"]["estimated_max_model_len"], 58148);
    // 52.66 GiB as format_gib prints it: round(b / 2^30, 2).
    let gib = 1u64 << 30;
    assert_eq!(
        e["message"]["kv_cache_needed"]["low"],
        (52655 * gib).div_ceil(1000)
    );
    assert_eq!(e["message"]["kv_cache_needed"]["high"], 52665 * gib / 1000);
    assert_eq!(e["cause"], "capacity");
    assert!(
        e["next_checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["command"] == "vllm serve MODEL --max-model-len 58148"
                && c["kind"] == "shell")
    );
    assert!(v["known_formats"].as_array().unwrap().len() >= 15);
}

#[test]
fn exit_codes_say_explained_nothing_recognized_or_unreadable() {
    let out = run(
        &["explain", "--file", "-"],
        Some(&fixture("unrecognized.log")),
    );
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("No out-of-memory message recognized."));
    assert!(
        out.stdout
            .contains("line 1: Killed process 4242 (python) total-vm:81234567kB: OOM killer")
    );
    assert!(out.stdout.contains("Known formats:"));
    assert!(out.stdout.contains("pytorch-caching-legacy"));
    let out = run(&["explain", "--json"], Some("all good\n"));
    assert_eq!(out.code, 1);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["explanations"], serde_json::json!([]));
    let out = run(&["explain", "--file", "/nonexistent/oom.log"], None);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("/nonexistent/oom.log: cannot read"),
        "{}",
        out.stderr
    );
    // stdin without --file, a whole log.
    let out = run(&["explain"], Some(&fixture("nccl.log")));
    assert_eq!(out.code, 0);
    assert!(
        out.stdout
            .contains("message 3 of 3 · line 5 · nccl-cuda-failure")
    );
}

#[test]
fn terminal_control_characters_in_the_input_are_escaped() {
    let evil = "\u{1b}]0;pwned\u{7}\u{1b}[2J Allocator (GPU_0_\u{1b}[31mbfc) ran out of memory trying to allocate 2.00GiB (rounded to 2147483648)\n\u{1b}[1mRuntimeError: out of memory \u{1b}[0m\n";
    let out = run(&["explain"], Some(evil));
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        !out.stdout.contains('\u{1b}'),
        "raw ESC in {:?}",
        out.stdout
    );
    assert!(!out.stdout.contains('\u{7}'));
    assert!(out.stdout.contains("GPU_0_\\u{1b}[31mbfc"));
    // The second line is read by principle; its colour codes are not part of it.
    assert!(
        out.stdout.contains("  \"RuntimeError: out of memory\""),
        "{}",
        out.stdout
    );
    let out = run(&["explain", "--json"], Some(evil));
    assert!(!out.stdout.contains('\u{1b}'));
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    // Colour codes are not part of the name: the quote keeps them (escaped), the figure not.
    assert_eq!(v["explanations"][0]["message"]["allocator"], "GPU_0_bfc");
}

#[test]
fn a_log_with_several_messages_explains_each_in_order() {
    let log = [
        "starting\n",
        &fixture("vllm-startup-free-memory.log"),
        "retrying with a smaller model\n",
        &fixture("pytorch-two-processes.log"),
        &fixture("tf-stream-executor.log"),
        "done\n",
    ]
    .concat();
    let r = explain_text(&log);
    let seen: Vec<(usize, &str, Option<&str>)> = r
        .explanations
        .iter()
        .map(|e| {
            (
                e.message.span.line,
                e.message.format().name(),
                e.cause.map(|c| c.as_str()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (3, "vllm-startup-free-memory", Some("other-process")),
            (5, "pytorch-caching", Some("capacity")),
            (6, "stream-executor-alloc", None),
            (7, "stream-executor-alloc", None),
        ]
    );
    assert!(r.unrecognized.is_empty());
    let text = render::render_text(&r);
    assert!(text.contains("message 4 of 4 · line 7 · stream-executor-alloc"));
    for e in &r.explanations {
        assert_eq!(
            &log[e.message.span.start_byte..e.message.span.end_byte],
            e.message.text
        );
    }
}

#[test]
fn the_line_scanner_finds_what_the_whole_text_holds() {
    for log in logs() {
        let text = std::fs::read_to_string(&log).unwrap();
        let mut scanner = LineScanner::new();
        let mut streamed = Vec::new();
        for line in text.lines() {
            streamed.extend(scanner.push_line(line));
        }
        streamed.extend(scanner.finish());
        let whole = find_all(&text);
        assert_eq!(streamed.len(), whole.len(), "{}", log.display());
        // Without the BFC statistics: printed far below the message in a real log, they are
        // attached by the scanner only when they arrive before it reports the message.
        let without_stats = |m: &headroom::oom_message::OomMessage| {
            let mut v = serde_json::to_value(&m.detail).unwrap();
            v.as_object_mut().unwrap().remove("stats");
            v
        };
        for (s, w) in streamed.iter().zip(&whole) {
            assert_eq!(without_stats(s), without_stats(w), "{}", log.display());
            assert_eq!(s.span, w.span, "{}", log.display());
            assert_eq!(s.text, w.text);
        }
    }
}

#[test]
fn the_line_scanner_reports_a_message_once_and_keeps_counting_lines() {
    let mut scanner = LineScanner::new();
    let mut found = Vec::new();
    for i in 0..200 {
        found.extend(scanner.push_line(&format!("step {i} fine")));
        if i % 50 == 7 {
            found.extend(scanner.push_line("RuntimeError: CUDA error: out of memory"));
        }
    }
    found.extend(scanner.finish());
    let lines: Vec<usize> = found.iter().map(|m| m.span.line).collect();
    assert_eq!(lines, [9, 60, 111, 162]);
}

#[test]
fn a_long_adversarial_input_stays_fast() {
    // Anchors followed by long digit runs and near-misses, on one line and on many.
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str("CUDA out of memory. Tried to allocate ");
        text.push_str(&"9".repeat(i % 60));
        text.push_str(" MiB. GPU 0 has a total capacity of 1.00 GiB of which ");
        text.push_str("Allocator (x) ran out of memory trying to allocate 1.0KiB ");
        text.push_str("Failed to CUDA calloc CUBLAS_STATUS_ALLOC_FAILED Cuda failure ");
        if i % 3 == 0 {
            text.push('\n');
        }
    }
    assert!(text.len() > 4 << 20);
    // This thread's CPU time, not the wall clock: the bound is on the work, whatever else the
    // machine runs beside it. A quadratic scan takes minutes (20,000 fragments took 149 s
    // before the long-line fix); the reader by principle took 18 s of a debug build's CPU
    // when it searched each reading's text once per runtime word and read every wording
    // twice, and takes about 4.4 s since it reads each wording once and names the runtime and
    // memory in one search.
    let start = thread_cpu_time();
    let r = explain_text(&text);
    let _ = render::render_text(&r);
    let took = thread_cpu_time() - start;
    println!("20,000 near-messages: {took:?} of CPU");
    assert!(took < Duration::from_secs(15), "took {took:?} of CPU");
    assert!(!r.explanations.is_empty());
}

/// CPU time the calling thread has used.
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the struct it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn mutated(base: String, cut: usize, insert: String) -> String {
    let mut s = base;
    let mut at = cut % (s.len() + 1);
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    s.insert_str(at, &insert);
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        let r = explain_text(&text);
        let _ = render::render_text(&r);
        let _ = serde_json::to_string(&r).unwrap();
    }

    #[test]
    fn damaged_messages_never_panic(
        which in 0usize..31,
        cut in 0usize..2000,
        insert in "[ 0-9.a-zA-Z();:,\\n'`\u{1b}é]{0,40}",
        truncate in 0usize..2000,
    ) {
        let logs = logs();
        let base = std::fs::read_to_string(&logs[which % logs.len()]).unwrap();
        let mut text = mutated(base, cut, insert);
        let mut end = truncate.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if truncate % 2 == 0 {
            text.truncate(end);
        }
        let r = explain_text(&text);
        let _ = render::render_text(&r);
        let json = serde_json::to_string(&r).unwrap();
        let escaped = !json.contains('\u{1b}');
        prop_assert!(escaped, "raw ESC in the JSON");
        for e in &r.explanations {
            let s = e.message.span;
            prop_assert!(s.start_byte < s.end_byte && s.end_byte <= text.len());
            prop_assert_eq!(&text[s.start_byte..s.end_byte], e.message.text.as_str());
        }
    }
}

#[test]
fn a_dash_reads_stdin_and_a_lone_path_reads_the_file() {
    let text = fixture("pytorch-two-processes.log");
    let from_stdin = run(&["explain", "-", "--json"], Some(&text));
    assert_eq!(from_stdin.code, 0, "{}", from_stdin.stderr);
    let path = fixtures().join("pytorch-two-processes.log");
    let from_file = run(&["explain", path.to_str().unwrap(), "--json"], None);
    assert_eq!(from_file.code, 0, "{}", from_file.stderr);
    let a: Value = serde_json::from_str(&from_stdin.stdout).unwrap();
    let b: Value = serde_json::from_str(&from_file.stdout).unwrap();
    assert_eq!(a, b);
    assert_eq!(a["explanations"][0]["message"]["format"], "pytorch-caching");
    // A pipe is read like a file (here stdin's, by its path).
    let out = run(&["explain", "/dev/stdin", "--json"], Some(&text));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(serde_json::from_str::<Value>(&out.stdout).unwrap(), a);
    // A word that names no file is the message itself.
    let out = run(&["explain", "oom.log"], None);
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("No out-of-memory message recognized."));
}

/// The peak resident memory of a running process, from `/proc/PID/status` (`VmHWM`), in bytes.
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn a_long_log_is_streamed_in_bounded_memory() {
    use std::io::{BufRead, BufReader};
    // 6 MB, past the 4 MiB read whole: 3,000 messages among training output.
    let filler = "step 1234 loss 0.1234 lr 0.0001 throughput 123.4 samples/s\n".repeat(30);
    // Each message its own (a repeat would be counted, not explained again).
    let message =
        |i: usize| format!("RuntimeError: CUDA out of memory. Tried to allocate {i}.00 MiB\n");
    let messages = 3000;
    let block = format!("{filler}{}", message(0));
    let log: String = (1..=messages)
        .map(|i| format!("{filler}{}", message(i)))
        .collect();
    assert!(log.len() > 4 << 20);
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["explain", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut pipe = child.stdin.take().unwrap();
    let (close_tx, close_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        pipe.write_all(log.as_bytes()).unwrap();
        // Held open until the peak is read, so that the process is still running then
        // (or, if nothing is printed before the input ends, for a minute).
        let _ = close_rx.recv_timeout(Duration::from_secs(60));
        drop(pipe);
    });
    let lines_per_block = block.lines().count();
    let mut seen = 0usize;
    let mut peak_while_streaming = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("message ") {
            seen += 1;
            // Streamed: no "of M", the line counted across reads.
            assert_eq!(
                rest,
                format!(
                    "{seen} · line {} · pytorch-caching (raised as RuntimeError)",
                    seen * lines_per_block
                )
            );
            // The first 4 MiB hold about 2,000 messages: they are explained before the
            // input ends.
            if seen == 1000 {
                peak_while_streaming = Some(peak_rss_bytes(pid));
                close_tx.send(()).unwrap();
            }
        }
    }
    writer.join().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(seen, messages);
    let peak = peak_while_streaming.expect("explanations printed before the input ended");
    // Holding every message and its explanation costs tens of kilobytes each; reading a
    // chunk at a time stays near the binary's own ~30 MB.
    assert!(peak < 64 << 20, "peak RSS {peak} bytes");
}

#[test]
fn binary_input_is_refused_after_a_mebibyte_of_nul_bytes() {
    let zeros = "\0".repeat((1 << 20) + 1);
    let text = format!("CUDA error: out of memory\n{zeros}");
    let out = run(&["explain", "-"], Some(&text));
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr
            .contains("stdin: not a text log: 1048577 NUL or control bytes in the first"),
        "{}",
        out.stderr
    );
}

#[test]
fn every_known_wording_no_specific_reader_takes_is_read_by_principle() {
    // Each line says memory ran out, in words headroom knows, in a form no specific reader
    // parses (a cut-off paste, a library without a reader, the host): each is still read,
    // with its figures and the memory it is about.
    let lines = [
        (
            "RuntimeError: CUDA out of memory. Tried to allocate",
            "device",
            0,
        ),
        ("ERROR: CudaCustomAllocator out of memory", "device", 0),
        (
            "2024-03-01 10:00:00.1 [E:onnxruntime:, sequential_executor.cc:514] Failed to allocate memory for requested buffer",
            "device",
            0,
        ),
        (
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "host-ram",
            0,
        ),
        (
            "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.13 GiB for an array with shape (1000, 420000)",
            "host-ram",
            1,
        ),
        (
            "\u{1b}[31mXlaRuntimeError: RESOURCE_EXHAUSTED\u{1b}[0m",
            "device",
            0,
        ),
        (
            "paddle.fluid.core_avx.EnforceNotMet: ResourceExhaustedError:",
            "device",
            0,
        ),
        (
            "[12345.678] Out of memory: Killed process 4242 (python)",
            "host-ram",
            0,
        ),
    ];
    let text: Vec<&str> = lines.iter().map(|l| l.0).collect();
    let r = explain_text(&text.join("\n"));
    assert!(r.unrecognized.is_empty(), "{:?}", r.unrecognized);
    let read: Vec<(usize, String, usize)> = r
        .explanations
        .iter()
        .map(|e| {
            let m = serde_json::to_value(&e.message).unwrap();
            (
                e.message.span.line,
                m["memory"].as_str().unwrap_or("").to_string(),
                m["figures"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    let want: Vec<(usize, String, usize)> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| (i + 1, l.1.to_string(), l.2))
        .collect();
    assert_eq!(read, want);
}
