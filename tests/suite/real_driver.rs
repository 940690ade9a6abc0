//! headroom on NVIDIA's own userspace driver libraries with no GPU and no kernel module: the
//! R470, R535 and R550 `libcuda.so.1` / `libnvidia-ml.so.1` from Debian's non-free packages
//! (`scripts/real-driver-libs`). There the real driver answers `cuInit` with
//! `CUDA_ERROR_NO_DEVICE` and `nvmlInit` with `NVML_ERROR_DRIVER_NOT_LOADED`: `--backend auto`
//! runs on the simulator with a note naming the cause, `--backend cuda` and `--require-gpu` are
//! exit 2 naming it, and NVML's error is named where NVML is reported. Where the archive cannot
//! be reached the test says so on the terminal and skips; under CI (`CI=true`, as `.ci/run`
//! sets it) that is a failure naming the archive.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folder of the branch's unpacked libraries, or `None` (said on the terminal) when the
/// archive cannot be reached.
fn libs(branch: &str) -> Option<PathBuf> {
    let out = Command::new("bash")
        .arg(root().join("scripts/real-driver-libs"))
        .arg(branch)
        .output()
        .expect("scripts/real-driver-libs runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())),
        Some(3) => {
            crate::common::skip::missing(
                &format!("real_driver: NVIDIA's R{branch} libraries"),
                stderr.trim(),
            );
            None
        }
        code => panic!("scripts/real-driver-libs {branch} exited {code:?}: {stderr}"),
    }
}

/// Runs headroom with the real libraries first on the library path.
fn real(lib: &Path, cwd: &Path, args: &[&str]) -> Out {
    let path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(p) if !p.is_empty() => format!("{}:{}", lib.display(), p.to_string_lossy()),
        _ => lib.display().to_string(),
    };
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .current_dir(cwd)
        .env("LD_LIBRARY_PATH", path)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .output()
        .expect("the binary runs");
    let o = Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !o.stderr.contains("panicked"),
        "{args:?} panicked: {}",
        o.stderr
    );
    o
}

const NO_DEVICE: &str = "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)";
const NVML_NOT_LOADED: &str =
    "nvmlInit_v2 failed: NVML_ERROR_DRIVER_NOT_LOADED (NVIDIA driver is not loaded)";

fn summary(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    let s: serde_json::Value = serde_json::from_str(&text).unwrap();
    schema::check("summary", &s, &dir.display().to_string());
    s
}

/// Every command that opens or lists a device, on branch `branch` whose `cuDriverGetVersion`
/// is `cuda_version` (e.g. 12020, said as `CUDA 12.2`).
fn the_real_driver_without_a_gpu(branch: &str, cuda_version: u32) {
    let Some(lib) = libs(branch) else { return };
    for name in ["libcuda.so", "libcuda.so.1", "libnvidia-ml.so.1"] {
        assert!(lib.join(name).exists(), "{} lacks {name}", lib.display());
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cuda_text = format!(
        "the driver library reports CUDA {}.{}, R{branch} (cuDriverGetVersion {cuda_version})",
        cuda_version / 1000,
        cuda_version % 1000 / 10
    );

    // devices: the simulator's profiles, with why there is no GPU. The library loaded, has
    // every function headroom calls and is not below the floor (R470 is the floor itself).
    let d = real(&lib, dir, &["devices", "--json"]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    let listing: serde_json::Value = serde_json::from_str(&d.stdout).unwrap();
    let reason = listing["reason"].as_str().unwrap();
    assert_eq!(listing["backend"], "sim", "{listing}");
    assert!(reason.contains(NO_DEVICE), "{reason}");
    assert!(reason.contains(NVML_NOT_LOADED), "{reason}");
    assert!(reason.contains(&cuda_text), "{reason}");
    assert_eq!(listing["gpus"], serde_json::json!([]), "{listing}");
    let sim = headroom(dir, &["devices", "--backend", "sim", "--json"]);
    let sim: serde_json::Value = serde_json::from_str(&sim.stdout).unwrap();
    assert_eq!(listing["profiles"], sim["profiles"]);
    let h200 = sim["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["default"] == true)
        .unwrap()
        .clone();
    let text = real(&lib, dir, &["devices"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.starts_with(reason), "{}", text.stdout);

    let d = real(&lib, dir, &["devices", "--backend", "cuda"]);
    assert_eq!(d.code, 2, "{}", d.stderr);
    assert!(d.stderr.contains(NO_DEVICE), "{}", d.stderr);
    assert!(d.stderr.contains(NVML_NOT_LOADED), "{}", d.stderr);

    // run under auto: the simulated default card, the same run as --backend sim gives.
    let wl = workload(
        dir,
        "one-gib",
        "[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"1GiB\" },\n  { op = \"free\", name = \"a\" },\n]\n",
    );
    let wl = wl.to_str().unwrap();
    let auto_dir = dir.join("auto");
    let r = real(
        &lib,
        dir,
        // Without -q: the note is for the person watching (-q prints nothing on success).
        &["run", wl, "--out", auto_dir.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = format!(
        "note: the NVIDIA driver did not initialize: {NO_DEVICE}; using the simulated device (profile {})",
        h200["name"].as_str().unwrap()
    );
    assert!(r.stderr.contains(&note), "{}", r.stderr);
    let s = summary(&auto_dir);
    assert_eq!(s["device"]["backend"], "sim", "{}", s["device"]);
    assert_eq!(s["device"]["total_bytes"], h200["total_bytes"]);
    let peaks = &s["peaks"]["run"];
    assert_eq!(peaks["own_bytes"]["bytes"].as_u64(), Some(GIB));
    assert_eq!(
        peaks["device_used_bytes"]["bytes"].as_u64(),
        Some(GIB + h200["context_overhead_bytes"].as_u64().unwrap())
    );
    let junit = std::fs::read_to_string(auto_dir.join("junit.xml")).unwrap();
    assert!(
        junit.contains("<property name=\"backend\" value=\"sim\""),
        "{junit}"
    );
    let sim_dir = dir.join("sim");
    let r = headroom(
        dir,
        &[
            "run",
            wl,
            "--backend",
            "sim",
            "--out",
            sim_dir.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(summary(&sim_dir)["peaks"], s["peaks"]);

    // run where only the GPU will do.
    for (flags, what) in [
        (&["--backend", "cuda"][..], "--backend cuda"),
        (&["--require-gpu"][..], "--require-gpu"),
    ] {
        let out_dir = dir.join(what.trim_start_matches('-'));
        let mut args = vec!["run", wl, "--out", out_dir.to_str().unwrap(), "-q"];
        args.extend_from_slice(flags);
        let r = real(&lib, dir, &args);
        assert_eq!(r.code, 2, "{what}: {}", r.stderr);
        assert!(r.stderr.contains(NO_DEVICE), "{what}: {}", r.stderr);
        assert!(!out_dir.join("summary.json").exists(), "{what}");
    }
    let r = real(&lib, dir, &["run", wl, "--require-gpu", "-q"]);
    assert!(
        r.stderr
            .contains("--require-gpu: refusing to run on the simulated device"),
        "{}",
        r.stderr
    );

    // watch reads NVML: both errors named, exit 2, the command never started.
    let marker = dir.join("watched-command-ran");
    let w = real(
        &lib,
        dir,
        &["watch", "--", "touch", marker.to_str().unwrap()],
    );
    assert_eq!(w.code, 2, "{}", w.stderr);
    assert!(w.stderr.contains(NO_DEVICE), "{}", w.stderr);
    assert!(w.stderr.contains(NVML_NOT_LOADED), "{}", w.stderr);
    assert!(!marker.exists());

    // hold: on the simulator under auto (its bytes, the note), refused where a GPU is required.
    let h = real(&lib, dir, &["hold", "1MiB", "--for", "10ms"]);
    assert_eq!(h.code, 0, "{}", h.stderr);
    assert!(
        h.stdout.starts_with(&format!(
            "holding {MIB} bytes (1.00 MiB) on {} as pid ",
            h200["gpu_name"].as_str().unwrap()
        )),
        "{}",
        h.stdout
    );
    assert!(h.stderr.contains(&note), "{}", h.stderr);
    for flags in [&["--backend", "cuda"][..], &["--require-gpu"][..]] {
        let mut args = vec!["hold", "1MiB", "--for", "10ms"];
        args.extend_from_slice(flags);
        let h = real(&lib, dir, &args);
        assert_eq!(h.code, 2, "{flags:?}: {}", h.stderr);
        assert!(h.stderr.contains(NO_DEVICE), "{flags:?}: {}", h.stderr);
        assert!(!h.stdout.contains("holding"), "{flags:?}: {}", h.stdout);
    }
}

#[test]
fn r470_the_floor_reports_no_device() {
    the_real_driver_without_a_gpu("470", 11040);
}

#[test]
fn r535_reports_no_device() {
    the_real_driver_without_a_gpu("535", 12020);
}

#[test]
fn r550_reports_no_device() {
    the_real_driver_without_a_gpu("550", 12040);
}
