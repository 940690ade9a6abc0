//! Long runs in bounded memory: a million steps run in the memory of a few (the run expands
//! them as it goes), a long sleep's sampler readings are written as they come
//! (one row per change, every peak exact), and `headroom report` rereads a full-resolution
//! timeline through a bounded downsample; a SIGTERM after the last step of a run of over 10^7
//! readings ends it within a second, the record complete and the reports not written named. Peak RSS is the child's, from `wait4`; it includes
//! the parent's resident memory at the spawn (the child starts in the parent's address space
//! until it execs), which is why these tests stay in a small binary of their own.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Far below what holding every reading costs (over 200 MB for 600,000 readings in a debug
/// build), far above what a bounded run needs (about 30 MB).
const RSS_BOUND_BYTES: u64 = 100 * MIB;

/// Ten minutes of virtual time at 1 ms: 600,000 sampler readings.
const SLEEP_MS: u64 = 600_000;

/// Runs `headroom ARGS` in `cwd`; returns its exit code and peak resident set size in bytes.
fn run_measured(cwd: &Path, args: &[&str]) -> (i32, u64) {
    let (code, _, rss) = common::rusage::headroom_measured(cwd, args, None);
    (code, rss)
}

fn long_sleep(dir: &Path) -> std::path::PathBuf {
    workload(
        dir,
        "long-sleep",
        &format!(
            r#"[settings]
sample_interval = "1ms"

[[phase]]
name = "hold"
steps = [
  {{ op = "allocate", name = "w", size = "64MiB" }},
  {{ op = "sleep", for = "{SLEEP_MS}ms" }},
  {{ op = "free", name = "w" }},
]
"#
        ),
    )
}

#[test]
fn a_long_sleep_streams_its_readings_in_bounded_memory_one_row_per_change() {
    let dir = tempfile::tempdir().unwrap();
    let wl = long_sleep(dir.path());
    let out = dir.path().join("out");
    let (code, rss) = run_measured(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0);
    assert!(rss < RSS_BOUND_BYTES, "peak RSS {rss} bytes");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    // Every reading was seen: the peaks and the polled replays are those of all of them.
    assert!(u(&s["sampler"]["readings"]) > SLEEP_MS, "{}", s["sampler"]);
    assert_eq!(u(&s["peaks"]["run"]["own_bytes"]["bytes"]), 64 * MIB);
    assert_eq!(
        u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]),
        CTX + 64 * MIB
    );
    for poller in ["1hz", "10hz"] {
        assert_eq!(
            u(&s["peaks"]["polled"][poller]["peaks"]["device_used_bytes"]),
            CTX + 64 * MIB
        );
    }
    assert_eq!(
        u(&s["peaks"]["polled"]["1hz"]["ticks"]),
        SLEEP_MS / 1000 + 1
    );
    // Only the rows where a value changed, and the last sighting before each change.
    let rows = csv_rows(&out.join("timeline.csv"));
    assert_eq!(rows.len() as u64, u(&s["timeline_rows"]));
    assert!(rows.len() < 10, "{} rows", rows.len());
    let held: Vec<u64> = rows
        .iter()
        .filter(|r| r["own_bytes"] == (64 * MIB).to_string())
        .map(|r| r["t_ns"].parse().unwrap())
        .collect();
    let sleep_ns = SLEEP_MS * 1_000_000;
    assert!(
        held.last().unwrap() - held.first().unwrap() >= sleep_ns,
        "the first and last reading at 64 MiB, a sleep apart: {held:?}"
    );
}

#[test]
fn report_rereads_a_full_resolution_timeline_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let wl = long_sleep(dir.path());
    let (out, s, run_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The same run as a timeline with every reading in it (what earlier versions wrote):
    // each row repeated at every sampler tick until the next row.
    let text = std::fs::read_to_string(run_dir.join("timeline.csv")).unwrap();
    let mut lines = text.lines();
    let mut full = format!("{}\n", lines.next().unwrap());
    let rows: Vec<(u64, &str)> = lines
        .map(|l| {
            let (t, rest) = l.split_once(',').unwrap();
            (t.parse().unwrap(), rest)
        })
        .collect();
    for (i, (t, rest)) in rows.iter().enumerate() {
        full.push_str(&format!("{t},{rest}\n"));
        let next = rows.get(i + 1).map_or(*t, |r| r.0);
        let (phase, rest) = rest.split_once(',').unwrap();
        let (_source, values) = rest.split_once(',').unwrap();
        let mut tick = t + 1_000_000;
        while !phase.is_empty() && tick < next {
            full.push_str(&format!("{tick},{phase},sampler,{values}\n"));
            tick += 1_000_000;
        }
    }
    assert!(full.lines().count() as u64 > SLEEP_MS);
    std::fs::write(run_dir.join("timeline.csv"), &full).unwrap();
    // The child starts in this process's address space: what this test holds would count
    // as the report's.
    drop(rows);
    drop(full);
    drop(text);
    std::fs::remove_file(run_dir.join("report.md")).unwrap();
    let (code, rss) = run_measured(dir.path(), &["report", run_dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(rss < RSS_BOUND_BYTES, "peak RSS {rss} bytes");
    let report = std::fs::read_to_string(run_dir.join("report.md")).unwrap();
    assert!(report.contains("64.00 MiB"), "{report}");
    let svg = std::fs::read_to_string(run_dir.join("timeline.svg")).unwrap();
    let peak = u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]);
    assert!(
        svg.contains(&format!("true peak {peak} B")),
        "the peak is drawn"
    );
}

/// What a long step kind may peak at, whatever its length: well above a bounded run's
/// (about 30 MB), far below what holding every reading costs (36 million readings of a
/// ten-hour spin at 1 ms are over 9 GB).
const LONG_STEP_RSS_BOUND_BYTES: u64 = 200 * MIB;

fn run_long(dir: &Path, name: &str, body: &str) -> (u64, serde_json::Value, std::path::PathBuf) {
    let wl = workload(dir, name, body);
    let out = dir.join(format!("out-{name}"));
    let (code, rss) = run_measured(
        dir,
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    (rss, s, out)
}

/// Ten hours of virtual time.
const SPIN_S: u64 = 36_000;

#[test]
fn a_ten_hour_spin_at_1ms_folds_its_readings_as_they_come() {
    let dir = tempfile::tempdir().unwrap();
    let (rss, s, out) = run_long(
        dir.path(),
        "long-spin",
        &format!(
            r#"[settings]
sample_interval = "1ms"

[[phase]]
name = "spin"
steps = [
  {{ op = "allocate", name = "w", size = "64MiB" }},
  {{ op = "spin", for = "{SPIN_S}s" }},
  {{ op = "synchronize" }},
  {{ op = "free", name = "w" }},
]
"#
        ),
    );
    assert!(rss < LONG_STEP_RSS_BOUND_BYTES, "peak RSS {rss} bytes");
    // Every tick of the ten hours was a reading, and the peaks are all of theirs.
    assert!(
        u(&s["sampler"]["readings"]) > SPIN_S * 1000,
        "{}",
        s["sampler"]
    );
    assert_eq!(
        u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]),
        CTX + 64 * MIB
    );
    assert_eq!(u(&s["peaks"]["polled"]["1hz"]["ticks"]), SPIN_S + 1);
    let rows = csv_rows(&out.join("timeline.csv"));
    assert!(rows.len() < 12, "{} rows", rows.len());
}

/// A million launches of one graph.
const LAUNCHES: u64 = 1_000_000;

#[test]
fn a_million_launch_graph_replay_folds_its_readings_as_they_come() {
    let dir = tempfile::tempdir().unwrap();
    let (rss, s, _) = run_long(
        dir.path(),
        "long-replay",
        &format!(
            r#"[settings]
sample_interval = "1ms"

[[phase]]
name = "replay"
steps = [
  {{ op = "capture", graph = "g", stream = "s", steps = [
    {{ op = "allocate", name = "out", size = "4MiB" }},
    {{ op = "fill", name = "out" }},
    {{ op = "free", name = "out" }},
  ] }},
  {{ op = "instantiate", graph = "g", auto_free = true }},
  {{ op = "replay", graph = "g", times = {LAUNCHES} }},
]
"#
        ),
    );
    assert!(rss < LONG_STEP_RSS_BOUND_BYTES, "peak RSS {rss} bytes");
    assert_eq!(u(&s["graphs"]["graphs"][0]["launches"]), LAUNCHES);
    assert!(u(&s["sampler"]["readings"]) > 1000, "{}", s["sampler"]);
    assert_eq!(s["status"], "completed");
}

/// A gigabyte of training log with a CUDA message every 100,000 lines, streamed into
/// `headroom explain -` through a pipe: the child's peak RSS (wait4) stays under the bound.
#[test]
// The child is reaped by `wait4`, which also gives its resource usage.
#[allow(clippy::zombie_processes)]
fn a_gigabyte_log_is_explained_in_bounded_memory() {
    use std::io::Write;
    use std::process::Stdio;
    const LOG_BYTES: usize = 1 << 30;
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["explain", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let writer = std::thread::spawn(move || {
        let line =
            "2024-05-01 12:00:00 INFO trainer step 1234 loss 0.2500 lr 3.0e-4 tokens/s 10432\n";
        let block = line.repeat(100_000 - 1) + "RuntimeError: CUDA error: out of memory\n";
        let mut sent = 0usize;
        let mut messages = 0usize;
        while sent < LOG_BYTES {
            stdin.write_all(block.as_bytes()).unwrap();
            sent += block.len();
            messages += 1;
        }
        messages
    });
    let messages = writer.join().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for; both pointers are to live locals.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid);
    let out = reader.join().unwrap();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    // The same message every 100,000 lines: explained once, with how often and where.
    let last_line = messages * 100_000;
    assert_eq!(
        out.lines().filter(|l| l.starts_with("message ")).count(),
        1,
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "printed {messages} times, lines 100000–{last_line}"
        )),
        "{out}"
    );
    let rss = usage.ru_maxrss as u64 * 1024;
    assert!(rss < LONG_STEP_RSS_BOUND_BYTES, "peak RSS {rss} bytes");
}

/// A million steps, an allocation touched 999,999 times, peak under `RSS_BOUND_BYTES` (the
/// actions are made as the run goes: holding them all took 391 MB) and every step run.
#[test]
fn a_million_step_run_peaks_in_the_memory_of_a_few_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (rss, s, _) = run_long(
        dir.path(),
        "million",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "w", size = "4KiB" },
  { op = "repeat", times = 999999, steps = [{ op = "touch", name = "w" }] },
]
"#,
    );
    assert_eq!(u(&s["phases"][0]["actions_run"]), 1_000_000);
    assert!(rss < RSS_BOUND_BYTES, "peak RSS {rss} bytes");
}

/// A file of one gigabyte line (sparse: it takes no disk), made from `prefix` and NUL bytes
/// with no newline, as a binary or a runaway log would be.
fn one_gigabyte_line(path: &Path, prefix: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(prefix).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len + (1 << 30)).unwrap();
}

/// Hostile input is read by its shape, not its size: `replay` of a one-gigabyte line and
/// `report` of a folder whose `timeline.csv` holds one stop at the line's 64 KiB bound, with
/// an error under 1 KB that names the line and quotes its start printably.
#[test]
fn a_one_gigabyte_line_is_refused_at_its_bound_in_bounded_memory() {
    const ERROR_MAX_BYTES: usize = 1024;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("huge.csv");
    one_gigabyte_line(&log, b"\x1b[31mt_ns,");
    let (code, stderr, rss) = common::rusage::headroom_measured(
        dir.path(),
        &["replay", log.to_str().unwrap(), "--backend", "sim"],
        None,
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.len() < ERROR_MAX_BYTES, "{} bytes", stderr.len());
    assert!(
        stderr.contains("line 1 is longer than 65536 bytes (it starts \"\\x1b[31mt_ns,\\x00"),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\0'),
        "{stderr:?}"
    );
    assert!(rss < RSS_BOUND_BYTES, "replay: peak RSS {rss} bytes");

    // A finished run's folder, its timeline then given a gigabyte line.
    let wl = workload(
        dir.path(),
        "small",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"a\", size = \"1MiB\" }]\n",
    );
    let (out, _, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The line in the middle of the file: the folder's last row stays whole, so the reading
    // itself, not the completeness check, meets it.
    let timeline = out_dir.join("timeline.csv");
    let text = std::fs::read_to_string(&timeline).unwrap();
    let (lines, last) = (
        text.lines().count(),
        text.lines().last().unwrap().to_string(),
    );
    one_gigabyte_line(&timeline, b"12,p,");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&timeline)
            .unwrap();
        writeln!(f, "\n{last}").unwrap();
    }
    let (code, stderr, rss) =
        common::rusage::headroom_measured(dir.path(), &["report", out_dir.to_str().unwrap()], None);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.len() < ERROR_MAX_BYTES, "{} bytes", stderr.len());
    assert!(stderr.contains("timeline.csv"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "line {} is longer than 65536 bytes (it starts \"12,p,\\x00",
            lines + 1
        )),
        "{stderr}"
    );
    assert!(rss < RSS_BOUND_BYTES, "report: peak RSS {rss} bytes");
}

/// Writes `objects` copies of `object` (each a memoized value, as Python's pickler writes
/// one) in batches of 1,000 into a list, itself the pickle's first value or the `segments`
/// of a snapshot dict: about 60 MB for 30,000,000 empty dicts.
fn memo_heavy_pickle(path: &Path, object: &[u8], objects: usize, in_snapshot: bool) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    w.write_all(b"\x80\x04").unwrap();
    if in_snapshot {
        w.write_all(b"}\x94\x8c\x08segments\x94").unwrap();
    }
    w.write_all(b"]\x94").unwrap();
    let batch: Vec<u8> = std::iter::once(b'(')
        .chain(object.iter().copied().cycle().take(1000 * object.len()))
        .chain(std::iter::once(b'e'))
        .collect();
    for _ in 0..objects / 1000 {
        w.write_all(&batch).unwrap();
    }
    if in_snapshot {
        w.write_all(b"s").unwrap();
    }
    w.write_all(b".").unwrap();
}

/// A pickle of 60 MB of memoized empty dicts (77 bytes of memory per byte of file when every
/// value was built before its shape was looked at: 455 MiB for 6 MB, and 60 MB aborted under a
/// 3 GiB limit) is refused in bounded memory: as a
/// list, after 64 KiB (a snapshot is a dict); as a snapshot's `segments`, once its values pass
/// the reader's budget (32 bytes per byte read, plus 32 MiB), after about a megabyte.
#[test]
fn a_sixty_megabyte_pickle_of_memoized_empty_dicts_is_refused_in_bounded_memory() {
    const PICKLE_RSS_BOUND_BYTES: u64 = 200 * MIB;
    let dir = tempfile::tempdir().unwrap();
    for (in_snapshot, expect) in [
        (
            false,
            "the pickle's first value is a list, not the dict torch.cuda.memory._snapshot() returns",
        ),
        (true, "in memory, more than the "),
    ] {
        let path = dir.path().join(format!("dicts-{in_snapshot}.pickle"));
        memo_heavy_pickle(&path, b"}\x94", 30_000_000, in_snapshot);
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert!(bytes > 60_000_000, "{bytes}");
        let (code, stderr, rss) = common::rusage::headroom_measured(
            dir.path(),
            &["import", "torch", path.to_str().unwrap()],
            None,
        );
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(path.to_str().unwrap()), "{stderr}");
        assert!(stderr.contains(expect), "{stderr}");
        assert!(
            rss < PICKLE_RSS_BOUND_BYTES,
            "in a snapshot: {in_snapshot}: peak RSS {rss} bytes"
        );
        std::fs::remove_file(&path).unwrap();
    }
}

/// A run whose last step is long done when the signal comes: 2,000 `kv` requests (about
/// 340,000 timeline rows, each tick a change) and then 1,000 s of virtual time at 100 µs, so
/// over 10^7 sampler readings in all. About 7 s of CPU in a debug build.
fn late_signal_workload(dir: &Path) -> std::path::PathBuf {
    workload(
        dir,
        "late-signal",
        r#"[settings]
sample_interval = "100us"

[[phase]]
name = "decode"
steps = [
  { op = "kv", requests = 2000, block = "2MiB", blocks_per_request = 64, prefill_blocks = 8, arrive_every = 2, tick = "2ms" },
]

[[phase]]
name = "hold"
steps = [
  { op = "allocate", name = "w", size = "64MiB" },
  { op = "sleep", for = "1000s" },
  { op = "free", name = "w" },
]
"#,
    )
}

/// Starts the run into `DIR/out`, waits until `ready` says its last step is done (polling
/// every 2 ms), sends SIGTERM, and returns how long it took to exit after the signal, its
/// exit code and its stderr.
fn signalled_after_the_last_step(
    dir: &Path,
    ready: impl Fn(&Path) -> bool,
) -> (std::time::Duration, i32, String) {
    use std::time::{Duration, Instant};
    let wl = late_signal_workload(dir);
    let out = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("run")
        .arg(&wl)
        .args(["--backend", "sim", "--profile", "h100-80g", "--out"])
        .arg(&out)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready(&out) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its last step was seen done"
        );
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the run took over 10 min"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill only sends a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let signalled = Instant::now();
    let o = child.wait_with_output().unwrap();
    let took = signalled.elapsed();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (took, o.status.code().unwrap_or(-1), stderr)
}

/// The folder's record after the signal: complete, `completed` as recorded, over 10^7
/// readings; the reports not written named with the command that writes them.
fn check_late_signal(dir: &Path, took: std::time::Duration, code: i32, stderr: &str) {
    let out = dir.join("out");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["status"], "completed", "{s}");
    assert_eq!(s["exit_code"], 0, "{s}");
    assert_eq!(code, 0, "the run's status as recorded: {stderr}");
    assert!(
        u(&s["sampler"]["readings"]) >= 10_000_000,
        "{}",
        s["sampler"]
    );
    assert!(u(&s["timeline_rows"]) >= 300_000, "{}", s["timeline_rows"]);
    assert!(
        !s["finished_utc"].is_null() && !s["end_ns"].is_null(),
        "{s}"
    );
    assert_eq!(
        u(&s["timeline_rows"]),
        std::fs::read_to_string(out.join("timeline.csv"))
            .unwrap()
            .lines()
            .count() as u64
            - 1
    );
    // Said plainly: what was not written and how to write it.
    let line = stderr
        .lines()
        .find(|l| l.contains("not written"))
        .unwrap_or_else(|| panic!("no report named as not written: {stderr}"));
    assert!(line.contains("completed as recorded"), "{line}");
    assert!(
        line.contains(&format!("`headroom report {}` writes them", out.display())),
        "{line}"
    );
    let named: Vec<&str> = [
        "report.md",
        "junit.xml",
        "trace.json",
        "timeline.svg",
        "timeline.png",
    ]
    .into_iter()
    .filter(|f| line.contains(f))
    .collect();
    assert!(!named.is_empty(), "{line}");
    for f in &named {
        assert!(!out.join(f).exists(), "{f} named as not written but there");
    }
    println!(
        "exited {took:?} after the signal; {} readings, {} timeline rows; not written: {named:?}",
        s["sampler"]["readings"], s["timeline_rows"]
    );
    // 1 s from the signal to the exit (500 ms promised for the reports, the rest for the
    // process's own end on a loaded machine).
    assert!(
        took < std::time::Duration::from_secs(1),
        "exited {took:?} after the signal"
    );
}

#[test]
fn a_signal_once_the_record_is_complete_stops_the_reports_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    // The record is complete once summary.json says how the run ended: the reports come next.
    let (took, code, stderr) = signalled_after_the_last_step(dir.path(), |out| {
        std::fs::read_to_string(out.join("summary.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|s| s["status"] != "running")
    });
    check_late_signal(dir.path(), took, code, &stderr);
}

#[test]
fn a_signal_while_the_reports_are_drawn_stops_them_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    // report.md is the first report written: the signal comes while the others are made.
    let (took, code, stderr) =
        signalled_after_the_last_step(dir.path(), |out| out.join("report.md").exists());
    check_late_signal(dir.path(), took, code, &stderr);
    assert!(dir.path().join("out/report.md").is_file());
}

/// A file read whole (a `config.json`, a safetensors index, a usage script, a folder's
/// `summary.json`) that is 1 GiB (sparse: nothing on disk): refused by its size before any of
/// it is held, under 100 MB resident, with an error under 1 KB naming the file.
#[test]
fn a_gigabyte_file_read_whole_is_refused_by_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sparse = |path: &Path, head: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, head).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
    };
    sparse(&d.join("model/config.json"), "{\"a\": \"");
    sparse(&d.join("index/model.safetensors.index.json"), "{\"a\": \"");
    std::fs::write(
        d.join("index/config.json"),
        r#"{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
            "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    sparse(&d.join("script.toml"), "usage = [\"");
    let wl = workload(
        d,
        "small",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"1MiB\" }]\n",
    );
    let (code, _) = run_measured(
        d,
        &[
            "run",
            wl.to_str().unwrap(),
            "--backend",
            "sim",
            "--out",
            "run",
            "-q",
        ],
    );
    assert_eq!(code, 0);
    sparse(&d.join("run/summary.json"), "{\"format_version\": \"");
    let cases: &[(&[&str], &str)] = &[
        (
            &["plan", "--model", "model/config.json"],
            "model/config.json",
        ),
        (
            &["plan", "--model", "index"],
            "model.safetensors.index.json",
        ),
        (
            &["watch", "--sim-script", "script.toml", "--", "true"],
            "script.toml",
        ),
        (&["report", "run"], "run/summary.json"),
    ];
    for (args, names) in cases {
        let (code, stderr, rss) = common::rusage::headroom_measured(d, args, None);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
        assert!(
            stderr.contains("it is 1073741824 bytes, more than the 67108864"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.len() < 1024, "{args:?}: {} bytes", stderr.len());
        assert!(
            rss < RSS_BOUND_BYTES,
            "{args:?}: {} MiB resident",
            rss >> 20
        );
    }
}
