//! `scripts/gpu-check` on the cards CI runners rent, on the fake NVIDIA driver: T4 16 GB, L4
//! and A10G 24 GB, a 1g.18gb MIG instance of an H200 (the fake in MIG mode), A100 40 GB and
//! H200 141 GB here (tiny-4g,
//! the fake's default, and H100 80 GB in `gpu_check`). Each ends with exit 0, every step sized
//! by the card: the workloads that do not fit it skipped with their stated minimum and its
//! total, the bandwidth buffers a quarter of its free memory, the card-relative plan's
//! categories its shares of the card's total. The workloads here are the two of fixed size,
//! `serving` (25 GiB) and `comm` (6 GiB): each card runs `comm`, the cards below 25 GiB skip
//! `serving` and the A100 runs it (the H200, which it fits as well, runs `comm` alone). The
//! kernels' modeled time is scaled to zero and each bandwidth case launched twice, all six
//! cards at once: a few seconds of CPU each. Each card runs on a driver branch such runners
//! have: the T4 on the floor, R470; the L4, A10G and A100 on R535; the MIG instance on R550;
//! the H200 on the newest, R580.

use std::path::{Path, PathBuf};

use headroom::device::profile::SimProfile;
use headroom::workload::WorkloadFile;

use crate::common::*;
use crate::gpu_check::{finished, root, start};

const SERVING: &str = "workloads/serving.toml";
const COMM: &str = "workloads/comm.toml";

/// Each card: the simulator's profile of it, the fake's settings that make it, and the
/// workloads gpu-check runs on it.
type Card = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

const CARDS: [Card; 6] = [
    (
        "t4-16g",
        &[
            ("HEADROOM_FAKE_PROFILE", "t4-16g"),
            ("HEADROOM_FAKE_DRIVER", "470"),
        ],
        &[SERVING, COMM],
    ),
    (
        "l4-24g",
        &[
            ("HEADROOM_FAKE_PROFILE", "l4-24g"),
            ("HEADROOM_FAKE_DRIVER", "535"),
        ],
        &[SERVING, COMM],
    ),
    (
        "a10g-24g",
        &[
            ("HEADROOM_FAKE_PROFILE", "a10g-24g"),
            ("HEADROOM_FAKE_DRIVER", "535"),
        ],
        &[SERVING, COMM],
    ),
    (
        "h200-1g.18gb",
        &[
            ("HEADROOM_FAKE_PROFILE", "h200"),
            ("HEADROOM_FAKE_MIG", "1g.18gb"),
            ("HEADROOM_FAKE_DRIVER", "550"),
        ],
        &[SERVING, COMM],
    ),
    (
        "a100-40g",
        &[
            ("HEADROOM_FAKE_PROFILE", "a100-40g"),
            ("HEADROOM_FAKE_DRIVER", "550"),
        ],
        &[SERVING, COMM],
    ),
    (
        "h200",
        &[
            ("HEADROOM_FAKE_PROFILE", "h200"),
            ("HEADROOM_FAKE_DRIVER", "580"),
        ],
        &[COMM],
    ),
];

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run_dirs(d: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// What one finished gpu-check of `files` on a card of `profile` must show: every workload
/// the card is too small for (its `min_total_bytes` above the card's total) skipped with both
/// figures on the GPU and on the calibrated simulator, agreeing; the others run; the bandwidth
/// buffers a quarter of the free memory (whole pages, at most `cap_bytes`) launched `repeats`
/// times; the plan `workloads/plans/card.toml` sized by the card's total; the summary's
/// counts. Returns (ran, skipped) names.
pub(crate) fn check_card(
    dir: &Path,
    profile: &str,
    files: &[String],
    cap_bytes: u64,
    repeats: u64,
) -> (Vec<String>, Vec<String>) {
    let card = SimProfile::resolve(profile).unwrap();
    let total = card.memory.total_bytes.0;
    let devices = json(&dir.join("devices.json"));
    let gpu = &devices["gpus"][0];
    assert_eq!(u(&gpu["total_bytes"]), total, "{profile}");
    let free = u(&gpu["free_bytes"]);

    // Which workloads the card is too small for, from the files' own minimums.
    let mut expected_skips = std::collections::BTreeMap::new();
    for f in files {
        let wl = WorkloadFile::read(&root().join(f)).unwrap();
        if let Some(min) = wl.min_total_bytes().filter(|m| *m > total) {
            let name =
                toml::from_str::<toml::Table>(&std::fs::read_to_string(root().join(f)).unwrap())
                    .unwrap()["workload"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string();
            expected_skips.insert(name, min);
        }
    }
    let (mut ran, mut skipped) = (Vec::new(), Vec::new());
    for side in ["cuda", "sim"] {
        let runs = run_dirs(&dir.join(side));
        assert_eq!(runs.len(), files.len(), "{profile} {side}");
        for r in runs {
            let s = json(&r.join("summary.json"));
            schema::check("summary", &s, &r.display().to_string());
            let name = s["workload"]["name"].as_str().unwrap().to_string();
            match expected_skips.get(&name) {
                Some(min) => {
                    assert_eq!(s["status"], "skipped", "{profile} {side} {name}");
                    let why = s["status_detail"].as_str().unwrap();
                    assert!(
                        why.contains(&format!("({min} bytes) CUDA-visible"))
                            && why.ends_with(&format!("({total} bytes)")),
                        "{profile} {side} {name}: {why}"
                    );
                    if side == "cuda" {
                        skipped.push(name);
                    }
                }
                None => {
                    assert!(
                        s["status"] == "completed" || s["status"] == "oom",
                        "{profile} {side} {name}: {}",
                        s["status"]
                    );
                    assert_eq!(s["exit_code"], 0, "{profile} {side} {name}");
                    if side == "cuda" {
                        assert_eq!(s["device"]["backend"], "cuda");
                        ran.push(name);
                    }
                }
            }
        }
    }
    ran.sort();
    skipped.sort();
    let cross = std::fs::read_to_string(dir.join("crosscheck.txt")).unwrap();
    assert!(!cross.contains(" NO"), "{profile}: {cross}");
    for name in &skipped {
        assert!(
            cross.lines().any(|l| l.starts_with(name.as_str())
                && l.split_whitespace().collect::<Vec<_>>()[1..] == ["skipped", "skipped", "yes"]),
            "{profile}: {cross}"
        );
    }

    let bw = json(&dir.join("bandwidth.json"));
    let quarter = free / 4 / (2 * MIB) * (2 * MIB);
    assert_eq!(u(&bw["size_bytes"]), quarter.min(cap_bytes), "{profile}");
    assert_eq!(u(&bw["repeats"]), repeats);

    let v = json(&dir.join("plan/validation.json"));
    let share = |pct: u64| total * pct / 100 / (2 * MIB) * (2 * MIB);
    assert_eq!(v["plan"]["capacity_bytes"], total, "{profile}");
    assert_eq!(u(&v["plan"]["weights_bytes"]), share(60), "{profile}");
    assert_eq!(u(&v["plan"]["other_peak_bytes"]), share(25), "{profile}");
    assert_eq!(u(&v["plan"]["margin_bytes"]), share(5), "{profile}");
    let plan_rc = u(&v["exit_code"]);
    assert!(plan_rc <= 1, "{profile}: {v}");

    let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
    let mut lines = summary.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "workloads: {} tried, {} ran, {} skipped",
            files.len(),
            ran.len(),
            skipped.len()
        ),
        "{profile}: {summary}"
    );
    // A line per skip, in the order the run folders sort.
    let mut said: Vec<String> = (0..skipped.len())
        .map(|_| {
            let line = lines.next().unwrap();
            let name = line.strip_prefix("   skipped ").unwrap().split(':').next();
            assert!(
                line.contains(": the workload needs a device of at least"),
                "{profile}: {summary}"
            );
            name.unwrap().to_string()
        })
        .collect();
    said.sort();
    assert_eq!(said, skipped, "{profile}: {summary}");
    assert!(
        lines.next().unwrap().contains(&format!("(exit {plan_rc}")),
        "{profile}: {summary}"
    );
    check_settled(
        dir,
        profile,
        &lines.collect::<Vec<_>>(),
        "absent (no nvidia-smi on PATH)",
        None,
    );
    (ran, skipped)
}

/// The 32 hex digits of a `GPU-…`/`MIG-…` UUID: the 16 bytes the driver returned.
fn uuid_hex(uuid: &str) -> String {
    uuid[4..].replace('-', "")
}

/// summary.txt's last six lines, what only a GPU can settle, as the fake driver of `profile`
/// answers them: the relaunch refused with CUDA_ERROR_INVALID_VALUE; the v1 and v2 UUID bytes
/// (the parent's and the instance's on a MIG instance, the GPU's twice otherwise); the stack
/// reservation of a 64 KiB frame refused with out of memory, its bytes from the card's SMs and
/// threads, half of it left free; the process list while `hold 256MiB` runs (its context
/// included), next to `smi` (nvidia-smi's answer); the calibrated sizes the fake models; and
/// whether torch and vllm import.
/// `train`: the training step's line where gpu-check ran it (TORCH_PYTHON given); `None` where
/// the machine's python3 has no torch with CUDA.
pub(crate) fn check_settled(
    dir: &Path,
    profile: &str,
    lines: &[&str],
    smi: &str,
    train: Option<&str>,
) {
    let card = SimProfile::resolve(profile).unwrap();
    let gpu = &json(&dir.join("devices.json"))["gpus"][0];
    assert_eq!(lines.len(), 7, "{profile}: {lines:#?}");
    assert_eq!(
        lines[0],
        "graph relaunch with live allocations: CUDA_ERROR_INVALID_VALUE (a graph allocating 2 \
         MiB it does not free, instantiated without auto-free, launched again after its first \
         launch)",
        "{profile}"
    );
    let uuid = gpu["uuid"].as_str().unwrap();
    let mig = match gpu["mig"]["parent_uuid"].as_str() {
        Some(parent) => format!(
            "MIG UUIDs: on MIG instance {uuid}: cuDeviceGetUuid (v1) {}, cuDeviceGetUuid_v2 {} \
             (v1 differs from v2: {parent})",
            uuid_hex(parent),
            uuid_hex(uuid)
        ),
        None => format!(
            "MIG UUIDs: no MIG instance (device 0 is {uuid}; v1 {0}, v2 {0}, equal)",
            uuid_hex(uuid)
        ),
    };
    assert_eq!(lines[1], mig, "{profile}");
    let (sms, threads) = (
        u(&gpu["multiprocessors"]),
        u64::from(card.stack.threads_per_multiprocessor),
    );
    let default_stack = card.stack.default_per_thread_bytes.0;
    let reservation = (64 * 1024 - default_stack) * sms * threads;
    let free_before =
        u(&gpu["free_bytes"]) - card.memory.context_overhead_bytes.0 - card.kernels.module_bytes.0;
    let hold = free_before.saturating_sub(reservation / 2) / (2 * MIB) * (2 * MIB);
    assert_eq!(
        lines[2],
        format!(
            "stack reservation refused: CUDA_ERROR_OUT_OF_MEMORY at cuLaunchKernel (stack_64k \
             raising the per-thread stack from {default_stack} B: {reservation} B reservation \
             ({sms} SMs x {threads} threads), {} B free)",
            free_before - hold
        ),
        "{profile}"
    );
    let listed = if gpu["mig"].is_object() {
        format!("none ({})", gpu["processes_unavailable"].as_str().unwrap())
    } else {
        // The hold's process: its 256 MiB and its context.
        let bytes = 256 * MIB + card.memory.context_overhead_bytes.0;
        let pid = lines[3]
            .strip_prefix("process list: headroom devices: ")
            .and_then(|r| r.split_once(' '))
            .map(|(pid, _)| pid)
            .unwrap_or_else(|| panic!("{profile}: {}", lines[3]));
        assert!(pid.parse::<u32>().is_ok(), "{profile}: {}", lines[3]);
        format!("{pid} {bytes} B")
    };
    assert_eq!(
        lines[3],
        format!(
            "process list: headroom devices: {listed}; nvidia-smi \
             --query-compute-apps=pid,used_memory --format=csv: {smi}"
        ),
        "{profile}"
    );
    let m = &card.memory;
    assert_eq!(
        lines[4],
        format!(
            "calibrated sizes: page_bytes {}, small_alloc_limit_bytes {}, \
             small_alloc_spacing_bytes {}",
            m.page_bytes.0, m.small_alloc_limit_bytes.0, m.small_alloc_spacing_bytes.0
        ),
        "{profile}"
    );
    let imports = "python3 -c \"import torch, vllm\": ";
    assert!(
        lines[5] == format!("{imports}works") || lines[5].starts_with(&format!("{imports}fails: ")),
        "{profile}: {}",
        lines[5]
    );
    match train {
        Some(line) => assert_eq!(lines[6], line, "{profile}"),
        // No torch with CUDA on the fake driver (torch's own check finds its driver too old):
        // the training step is not run, and says why.
        None => assert!(
            lines[6].starts_with(
                "a training step under watch --torch: not run: torch with CUDA is absent (python3: "
            ) && lines[6].ends_with(')'),
            "{profile}: {}",
            lines[6]
        ),
    }
}

#[test]
fn the_gpu_check_passes_on_every_card_with_what_does_not_fit_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let children: Vec<_> = CARDS
        .iter()
        .enumerate()
        .map(|(i, (_, fake, files))| {
            let dir = tmp.path().join(format!("card-{i}"));
            let workloads = files.join(" ");
            let mut env = vec![
                ("HEADROOM_FAKE_TIME_SCALE", "0"),
                ("BANDWIDTH_REPEATS", "2"),
                ("WORKLOADS", &workloads),
            ];
            env.extend_from_slice(fake);
            let child = start(&dir, Some("scripts/fake-gpu"), &env);
            (dir, child)
        })
        .collect();
    let mut outcomes = Vec::new();
    for ((dir, child), (card, fake, files)) in children.into_iter().zip(CARDS) {
        finished(child, &dir);
        let branch = fake
            .iter()
            .find(|(k, _)| *k == "HEADROOM_FAKE_DRIVER")
            .map_or("550", |(_, v)| *v);
        let devices = json(&dir.join("devices.json"));
        let driver = devices["gpus"][0]["driver_version"].as_str().unwrap_or("");
        assert!(
            driver.starts_with(&format!("{branch}.")),
            "{card}: {devices}"
        );
        let files: Vec<String> = files.iter().map(|f| f.to_string()).collect();
        outcomes.push(check_card(&dir, card, &files, 4 * GIB, 2));
    }
    let names = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let small = (names(&["comm"]), names(&["serving"]));
    assert_eq!(
        outcomes,
        [
            small.clone(),
            small.clone(),
            small.clone(),
            small,
            (names(&["comm", "serving"]), vec![]),
            (names(&["comm"]), vec![]),
        ]
    );
}

/// A device without memory pools or virtual memory management (as a vGPU may be): gpu-check
/// skips what needs them, naming the attribute, and the simulator calibrated on the device
/// skips the same; the rest runs, and the check exits 0.
#[test]
fn the_gpu_check_skips_what_needs_a_capability_the_device_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("no-pools");
    let expandable = workload(
        tmp.path(),
        "expandable",
        "[allocator]\nkind = \"caching\"\nexpandable_segments = true\n\n[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"64MiB\" }]\n",
    );
    let files = [
        "workloads/pool-reuse.toml".to_string(),
        expandable.display().to_string(),
        "workloads/verify.toml".to_string(),
    ];
    let child = start(
        &dir,
        Some("scripts/fake-gpu"),
        &[
            ("HEADROOM_FAKE_DISABLE", "memory_pools,vmm"),
            ("HEADROOM_FAKE_TIME_SCALE", "0"),
            ("BANDWIDTH_REPEATS", "2"),
            ("WORKLOADS", &files.join(" ")),
        ],
    );
    finished(child, &dir);
    let profile = std::fs::read_to_string(dir.join("profile.toml")).unwrap();
    assert!(
        profile.contains("memory_pools_supported = false")
            && profile.contains("virtual_memory_management_supported = false"),
        "{profile}"
    );
    let expected = [
        ("pool-reuse", "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED"),
        (
            "expandable",
            "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
        ),
    ];
    for side in ["cuda", "sim"] {
        let runs = run_dirs(&dir.join(side));
        assert_eq!(runs.len(), files.len());
        for r in runs {
            let s = json(&r.join("summary.json"));
            let name = s["workload"]["name"].as_str().unwrap();
            match expected.iter().find(|(n, _)| *n == name) {
                Some((_, attribute)) => {
                    assert_eq!(s["status"], "skipped", "{side} {name}");
                    let why = s["status_detail"].as_str().unwrap();
                    assert!(
                        why.contains(&format!("needs {attribute}, which ")),
                        "{side} {name}: {why}"
                    );
                }
                None => assert_eq!(s["status"], "completed", "{side} {name}"),
            }
        }
    }
    let cross = std::fs::read_to_string(dir.join("crosscheck.txt")).unwrap();
    assert!(!cross.contains(" NO"), "{cross}");
    let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
    let lines: Vec<&str> = summary.lines().collect();
    assert_eq!(
        lines[0], "workloads: 3 tried, 1 ran, 2 skipped",
        "{summary}"
    );
    // One line per skip, in the order the run folders sort.
    let line = |name: &str| {
        lines[1..3]
            .iter()
            .find(|l| l.starts_with(&format!("   skipped {name}: ")))
            .unwrap_or_else(|| panic!("{summary}"))
            .to_string()
    };
    assert!(
        line("expandable").ends_with(
            "expandable segments (expandable_segments:True: cuMemAddressReserve, cuMemCreate, \
             cuMemMap) needs CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, which \
             tiny 4 GiB GPU (fake driver) reports as 0"
        ),
        "{summary}"
    );
    assert!(
        line("pool-reuse").ends_with(
            "the pool allocator ([allocator] kind = \"pool\": cuMemPoolCreate, \
             cuMemAllocFromPoolAsync) needs CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, which \
             tiny 4 GiB GPU (fake driver) reports as 0"
        ),
        "{summary}"
    );
}
