//! Replaying allocation logs (headroom's own and RMM's) against allocator specs on the
//! simulated device: fits or not, exact peaks, the first failing line, and clear errors for
//! bad lines, double frees and unknown pointers.

use std::fmt::Write;

use headroom::alloc::adaptors::LoggingAdaptor;
use headroom::alloc::caching::CachingConfig;
use headroom::alloc::replay::{
    BadRowPolicy, LogFormat, ReplayError, ReplayOptions, replay_file, replay_reader,
};
use headroom::alloc::{Allocator, AllocatorSpec};
use headroom::device::StreamId;
use headroom::device::prelude::*;
use headroom::device::profile::SimProfile;
use headroom::device::sim::SimDevice;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const CONTEXT: u64 = 256 * MIB;

fn tiny() -> SimDevice {
    SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0)
}

fn caching(settings: &str) -> AllocatorSpec {
    AllocatorSpec::Caching(CachingConfig::parse(settings).unwrap())
}

fn replay(
    text: &str,
    spec: &AllocatorSpec,
    policy: BadRowPolicy,
) -> Result<headroom::alloc::replay::ReplayReport, ReplayError> {
    let mut d = tiny();
    let opts = ReplayOptions {
        on_bad_row: policy,
        pace: false,
    };
    replay_reader("LOG.csv", text.as_bytes(), spec, &mut d, &opts)
}

const RMM_LOG: &str = "Thread,Time,Action,Pointer,Size,Stream
140573312345856,18:21:24.857582,allocate,0x7f8a40000000,3145728,0x0
140573312345856,18:21:24.857590,allocate,0x7f8a40300000,3145728,0x0
140573312345856,18:21:24.857600,free,0x7f8a40000000,3145728,0x0
140573312345856,18:21:24.857610,allocate failure,0x0,99999999999,0x0
140573312345856,18:21:24.857620,allocate,0x7f8a50000000,1024,0x7f8a38001020
140573312345856,18:21:24.857630,deallocate,0x7f8a40300000,3145728,0x0
";

#[test]
fn an_rmm_log_replays_with_exact_peaks() {
    let r = replay(RMM_LOG, &caching(""), BadRowPolicy::Stop).unwrap();
    assert_eq!(r.format, LogFormat::Rmm);
    assert!(r.fits);
    // The logged failure (a 93 GiB request) is tried again and refused again.
    assert_eq!(
        (r.events, r.allocations, r.frees, r.logged_failures),
        (6, 3, 2, 1)
    );
    assert_eq!(
        (r.failures_still_refused, r.failures_now_served.len()),
        (1, 0)
    );
    // Two 3 MiB blocks share one 20 MiB segment; the 1 KiB one is on another stream, small pool.
    assert_eq!(
        (r.peaks.alloc_allocated.bytes, r.peaks.alloc_allocated.line),
        (6 * MIB, 3)
    );
    assert_eq!(
        (r.peaks.alloc_reserved.bytes, r.peaks.alloc_reserved.line),
        (22 * MIB, 6)
    );
    assert_eq!(r.peaks.device_used.bytes, CONTEXT + 22 * MIB);
    assert_eq!(r.device_used_idle_bytes, CONTEXT);
    let text = r.to_string();
    assert!(text.contains("result: fits"), "{text}");
    // The same log with plain cudaMalloc: no caching, so reserved follows allocated.
    let d = replay(RMM_LOG, &AllocatorSpec::Direct, BadRowPolicy::Stop).unwrap();
    assert_eq!(
        (d.peaks.alloc_reserved.bytes, d.peaks.alloc_allocated.bytes),
        (6 * MIB, 6 * MIB)
    );
}

#[test]
fn a_log_that_does_not_fit_names_its_first_failing_line() {
    let log = "t_ns,action,ptr,bytes,stream,detail
100,allocate,0x1000,2147483648,0,
200,allocate,0x90001000,1073741824,0,
300,free,0x1000,2147483648,0,
400,allocate,0x1000,3221225472,0,
";
    let r = replay(log, &caching(""), BadRowPolicy::Stop).unwrap();
    assert!(!r.fits);
    let f = r.first_failure.as_ref().unwrap();
    assert_eq!((f.line, f.requested_bytes), (5, 3 * GIB));
    let oom = f.oom.as_ref().unwrap();
    assert_eq!(oom.retries.len(), 4, "{:?}", oom.retries);
    // The 2 GiB cached segment was given back before giving up: only the live 1 GiB remains.
    assert_eq!(
        (f.alloc_allocated_bytes, f.alloc_reserved_bytes),
        (GIB, GIB)
    );
    assert_eq!(f.device_used_bytes, CONTEXT + GIB);
    assert_eq!(r.peaks.alloc_reserved.bytes, 3 * GIB);
    let text = r.to_string();
    assert!(
        text.contains("does NOT fit") && text.contains("line 5"),
        "{text}"
    );
    // Expandable segments do not help here: still 3 GiB on a device with 3.75 GiB free and 1 GiB held.
    let e = replay(
        log,
        &caching("expandable_segments:True"),
        BadRowPolicy::Stop,
    )
    .unwrap();
    assert!(!e.fits);
}

#[test]
fn malformed_lines_stop_or_are_collected() {
    let log = "t_ns,action,ptr,bytes,stream,detail
100,allocate,0x1000,4096,0,
200,allocate,0x2000,abc,0,
300,resize,0x2000,4096,0,
400,free,0x1000,,0,
";
    let e = replay(log, &caching(""), BadRowPolicy::Stop).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ReplayError::BadRow { line: 3, .. }), "{msg}");
    assert!(
        msg.starts_with("LOG.csv line 3:") && msg.contains("\"abc\""),
        "{msg}"
    );
    let r = replay(log, &caching(""), BadRowPolicy::Collect).unwrap();
    let bad: Vec<u64> = r.bad_rows.iter().map(|b| b.line).collect();
    assert_eq!(bad, vec![3, 4]);
    assert!(
        r.bad_rows[1].message.contains("\"resize\""),
        "{:?}",
        r.bad_rows
    );
    assert_eq!((r.allocations, r.frees), (1, 1));
    assert!(r.to_string().contains("2 bad lines skipped"));
}

#[test]
fn double_frees_and_unknown_pointers_name_their_lines() {
    let log = "t_ns,action,ptr,bytes,stream,detail
100,allocate,0x1000,4096,0,
200,free,0x1000,4096,0,
300,free,0x1000,4096,0,
400,free,0x5000,4096,0,
";
    let e = replay(log, &caching(""), BadRowPolicy::Stop).unwrap_err();
    assert_eq!(
        e.to_string(),
        "LOG.csv line 4: double free of 0x1000, already freed at line 3"
    );
    let r = replay(log, &caching(""), BadRowPolicy::Collect).unwrap();
    assert_eq!(
        r.bad_rows[1].message,
        "free of 0x5000, which no earlier line allocated"
    );
    assert_eq!(r.bad_rows[1].line, 5);
}

#[test]
fn unknown_and_empty_logs_are_refused() {
    let e = replay("when,what\n1,2\n", &caching(""), BadRowPolicy::Stop).unwrap_err();
    assert!(
        e.to_string().contains("unknown log format")
            && e.to_string().contains("Thread,Time,Action"),
        "{e}"
    );
    let e = replay("", &caching(""), BadRowPolicy::Collect).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = replay(
        "Thread,Time,Action,Pointer,Size,Stream\n1,x,allocate,0x10,5\n",
        &caching(""),
        BadRowPolicy::Stop,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("line 2: expected 6 columns, found 5"),
        "{e}"
    );
}

#[test]
fn a_logged_run_replays_to_the_same_peaks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.csv");
    let spec = caching("max_split_size_mb:64");
    // A run through the logging adaptor, with record_stream and empty_cache.
    let mut d = tiny();
    let s1 = d.create_stream().unwrap();
    let inner = spec.build(&mut d).unwrap();
    let mut a = LoggingAdaptor::create(inner, &path).unwrap();
    let mut live = Vec::new();
    let (mut peak_allocated, mut peak_reserved) = (0, 0);
    let mut observe = |a: &LoggingAdaptor| {
        let s = a.stats();
        peak_allocated = peak_allocated.max(s.allocated_bytes);
        peak_reserved = peak_reserved.max(s.reserved_bytes);
    };
    for i in 0..400u64 {
        let bytes = [700, 5 * MIB, 3000, 90 * MIB, MIB + 1][i as usize % 5] + i;
        let stream = if i % 3 == 0 { s1 } else { StreamId::MAIN };
        live.push(a.allocate(&mut d, bytes, stream).unwrap().ptr);
        observe(&a);
        if i % 7 == 0 {
            a.record_stream(&mut d, live[live.len() / 2], s1).unwrap();
        }
        if live.len() > 12 {
            let p = live.remove((i as usize * 5) % live.len());
            a.free(&mut d, p).unwrap();
            observe(&a);
        }
        if i % 50 == 49 {
            a.empty_cache(&mut d).unwrap();
            observe(&a);
        }
    }
    a.release_all(&mut d).unwrap();
    drop(a);
    let mut fresh = tiny();
    let r = replay_file(&path, &spec, &mut fresh, &ReplayOptions::default()).unwrap();
    assert!(r.fits && r.bad_rows.is_empty());
    assert_eq!(r.allocations, 400);
    assert_eq!(
        (r.peaks.alloc_allocated.bytes, r.peaks.alloc_reserved.bytes),
        (peak_allocated, peak_reserved)
    );
    assert_eq!(
        fresh.mem_info().unwrap().used_bytes(),
        CONTEXT,
        "the replay released everything"
    );
    // Pacing follows the log's clock.
    let paced = ReplayOptions {
        pace: true,
        ..ReplayOptions::default()
    };
    let mut again = tiny();
    let p = replay_file(&path, &spec, &mut again, &paced).unwrap();
    assert!(p.device_ns >= r.device_ns);
    // A missing file is an error naming it.
    let e = replay_file(
        &dir.path().join("nope.csv"),
        &spec,
        &mut tiny(),
        &ReplayOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("nope.csv"), "{e}");
}

#[test]
fn a_replay_on_a_device_with_less_memory_fails_where_it_should() {
    // 3 × 1 GiB fits tiny-4g; the same log with another tenant holding 1 GiB does not.
    let mut log = String::from("t_ns,action,ptr,bytes,stream,detail\n");
    for i in 0..3u64 {
        writeln!(
            log,
            "{i},allocate,{:#x},{},0,",
            0x1000 + i * 0x4000_0000,
            GIB
        )
        .unwrap();
    }
    let opts = ReplayOptions::default();
    let ok = replay_reader(
        "three.csv",
        log.as_bytes(),
        &AllocatorSpec::Direct,
        &mut tiny(),
        &opts,
    )
    .unwrap();
    assert!(ok.fits);
    let mut crowded = tiny();
    crowded.add_tenant(4242, GIB, None);
    let r = replay_reader(
        "three.csv",
        log.as_bytes(),
        &AllocatorSpec::Direct,
        &mut crowded,
        &opts,
    )
    .unwrap();
    assert_eq!(r.first_failure.map(|f| f.line), Some(4));
}

/// The report names the allocator with its settings, and serializes for machines.
#[test]
fn the_report_names_the_allocator_and_device() {
    let r = replay(
        RMM_LOG,
        &caching("max_split_size_mb:128"),
        BadRowPolicy::Stop,
    )
    .unwrap();
    assert_eq!(r.allocator, "caching (max_split_size_mb:128)");
    assert!(r.device.contains("tiny-4g"), "{}", r.device);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["peaks"]["alloc_reserved"]["bytes"], 22 * MIB);
}

#[test]
fn the_replay_command_exits_by_whether_the_log_fits() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rmm.csv");
    let fitting: String = RMM_LOG
        .lines()
        .filter(|l| !l.contains("failure"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&log, fitting).unwrap();
    let bin = env!("CARGO_BIN_EXE_headroom");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let out = run(&[
        "replay",
        log.to_str().unwrap(),
        "--profile",
        "tiny-4g",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fits"], true);
    // 5 GiB in one allocation cannot fit on a 4 GiB device: exit 1 with the failing line.
    std::fs::write(
        &log,
        "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x1000,5368709120,0x0\n",
    )
    .unwrap();
    let out = run(&["replay", log.to_str().unwrap(), "--profile", "tiny-4g"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A malformed line stops the replay with its number, exit 2.
    std::fs::write(
        &log,
        "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x1000,lots,0x0\n",
    )
    .unwrap();
    let out = run(&["replay", log.to_str().unwrap(), "--profile", "tiny-4g"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&[
        "replay",
        log.to_str().unwrap(),
        "--profile",
        "tiny-4g",
        "--allocator",
        "direct",
        "--settings",
        "x:1",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_runs_allocation_log_replays_and_a_refused_request_can_be_served_elsewhere() {
    // A run on tiny-4g where a 3 GiB request is refused after 2 GiB are taken; its log replays
    // against the same device (refused again) and against a larger one (served now).
    let dir = tempfile::tempdir().unwrap();
    let wl = dir.path().join("w.toml");
    std::fs::write(
        &wl,
        "[workload]\nname = \"w\"\n[settings]\nallow_oom = true\n[allocator]\nkind = \"caching\"\n\
         [[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"a\", size = \"2GiB\" }, { op = \"allocate\", name = \"b\", size = \"3GiB\", on_oom = \"continue\" }]\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_headroom");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let out_dir = dir.path().join("run");
    let out = run(&[
        "run",
        wl.to_str().unwrap(),
        "--profile",
        "tiny-4g",
        "--out",
        out_dir.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the OOM was not expected: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = out_dir.join("alloc-log.csv");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.starts_with("t_ns,action,ptr,bytes,stream,detail\n"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.contains(",failure,")).count(),
        1,
        "{text}"
    );
    let v =
        |args: &[&str]| -> serde_json::Value { serde_json::from_slice(&run(args).stdout).unwrap() };
    let same = v(&[
        "replay",
        log.to_str().unwrap(),
        "--profile",
        "tiny-4g",
        "--json",
    ]);
    assert_eq!(
        (
            same["failures_still_refused"].as_u64(),
            same["failures_now_served"].as_array().unwrap().len()
        ),
        (Some(1), 0)
    );
    let bigger = v(&[
        "replay",
        log.to_str().unwrap(),
        "--profile",
        "h100-80g",
        "--json",
    ]);
    assert_eq!(bigger["failures_now_served"].as_array().unwrap().len(), 1);
    assert_eq!(
        bigger["peaks"]["alloc_reserved"]["bytes"].as_u64(),
        Some(5 << 30)
    );
}

#[test]
fn rmm_streams_written_as_bare_hex_replay_and_are_quoted_as_written() {
    let log = "Thread,Time,Action,Pointer,Size,Stream
140573312345856,18:21:24.857582,allocate,0x7f8a40000000,3145728,7f8a38001020
140573312345856,18:21:24.857590,allocate,0x7f8a50000000,3145728,0
140573312345856,18:21:24.857600,free,0x7f8a40000000,3145728,7f8a38001020
140573312345856,18:21:24.857610,allocate,0x7f8a60000000,8589934592,7f8a38001020
";
    let r = replay(log, &caching(""), BadRowPolicy::Stop).unwrap();
    // Two streams: the bare-hex one and the default stream, each with its own 20 MiB segment.
    assert_eq!(r.peaks.alloc_reserved.bytes, 40 * MIB);
    let f = r.first_failure.as_ref().unwrap();
    assert_eq!((f.line, f.log_stream.as_str()), (5, "7f8a38001020"));
    assert!(r.to_string().contains("on log stream 7f8a38001020)"), "{r}");
}

#[test]
fn a_truncated_last_line_points_to_keep_going() {
    let cut = "Thread,Time,Action,Pointer,Size,Stream
140573312345856,18:21:24.857582,allocate,0x7f8a40000000,3145728,0x0
140573312345856,18:21:24.857590,free,0x7f8a4";
    let e = replay(cut, &caching(""), BadRowPolicy::Stop).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("line 3") && msg.contains("--keep-going"),
        "{msg}"
    );
    let r = replay(cut, &caching(""), BadRowPolicy::Collect).unwrap();
    assert_eq!((r.allocations, r.bad_rows.len()), (1, 1));
}
