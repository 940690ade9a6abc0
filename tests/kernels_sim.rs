//! Kernel steps on the simulated device: fill → verify, and a planted corruption found exactly.

mod common;

use common::*;
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
    assert_eq!(m[0]["step"], "2");
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
