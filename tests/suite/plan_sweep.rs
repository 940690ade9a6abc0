//! `headroom validate --sweep` on the simulated device, and a validation with no margin at all.

use crate::common::plans::*;
use crate::common::*;

#[test]
fn sweep_other_peak_on_tiny_writes_csv_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny_plan(dir.path(), "sweep", None, "");
    let (out, v, out_dir) = validate(
        dir.path(),
        &p,
        "tiny-4g",
        &["--sweep", "other_peak=256MiB..1GiB:256MiB"],
    );
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let rows = csv_rows(&out_dir.join("sweep.csv"));
    let got: Vec<(String, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["other_peak_bytes"].clone(),
                r["planned_requests"].clone(),
                r["admitted_requests"].clone(),
                r["first_failure"].clone(),
            )
        })
        .collect();
    // Planned = (3328 − O) / 64; measured = (3072 − O) / 64: always 4 fewer, the context.
    let want: Vec<(String, String, String, String)> =
        [(256, 24, 20), (512, 20, 16), (768, 16, 12), (1024, 12, 8)]
            .iter()
            .map(|(o, p, a)| {
                (
                    (o * MIB).to_string(),
                    p.to_string(),
                    a.to_string(),
                    "margin_violated".to_string(),
                )
            })
            .collect();
    assert_eq!(got, want);
    assert_eq!(rows[0]["key"], "other_peak");
    assert_eq!(rows[0]["capacity_bytes"], (4 * GIB).to_string());
    assert_eq!(rows[0]["unnamed_bytes"], CTX.to_string());
    let svg = std::fs::read_to_string(out_dir.join("sweep.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 2);
    assert_eq!(v["points"].as_array().unwrap().len(), 4);
    assert!(
        out_dir
            .join("other_peak-256MiB/requests-0020/summary.json")
            .exists()
    );
    assert!(out_dir.join("other_peak-1GiB/validation.json").exists());
    assert!(
        out.stdout.contains("sweeping other_peak over 4 values"),
        "{}",
        out.stdout
    );

    // A point whose categories exceed the capacity stops the sweep before anything runs.
    let (out, _, out_dir) = validate(
        dir.path(),
        &p,
        "tiny-4g",
        &["--sweep", "other_peak=1GiB,2GiB"],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("--sweep other_peak=2 GiB: 4 GiB − 2 GiB − 2 GiB − 256 MiB = −256 MiB: the categories exceed the capacity"),
        "{}",
        out.stderr
    );
    assert!(!out_dir.exists());
}

#[test]
fn sweep_kv_per_request_needs_whole_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny_plan(dir.path(), "kv", Some("3840MiB"), "");
    let (out, _, _) = validate(
        dir.path(),
        &p,
        "tiny-4g",
        &["--sweep", "kv_per_request=64MiB,3MiB"],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("not a whole number of 2 MiB blocks"),
        "{}",
        out.stderr
    );
    let (out, v, _) = validate(
        dir.path(),
        &p,
        "tiny-4g",
        &["--sweep", "kv_per_request=32MiB,64MiB,128MiB"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let limits: Vec<u64> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["admission"]["admitted_requests"]))
        .collect();
    assert_eq!(limits, [32, 16, 8]);
}

#[test]
fn validate_with_no_margin_stops_at_the_first_oom_and_notes_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    // Margin 0: 4096 − 2048 − 512 − 0 = 1536 MiB → 24 planned. On the device the context
    // leaves 1280 MiB: 20 requests and the other peak fill it to the last byte; with 21, the
    // KV fits (3648 MiB used) but the other peak's workspace is refused (4032 + 128 > 4096).
    let p = tiny_plan(dir.path(), "nomargin", None, "");
    let (out, v, out_dir) = validate(dir.path(), &p, "tiny-4g", &["--margin", "0B"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(u(&v["planned_requests"]), 24);
    assert_eq!(v["planned_run"]["outcome"]["result"], "oom");
    assert_eq!(u(&v["admission"]["admitted_requests"]), 20);
    assert_eq!(u(&v["admission"]["first_failure"]["requests"]), 21);
    assert_eq!(v["admission"]["first_failure"]["outcome"]["result"], "oom");
    assert_eq!(
        v["admission"]["first_failure"]["outcome"]["at"],
        "other-peak/s2"
    );
    assert_eq!(u(&v["floor_bytes"]), 256 * MIB);
    let at_limit = v["admission"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["requests"] == 20)
        .unwrap();
    assert_eq!(u(&at_limit["headroom_at_peak_bytes"]), 0);
    assert_eq!(at_limit["below_floor"], true);
    assert!(
        out.stdout.contains("smaller than the floor"),
        "{}",
        out.stdout
    );
    // The same probe as a plain run, without OOM allowed, stops before the step that would go
    // below the 256 MiB floor (4096 / 16) and says why: exit 2, could not run.
    let wl = out_dir.join("requests-0020/workload.toml");
    let plain = dir.path().join("plain.toml");
    std::fs::write(
        &plain,
        std::fs::read_to_string(&wl)
            .unwrap()
            .replace("allow_oom = true", "allow_oom = false"),
    )
    .unwrap();
    let (out, s, _) = run_tiny(dir.path(), &plain, &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(s["status"], "stopped_at_floor");
}
