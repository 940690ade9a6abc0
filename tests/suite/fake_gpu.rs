//! The `cuda` backend, run on the fake NVIDIA driver (`tests/fake-gpu`, through
//! `scripts/fake-gpu`): the fixes a first GPU run needs, each shown where the fake can show it,
//! and every injected fault recorded with its call, error and phase, with earlier phases kept,
//! no panic, no hang past the watchdog and the documented exit code. tiny-4g unless named.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `headroom ARGS --backend cuda` on the fake driver with `env` set.
fn fake(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut all = args.to_vec();
    all.extend(["--backend", "cuda"]);
    on_fake(dir, &all, env)
}

/// Runs workload `wl` on the fake into `<dir>/out-<name>`: (output, summary, folder).
fn fake_run(
    dir: &Path,
    wl: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Out, serde_json::Value, PathBuf) {
    let stem = wl.file_stem().unwrap().to_string_lossy().into_owned();
    let out_dir = dir.join(format!("out-{stem}"));
    let mut args = vec![
        "run",
        wl.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "-q",
    ];
    args.extend_from_slice(extra);
    let out = fake(dir, &args, env);
    let summary = std::fs::read_to_string(out_dir.join("summary.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (out, summary, out_dir)
}

/// tiny-4g with every kernel module costing 3 MiB, written into `dir`.
fn module_profile(dir: &Path) -> PathBuf {
    let path = dir.join("tiny-modules.toml");
    let text = std::fs::read_to_string(root().join("profiles/tiny-4g.toml")).unwrap();
    std::fs::write(
        &path,
        format!("{text}\n[kernels]\nmodule_bytes = \"3MiB\"\n"),
    )
    .unwrap();
    path
}

fn event<'a>(
    rows: &'a [std::collections::HashMap<String, String>],
    op: &str,
) -> &'a std::collections::HashMap<String, String> {
    rows.iter()
        .find(|e| e["op"] == op)
        .unwrap_or_else(|| panic!("no {op} row in {rows:?}"))
}

fn free_after(rows: &[std::collections::HashMap<String, String>], op: &str) -> u64 {
    event(rows, op)["device_free_bytes"].parse().unwrap()
}

#[test]
fn a_corruption_is_written_after_the_fill_queued_before_it() {
    // The fill of 2 GiB runs for ~24 ms on its stream; a write on the legacy stream would
    // land first and be overwritten, and verify would find nothing.
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "corrupt",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "buf", size = "2GiB" },
  { op = "fill", name = "buf", seed = 3 },
  { op = "corrupt", name = "buf", offset = "4MiB", value = 0x0badf00d },
  { op = "verify", name = "buf", seed = 3 },
]
"#,
    );
    let (out, s, out_dir) = fake_run(dir.path(), &wl, &[], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let m = &s["mismatches"][0];
    let base = u64::from_str_radix(
        csv_rows(&out_dir.join("events.csv"))[0]["detail"].trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert_eq!(u(&m["count"]), 1);
    assert_eq!(u(&m["first_address"]), base + 4 * MIB);
    assert_eq!(u(&m["actual"]), 0x0bad_f00d);
    assert_eq!(
        u(&m["expected"]),
        headroom::device::fill_pattern(base + 4 * MIB, 3) as u64
    );
}

#[test]
fn kernel_modules_load_before_the_idle_reading_and_stack_limits_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let profile = module_profile(dir.path());
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
    let env = [("HEADROOM_FAKE_PROFILE", profile.to_str().unwrap())];
    let (out, s, out_dir) = fake_run(dir.path(), &wl, &[], &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // fill, verify, touch and stack: four modules of 3 MiB; verify's 16-byte result buffer
    // opens a 2 MiB page. Creating the context is reported without them.
    let k = &s["idle"]["kernels"];
    assert_eq!(u(&k["modules"]), 4);
    assert_eq!(u(&k["device_bytes"]), 4 * 3 * MIB + 2 * MIB);
    assert_eq!(u(&s["idle"]["context_overhead_bytes"]), CTX);
    let idle_free = u(&s["idle"]["after_context"]["device_free_bytes"]);
    assert_eq!(idle_free, 4 * GIB - CTX - 14 * MIB);
    let rows = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(free_after(&rows, "fill"), idle_free - 64 * MIB);
    // The driver's own stack limits, read around the launch: 1 KiB, then the kernel's 4 KiB
    // for each of 8 SMs × 2048 resident threads.
    let stack = event(&rows, "stack");
    assert_eq!(
        stack["detail"],
        "per-thread stack limit 1.00 KiB -> 4.00 KiB (the kernel uses 4.00 KiB of local memory per thread)"
    );
    assert_eq!(
        free_after(&rows, "touch") - free_after(&rows, "stack"),
        3 * 1024 * 8 * 2048
    );
}

#[test]
fn hold_loads_no_kernel_module() {
    // Every module load fails: a hold that loaded one (for its memset) would fail too.
    let dir = tempfile::tempdir().unwrap();
    let out = fake(
        dir.path(),
        &["hold", "64MiB", "--for", "50ms"],
        &[(
            "HEADROOM_FAKE_FAULTS",
            "cuModuleLoadDataEx@*=CUDA_ERROR_INVALID_PTX,cuModuleLoadData@*=CUDA_ERROR_INVALID_PTX",
        )],
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
}

#[test]
fn a_stopped_tenant_memory_is_waited_for_before_the_release_check() {
    let dir = tempfile::tempdir().unwrap();
    let (out, s, _) = fake_run(
        dir.path(),
        &root().join("workloads/oom/other-tenant.toml"),
        &[],
        &[("HEADROOM_FAKE_RELEASE_DELAY", "400ms")],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = &s["release"];
    assert_eq!(r["difference_bytes"], 0, "{r}");
    assert!(u(&r["tenant_settle_ns"]) >= 300_000_000, "{r}");
    // The tenant is a process with a context of its own, and no kernel modules: 2 GiB + 256 MiB.
    let oom = &s["ooms"][0];
    let tenant: Vec<_> = oom["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["is_self"] == false)
        .collect();
    assert_eq!(u(&tenant[0]["used_bytes"]), 2 * GIB + CTX);
    assert_eq!(oom["diagnosis"]["causes"][0], "other-process");
}

#[test]
fn a_process_list_without_this_process_is_doubted_and_blames_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let (out, s, _) = fake_run(
        dir.path(),
        &root().join("workloads/oom/other-tenant.toml"),
        &[],
        &[("HEADROOM_FAKE_NVML_HIDE_SELF", "1")],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doubt = s["idle"]["processes_doubt"].as_str().unwrap();
    assert!(doubt.contains("PID namespace"), "{doubt}");
    let oom = &s["ooms"][0];
    assert!(oom["processes_doubt"].is_string(), "{oom}");
    let causes = oom["diagnosis"]["causes"].as_array().unwrap();
    assert!(!causes.iter().any(|c| c == "other-process"), "{causes:?}");
}

#[test]
fn the_sampler_cost_at_full_rate_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "fast",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "a", size = "64MiB" },
  { op = "sleep", for = "20ms" },
]
"#,
    );
    let (out, s, _) = fake_run(dir.path(), &wl, &["--sample-interval", "0ns"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let p = &s["sampler_perturbation"];
    assert_eq!(u(&p["pairs"]), 64);
    assert!(u(&p["alloc_free_p50_without_sampler_ns"]) > 0, "{p}");
    assert!(u(&p["alloc_free_p50_with_sampler_ns"]) > 0, "{p}");
}

/// Two phases: one that completes, then one with kernels and a synchronize after the second
/// fill, where an asynchronous error surfaces at the latest.
fn two_phases(dir: &Path) -> PathBuf {
    workload(
        dir,
        "two",
        r#"[[phase]]
name = "first"
steps = [
  { op = "allocate", name = "a", size = "64MiB", via = "driver" },
  { op = "touch", name = "a" },
]

[[phase]]
name = "kernels"
steps = [
  { op = "fill", name = "a" },
  { op = "fill", name = "a" },
  { op = "synchronize" },
  { op = "touch", name = "a" },
]
"#,
    )
}

#[test]
fn a_faulting_kernel_fails_its_phase_and_keeps_the_one_before() {
    for error in [
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_ECC_UNCORRECTABLE",
        "CUDA_ERROR_LAUNCH_FAILED",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fault = format!("cuLaunchKernel@2={error}");
        let (out, s, out_dir) = fake_run(
            dir.path(),
            &two_phases(dir.path()),
            &[],
            &[("HEADROOM_FAKE_FAULTS", &fault)],
        );
        assert_eq!(out.code, 2, "{error}: {}", out.stderr);
        assert_eq!(s["status"], "failed", "{error}");
        assert_eq!(s["phases"][0]["status"], "completed", "{error}");
        assert_eq!(s["phases"][1]["status"], "stopped", "{error}");
        let detail = s["status_detail"].as_str().unwrap();
        assert!(
            detail.contains(error) && detail.contains("kernels"),
            "{error}: {detail}"
        );
        let rows = csv_rows(&out_dir.join("events.csv"));
        let failed: Vec<_> = rows.iter().filter(|e| e["result"] == "error").collect();
        assert_eq!(failed.len(), 1, "{error}: {rows:?}");
        assert_eq!(failed[0]["phase"], "kernels");
        assert!(failed[0]["detail"].contains(error), "{error}: {failed:?}");
        // The error surfaced at the first call after the kernel faulted: the reading after
        // the faulting fill when the kernel had already run, else the synchronize.
        assert!(
            ["fill", "synchronize"].contains(&failed[0]["op"].as_str()),
            "{error}: {failed:?}"
        );
        // The first phase's rows are all there.
        assert_eq!(
            rows.iter()
                .filter(|e| e["phase"] == "first" && e["result"] == "ok")
                .count(),
            2
        );
    }
}

#[test]
fn a_kernel_fault_seen_only_after_the_last_step_still_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    // The run's only kernel, its last step, faults; kernels run 500 times slower than modeled
    // (its 1 ms becomes 0.5 s), so the step and its reading are done before it does.
    let wl = workload(
        dir.path(),
        "late",
        r#"[[phase]]
name = "first"
steps = [{ op = "allocate", name = "a", size = "64MiB", via = "driver" }]

[[phase]]
name = "kernels"
steps = [{ op = "touch", name = "a" }]
"#,
    );
    let (out, s, out_dir) = fake_run(
        dir.path(),
        &wl,
        &[],
        &[
            (
                "HEADROOM_FAKE_FAULTS",
                "cuLaunchKernel@1=CUDA_ERROR_ILLEGAL_ADDRESS",
            ),
            ("HEADROOM_FAKE_TIME_SCALE", "500"),
        ],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(s["status"], "failed");
    let detail = s["status_detail"].as_str().unwrap();
    assert!(detail.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{detail}");
    let rows = csv_rows(&out_dir.join("events.csv"));
    let last = rows.last().unwrap();
    assert_eq!(
        (last["op"].as_str(), last["result"].as_str()),
        ("release", "error")
    );
}

#[test]
fn an_out_of_memory_at_any_allocation_is_a_recorded_oom() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "three",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "a", size = "64MiB", via = "driver" },
  { op = "allocate", name = "b", size = "64MiB", via = "driver" },
  { op = "allocate", name = "c", size = "64MiB", via = "driver" },
]
"#,
    );
    let (out, s, out_dir) = fake_run(
        dir.path(),
        &wl,
        &[],
        &[(
            "HEADROOM_FAKE_FAULTS",
            "cuMemAlloc_v2@2=CUDA_ERROR_OUT_OF_MEMORY",
        )],
    );
    assert_eq!(
        out.code, 1,
        "an unexpected OOM fails the run: {}",
        out.stderr
    );
    assert_eq!(s["status"], "oom");
    assert_eq!(s["ooms"][0]["step"], "s2");
    assert_eq!(u(&s["ooms"][0]["requested_bytes"]), 64 * MIB);
    let rows = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(rows[1]["result"], "oom");
    assert_eq!(
        s["release"]["difference_bytes"], 0,
        "everything was given back"
    );
}

#[test]
fn a_wedged_driver_call_ends_at_the_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "wedge",
        r#"[[phase]]
name = "before"
steps = [
  { op = "allocate", name = "a", size = "64MiB", via = "driver" },
]

[[phase]]
name = "wedged"
steps = [
  { op = "synchronize", stream = "main" },
  { op = "free", name = "a" },
]
"#,
    );
    let started = Instant::now();
    let (out, s, out_dir) = fake_run(
        dir.path(),
        &wl,
        &["--watchdog", "1s"],
        &[("HEADROOM_FAKE_FAULTS", "cuStreamSynchronize@1=hang:120s")],
    );
    assert!(
        started.elapsed().as_secs() < 30,
        "the watchdog ended the run: {:?}",
        started.elapsed()
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(s["status"], "failed");
    assert_eq!(s["exit_code"], 2);
    let detail = s["status_detail"].as_str().unwrap();
    assert!(
        detail.contains("wedged") && detail.contains("\"wedged\", step s1 (synchronize)"),
        "{detail}"
    );
    assert_eq!(s["phases"][0]["status"], "completed");
    let rows = csv_rows(&out_dir.join("events.csv"));
    let last = rows.last().unwrap();
    assert_eq!(last["result"], "wedged");
    assert_eq!(last["phase"], "wedged");
    assert_eq!(last["op"], "synchronize");
}

#[test]
fn a_run_without_nvml_completes_without_its_views() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "plain",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "a", size = "64MiB" },
  { op = "free", name = "a" },
]
"#,
    );
    let (out, s, _) = fake_run(
        dir.path(),
        &wl,
        &[],
        &[(
            "HEADROOM_FAKE_FAULTS",
            "nvmlInit_v2@*=NVML_ERROR_LIBRARY_NOT_FOUND",
        )],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(s["idle"]["before_context"].is_null());
    assert!(s["idle"]["processes"].is_null());
    assert_eq!(u(&s["peaks"]["run"]["own_bytes"]["bytes"]), 64 * MIB);
}

#[test]
fn a_tenant_that_cannot_create_a_context_is_a_recorded_error() {
    let dir = tempfile::tempdir().unwrap();
    let listing = fake(
        dir.path(),
        &["devices", "--json"],
        &[("HEADROOM_FAKE_COMPUTE_MODE", "exclusive_process")],
    );
    assert!(
        listing
            .stdout
            .contains("\"compute_mode\": \"exclusive_process\""),
        "{}",
        listing.stdout
    );
    let (out, s, out_dir) = fake_run(
        dir.path(),
        &root().join("workloads/oom/other-tenant.toml"),
        &[],
        &[("HEADROOM_FAKE_COMPUTE_MODE", "exclusive_process")],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(s["status"], "failed");
    let rows = csv_rows(&out_dir.join("events.csv"));
    let tenant = event(&rows, "tenant");
    assert_eq!(tenant["result"], "error");
    assert!(
        tenant["detail"].contains("CUDA_ERROR_DEVICE_UNAVAILABLE"),
        "{tenant:?}"
    );
    assert_eq!(s["release"]["difference_bytes"], 0);
}

#[test]
fn ctrl_c_during_a_sleep_interrupts_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "nap",
        r#"[[phase]]
name = "p"
steps = [
  { op = "allocate", name = "a", size = "64MiB" },
  { op = "sleep", for = "60s" },
]
"#,
    );
    let out_dir = dir.path().join("out");
    let mut child = Command::new("bash")
        .arg(root().join("scripts/fake-gpu"))
        .arg(env!("CARGO_BIN_EXE_headroom"))
        .args([
            "run",
            wl.to_str().unwrap(),
            "--backend",
            "cuda",
            "-q",
            "--out",
        ])
        .arg(&out_dir)
        .current_dir(dir.path())
        .env_remove("HEADROOM_FAKE_STATE")
        .spawn()
        .unwrap();
    // Wait until the sleep has started: the allocation's row is on disk.
    let started = Instant::now();
    while !std::fs::read_to_string(out_dir.join("events.csv")).is_ok_and(|t| t.contains("allocate"))
    {
        assert!(
            started.elapsed().as_secs() < 120,
            "the run never got to its sleep"
        );
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the run ended early: {st}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let interrupted_at = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(
        interrupted_at.elapsed().as_secs() < 10,
        "the sleep was cut short"
    );
    assert_eq!(status.code(), Some(130));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["status"], "interrupted");
    assert_eq!(s["release"]["difference_bytes"], 0);
    let rows = csv_rows(&out_dir.join("events.csv"));
    assert_eq!(rows.last().unwrap()["result"], "stopped");
}
