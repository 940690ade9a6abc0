//! CUDA graphs on the simulated tiny-4g: per-graph memory, what a trim returns, the linear
//! extrapolation's error over a list of batch sizes, the graph-pool OOM at its step, and the
//! memory back at baseline afterwards, all to the byte.

use std::path::Path;

use crate::common::*;

const KIB: u64 = 1 << 10;
/// tiny-4g: device memory an executable graph takes per kernel node.
const PER_NODE: u64 = 10 * KIB;

fn shipped(
    rel: &str,
) -> (
    Out,
    serde_json::Value,
    std::path::PathBuf,
    tempfile::TempDir,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let (out, s, out_dir) = run_tiny(dir.path(), &root.join(rel), &[]);
    (out, s, out_dir, dir)
}

fn i(v: &serde_json::Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// Σ over `sizes` of the line through the two samples, rounded half away from zero.
fn line_total(b1: i128, c1: i128, b2: i128, c2: i128, sizes: &[i128]) -> i64 {
    let num = sizes.len() as i128 * c1 * (b2 - b1)
        + (c2 - c1) * sizes.iter().map(|b| b - b1).sum::<i128>();
    let den = b2 - b1;
    ((2 * num.abs() + den) / (2 * den) * num.signum()) as i64
}

#[test]
fn graph_pool_memory_kept_after_destroy_refuses_a_request_that_fits_once_trimmed() {
    let (out, s, out_dir, _d) = shipped("workloads/oom/graph-pool.toml");
    assert_eq!(out.code, 0, "the designed OOM is expected: {}", out.stderr);
    let ws = 3 * GIB / 2;
    let g = &s["graphs"]["graphs"][0];
    assert_eq!(g["graph"], "g");
    assert_eq!(
        (
            u(&g["kernel_nodes"]),
            u(&g["alloc_nodes"]),
            u(&g["free_nodes"])
        ),
        (2, 1, 1)
    );
    assert_eq!(i(&g["capture_bytes"]), 0, "a capture takes nothing");
    assert_eq!(i(&g["exec_bytes"]), (2 * PER_NODE) as i64);
    assert_eq!(i(&g["first_map_bytes"]), ws as i64);
    assert_eq!(i(&g["graph_reserved_growth_bytes"]), ws as i64);
    assert_eq!(u(&g["launches"]), 10);
    assert_eq!(
        u(&g["device_free_after_launches_bytes"]),
        4 * GIB - CTX - 2 * PER_NODE - ws
    );
    assert_eq!(
        i(&g["destroy_returned_bytes"]),
        (2 * PER_NODE) as i64,
        "only the executable"
    );

    assert_eq!(s["ooms"].as_array().unwrap().len(), 1);
    let oom = &s["ooms"][0];
    assert_eq!(
        (oom["phase"].as_str(), oom["step"].as_str()),
        (Some("allocate"), Some("s1"))
    );
    assert_eq!(u(&oom["requested_bytes"]), 5 * GIB / 2);
    assert_eq!(u(&oom["device_free_bytes"]), 4 * GIB - CTX - ws);
    assert_eq!(u(&oom["graph_reserved_bytes"]), ws);
    assert_eq!(u(&oom["graph_used_bytes"]), 0);
    assert_eq!(u(&oom["graph_exec_bytes"]), 0);
    assert_eq!(
        i(&oom["unexplained_used_bytes"]),
        0,
        "graph memory is explained"
    );
    assert_eq!(
        oom["diagnosis"]["causes"],
        serde_json::json!(["graph-pool"])
    );
    assert_eq!(
        oom["diagnosis"]["observation"],
        "Framework and device totals disagree"
    );

    let trim = &s["graphs"]["trims"][0];
    assert_eq!(i(&trim["released_bytes"]), ws as i64);
    assert_eq!(i(&trim["device_free_gain_bytes"]), ws as i64);
    assert_eq!(u(&trim["graph_reserved_after_bytes"]), 0);
    let usage = &s["graphs"]["driver_usage"];
    assert_eq!(
        (
            u(&usage["reserved_high_bytes"]),
            u(&usage["used_high_bytes"])
        ),
        (ws, ws)
    );
    assert_eq!(u(&s["peaks"]["run"]["graph_reserved_bytes"]["bytes"]), ws);
    assert_eq!(
        u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]),
        CTX + 5 * GIB / 2,
        "the request fits once trimmed"
    );

    // Device free before and after each stage, as event readings.
    let events = csv_rows(&out_dir.join("events.csv"));
    let free_after = |op: &str| -> u64 {
        events
            .iter()
            .find(|e| e["op"] == op)
            .map(|e| e["device_free_bytes"].parse().unwrap())
            .unwrap_or_else(|| panic!("no {op} row"))
    };
    let idle = 4 * GIB - CTX;
    assert_eq!(free_after("end_capture"), idle);
    assert_eq!(free_after("instantiate"), idle - 2 * PER_NODE);
    assert_eq!(free_after("replay"), idle - 2 * PER_NODE - ws);
    assert_eq!(free_after("destroy_graph"), idle - ws);
    assert_eq!(free_after("trim_graph_memory"), idle);
    let last = events.last().unwrap();
    assert_eq!(
        (last["name"].as_str(), last["result"].as_str()),
        ("big-after-trim", "ok")
    );
    // The graph views are columns of every reading.
    let rows = csv_rows(&out_dir.join("timeline.csv"));
    assert!(
        rows.iter()
            .any(|r| r["graph_reserved_bytes"] == ws.to_string() && r["graph_used_bytes"] == "0")
    );
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn graphs_per_batch_size_against_the_linear_extrapolation() {
    let (out, s, out_dir, _d) = shipped("workloads/graphs.toml");
    assert_eq!(out.code, 0, "{}", out.stderr);
    let p = &s["graphs"]["patterns"][0];
    assert_eq!(
        (p["name"].as_str(), p["order"].as_str()),
        (Some("decode"), Some("descending"))
    );
    // Per graph: 4 layers × (touch + fill) + the output's touch = 9 kernel nodes.
    let exec = 9 * PER_NODE;
    let out_bytes = |b: u64| (b * 64 * KIB).div_ceil(2 * MIB) * 2 * MIB;
    let sizes: Vec<u64> = (0..10).rev().map(|k| 1 << k).collect();
    let graphs = p["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 10);
    for (g, b) in graphs.iter().zip(&sizes) {
        assert_eq!(u(&g["batch_size"]), *b);
        assert_eq!(i(&g["exec_bytes"]), exec as i64);
        // The largest graph sizes the stream's shared workspace; the others reuse it.
        let workspace = if *b == 512 { 512 * MIB } else { 0 };
        assert_eq!(
            i(&g["cost_bytes"]),
            (exec + workspace + out_bytes(*b)) as i64,
            "b = {b}"
        );
        assert_eq!(
            i(&g["graph_reserved_growth_bytes"]),
            (workspace + out_bytes(*b)) as i64
        );
    }
    let measured = 584 * MIB + 10 * exec;
    assert_eq!(u(&p["measured_total_bytes"]), measured);
    // Alone, each sample holds its own workspace: b = 1 rounds 1 MiB up to a 2 MiB page.
    let c1 = exec + 2 * MIB + 2 * MIB;
    let c512 = exec + 512 * MIB + 32 * MIB;
    let samples = p["samples"].as_array().unwrap();
    assert_eq!(
        (u(&samples[0]["batch_size"]), u(&samples[0]["cost_bytes"])),
        (1, c1)
    );
    assert_eq!(
        (u(&samples[1]["batch_size"]), u(&samples[1]["cost_bytes"])),
        (512, c512)
    );
    let all: Vec<i128> = sizes.iter().map(|b| *b as i128).collect();
    let predicted = line_total(1, c1 as i128, 512, c512 as i128, &all);
    assert_eq!(i(&p["predicted_total_bytes"]), predicted);
    assert_eq!(i(&p["error_bytes"]), predicted - measured as i64);
    // The error as a share of what was measured, from the figures above.
    let want_pct = (predicted - measured as i64) as f64 / measured as f64 * 100.0;
    let pct = p["error_percent"].as_f64().unwrap();
    assert!((pct - want_pct).abs() < 1e-9, "{pct} against {want_pct}");

    // Each sample was destroyed and trimmed back to nothing before the real captures.
    let trims = s["graphs"]["trims"].as_array().unwrap();
    assert_eq!(trims.len(), 3);
    assert_eq!(i(&trims[0]["released_bytes"]), (4 * MIB) as i64);
    assert_eq!(i(&trims[1]["released_bytes"]), (544 * MIB) as i64);
    // Teardown: graphs destroyed, outputs freed, graph memory trimmed; back to the weights.
    assert_eq!(i(&trims[2]["released_bytes"]), (584 * MIB) as i64);
    let events = csv_rows(&out_dir.join("events.csv"));
    let trim = events
        .iter()
        .rev()
        .find(|e| e["op"] == "trim_graph_memory")
        .unwrap();
    assert_eq!(trim["device_free_bytes"], (4 * GIB - CTX - GIB).to_string());
    let report = events.iter().find(|e| e["op"] == "graphs_report").unwrap();
    assert_eq!(report["size_bytes"], measured.to_string());
    assert!(
        report["detail"].contains(&format!("{want_pct:+.2}%")),
        "{} (error {want_pct})",
        report["detail"]
    );
    assert_eq!(
        u(&s["graphs"]["driver_usage"]["reserved_high_bytes"]),
        584 * MIB
    );
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn two_small_samples_under_budget_the_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "small-samples",
        r#"[[phase]]
name = "capture"
steps = [
  { op = "graphs", name = "cg", stream = "graphs", batch_sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    layers = 1, workspace_per_batch = "1MiB", output_per_batch = "64KiB", samples = [1, 2], replays = 2 },
]
"#,
    );
    let (out, s, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let p = &s["graphs"]["patterns"][0];
    let exec = 3 * PER_NODE;
    let measured = 584 * MIB + 10 * exec;
    assert_eq!(u(&p["measured_total_bytes"]), measured);
    // Batch sizes 1 and 2 both cost a 2 MiB workspace page and a 2 MiB output page: the line
    // through them is flat and misses everything the larger graphs add.
    assert_eq!(
        i(&p["predicted_total_bytes"]),
        (10 * (4 * MIB + exec)) as i64
    );
    assert_eq!(i(&p["error_bytes"]), -((544 * MIB) as i64));
    assert_eq!(
        s["release"]["difference_bytes"], 0,
        "outputs left live are released"
    );
}

#[test]
fn a_first_launch_that_cannot_map_its_memory_is_a_recorded_oom() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "launch-oom",
        r#"[settings]
allow_oom = true

[[phase]]
name = "hold"
steps = [{ op = "allocate", name = "held", size = "2GiB", via = "driver" }]

[[phase]]
name = "capture"
steps = [
  { op = "capture", graph = "g", stream = "s", steps = [
    { op = "allocate", name = "ws", size = "2GiB" },
    { op = "touch", name = "ws" },
    { op = "free", name = "ws" },
  ] },
  { op = "instantiate", graph = "g" },
]

[[phase]]
name = "launch"
steps = [{ op = "replay", graph = "g" }]

[expect]
oom = "launch/1"
"#,
    );
    let (out, s, _) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let oom = &s["ooms"][0];
    assert_eq!(
        (oom["op"].as_str(), oom["via"].as_str()),
        (Some("replay"), Some("graph"))
    );
    assert_eq!(oom["pool"], "graph (launch)");
    assert_eq!(u(&oom["requested_bytes"]), 2 * GIB);
    assert_eq!(
        u(&oom["device_free_bytes"]),
        4 * GIB - CTX - 2 * GIB - PER_NODE
    );
    assert_eq!(u(&oom["graph_exec_bytes"]), PER_NODE);
    assert_eq!(
        u(&oom["graph_reserved_bytes"]),
        0,
        "a refused launch maps nothing"
    );
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn a_relaunch_without_auto_free_is_refused_before_any_gpu_work() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "relaunch",
        r#"[[phase]]
name = "p"
steps = [
  { op = "capture", graph = "g", stream = "s", steps = [
    { op = "allocate", name = "out", size = "4MiB" },
    { op = "fill", name = "out" },
  ] },
  { op = "instantiate", graph = "g" },
  { op = "replay", graph = "g" },
  { op = "replay", graph = "g" },
]
"#,
    );
    let (out, s, out_dir) = run_tiny(dir.path(), &wl, &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("relaunch.toml: phase 1 (\"p\"), step 4 (replay): ")
            && out.stderr.contains("CUDA_ERROR_INVALID_VALUE"),
        "{}",
        out.stderr
    );
    assert!(s.is_null() && !out_dir.exists(), "nothing ran");
}

#[test]
fn the_terminal_summary_shows_each_graph_and_the_extrapolation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = headroom(
        dir.path(),
        &[
            "run",
            root.join("workloads/graphs.toml").to_str().unwrap(),
            "--profile",
            "tiny-4g",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = |start: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?}:\n{}", out.stdout))
            .to_string()
    };
    let g = line("decode[512]");
    assert!(g.contains("+90.00 KiB") && g.contains("+544.00 MiB"), "{g}");
    let p = line("graphs decode:");
    assert!(
        p.contains("cost +584.88 MiB")
            && p.contains("batch sizes 1 and 512 alone predicted +1.09 GiB")
            && p.contains("(+90.0%)"),
        "{p}"
    );
    assert!(line("trim_graph_memory at teardown/s3").contains("released +584.00 MiB"));
}
