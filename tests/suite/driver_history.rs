//! The fake NVIDIA driver as real releases were (`tests/fake-gpu/README.md`, "Driver
//! history"): twenty other processes listed exactly whatever record size the release's NVML
//! writes, NVML under WSL2 (memory info v2 and the process list failing at run time), and a
//! driver library whose kernel module is not loaded.

use std::path::Path;
use std::process::Command;

use crate::common::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `scripts/fake-gpu ARGS…` on an H100 with a fresh shared state and `env`.
fn fake(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut c = Command::new("bash");
    c.arg(root().join("scripts/fake-gpu"))
        .args(args)
        .current_dir(dir)
        .env("HEADROOM_FAKE_PROFILE", "h100-80g")
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_DRIVER")
        .env_remove("HEADROOM_FAKE_FAULTS")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("HEADROOM_MARK");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let o = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    o
}

const HOLDS: u64 = 20;
/// h100-80g's context overhead.
const H100_CTX: u64 = 512 * MIB;

/// What hold `i` (from 1) holds: 2·i MiB, whole pages, and its context.
fn held(i: u64) -> u64 {
    2 * i * MIB + H100_CTX
}

/// `watch` of a job that starts twenty `hold`s of different sizes and, while all hold, runs
/// `devices --json` into `DIR/devices.json`; the holds' pids go to `DIR/pids`.
fn twenty_holds(dir: &Path, env: &[(&str, &str)]) -> (Out, serde_json::Value) {
    let d = dir.display();
    let job = format!(
        r#"for i in $(seq 1 {HOLDS}); do
  {HR} hold $((2 * i))MiB --for 20s --backend cuda > '{d}/hold.'$i 2>/dev/null &
  echo $i $! >> '{d}/pids'
done
until [ "$(cat '{d}'/hold.* | grep -c holding)" -eq {HOLDS} ]; do sleep 0.05; done
{HR} devices --json > '{d}/devices.json'
sleep 0.3
kill $(cut -d' ' -f2 '{d}/pids')
wait
exit 0"#
    );
    let out = dir.join("out");
    let o = fake(
        dir,
        env,
        &[
            HR,
            "watch",
            "--out",
            out.to_str().unwrap(),
            "-q",
            "--",
            "bash",
            "-c",
            &job,
        ],
    );
    let s = if out.join("summary.json").is_file() {
        json(&std::fs::read_to_string(out.join("summary.json")).unwrap())
    } else {
        serde_json::Value::Null
    };
    (o, s)
}

/// (pid, bytes) of every hold, by pid.
fn expected(dir: &Path) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = std::fs::read_to_string(dir.join("pids"))
        .unwrap()
        .lines()
        .map(|l| {
            let (i, pid) = l.split_once(' ').unwrap();
            (pid.parse().unwrap(), held(i.parse().unwrap()))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn twenty_processes_are_listed_exactly_on_every_release_s_record_layout() {
    // 535.54.03's `_v3` writes 32-byte records; 535.261.03, 550 and 470 (which has only `_v2`)
    // 24-byte ones. Under the fault `_v2` is gone and `_v3` is read at 535.54.03's 32 bytes.
    let cases: &[(&str, Option<&str>)] = &[
        ("535.54.03", None),
        (
            "535.54.03",
            Some("nvmlDeviceGetComputeRunningProcesses_v2@*=NVML_ERROR_FUNCTION_NOT_FOUND"),
        ),
        ("535.261.03", None),
        ("550", None),
        ("470", None),
    ];
    std::thread::scope(|scope| {
        for &(driver, fault) in cases {
            scope.spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let mut env = vec![("HEADROOM_FAKE_DRIVER", driver)];
                env.extend(fault.map(|f| ("HEADROOM_FAKE_FAULTS", f)));
                let (o, s) = twenty_holds(dir.path(), &env);
                let case = format!("{driver} {fault:?}");
                assert_eq!(o.code, 0, "{case}: {}", o.stderr);
                let want = expected(dir.path());
                assert_eq!(want.len() as u64, HOLDS);

                let listing =
                    json(&std::fs::read_to_string(dir.path().join("devices.json")).unwrap());
                let mut listed: Vec<(u64, u64)> = listing["gpus"][0]["processes"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{case}: {listing}"))
                    .iter()
                    .map(|p| (u(&p["pid"]), u(&p["used_bytes"])))
                    .collect();
                listed.sort();
                assert_eq!(listed, want, "{case}: devices --json");

                let mut watched: Vec<(u64, u64)> = s["watch"]["job_processes"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{case}: {s}"))
                    .iter()
                    .map(|p| (u(&p["pid"]), u(&p["peak_used_bytes"])))
                    .collect();
                watched.sort();
                assert_eq!(watched, want, "{case}: watch");
                let total: u64 = want.iter().map(|w| w.1).sum();
                assert_eq!(
                    u(&s["peaks"]["run"]["job_used_bytes"]["bytes"]),
                    total,
                    "{case}"
                );
            });
        }
    });
}

#[test]
fn under_wsl2_watch_reads_memory_info_v1_and_says_what_it_could_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = fake(
        dir.path(),
        &[
            ("HEADROOM_FAKE_WSL2", "1"),
            ("HEADROOM_FAKE_PROFILE", "tiny-4g"),
        ],
        &[
            HR,
            "watch",
            "--out",
            out.to_str().unwrap(),
            "--",
            HR,
            "hold",
            "256MiB",
            "--for",
            "300ms",
            "--backend",
            "cuda",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    // What it could not read, named: the process list, and with it the job's own usage.
    assert!(
        o.stderr.contains("NVML_ERROR_NOT_SUPPORTED"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("job_used_bytes will not be recorded"),
        "{}",
        o.stderr
    );
    let s = json(&std::fs::read_to_string(out.join("summary.json")).unwrap());
    // Memory info v1 counts the driver's reserve (tiny-4g's 64 MiB) in used without saying
    // how much it is: the device view has it, and NVML's readings no reserved figure.
    assert_eq!(
        u(&s["peaks"]["run"]["device_used_bytes"]["bytes"]),
        256 * MIB + CTX + 64 * MIB
    );
    assert_eq!(
        u(&s["idle"]["after_context"]["device_used_bytes"]),
        64 * MIB,
        "{}",
        s["idle"]
    );
    assert!(
        o.stderr
            .contains("nvmlDeviceGetMemoryInfo_v2 failed: NVML_ERROR_UNKNOWN")
            && o.stderr.contains("memory info v1"),
        "{}",
        o.stderr
    );
    assert!(s["peaks"]["run"]["job_used_bytes"].is_null());
    let why = s["idle"]["processes_unavailable"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("NVML_ERROR_NOT_SUPPORTED"), "{}", s["idle"]);
}

#[test]
fn a_library_without_its_kernel_module_is_exit_2_under_auto_naming_both_facts() {
    let dir = tempfile::tempdir().unwrap();
    let both = "cuInit@*=CUDA_ERROR_NO_DEVICE,nvmlInit_v2@*=NVML_ERROR_DRIVER_NOT_LOADED";
    let wl = root().join("workloads/quickstart.toml");
    let out = dir.path().join("out");
    let args = [
        HR,
        "run",
        wl.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ];
    let o = fake(dir.path(), &[("HEADROOM_FAKE_FAULTS", both)], &args);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("CUDA_ERROR_NO_DEVICE"), "{}", o.stderr);
    assert!(
        o.stderr.contains("NVML_ERROR_DRIVER_NOT_LOADED"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("kernel module is not loaded"),
        "{}",
        o.stderr
    );
    assert!(!out.join("summary.json").exists());
    let devices = fake(
        dir.path(),
        &[("HEADROOM_FAKE_FAULTS", both)],
        &[HR, "devices"],
    );
    assert_eq!(devices.code, 2, "{}", devices.stdout);
    // Asked for on purpose, the simulator still runs.
    let sim = fake(
        dir.path(),
        &[("HEADROOM_FAKE_FAULTS", both)],
        &[HR, "devices", "--backend", "sim"],
    );
    assert_eq!(sim.code, 0, "{}", sim.stderr);
    // NO_DEVICE with an NVML that starts is still a machine without a GPU.
    let only_cuda = fake(
        dir.path(),
        &[("HEADROOM_FAKE_FAULTS", "cuInit@*=CUDA_ERROR_NO_DEVICE")],
        &args,
    );
    assert_eq!(only_cuda.code, 0, "{}", only_cuda.stderr);
}

/// `run workloads/quickstart.toml` into `DIR/out` on the fake with `env`.
fn quickstart(dir: &Path, env: &[(&str, &str)], extra: &[&str]) -> Out {
    let wl = root().join("workloads/quickstart.toml");
    let out = dir.join("out");
    let mut args = vec![
        HR,
        "run",
        wl.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    fake(dir, env, &args)
}

#[test]
fn a_gpu_before_volta_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("profiles/tiny-4g.toml")).unwrap();
    let pascal = dir.path().join("pascal.toml");
    let text: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("compute_capability") {
                "compute_capability = \"6.0\"".to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    let text = text.join("\n");
    std::fs::write(&pascal, text).unwrap();
    let o = quickstart(
        dir.path(),
        &[("HEADROOM_FAKE_PROFILE", pascal.to_str().unwrap())],
        &["-q"],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("is compute capability 6.0")
            && o.stderr.contains("sm_70 (Volta) and newer"),
        "{}",
        o.stderr
    );
    assert!(!dir.path().join("out/summary.json").exists());
}

#[test]
fn a_stub_libcuda_is_named_with_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let o = fake(dir.path(), &[("HEADROOM_FAKE_STUB", "1")], &[HR, "devices"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    let stubs = root().join("target/fake-gpu/lib/stubs");
    let stubs = std::env::var("CARGO_TARGET_DIR")
        .map_or(stubs, |t| Path::new(&t).join("fake-gpu/lib/stubs"));
    assert!(o.stderr.contains("CUDA_ERROR_STUB_LIBRARY"), "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "the libcuda.so loaded is {}/libcuda.so, the CUDA toolkit's stub",
            stubs.display()
        )) && o
            .stderr
            .contains(&format!("remove {} from LD_LIBRARY_PATH", stubs.display())),
        "{}",
        o.stderr
    );
}

#[test]
fn cuda_info_is_refused_on_an_exclusive_process_gpu_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = fake(
        dir.path(),
        &[
            ("HEADROOM_FAKE_COMPUTE_MODE", "exclusive_process"),
            ("HEADROOM_FAKE_PROFILE", "tiny-4g"),
        ],
        &[
            HR,
            "watch",
            "--cuda-info",
            "--out",
            out.to_str().unwrap(),
            "-q",
            "--",
            "true",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("exclusive-process compute mode")
            && o.stderr
                .contains("the job could then not create its own context"),
        "{}",
        o.stderr
    );
    assert!(!out.join("summary.json").exists());
}

#[test]
fn a_long_spin_goes_as_launches_under_the_kernel_exec_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // 1.2 s of spin against a 1 s watchdog, at a hundredth of the modeled time.
    let wl = workload(
        dir.path(),
        "spin",
        "[[phase]]\nname = \"busy\"\nsteps = [\n  { op = \"spin\", for = \"1200ms\" },\n]\n",
    );
    let out = dir.path().join("out");
    let o = fake(
        dir.path(),
        &[
            ("HEADROOM_FAKE_KERNEL_EXEC_TIMEOUT", "1s"),
            ("HEADROOM_FAKE_TIME_SCALE", "0.01"),
            ("HEADROOM_FAKE_PROFILE", "tiny-4g"),
        ],
        &[
            HR,
            "run",
            wl.to_str().unwrap(),
            "--backend",
            "cuda",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT")
            && o.stderr
                .contains("a spin of 1200000000 ns runs as 3 launches of at most 500000000 ns"),
        "{}",
        o.stderr
    );
    let s = json(&std::fs::read_to_string(out.join("summary.json")).unwrap());
    assert_eq!(s["status"], "completed", "{}", s["status_detail"]);
}

#[test]
fn r470_reports_no_reserved_share_and_calibration_says_not_measured() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HEADROOM_FAKE_DRIVER", "470"),
        ("HEADROOM_FAKE_PROFILE", "tiny-4g"),
    ];
    let o = fake(dir.path(), &env, &[HR, "devices", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let nvml = &json(&o.stdout)["gpus"][0]["nvml"];
    assert!(nvml["reserved_bytes"].is_null(), "{nvml}");
    // v1: used counts the driver's 64 MiB reserve.
    assert_eq!(u(&nvml["used_bytes"]), 64 * MIB, "{nvml}");
    let calibrated = dir.path().join("calibrated.toml");
    let o = fake(
        dir.path(),
        &env,
        &[
            HR,
            "calibrate",
            "--backend",
            "cuda",
            "--out",
            calibrated.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&calibrated).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("nvml_reserved_bytes"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("NOT MEASURED (only NVML memory info v1 answered"),
        "{line}"
    );
}

#[test]
fn a_run_looks_its_nvml_device_up_once_however_many_readings() {
    let dir = tempfile::tempdir().unwrap();
    // Every lookup by UUID after the ones opening the device fails: a run that looked the
    // device up again at each reading would lose NVML's view.
    let env = [
        (
            "HEADROOM_FAKE_FAULTS",
            "nvmlDeviceGetHandleByUUID@3+=NVML_ERROR_UNKNOWN",
        ),
        ("HEADROOM_FAKE_PROFILE", "tiny-4g"),
    ];
    let o = quickstart(dir.path(), &env, &["-q", "--backend", "cuda"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let s = json(&std::fs::read_to_string(dir.path().join("out/summary.json")).unwrap());
    let idle = &s["idle"];
    assert!(!idle["before_context"].is_null(), "{idle}");
    assert!(!idle["after_context"]["nvml"].is_null(), "{idle}");
    let ps = idle["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("{idle}"));
    assert_eq!(ps.len(), 1, "{idle}");
    assert_eq!(u(&idle["context_overhead_bytes"]), CTX, "{idle}");
}

#[test]
fn devices_without_nvml_opens_no_context_and_still_names_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    let o = fake(
        dir.path(),
        &[
            (
                "HEADROOM_FAKE_FAULTS",
                "nvmlInit_v2@*=NVML_ERROR_LIBRARY_NOT_FOUND",
            ),
            ("HEADROOM_FAKE_PROFILE", "tiny-4g"),
            ("HEADROOM_FAKE_COMPUTE_MODE", "exclusive_process"),
        ],
        &[HR, "devices", "--json"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let g = &json(&o.stdout)["gpus"][0];
    assert!(g["free_bytes"].is_null(), "{g}");
    assert_eq!(g["driver_version"], "CUDA 12.4", "{g}");
}
