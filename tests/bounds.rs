//! Memory and time bounded by design: a workload that would expand past the bound is refused
//! at once (file, phase, step), a signal while a workload loads ends the process at once, and
//! `hold` exits 130 when interrupted; lenient inputs (a device the profile lacks, a synchronize of
//! an unused stream, a hold past the device, a string format_version) are refused, and so are names
//! longer than the cap.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn refused(body: &str, expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(dir.path(), "big", body);
    let started = Instant::now();
    let (out, _, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "refused quickly: {:?}",
        started.elapsed()
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains(expect), "{}", out.stderr);
    assert!(
        out.stderr.contains("big.toml") && out.stderr.contains("phase 1"),
        "{}",
        out.stderr
    );
    assert!(!out_dir.exists(), "a refused workload leaves no folder");
}

#[test]
fn a_count_past_the_bound_is_refused_before_it_expands() {
    refused(
        r#"[[phase]]
name = "p"
steps = [{ op = "allocate", name = "w", size = "2MiB", count = 4294967295 }]
"#,
        "4294967295 actions, more than the 1000000",
    );
}

#[test]
fn a_repeat_past_the_bound_is_refused() {
    refused(
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "w", size = "4KiB" },
  { op = "repeat", times = 4294967295, steps = [{ op = "touch", name = "w" }] },
]
"#,
        "4294967296 actions (4294967295 rounds of 1), more than the 10000000",
    );
}

#[test]
fn a_fill_of_tiny_allocations_is_refused() {
    refused(
        r#"[settings]
allow_oom = true

[[phase]]
name = "p"
steps = [{ op = "allocate", name = "w", size = "513B", count = "fill" }]
"#,
        "could make 8372255 allocations",
    );
}

/// A workload of 1,000,000 steps: an allocation touched 999,990 times.
fn million_steps(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    workload(
        dir,
        name,
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "w", size = "4KiB" },
  { op = "repeat", times = 999990, steps = [{ op = "touch", name = "w" }] },
]
"#,
    )
}

/// `headroom run WL --profile tiny-4g -q --out OUT`, to be spawned.
fn run_command(wl: &std::path::Path, out_dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_headroom"));
    c.args([
        "run",
        wl.to_str().unwrap(),
        "--profile",
        "tiny-4g",
        "-q",
        "--out",
    ])
    .arg(out_dir);
    c
}

#[test]
fn a_signal_while_a_workload_loads_ends_the_process_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A step of close to a million allocations: checking it takes a while (about a second
    // in a debug build; a repeat of identical rounds would not, its rounds are counted).
    let wl = workload(
        dir.path(),
        "slow",
        r#"[[phase]]
name = "p"
steps = [{ op = "allocate", name = "w", size = "512B", count = 999990 }]
"#,
    );
    let out_dir = dir.path().join("out");
    let mut child = run_command(&wl, &out_dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let sent = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(130));
    assert!(took < Duration::from_millis(500), "acted on in {took:?}");
    assert!(!out_dir.exists(), "nothing was written");
}

#[test]
fn hold_exits_130_when_interrupted() {
    for signal in ["-INT", "-TERM", "-HUP"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
            .args(["hold", "64MiB", "--for", "60s", "--profile", "tiny-4g"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait for the line that says it holds the memory.
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert!(line.starts_with("holding"), "{line}");
        assert!(
            Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
        assert_eq!(child.wait().unwrap().code(), Some(130), "{signal}");
    }
}

#[test]
fn a_full_stdout_is_an_error_and_a_closed_one_ends_quietly() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["devices", "--backend", "sim"])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output") && !stderr.contains("panicked"),
        "{stderr}"
    );
    // The reader is gone before anything is written: a quiet exit 0, as ripgrep does.
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["devices", "--backend", "sim"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn lenient_inputs_are_refused_with_their_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A device the simulated profile does not have.
    let wl = workload(
        d,
        "one",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"a\", size = \"1MiB\" }]\n",
    );
    let run = headroom(
        d,
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--device",
            "99",
            "-q",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("there is no simulated device 99")
            && run.stderr.contains("tiny-4g is one device (0)"),
        "{}",
        run.stderr
    );
    assert!(!d.join("results").exists(), "nothing was written");

    // A synchronize of a stream no step before it uses.
    let wl = workload(
        d,
        "sync",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "a", size = "1MiB", stream = "copy" },
  { op = "synchronize", stream = "cpy" },
]
"#,
    );
    let (out, _, out_dir) = run_tiny(d, &wl, &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("sync.toml")
            && out.stderr.contains("phase 1")
            && out.stderr.contains("synchronize of stream \"cpy\"")
            && out.stderr.contains("streams so far: copy, main"),
        "{}",
        out.stderr
    );
    assert!(!out_dir.exists());

    // Holding more than the device has.
    let out = headroom(d, &["hold", "1TiB", "--for", "1s", "--profile", "tiny-4g"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cannot hold 1.00 TiB (1099511627776 bytes)")
            && out.stderr.contains("the device has 4.00 GiB in all"),
        "{}",
        out.stderr
    );

    // A format_version written as a string is named for what it is.
    let fake = d.join("stringy");
    std::fs::create_dir(&fake).unwrap();
    std::fs::write(fake.join("summary.json"), r#"{"format_version": "1"}"#).unwrap();
    std::fs::write(fake.join("timeline.csv"), "").unwrap();
    std::fs::write(fake.join("events.csv"), "").unwrap();
    let out = headroom(d, &["report", fake.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("summary.json: format_version is \"1\", not a whole number"),
        "{}",
        out.stderr
    );
}

#[test]
fn names_longer_than_the_cap_are_refused_at_once() {
    let long = "n".repeat(65_536);
    for (body, place) in [
        (
            format!(
                "[[phase]]\nname = \"{long}\"\nsteps = [{{ op = \"sleep\", for = \"1ms\" }}]\n"
            ),
            "phase 1 name",
        ),
        (
            format!(
                "[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"{long}\", size = \"1MiB\" }}]\n"
            ),
            "phase 1",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let wl = workload(dir.path(), "long", &body);
        let (out, _, out_dir) = run_tiny(dir.path(), &wl, &[]);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr.contains("long.toml")
                && out.stderr.contains(place)
                && out
                    .stderr
                    .contains("is 65536 characters long; a name may have at most 200"),
            "{}",
            &out.stderr[..out.stderr.len().min(2000)]
        );
        assert!(
            out.stderr.len() < 2000,
            "the message quotes only the name's start"
        );
        assert!(!out_dir.exists());
    }
    // The workload's own name.
    let dir = tempfile::tempdir().unwrap();
    let wl = dir.path().join("w.toml");
    std::fs::write(
        &wl,
        format!("[workload]\nname = \"{long}\"\n\n[[phase]]\nname = \"p\"\nsteps = [{{ op = \"sleep\", for = \"1ms\" }}]\n"),
    )
    .unwrap();
    let (out, _, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("[workload] name"), "{}", out.stderr);
}

#[test]
fn ctrl_c_on_a_million_step_run_exits_at_once_with_a_complete_folder() {
    let dir = tempfile::tempdir().unwrap();
    let wl = million_steps(dir.path(), "steps");
    let out_dir = dir.path().join("out");
    let child = run_command(&wl, &out_dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-run: about 200,000 steps done (60 bytes an event row), the rest still to come.
    let events = out_dir.join("events.csv");
    let waited = Instant::now();
    while std::fs::metadata(&events).map_or(0, |m| m.len()) < 12_000_000 {
        assert!(
            waited.elapsed() < Duration::from_secs(120),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    // Writing every report of 200,000 events took about 4 s in a debug build.
    assert!(
        took < Duration::from_secs(2),
        "exited {took:?} after Ctrl-C"
    );
    assert!(
        stderr.contains("interrupted: writing summary.json, timeline.csv, events.csv"),
        "{stderr}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["status"], "interrupted");
    assert_eq!(s["exit_code"], 130);
    let run = u(&s["phases"][0]["actions_run"]);
    assert!((100_000..999_991).contains(&run), "{run} steps run");
    assert_eq!(u(&s["event_rows"]), csv_rows(&events).len() as u64);
    let reasons = headroom::report::complete::incomplete_reasons(&out_dir);
    assert!(reasons.is_empty(), "{reasons:?}");
    // Each derived report was written, or is named as left for `headroom report`.
    let skipped = stderr
        .lines()
        .find(|l| l.starts_with("interrupted: skipped"))
        .unwrap_or("");
    for f in [
        "report.md",
        "junit.xml",
        "trace.json",
        "timeline.svg",
        "timeline.png",
    ] {
        assert!(
            out_dir.join(f).is_file() || skipped.contains(f),
            "{f}: neither written nor said skipped: {stderr}"
        );
    }
}

/// Runs `headroom ARGS` in `cwd`; returns its exit code, stderr and peak RSS in bytes (wait4).
fn run_measured(cwd: &std::path::Path, args: &[&str]) -> (i32, String, u64) {
    common::rusage::headroom_measured(cwd, args, None)
}

#[test]
fn three_million_written_steps_are_refused_before_parsing_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    // Written a line at a time: the child's peak RSS counts what this process holds at the
    // spawn.
    let wl = dir.path().join("flat.toml");
    {
        use std::io::Write;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&wl).unwrap());
        write!(
            w,
            "[workload]\nname = \"flat\"\n\n[[phase]]\nname = \"p\"\nsteps = [\n  {{ op = \
             \"allocate\", name = \"w\", size = \"4KiB\" }},\n"
        )
        .unwrap();
        for _ in 0..3_000_000 {
            w.write_all(b"  { op = \"touch\", name = \"w\" },\n")
                .unwrap();
        }
        w.write_all(b"]\n").unwrap();
    }
    let file_bytes = std::fs::metadata(&wl).unwrap().len();
    let out_dir = dir.path().join("out");
    let started = Instant::now();
    let (code, stderr, rss) = run_measured(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "-q",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code, 2, "{stderr}");
    // The two-millionth-and-first `op` is on line 2,000,007 (six lines of header before).
    assert!(
        stderr.contains("flat.toml: line 2000007: more than 2000000 steps written out"),
        "{stderr}"
    );
    // The text itself and little more: parsing it took over 6 GB.
    assert!(rss < file_bytes + 64 * MIB, "peak RSS {rss} bytes");
    assert!(!out_dir.exists());
}

#[test]
fn a_file_past_the_size_bound_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let wl = dir.path().join("huge.toml");
    let f = std::fs::File::create(&wl).unwrap();
    f.set_len((128 << 20) + 1).unwrap();
    let (out, _, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("huge.toml: the file is 134217729 bytes, more than the 134217728"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_file_that_is_not_utf8_is_refused_at_its_byte_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let wl = dir.path().join("latin1.toml");
    std::fs::write(
        &wl,
        b"[workload]\nname = \"x\"\n\n[[phase]]\nname = \"caf\xe9\"\nsteps = []\n",
    )
    .unwrap();
    let (out, _, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("latin1.toml: line 5: not UTF-8 text: byte 44 (0xe9) is not valid UTF-8"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_duplicate_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "dup",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"sleep\", for = \"1ms\", for = \"2ms\" }]\n",
    );
    let (out, _, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("dup.toml: line 6: not valid TOML: duplicate key \"for\""),
        "{}",
        out.stderr
    );
}

#[test]
fn a_replay_of_four_billion_launches_stops_at_the_first_signal() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "forever",
        r#"[[phase]]
name = "p"
steps = [
  { op = "capture", graph = "g", stream = "s", steps = [
    { op = "allocate", name = "o", size = "4MiB" },
    { op = "fill", name = "o" },
    { op = "free", name = "o" },
  ] },
  { op = "instantiate", graph = "g", auto_free = true },
  { op = "replay", graph = "g", times = 4294967295 },
]
"#,
    );
    let out_dir = dir.path().join("out");
    let mut child = run_command(&wl, &out_dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Well inside the replay: hours of host time at this rate.
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(130));
    // The replay looks at the signal every 256 launches; the rest is the release and the
    // reports of an interrupted run.
    assert!(took < Duration::from_secs(10), "acted on in {took:?}");
    let rows = csv_rows(&out_dir.join("events.csv"));
    // The first launch is a step of its own; the steady replays stop.
    let replay = rows.last().unwrap();
    assert_eq!(
        (replay["op"].as_str(), replay["result"].as_str()),
        ("replay", "stopped")
    );
    assert!(
        replay["detail"].starts_with("interrupted after ")
            && replay["detail"].ends_with(" of 4294967294 launches"),
        "{}",
        replay["detail"]
    );
}
