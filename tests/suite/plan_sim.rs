//! `headroom plan` and `headroom validate` end to end on the simulated device, to the byte.
//!
//! The admission limits here are computed by hand from the profiles. On tiny-4g (4096 MiB
//! CUDA-visible, a 256 MiB context, 2 MiB pages) a probe with n requests of 64 MiB peaks at
//! device used = 256 (context) + 2048 (weights) + 512 (other peak) + 64·n MiB, and the margin
//! holds while that stays at or under 4096 − 256 = 3840 MiB: n ≤ 16. The plan's arithmetic,
//! which never names the context, says 20.

use std::path::Path;

use crate::common::plans::*;
use crate::common::*;

const ARTICLE: [&str; 10] = [
    "--capacity",
    "80GiB",
    "--weights",
    "48GiB",
    "--other-peak",
    "20GiB",
    "--margin",
    "4GiB",
    "--kv-per-request",
    "0.5GiB",
];

fn article_with(replace: &[(&str, &str)]) -> Vec<String> {
    let mut a: Vec<String> = ARTICLE.iter().map(|s| s.to_string()).collect();
    for (flag, value) in replace {
        let i = a.iter().position(|x| x == flag).unwrap();
        a[i + 1] = value.to_string();
    }
    a.insert(0, "plan".into());
    a
}

fn plan_cli(dir: &Path, replace: &[(&str, &str)], json: bool) -> Out {
    let mut a = article_with(replace);
    if json {
        a.push("--json".into());
    }
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    headroom(dir, &refs)
}

#[test]
fn plan_does_the_articles_arithmetic_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let out = plan_cli(dir.path(), &[], false);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(
            "\n80 − 48 − 20 − 4 = 8 GiB for KV\n8 GiB ÷ 0.5 GiB per request = 16 requests\n"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("= KV budget             8 GiB\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("workload: not named"), "{}", out.stdout);

    let out = plan_cli(dir.path(), &[("--kv-per-request", "1GiB")], false);
    assert!(
        out.stdout
            .contains("8 GiB ÷ 1 GiB per request = 8 requests\n"),
        "{}",
        out.stdout
    );

    let out = plan_cli(dir.path(), &[("--other-peak", "28GiB")], false);
    assert_eq!(out.code, 0);
    assert!(
        out.stdout.contains("80 − 48 − 28 − 4 = 0 GiB for KV\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("= 0 requests\n"), "{}", out.stdout);

    // JSON: raw byte integers.
    for (replace, budget, requests) in [
        (vec![], 8 << 30, 16u64),
        (vec![("--kv-per-request", "1GiB")], 8 << 30, 8),
        (vec![("--other-peak", "28GiB")], 0, 0),
    ] {
        let out = plan_cli(dir.path(), &replace, true);
        let j: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(u(&j["capacity_bytes"]), 80 * GIB);
        assert_eq!(u(&j["weights_bytes"]), 48 * GIB);
        assert_eq!(u(&j["margin_bytes"]), 4 * GIB);
        assert_eq!(u(&j["kv_budget_bytes"]), budget);
        assert_eq!(u(&j["requests"]), requests);
        assert_eq!(j["capacity_source"], "flag");
    }
}

#[test]
fn plan_capacity_defaults_to_the_devices_cuda_visible_total() {
    let dir = tempfile::tempdir().unwrap();
    let out = headroom(
        dir.path(),
        &[
            "plan",
            "--profile",
            "h200",
            "--weights",
            "48GiB",
            "--other-peak",
            "20GiB",
            "--margin",
            "4GiB",
            "--kv-per-request",
            "0.5GiB",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("143156 − 49152 − 20480 − 4096 = 69428 MiB for KV\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("= 135 requests (308 MiB left over)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("CUDA-visible total of NVIDIA H200 (simulated)"),
        "{}",
        out.stdout
    );
}

#[test]
fn plan_files_name_the_workload_and_check_the_claimed_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny_plan(dir.path(), "claim", Some("4GiB"), "concurrency = 24\n");
    let out = headroom(dir.path(), &["plan", p.to_str().unwrap()]);
    assert_eq!(out.code, 1, "a claim above the arithmetic fails on paper");
    assert!(
        out.stdout.contains("4 − 2 − 0.5 − 0.25 = 1.25 GiB for KV"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("1.25 GiB ÷ 64 MiB per request = 20 requests"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("32 blocks of 16 tokens × 128 KiB = 64 MiB of KV per request"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("claim: 24 concurrent requests, 4 more than the 20"),
        "{}",
        out.stdout
    );
    let out = headroom(dir.path(), &["plan", p.to_str().unwrap(), "--json"]);
    let j: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(u(&j["kv_per_request_bytes"]), 64 * MIB);
    assert_eq!(u(&j["block_bytes"]), 2 * MIB);
    assert_eq!(u(&j["workload"]["kv_bytes_per_token"]), 128 << 10);
    assert_eq!(j["capacity_source"], "plan_file");
}

#[test]
fn bad_plans_exit_2_with_the_arithmetic_and_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = plan_cli(
        dir.path(),
        &[("--other-peak", "28GiB"), ("--margin", "8GiB")],
        false,
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(
            "80 GiB − 48 GiB − 28 GiB − 8 GiB = −4 GiB: the categories exceed the capacity (the 8 GiB safety margin is larger than the 4 GiB left after weights and other peak)"
        ),
        "{}",
        out.stderr
    );
    let out = plan_cli(dir.path(), &[("--weights", "70GiB")], false);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("80 GiB − 70 GiB − 20 GiB − 4 GiB = −14 GiB: the categories exceed the capacity (weights and other peak alone come to 90 GiB, 10 GiB more than the capacity)"),
        "{}",
        out.stderr
    );
    let out = plan_cli(dir.path(), &[("--kv-per-request", "0B")], false);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("8 GiB ÷ 0 B per request has no answer"),
        "{}",
        out.stderr
    );
    let out = plan_cli(dir.path(), &[("--weights", "-48GiB")], false);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("--weights") && out.stderr.contains("negative"),
        "{}",
        out.stderr
    );
    let out = plan_cli(dir.path(), &[("--margin", "4G")], false);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("ambiguous"), "{}", out.stderr);
    let out = plan_cli(dir.path(), &[("--margin", "lots")], false);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--margin"), "{}", out.stderr);

    // The same through validate: refused before the device is touched, no folder written.
    let p = tiny_plan(dir.path(), "over", Some("4GiB"), "");
    let (out, v, out_dir) = validate(dir.path(), &p, "tiny-4g", &["--other-peak", "2GiB"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(
            "4 GiB − 2 GiB − 2 GiB − 256 MiB = −256 MiB: the categories exceed the capacity"
        ),
        "{}",
        out.stderr
    );
    assert!(v.is_null() && !out_dir.exists());
    // Without a capacity the device's total (4 GiB) is used, then the same refusal.
    let p = tiny_plan(dir.path(), "over-dev", None, "");
    let (out, _, out_dir) = validate(dir.path(), &p, "tiny-4g", &["--margin", "2GiB"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("4 GiB − 2 GiB − 0.5 GiB − 2 GiB = −0.5 GiB: the categories exceed the capacity (the 2 GiB safety margin is larger than the 1.5 GiB left"),
        "{}",
        out.stderr
    );
    assert!(!out_dir.exists());
    // Blocks so small that probing would take millions of allocations are refused up front.
    let small = dir.path().join("small.toml");
    std::fs::write(
        &small,
        std::fs::read_to_string(&p)
            .unwrap()
            .replace("\"128KiB\"", "\"16B\""),
    )
    .unwrap();
    let (out, _, out_dir) = validate(dir.path(), &small, "tiny-4g", &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("KV allocations, more than the 500000"),
        "{}",
        out.stderr
    );
    assert!(!out_dir.exists());
    // A bad size in the file names the file and the section.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&p)
            .unwrap()
            .replace("\"512MiB\"", "\"-512MiB\""),
    )
    .unwrap();
    let (out, _, _) = validate(dir.path(), &bad, "tiny-4g", &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("bad.toml: [plan]") && out.stderr.contains("negative"),
        "{}",
        out.stderr
    );
}

#[test]
fn validate_a_zero_budget_plan_admits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // 4096 − 2048 − 512 − 1536 = 0 MiB for KV: valid arithmetic, 0 requests. On the device
    // even 0 requests leave 4096 − 2816 = 1280 MiB free, short of the 1536 MiB margin.
    let p = tiny_plan(dir.path(), "zero", None, "");
    let (out, v, _) = validate(dir.path(), &p, "tiny-4g", &["--margin", "1.5GiB"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(u(&v["planned_requests"]), 0);
    assert_eq!(v["planned_run"]["outcome"]["result"], "margin_violated");
    assert!(v["admission"]["admitted_requests"].is_null());
    assert_eq!(u(&v["admission"]["first_failure"]["requests"]), 0);
    assert_eq!(probes(&v), [(0, "margin_violated".to_string())]);
    assert!(
        out.stdout.contains("none (not even 0 requests fit)"),
        "{}",
        out.stdout
    );
}

#[test]
fn validate_tiny_a_plan_that_forgets_the_context_over_admits_by_4() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny_plan(dir.path(), "tiny", None, "");
    let (out, v, out_dir) = validate(dir.path(), &p, "tiny-4g", &[]);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(u(&v["plan"]["kv_budget_bytes"]), 1280 * MIB);
    assert_eq!(u(&v["planned_requests"]), 20);
    assert_eq!(v["planned_from"], "arithmetic");
    // 20 requests: 256 + 2048 + 512 + 1280 = 4096 MiB, the whole device; no OOM, no margin.
    assert_eq!(v["planned_run"]["outcome"]["result"], "margin_violated");
    assert_eq!(u(&v["planned_run"]["headroom_at_peak_bytes"]), 0);
    assert_eq!(v["margin_held"], false);
    assert_eq!(v["planned_admitted"], false);
    assert_eq!(u(&v["margin_line_bytes"]), 3840 * MIB);
    let a = &v["admission"];
    assert_eq!(u(&a["admitted_requests"]), 16);
    assert_eq!(u(&a["first_failure"]["requests"]), 17);
    assert_eq!(a["first_failure"]["outcome"]["result"], "margin_violated");
    assert_eq!(
        u(&a["first_failure"]["outcome"]["free_at_peak_bytes"]),
        192 * MIB
    );
    assert_eq!(a["over_admitted_by"], 4);
    // Whole-page arithmetic with the measured idle use guessed right: three probes in all.
    assert_eq!(
        probes(&v),
        [
            (16, "admitted".into()),
            (17, "margin_violated".into()),
            (20, "margin_violated".into())
        ]
    );
    // What the plan did not name is the context, exactly, and the plan had no slack for it.
    let un = &v["unnamed"];
    assert_eq!(u(&un["context_overhead_bytes"]), CTX);
    assert_eq!(u(&un["idle_used_bytes"]), CTX);
    assert_eq!(un["driver_rounding_bytes"], 0);
    assert_eq!(un["allocator_rounding_bytes"], 0);
    assert_eq!(un["capacity_beyond_device_bytes"], 0);
    assert_eq!(u(&un["total_bytes"]), CTX);
    assert_eq!(un["plan_slack_bytes"], 0);
    // Categories: asked exactly what was planned.
    let cats = v["planned_run"]["categories"].as_array().unwrap();
    assert_eq!(u(&cats[0]["own_bytes"]), 2 * GIB);
    assert_eq!(u(&cats[1]["own_bytes"]), 1280 * MIB);
    assert_eq!(u(&cats[1]["device_bytes"]), 1280 * MIB);
    assert_eq!(u(&cats[2]["own_bytes"]), 512 * MIB);
    // Each probe is a run of its own, with the plan's lines in its summary.
    for n in ["0016", "0017", "0020"] {
        let s: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out_dir.join(format!("requests-{n}/summary.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(u(&s["plan"]["margin_line_bytes"]), 3840 * MIB);
        assert_eq!(u(&s["plan"]["kv_budget_bytes"]), 1280 * MIB);
        assert_eq!(s["workload"]["allow_oom"], true);
        assert!(out_dir.join(format!("requests-{n}/workload.toml")).exists());
    }
    let s16: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("requests-0016/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        u(&s16["peaks"]["run"]["device_used_bytes"]["bytes"]),
        3840 * MIB
    );
    assert_eq!(s16["exit_code"], 0);
    // The text for people.
    assert!(
        out.stdout
            .contains("admission limit: 16 requests; 17 fails: margin violated"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("Planned 20 → the plan over-admits by 4"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "result: the plan fails: margin violated at the planned 20 requests (exit 1)"
        ),
        "{}",
        out.stdout
    );
}

#[test]
fn validate_tiny_planning_from_the_idle_free_reading_holds_at_16() {
    let dir = tempfile::tempdir().unwrap();
    // 3840 MiB is what is free once the context exists: 3840 − 2048 − 512 − 256 = 1024 MiB.
    let p = tiny_plan(dir.path(), "ctx", Some("3840MiB"), "");
    let (out, v, _) = validate(dir.path(), &p, "tiny-4g", &[]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(u(&v["planned_requests"]), 16);
    assert_eq!(v["margin_held"], true);
    assert_eq!(u(&v["planned_run"]["headroom_at_peak_bytes"]), 256 * MIB);
    assert_eq!(u(&v["admission"]["admitted_requests"]), 16);
    assert_eq!(u(&v["admission"]["first_failure"]["requests"]), 17);
    assert_eq!(v["admission"]["over_admitted_by"], 0);
    // The capacity the plan set aside is exactly the context: nothing is left unnamed.
    assert_eq!(v["unnamed"]["capacity_beyond_device_bytes"], -(CTX as i64));
    assert_eq!(v["unnamed"]["total_bytes"], 0);
    assert!(
        out.stdout.contains("the plan matches the measured limit"),
        "{}",
        out.stdout
    );
}

#[test]
fn validate_tiny_page_rounding_of_1_5_mib_blocks_over_admits_by_5() {
    let dir = tempfile::tempdir().unwrap();
    // 96 KiB per token × 16 = 1.5 MiB blocks, each taking a whole 2 MiB page: a request asks
    // 48 MiB and costs 64 MiB. The plan (capacity = idle free) says 1024 / 48 = 21.
    let p = dir.path().join("odd.toml");
    std::fs::write(
        &p,
        std::fs::read_to_string(tiny_plan(dir.path(), "odd-src", Some("3840MiB"), ""))
            .unwrap()
            .replace("\"128KiB\"", "\"96KiB\"")
            .replace("name = \"odd-src\"", "name = \"odd\""),
    )
    .unwrap();
    let (out, v, _) = validate(dir.path(), &p, "tiny-4g", &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(u(&v["planned_requests"]), 21);
    assert_eq!(u(&v["plan"]["kv_leftover_bytes"]), 16 * MIB);
    // 21 requests: 256 + 2048 + 21 × 64 + 384 = 4032 MiB, and the 128 MiB workspace is refused.
    let o = &v["planned_run"]["outcome"];
    assert_eq!(o["result"], "oom");
    assert_eq!(o["at"], "other-peak/s2");
    assert_eq!(u(&o["requested_bytes"]), 128 * MIB);
    assert!(v["margin_held"].is_null(), "an OOM never reaches the peak");
    // The page rounding measured: 21 × 32 blocks × 0.5 MiB.
    assert_eq!(u(&v["unnamed"]["driver_rounding_bytes"]), 336 * MIB);
    assert_eq!(u(&v["admission"]["admitted_requests"]), 16);
    assert_eq!(u(&v["admission"]["first_failure"]["requests"]), 17);
    assert_eq!(v["admission"]["over_admitted_by"], 5);
}

#[test]
fn validate_tiny_with_the_pool_allocator_reports_its_rounding() {
    let dir = tempfile::tempdir().unwrap();
    let src = tiny_plan(dir.path(), "pool-src", Some("3840MiB"), "");
    let p = dir.path().join("pool.toml");
    std::fs::write(
        &p,
        format!(
            "{}\n[allocator]\nkind = \"pool\"\n",
            std::fs::read_to_string(src)
                .unwrap()
                .replace("\"128KiB\"", "\"96KiB\"")
        ),
    )
    .unwrap();
    let (out, v, _) = validate(dir.path(), &p, "tiny-4g", &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    // The pool rounds each 1.5 MiB block to its 2 MiB granularity: the rounding is the
    // allocator's now, not the driver's.
    assert_eq!(u(&v["unnamed"]["allocator_rounding_bytes"]), 336 * MIB);
    assert_eq!(v["unnamed"]["driver_rounding_bytes"], 0);
    assert_eq!(u(&v["admission"]["admitted_requests"]), 16);
}

#[test]
fn validate_the_article_on_h100_80g_admits_13_not_16() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/plans/article.toml");
    let (out, v, _) = validate(dir.path(), &plan, "h100-80g", &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(u(&v["planned_requests"]), 16);
    // 81089 MiB visible, not 81920: the margin line is 81089 − 4096 = 76993 MiB, and the peak
    // is 512 + 49152 + 20480 + 512·n MiB: n ≤ 13.
    assert_eq!(u(&v["margin_line_bytes"]), 76_993 * MIB);
    assert_eq!(u(&v["admission"]["admitted_requests"]), 13);
    assert_eq!(u(&v["admission"]["first_failure"]["requests"]), 14);
    assert_eq!(
        v["admission"]["first_failure"]["outcome"]["result"],
        "margin_violated"
    );
    assert_eq!(v["admission"]["over_admitted_by"], 3);
    assert_eq!(u(&v["unnamed"]["capacity_beyond_device_bytes"]), 831 * MIB);
    assert_eq!(u(&v["unnamed"]["total_bytes"]), (831 + 512) * MIB);
    assert_eq!(
        u(&v["planned_run"]["headroom_at_peak_bytes"]),
        (81_089 - 78_336) * MIB
    );
}

#[test]
fn validate_on_h200_the_context_costs_one_request() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h200.toml");
    let article = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/plans/article.toml"),
    )
    .unwrap();
    let without_capacity: String = article
        .lines()
        .filter(|l| !l.starts_with("capacity"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&p, without_capacity).unwrap();
    let (out, v, _) = validate(dir.path(), &p, "h200", &["--json"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(printed, v, "--json prints validation.json");
    // 143156 − 49152 − 20480 − 4096 = 69428 MiB → 135 requests, 308 MiB left over; the 512 MiB
    // context does not fit in 308 MiB: the margin line 139060 MiB holds 134.
    assert_eq!(u(&v["planned_requests"]), 135);
    assert_eq!(u(&v["admission"]["admitted_requests"]), 134);
    assert_eq!(u(&v["admission"]["first_failure"]["requests"]), 135);
    assert_eq!(
        u(&v["admission"]["first_failure"]["outcome"]["short_by_bytes"]),
        204 * MIB
    );
    assert_eq!(v["admission"]["over_admitted_by"], 1);
    assert_eq!(probes(&v).len(), 2);
}
