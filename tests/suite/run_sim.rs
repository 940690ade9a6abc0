//! `headroom run` end to end on the simulated device, checked to the byte.

use crate::common::*;

#[test]
fn three_gib_then_free_one_peaks_at_exactly_three_gib() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "three",
        "[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"allocate\", name = \"x\", size = \"1GiB\", count = 3 },\n  { op = \"free\", name = \"x[1]\" },\n]\n",
    );
    let (out, s, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(u(&s["peaks"]["run"]["own_bytes"]["bytes"]), 3 * GIB);
    assert_eq!(
        u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]),
        CTX + 3 * GIB
    );
    assert_eq!(u(&s["idle"]["after_context"]["device_used_bytes"]), CTX);
    assert_eq!(u(&s["idle"]["context_overhead_bytes"]), CTX);
    // At the moment of the third allocation, device used = context + 3 GiB.
    let rows = csv_rows(&out_dir.join("timeline.csv"));
    let at_peak = rows
        .iter()
        .find(|r| r["source"] == "event" && r["own_bytes"] == (3 * GIB).to_string())
        .expect("an event reading at 3 GiB");
    assert_eq!(at_peak["device_used_bytes"], (CTX + 3 * GIB).to_string());
    let last_event = rows.iter().rev().find(|r| r["source"] == "event").unwrap();
    assert_eq!(last_event["own_bytes"], (2 * GIB).to_string());
    assert_eq!(s["release"]["within_one_page"], true);
    assert_eq!(s["release"]["difference_bytes"], 0);
    let events = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(events.len(), 4);
    assert_eq!(events[3]["op"], "free");
    assert_eq!(events[3]["name"], "x[1]");
}

#[test]
fn a_1_5_mib_allocation_takes_a_whole_2_mib_page() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "page",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"1.5MiB\" }]\n",
    );
    let (out, s, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(u(&s["peaks"]["run"]["own_bytes"]["bytes"]), 3 * MIB / 2);
    assert_eq!(
        u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]),
        CTX + 2 * MIB
    );
}

#[test]
fn a_50ms_spike_is_caught_by_events_and_missed_by_a_1hz_poll() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "spike",
        "[[phase]]\nname = \"base\"\nsteps = [{ op = \"allocate\", name = \"base\", size = \"100MiB\" }, { op = \"sleep\", for = \"300ms\" }]\n\
         [[phase]]\nname = \"spike\"\nsteps = [{ op = \"allocate\", name = \"s\", size = \"1GiB\" }, { op = \"sleep\", for = \"50ms\" }, { op = \"free\", name = \"s\" }, { op = \"sleep\", for = \"1500ms\" }]\n",
    );
    let (out, s, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let peak = &s["peaks"]["run"]["own_bytes"];
    assert_eq!(u(&peak["bytes"]), 100 * MIB + GIB);
    assert_eq!(peak["source"], "event");
    assert_eq!(
        u(&s["peaks"]["polled"]["1hz"]["peaks"]["own_bytes"]),
        100 * MIB
    );
    assert_eq!(u(&s["peaks"]["polled"]["1hz"]["ticks"]), 2);
    // A 10 Hz poll (ticks at 300 ms and 400 ms) misses a spike from 300.1 ms to 350.1 ms too.
    assert_eq!(
        u(&s["peaks"]["polled"]["10hz"]["peaks"]["own_bytes"]),
        100 * MIB
    );
    assert_eq!(
        u(&s["peaks"]["polled"]["1hz"]["peaks"]["device_used_bytes"]),
        CTX + 100 * MIB
    );
    // The 1 ms sampler saw the spike too: about fifty readings at the spike level. Equal
    // readings are one row each end: the spike's first row (the allocation's event) and the
    // sampler's last reading before the free; the ones between are the sampler's ticks.
    let rows = csv_rows(&out_dir.join("timeline.csv"));
    let spike = (CTX + 100 * MIB + GIB).to_string();
    let at_spike: Vec<(&str, u64)> = rows
        .iter()
        .filter(|r| r["device_used_bytes"] == spike)
        .map(|r| (r["source"].as_str(), r["t_ns"].parse().unwrap()))
        .collect();
    let sampler_rows: Vec<u64> = at_spike
        .iter()
        .filter(|r| r.0 == "sampler")
        .map(|r| r.1)
        .collect();
    assert_eq!(sampler_rows.len(), 1, "{at_spike:?}");
    let (first, last) = (at_spike[0].1, sampler_rows[0]);
    let interval = u(&s["sampler"]["interval_ns"]);
    let spike_samples = (last - first - 1) / interval + 1;
    assert!((49..=51).contains(&spike_samples), "{spike_samples}");
    // Phase peaks are kept apart.
    assert_eq!(u(&s["phases"][0]["peaks"]["own_bytes"]["bytes"]), 100 * MIB);
    assert_eq!(
        u(&s["phases"][1]["peaks"]["own_bytes"]["bytes"]),
        100 * MIB + GIB
    );
}

#[test]
fn a_bad_workload_exits_2_naming_file_phase_step_and_key_and_allocates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "bad",
        "[[phase]]\nname = \"load\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"1GiB\" }, { op = \"allocate\", name = \"y\", sise = \"1GiB\" }]\n",
    );
    let (out, _, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("bad.toml"), "{}", out.stderr);
    assert!(
        out.stderr.contains("phase 1 (\"load\"), step 2 (allocate)"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("sise"), "{}", out.stderr);
    assert!(
        !out_dir.exists(),
        "nothing is written for a workload that does not parse"
    );

    let too_big = workload(
        dir.path(),
        "big",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"5GiB\" }]\n",
    );
    let (out, _, _) = run_tiny(dir.path(), &too_big, &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("exceeds the device's total of 4.00 GiB"),
        "{}",
        out.stderr
    );
}

#[test]
fn an_existing_run_folder_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "again",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"sleep\", for = \"1ms\" }]\n",
    );
    let (first, _, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(first.code, 0);
    let before = std::fs::read(out_dir.join("summary.json")).unwrap();
    let (second, _, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(second.code, 2);
    assert!(
        second.stderr.contains("never overwritten"),
        "{}",
        second.stderr
    );
    assert_eq!(std::fs::read(out_dir.join("summary.json")).unwrap(), before);
}

#[test]
fn a_step_below_the_floor_stops_before_it_and_keeps_earlier_phases() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "floor",
        "[[phase]]\nname = \"fits\"\nsteps = [{ op = \"allocate\", name = \"a\", size = \"2GiB\" }]\n\
         [[phase]]\nname = \"too-much\"\nsteps = [{ op = \"allocate\", name = \"b\", size = \"1600MiB\" }]\n\
         [[phase]]\nname = \"never\"\nsteps = [{ op = \"sleep\", for = \"1ms\" }]\n",
    );
    let (out, s, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(s["status"], "stopped_at_floor");
    assert!(
        s["status_detail"].as_str().unwrap().contains("floor"),
        "{}",
        s["status_detail"]
    );
    assert_eq!(s["phases"][0]["status"], "completed");
    assert_eq!(s["phases"][1]["status"], "stopped");
    assert_eq!(s["phases"][2]["status"], "skipped");
    assert_eq!(u(&s["peaks"]["run"]["own_bytes"]["bytes"]), 2 * GIB);
    assert_eq!(s["ooms"].as_array().unwrap().len(), 0);
    assert_eq!(s["release"]["difference_bytes"], 0);
    let events = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(events.last().unwrap()["result"], "stopped");
}

#[test]
fn an_allowed_oom_is_a_recorded_result_with_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "oom",
        "[[phase]]\nname = \"weights\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"2GiB\" }]\n\
         [[phase]]\nname = \"peak\"\nsteps = [{ op = \"allocate\", name = \"act\", size = \"1800MiB\" }, { op = \"sleep\", for = \"1ms\" }]\n",
    );
    let (out, s, out_dir) = run_tiny(dir.path(), &wl, &["--allow-oom"]);
    assert_eq!(
        out.code, 1,
        "an unexpected OOM fails the run: {}",
        out.stderr
    );
    assert_eq!(s["status"], "oom");
    let oom = &s["ooms"][0];
    assert_eq!(oom["phase"], "peak");
    assert_eq!(oom["step"], "s1");
    assert_eq!(u(&oom["requested_bytes"]), 1800 * MIB);
    assert_eq!(u(&oom["device_free_bytes"]), 4 * GIB - CTX - 2 * GIB);
    assert_eq!(u(&oom["idle_device_free_bytes"]), 4 * GIB - CTX);
    assert_eq!(u(&oom["own_bytes"]), 2 * GIB);
    assert_eq!(
        oom["diagnosis"]["observation"],
        "A small workload fits, a larger one does not"
    );
    assert!(oom["utc"].as_str().unwrap().ends_with('Z'));
    let events = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(events.last().unwrap()["result"], "oom");
    assert_eq!(s["release"]["within_one_page"], true);

    let wl2 = workload(
        dir.path(),
        "oom2",
        &std::fs::read_to_string(&wl)
            .unwrap()
            .replace("[workload]\nname = \"oom\"\n", ""),
    );
    let (out, s, _) = run_tiny(dir.path(), &wl2, &["--allow-oom", "--expect-oom"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(s["expectations"][0]["held"], true);
}

#[test]
fn an_expected_oom_that_does_not_happen_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "fine",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"1GiB\" }]\n",
    );
    let (out, s, _) = run_tiny(dir.path(), &wl, &["--expect-oom"]);
    assert_eq!(out.code, 1);
    assert_eq!(s["expectations"][0]["held"], false);
}

#[test]
fn devices_without_a_driver_lists_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let out = headroom(dir.path(), &["devices", "--backend", "sim"]);
    assert_eq!(out.code, 0);
    assert!(
        out.stdout.contains("tiny-4g")
            && out.stdout.contains("h200")
            && out.stdout.contains("h100-80g")
    );
    let out = headroom(dir.path(), &["devices", "--backend", "sim", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["backend"], "sim");
    let h200 = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "h200")
        .unwrap();
    assert_eq!(u(&h200["total_bytes"]), 143_156 * MIB);
}

#[test]
fn the_quickstart_runs_on_the_default_simulated_device() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out = headroom(
        root,
        &[
            "run",
            "workloads/quickstart.toml",
            "--backend",
            "sim",
            "--results",
            dir.path().to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("true peak"), "{}", out.stdout);
    assert!(out.stdout.contains("profile h200"), "{}", out.stdout);
}

#[test]
fn the_sampler_does_not_perturb_a_simulated_run() {
    // The same workload with a 1 ms sampler and with one reading an hour: every event happens
    // at the same virtual time with the same result; only the sampler rows differ.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mut events = Vec::new();
    for (name, interval) in [("fast", "1ms"), ("slow", "1h")] {
        let out_dir = dir.path().join(name);
        let out = headroom(
            root,
            &[
                "run",
                "workloads/quickstart.toml",
                "--profile",
                "tiny-4g",
                "--sample-interval",
                interval,
                "--out",
                out_dir.to_str().unwrap(),
                "-q",
            ],
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        events.push(std::fs::read_to_string(out_dir.join("events.csv")).unwrap());
    }
    assert_eq!(events[0], events[1]);
}

#[test]
fn report_on_a_killed_folder_says_incomplete_with_what_its_csvs_hold() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "killed",
        r#"[[phase]]
name = "load"
steps = [
  { op = "allocate", name = "a", size = "1GiB" },
  { op = "allocate", name = "b", size = "512MiB" },
]

[[phase]]
name = "work"
steps = [
  { op = "touch", name = "a" },
  { op = "free", name = "b" },
  { op = "free", name = "a" },
]
"#,
    );
    let (out, s, run_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // What a SIGKILL in the second phase leaves: the summary of the first checkpoint still
    // says running with every phase pending, the timeline cut mid-row.
    let mut killed = s.clone();
    killed["status"] = "running".into();
    for p in killed["phases"].as_array_mut().unwrap() {
        p["status"] = "pending".into();
        p["actions_run"] = 0.into();
    }
    std::fs::write(
        run_dir.join("summary.json"),
        serde_json::to_string_pretty(&killed).unwrap(),
    )
    .unwrap();
    let timeline = std::fs::read_to_string(run_dir.join("timeline.csv")).unwrap();
    std::fs::write(
        run_dir.join("timeline.csv"),
        &timeline[..timeline.len() - 10],
    )
    .unwrap();
    std::fs::remove_file(run_dir.join("report.md")).unwrap();
    let r = headroom(dir.path(), &["report", run_dir.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    // The refusal is on standard error; nothing was written, so standard output is empty.
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr.contains("incomplete, no report written")
            && r.stderr.contains("still says \"running\""),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("phase \"load\": 2 steps done, 2 rows, the last ok")
            && r.stderr
                .contains("phase \"work\": 3 steps done, 3 rows, the last ok"),
        "{}",
        r.stderr
    );
    let peak = u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]);
    assert_eq!(peak, CTX + GIB + 512 * MIB);
    assert!(
        r.stderr
            .contains(&format!("peak device used so far {peak} bytes")),
        "{}",
        r.stderr
    );
    assert!(
        !run_dir.join("report.md").exists(),
        "no report that looks like a result"
    );
}
