//! `scripts/gpu-check` end to end, three times at once: for real on the fake NVIDIA driver
//! (`tests/fake-gpu`, through `scripts/fake-gpu`) with its default profile, tiny-4g, on R535
//! (the driver set, nothing else), every shipped workload on the cuda backend agreeing with the simulator
//! calibrated on the fake and the two too large for a 4 GiB card skipped; on the fake with the
//! h100-80g profile and dry on the simulator with the built-in h100-80g profile, for a few
//! workloads (`WORKLOADS`): every step runs, the calibrated simulator agrees with the device it
//! measured, and the fake's cuda runs of those workloads agree with the built-in profile's.
//! The other cards are in `gpu_check_cards`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::common::*;

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Starts `scripts/gpu-check OUT` (through `wrapper` when given) with its output in `OUT.log`.
pub(crate) fn start(out_dir: &Path, wrapper: Option<&str>, env: &[(&str, &str)]) -> Child {
    let log = File::create(out_dir.with_extension("stdout")).unwrap();
    let mut cmd = Command::new("bash");
    if let Some(w) = wrapper {
        cmd.arg(root().join(w)).arg("bash");
    }
    cmd.arg(root().join("scripts/gpu-check"))
        .arg(out_dir)
        .current_dir(root())
        .env("HEADROOM", env!("CARGO_BIN_EXE_headroom"))
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_PROFILE")
        .env_remove("HEADROOM_FAKE_TIME_SCALE")
        .env_remove("HEADROOM_FAKE_DISABLE")
        .env_remove("HEADROOM_FAKE_MIG")
        .env_remove("DEVICE")
        .env_remove("WORKLOADS")
        .env_remove("BANDWIDTH_SIZE")
        .env_remove("BANDWIDTH_REPEATS")
        .env_remove("PLAN")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

pub(crate) fn finished(mut child: Child, out_dir: &Path) -> String {
    let status = child.wait().unwrap();
    let stdout = std::fs::read_to_string(out_dir.with_extension("stdout")).unwrap();
    let log = std::fs::read_to_string(out_dir.join("gpu-check.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{stdout}\n{log}");
    assert!(!log.contains("panicked"), "{log}");
    stdout
}

/// Every shipped workload file, relative to the repository, as gpu-check runs them.
fn shipped_workloads() -> Vec<String> {
    let mut files = Vec::new();
    for d in ["workloads", "workloads/patterns", "workloads/oom"] {
        let mut here: Vec<String> = std::fs::read_dir(root().join(d))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| format!("{d}/{}", p.file_name().unwrap().to_string_lossy()))
            .collect();
        here.sort();
        files.extend(here);
    }
    files
}

fn watch_summary(out_dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out_dir.join("watch/summary.json")).unwrap())
        .unwrap()
}

fn pool_reuse_agrees(crosscheck: &str) -> bool {
    crosscheck.lines().any(|l| {
        l.starts_with("pool-reuse")
            && l.contains("pool_reserved_bytes")
            && l.trim_end().ends_with("yes")
    })
}

/// The dry run's workloads: the pool's reuse order, a pending free, another process, the KV
/// pattern and the quick start (every shipped one runs on the fake).
const DRY_WORKLOADS: [&str; 5] = [
    "workloads/quickstart.toml",
    "workloads/pool-reuse.toml",
    "workloads/patterns/kv.toml",
    "workloads/oom/pending-free.toml",
    "workloads/oom/other-tenant.toml",
];

/// summary.txt's lines after the plan's: what only a GPU can settle.
fn settled_lines(out_dir: &Path) -> Vec<String> {
    let summary = std::fs::read_to_string(out_dir.join("summary.txt")).unwrap();
    summary
        .lines()
        .skip_while(|l| !l.starts_with("plan "))
        .skip(1)
        .map(str::to_string)
        .collect()
}

fn workload_name(run: &Path) -> String {
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    s["workload"]["name"].as_str().unwrap().to_string()
}

#[test]
fn the_gpu_check_runs_dry_on_the_simulator_and_for_real_on_the_fake_driver() {
    let dir = tempfile::tempdir().unwrap();
    let dry_dir = dir.path().join("dry");
    let fake_dir = dir.path().join("fake");
    let tiny_dir = dir.path().join("tiny");
    let dry_workloads = DRY_WORKLOADS.join(" ");
    let dry = start(
        &dry_dir,
        None,
        &[
            ("DEVICE", "--profile h100-80g"),
            ("WORKLOADS", &dry_workloads),
        ],
    );
    // An nvidia-smi that answers as the real one does, for the process list's line.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let smi = bin.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\nprintf 'pid, used_memory [MiB]\\n4242, 768 MiB\\n'\n",
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The training step on the stand-in torch, its segments from the fake driver.
    let torch_python = root()
        .join("tests/torch-standin/gpu-check-python")
        .display()
        .to_string();
    let fake = start(
        &fake_dir,
        Some("scripts/fake-gpu"),
        &[
            ("HEADROOM_FAKE_PROFILE", "h100-80g"),
            ("BANDWIDTH_SIZE", "256MiB"),
            ("WORKLOADS", &dry_workloads),
            ("PATH", &path),
            ("TORCH_PYTHON", &torch_python),
        ],
    );
    // The fake's default card, on R535 (the long-term branch CI runners have): only the
    // driver set, the card as it comes.
    let tiny = start(
        &tiny_dir,
        Some("scripts/fake-gpu"),
        &[("HEADROOM_FAKE_DRIVER", "535")],
    );
    let dry_stdout = finished(dry, &dry_dir);
    let fake_stdout = finished(fake, &fake_dir);
    let tiny_stdout = finished(tiny, &tiny_dir);

    // The dry run: every file, every workload on both sides, and agreement.
    for f in [
        "devices.json",
        "profile.toml",
        "bandwidth.json",
        "crosscheck.csv",
        "crosscheck.txt",
        "gpu-check.log",
        "summary.txt",
        "watch/summary.json",
        "watch/report.md",
        "plan/validation.json",
    ] {
        assert!(dry_dir.join(f).is_file(), "{f} missing");
    }
    let runs = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };
    assert_eq!(runs(&dry_dir.join("cuda")).len(), DRY_WORKLOADS.len());
    assert_eq!(runs(&dry_dir.join("sim")).len(), DRY_WORKLOADS.len());
    assert!(
        dry_stdout.contains("oom-pending-free") && !dry_stdout.contains(" NO"),
        "{dry_stdout}"
    );
    // The pool's reuse order (grow before waiting on another stream) is in the crosscheck.
    assert!(pool_reuse_agrees(&dry_stdout), "{dry_stdout}");
    // What only a GPU can settle: not the simulator, which has only headroom's own rules;
    // the calibrated sizes are the built-in card's.
    let settled = settled_lines(&dry_dir);
    for (line, what) in settled.iter().zip([
        "graph relaunch with live allocations",
        "MIG UUIDs",
        "stack reservation refused",
        "process list",
    ]) {
        assert_eq!(
            *line,
            format!("{what}: not settled: a simulated device answers with headroom's own rules")
        );
    }
    assert_eq!(
        settled[4],
        "calibrated sizes: page_bytes 2097152, small_alloc_limit_bytes 1048576, \
         small_alloc_spacing_bytes 512"
    );
    assert_eq!(
        settled[6],
        "a training step under watch --torch: not run: a simulated device has no CUDA for PyTorch"
    );
    assert_eq!(settled.len(), 7, "{settled:#?}");
    // The watch of a scripted job on the simulated device: its 1 GiB, exactly.
    let w = watch_summary(&dry_dir);
    assert_eq!(w["peaks"]["run"]["job_used_bytes"]["bytes"], 1u64 << 30);
    assert_eq!(w["exit_code"], 0);

    // tiny-4g on the fake: every shipped workload, each on the cuda backend and run or, when
    // the card is below its stated minimum, skipped; every step sized by the 4 GiB card.
    let shipped = shipped_workloads();
    let (ran, skipped) =
        crate::gpu_check_cards::check_card(&tiny_dir, "tiny-4g", &shipped, 4 * GIB, 20);
    assert_eq!(skipped, ["comm", "serving"], "{tiny_stdout}");
    assert_eq!(ran.len(), shipped.len() - 2);
    // Each of them on R535's driver.
    let tiny_runs = runs(&tiny_dir.join("cuda"));
    assert_eq!(tiny_runs.len(), shipped.len());
    for run in &tiny_runs {
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        let driver = s["device"]["driver_version"].as_str().unwrap();
        assert!(
            driver.starts_with("535.261.03"),
            "{}: {driver}",
            run.display()
        );
    }

    // The fake driver on h100-80g: the dry run's workloads ran on the cuda backend, and agree
    // with the calibrated simulator (the script's own crosscheck) ...
    let fake_runs = runs(&fake_dir.join("cuda"));
    assert_eq!(fake_runs.len(), DRY_WORKLOADS.len(), "{fake_stdout}");
    for run in &fake_runs {
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(s["device"]["backend"], "cuda", "{}", run.display());
        assert_eq!(s["status_detail"], serde_json::Value::Null, "{s}");
    }
    assert!(!fake_stdout.contains(" NO"), "{fake_stdout}");
    // ... and with the simulator on the built-in profile the fake ran (the dry run's device).
    let cross = headroom(
        root(),
        &[
            "crosscheck",
            fake_dir.join("cuda").to_str().unwrap(),
            dry_dir.join("cuda").to_str().unwrap(),
        ],
    );
    assert_eq!(cross.code, 0, "{}\n{}", cross.stdout, cross.stderr);
    let dry_names: Vec<String> = runs(&dry_dir.join("cuda"))
        .iter()
        .map(|r| workload_name(r))
        .collect();
    for run in &fake_runs {
        assert!(dry_names.contains(&workload_name(run)));
    }
    // The fake driver grows its pool before making another stream wait, as the simulator does.
    assert!(pool_reuse_agrees(&cross.stdout), "{}", cross.stdout);
    // Every line a GPU settles, as the fake answers, nvidia-smi's list beside headroom's.
    crate::gpu_check_cards::check_settled(
        &fake_dir,
        "h100-80g",
        &settled_lines(&fake_dir)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        "pid, used_memory [MiB] / 4242, 768 MiB",
        Some(&format!(
            "a training step under watch --torch: 4 snapshots (one at the OOM), max allocated \
             {0} B, max reserved {0} B, OOM of {1} B caught; {2}",
            96 * MIB,
            u(&serde_json::from_str::<serde_json::Value>(
                &std::fs::read_to_string(fake_dir.join("devices.json")).unwrap()
            )
            .unwrap()["gpus"][0]["total_bytes"]),
            fake_dir.join("torch-train").display()
        )),
    );
    // Its folder is kept: the PyTorch section's OOM of the device's whole memory.
    let md = std::fs::read_to_string(fake_dir.join("torch-train/torch.md")).unwrap();
    assert!(md.contains("#### Out of memory at trace entry"), "{md}");
    // The watch of a small CUDA job: `headroom hold 512MiB` and its context (h100-80g's
    // 512 MiB), seen through NVML by a headroom that took no device memory itself.
    let w = watch_summary(&fake_dir);
    assert_eq!(w["exit_code"], 0, "{w}");
    assert_eq!(w["watch"]["sampling"]["device_view"], "nvml");
    assert_eq!(u(&w["peaks"]["run"]["job_used_bytes"]["bytes"]), 1024 * MIB);
    assert_eq!(
        u(&w["peaks"]["run"]["device_used_bytes"]["bytes"]),
        1024 * MIB
    );
}
