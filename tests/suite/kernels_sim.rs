//! Kernel steps on the simulated device: fill → verify, and a planted corruption found exactly.

use crate::common::*;
use headroom::device::fill_pattern;

#[test]
fn a_planted_corruption_is_found_at_its_address() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let (out, s, out_dir) = run_tiny(dir.path(), &root.join("workloads/verify.toml"), &[]);
    assert_eq!(
        out.code, 0,
        "mismatches alone do not fail a run: {}",
        out.stderr
    );
    let m = s["mismatches"].as_array().unwrap();
    assert_eq!(m.len(), 1, "only the second verify finds anything");
    let events = csv_rows(&out_dir.join("events.csv"));
    let base = u64::from_str_radix(events[0]["detail"].trim_start_matches("0x"), 16).unwrap();
    let addr = base + MIB;
    assert_eq!(m[0]["phase"], "plant-and-find");
    assert_eq!(m[0]["step"], "s2");
    assert_eq!(u(&m[0]["count"]), 1);
    assert_eq!(u(&m[0]["first_address"]), addr);
    assert_eq!(u(&m[0]["expected"]), fill_pattern(addr, 7) as u64);
    assert_eq!(u(&m[0]["actual"]), 0xdead_beef);
    let verifies: Vec<_> = events.iter().filter(|e| e["op"] == "verify").collect();
    assert_eq!(verifies[0]["detail"], "0 mismatches");
    assert!(
        verifies[1]["detail"].starts_with("1 mismatches; first at"),
        "{}",
        verifies[1]["detail"]
    );

    let strict = dir.path().join("strict.toml");
    std::fs::copy(root.join("workloads/verify.toml"), &strict).unwrap();
    let (out, s, _) = run_tiny(dir.path(), &strict, &["--fail-on-mismatch"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let e = s["expectations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "verify mismatches")
        .unwrap();
    assert_eq!(e["held"], false);
    assert_eq!(e["actual"], "1");
}

#[test]
fn kernel_steps_refuse_bad_input_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("{ op = \"fil\", name = \"a\" }", "fil"),
        ("{ op = \"verify\", name = \"a\" }", "never filled"),
        (
            "{ op = \"corrupt\", name = \"a\", offset = \"2B\", value = 1 }",
            "not a multiple of 4",
        ),
        (
            "{ op = \"corrupt\", name = \"a\", offset = \"1MiB\", value = 1 }",
            "outside",
        ),
        (
            "{ op = \"touch\", name = \"a\", stride = \"0B\" }",
            "stride",
        ),
        ("{ op = \"copy\", src = \"a\", dst = \"b\" }", "one size"),
        ("{ op = \"spin\", for = \"0ns\" }", "above zero"),
        (
            "{ op = \"fill\", name = \"nope\" }",
            "not a live allocation",
        ),
    ];
    for (i, (step, needle)) in cases.iter().enumerate() {
        let wl = workload(
            dir.path(),
            &format!("bad{i}"),
            &format!(
                "[[phase]]\nname = \"p\"\nsteps = [{{ op = \"allocate\", name = \"a\", size = \"1MiB\" }}, {{ op = \"allocate\", name = \"b\", size = \"2MiB\" }}, {step}]\n"
            ),
        );
        let (out, _, out_dir) = run_tiny(dir.path(), &wl, &[]);
        assert_eq!(out.code, 2, "{step}");
        assert!(
            out.stderr.contains(needle) && out.stderr.contains("step 3"),
            "{step}: {}",
            out.stderr
        );
        assert!(!out_dir.exists());
    }
}

/// The modules a workload launches are loaded before its idle reading and reported on their
/// own line; the first kernel step then costs no device memory. A stack step reports the
/// driver's stack limit before and after it.
#[test]
fn kernels_load_before_the_idle_reading_and_stack_steps_report_the_limit() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("modules.toml");
    let text = std::fs::read_to_string(root.join("profiles/tiny-4g.toml")).unwrap();
    std::fs::write(
        &profile,
        format!("{text}\n[kernels]\nmodule_bytes = \"3MiB\"\n"),
    )
    .unwrap();
    let wl = workload(
        dir.path(),
        "kernels",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "a", size = "64MiB" },
  { op = "fill", name = "a" },
  { op = "verify", name = "a" },
  { op = "touch", name = "a" },
  { op = "stack", frame = "4KiB" },
]
"#,
    );
    let out_dir = dir.path().join("out");
    let out = headroom(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--profile",
            profile.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    // fill, verify, touch, stack: four modules of 3 MiB, and verify's result buffer opens a
    // 2 MiB page.
    let k = &s["idle"]["kernels"];
    assert_eq!(u(&k["modules"]), 4);
    assert_eq!(u(&k["device_bytes"]), 4 * 3 * MIB + 2 * MIB);
    assert_eq!(u(&s["idle"]["context_overhead_bytes"]), CTX);
    let idle_free = u(&s["idle"]["after_context"]["device_free_bytes"]);
    assert_eq!(idle_free, 4 * GIB - CTX - 14 * MIB);
    let events = csv_rows(&out_dir.join("events.csv"));
    let after = |op: &str| -> u64 {
        events.iter().find(|e| e["op"] == op).unwrap()["device_free_bytes"]
            .parse()
            .unwrap()
    };
    // The first kernel step sees only the 64 MiB allocation taken out of the idle reading.
    assert_eq!(after("fill"), idle_free - 64 * MIB);
    assert_eq!(after("touch"), idle_free - 64 * MIB);
    let stack = events.iter().find(|e| e["op"] == "stack").unwrap();
    assert_eq!(
        stack["detail"],
        "per-thread stack limit 1.00 KiB -> 4.00 KiB (the kernel uses 4.00 KiB of local memory per thread)"
    );
    // tiny-4g: (4 KiB − 1 KiB) × 8 SMs × 2048 threads.
    let stack_free: u64 = stack["device_free_bytes"].parse().unwrap();
    assert_eq!(after("touch") - stack_free, 3 * 1024 * 8 * 2048);
    let table = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        table.contains("loading headroom's 4 kernel modules before it took 14.00 MiB"),
        "{table}"
    );
}
