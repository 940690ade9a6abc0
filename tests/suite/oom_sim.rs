//! Each shipped OOM scenario on the simulated tiny-4g: the OOM at its step, the evidence to the
//! byte, and the memory given back afterwards.

use std::path::Path;

use crate::common::*;

fn scenario(
    name: &str,
    extra: &[&str],
) -> (
    Out,
    serde_json::Value,
    std::path::PathBuf,
    tempfile::TempDir,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let (out, s, out_dir) = run_tiny(
        dir.path(),
        &root.join(format!("workloads/oom/{name}.toml")),
        extra,
    );
    assert_eq!(out.code, 0, "the designed OOM is expected: {}", out.stderr);
    assert_eq!(s["ooms"].as_array().unwrap().len(), 1, "{}", s["ooms"]);
    (out, s, out_dir, dir)
}

#[test]
fn pending_free_fails_on_another_stream_and_succeeds_after_synchronize() {
    let (_, s, out_dir, _d) = scenario("pending-free", &[]);
    let oom = &s["ooms"][0];
    assert_eq!(
        (
            oom["phase"].as_str().unwrap(),
            oom["step"].as_str().unwrap()
        ),
        ("allocate-on-b", "s1")
    );
    assert_eq!(oom["stream"], "b");
    assert_eq!(u(&oom["requested_bytes"]), 2456 * MIB);
    assert_eq!(u(&oom["device_free_bytes"]), 4 * GIB - CTX - 2456 * MIB);
    assert_eq!(u(&oom["alloc_reserved_bytes"]), 2456 * MIB);
    assert_eq!(u(&oom["alloc_allocated_bytes"]), 0);
    assert_eq!(
        oom["diagnosis"]["observation"],
        "Reserved is larger than allocated"
    );
    assert_eq!(oom["diagnosis"]["causes"][0], "pending-free");
    let events = csv_rows(&out_dir.join("events.csv"));
    let last = events.last().unwrap();
    assert_eq!(
        (last["name"].as_str(), last["result"].as_str()),
        ("on-b-after-sync", "ok")
    );
    // The free is ordered on the stream its block was allocated on, and recorded there.
    let free = events.iter().find(|e| e["op"] == "free").unwrap();
    assert_eq!(
        (free["name"].as_str(), free["stream"].as_str()),
        ("big", "a")
    );
    let trace = std::fs::read_to_string(out_dir.join("trace.json")).unwrap();
    let trace: serde_json::Value = serde_json::from_str(&trace).unwrap();
    let free_event = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str().is_some_and(|n| n.starts_with("free")))
        .unwrap_or_else(|| panic!("no free in trace.json"));
    assert_eq!(free_event["args"]["stream"], "a", "{free_event}");
    // The retry reused the pool's block: the pool never held more than one.
    assert_eq!(
        u(&s["peaks"]["run"]["pool_reserved_bytes"]["bytes"]),
        2456 * MIB
    );
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn outside_allocator_memory_is_invisible_to_the_allocator_views() {
    let (_, s, _, _d) = scenario("outside-allocator", &[]);
    let oom = &s["ooms"][0];
    assert_eq!(oom["phase"], "forward");
    assert_eq!(u(&oom["requested_bytes"]), 1228 * MIB);
    assert_eq!(u(&oom["outside_allocator_bytes"]), 1842 * MIB);
    assert_eq!(u(&oom["alloc_reserved_bytes"]), 1228 * MIB);
    assert_eq!(u(&oom["own_bytes"]), 1228 * MIB + 1842 * MIB);
    assert_eq!(
        u(&oom["device_free_bytes"]),
        4 * GIB - CTX - 1228 * MIB - 1842 * MIB
    );
    assert!(
        oom["diagnosis"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "outside-allocator")
    );
    assert_eq!(
        u(&s["peaks"]["run"]["alloc_reserved_bytes"]["bytes"]),
        1228 * MIB
    );
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn another_tenant_is_listed_with_its_usage() {
    let (_, s, _, _d) = scenario("other-tenant", &[]);
    let oom = &s["ooms"][0];
    assert_eq!(u(&oom["requested_bytes"]), 2456 * MIB);
    assert_eq!(u(&oom["own_bytes"]), 0);
    // The tenant holds 2 GiB and a context of its own.
    assert_eq!(u(&oom["device_free_bytes"]), 4 * GIB - CTX - 2 * GIB - CTX);
    let others: Vec<_> = oom["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["is_self"] == false)
        .collect();
    assert_eq!(others.len(), 1);
    assert_eq!(u(&others[0]["used_bytes"]), 2 * GIB + CTX);
    assert_eq!(
        oom["diagnosis"]["observation"],
        "Framework and device totals disagree"
    );
    assert_eq!(
        s["release"]["difference_bytes"], 0,
        "the tenant ends with the run"
    );
}

#[test]
fn the_stack_reservation_shows_only_as_a_drop_in_device_free() {
    let (_, s, _, _d) = scenario("context-and-stack", &[]);
    // (64 KiB − 1 KiB) × 8 SMs × 2048 threads.
    let stack = 63 * 1024 * 8 * 2048;
    assert_eq!(stack, 1008 * MIB);
    assert_eq!(u(&s["idle"]["context_overhead_bytes"]), CTX);
    let oom = &s["ooms"][0];
    assert_eq!(u(&oom["requested_bytes"]), 3686 * MIB);
    assert_eq!(u(&oom["device_free_bytes"]), 4 * GIB - CTX - stack);
    assert_eq!(
        oom["unexplained_used_bytes"].as_i64().unwrap(),
        stack as i64
    );
    assert_eq!(oom["diagnosis"]["causes"][0], "held-outside-any-allocator");
    assert_eq!(
        s["release"]["difference_bytes"].as_i64().unwrap(),
        -(stack as i64)
    );
    assert_eq!(s["release"]["within_one_page"], false);
    assert!(s["release"]["note"].as_str().unwrap().contains("stack"));
}

#[test]
fn the_activation_peak_fails_where_idle_said_it_would_fit() {
    let (_, s, _, _d) = scenario("peak-not-idle", &[]);
    let oom = &s["ooms"][0];
    // Layer outputs of 204 MiB: eight fit in the 1792 MiB left after the weights, the ninth not.
    assert_eq!(
        (
            oom["phase"].as_str().unwrap(),
            oom["step"].as_str().unwrap()
        ),
        ("train-step", "s1.33")
    );
    assert_eq!(oom["name"], "act[8]");
    assert_eq!(u(&oom["requested_bytes"]), 204 * MIB);
    assert_eq!(u(&oom["device_free_bytes"]), 1792 * MIB - 8 * 204 * MIB);
    assert_eq!(u(&oom["own_bytes"]), 2 * GIB + 8 * 204 * MIB);
    assert_eq!(
        oom["diagnosis"]["observation"],
        "A small workload fits, a larger one does not"
    );
    assert_eq!(s["phases"][0]["status"], "completed");
    assert_eq!(s["phases"][1]["status"], "oom");
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn a_missing_expected_oom_exits_1_and_an_unexpected_one_too() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // On the 80 GB profile a fixed 2 GiB tenant leaves plenty: no OOM where one was expected.
    let text = std::fs::read_to_string(root.join("workloads/oom/other-tenant.toml")).unwrap();
    let wl = dir.path().join("no-oom.toml");
    std::fs::write(&wl, text.replace("60% of total", "1GiB")).unwrap();
    let (out, s, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(s["expectations"][0]["held"], false);
}

#[test]
fn a_shared_gpu_is_refused_without_shared_ok() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile = std::fs::read_to_string(root.join("profiles/tiny-4g.toml")).unwrap()
        + "\n[[other_processes]]\npid = 777\nbytes = \"1GiB\"\n";
    let pfile = dir.path().join("shared.toml");
    std::fs::write(&pfile, profile).unwrap();
    let wl = workload(
        dir.path(),
        "w",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"1GiB\" }]\n",
    );
    let args = [
        "run",
        wl.to_str().unwrap(),
        "--profile",
        pfile.to_str().unwrap(),
        "--results",
        dir.path().to_str().unwrap(),
        "-q",
    ];
    let out = headroom(dir.path(), &args);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("pid 777 (1.00 GiB)") && out.stderr.contains("--shared-ok"),
        "{}",
        out.stderr
    );
    let mut shared = args.to_vec();
    shared.push("--shared-ok");
    let out = headroom(dir.path(), &shared);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn fragmentation_reserved_minus_allocated_predicts_success_wrongly() {
    let (_, s, out_dir, _d) = scenario("fragmentation", &[]);
    // 3840 MiB free after the context holds 192 segments of 20 MiB, ten 2 MiB blocks each.
    let events = csv_rows(&out_dir.join("events.csv"));
    let full = events.iter().find(|e| e["result"] == "full").unwrap();
    assert!(
        full["detail"].starts_with("full after 1920 allocations"),
        "{}",
        full["detail"]
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["op"] == "free" && e["result"] == "ok")
            .count(),
        1920 - 192
    );
    let empty = events.iter().find(|e| e["op"] == "empty_cache").unwrap();
    assert_eq!(
        empty["size_bytes"], "0",
        "empty_cache frees nothing: no segment is fully free"
    );
    let oom = &s["ooms"][0];
    assert_eq!(
        (
            oom["phase"].as_str().unwrap(),
            oom["step"].as_str().unwrap()
        ),
        ("request", "s1")
    );
    assert_eq!(u(&oom["rounded_bytes"]), 20 * MIB);
    assert_eq!(u(&oom["alloc_reserved_bytes"]), 192 * 20 * MIB);
    assert_eq!(u(&oom["alloc_allocated_bytes"]), 192 * 2 * MIB);
    assert_eq!(u(&oom["reserved_but_unallocated_bytes"]), 192 * 18 * MIB);
    assert_eq!(u(&oom["largest_free_block_bytes"]), 18 * MIB);
    assert_eq!(u(&oom["inactive_split_count"]), 192);
    assert_eq!(u(&oom["device_free_bytes"]), 0);
    assert!(!oom["retries"].as_array().unwrap().is_empty());
    // The allocator's own counters: the retry chain ran and ended in an OOM twice — once
    // where the fill stopped (the end of that step, not a result) and once at the request.
    assert_eq!(u(&s["allocator_stats"]["num_alloc_retries"]), 2);
    assert_eq!(u(&s["allocator_stats"]["num_ooms"]), 2);
    assert_eq!(
        oom["diagnosis"]["observation"],
        "Reserved is larger than allocated"
    );
    assert_eq!(oom["diagnosis"]["causes"][0], "fragmentation");
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn the_fraction_cap_is_the_cause_and_names_its_allowed_bytes() {
    let (_, s, _, _d) = scenario("fraction-cap", &[]);
    let oom = &s["ooms"][0];
    assert_eq!(
        (oom["phase"].as_str(), oom["via"].as_str()),
        (Some("workspace"), Some("caching"))
    );
    // 25% of tiny-4g's 4 GiB; weights took 20% (four 204.8 MiB tensors, each its own segment).
    let allowed = GIB;
    // 10% of the device, rounded down to a 2 MiB page.
    assert_eq!(u(&oom["requested_bytes"]), 408 * MIB);
    let caps: Vec<&serde_json::Value> = oom["retries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.get("fraction_cap"))
        .collect();
    assert_eq!(
        caps.len(),
        2,
        "the first attempt and the retry: {}",
        oom["retries"]
    );
    let last = caps[1];
    assert_eq!(u(&last["allowed_bytes"]), allowed);
    assert_eq!(u(&last["held_bytes"]), u(&oom["alloc_reserved_bytes"]));
    assert!(u(&last["held_bytes"]) + u(&last["more_bytes"]) > allowed);
    // The device had room: this is the cap, not the peak.
    assert!(u(&oom["device_free_bytes"]) > 2 * GIB);
    assert_eq!(
        u(&oom["driver_request_bytes"]),
        0,
        "the driver was never asked"
    );
    let d = &oom["diagnosis"];
    assert_eq!(d["causes"][0], "fraction-cap", "{d}");
    assert!(
        !d["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "peak-not-idle"),
        "{d}"
    );
    assert!(
        d["findings"].as_array().unwrap().iter().any(|f| f
            .as_str()
            .unwrap()
            .contains("1.00 GiB allowed (1073741824 bytes)")),
        "{d}"
    );
}
