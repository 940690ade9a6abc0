//! headroom on NVIDIA's own userspace driver libraries with no GPU and no kernel module: the
//! R470, R535 and R550 `libcuda.so.1` / `libnvidia-ml.so.1` from Debian's non-free packages
//! (`scripts/real-driver-libs`). There the real driver answers `cuInit` with
//! `CUDA_ERROR_NO_DEVICE` and `nvmlInit` with `NVML_ERROR_DRIVER_NOT_LOADED`: a driver whose
//! kernel module is not loaded, so every command that asks for a device (`--backend auto`
//! included) is exit 2 naming both facts, and only `--backend sim` runs on the simulator. Where
//! the archive cannot be reached the test says so on the terminal and skips; under CI
//! (`CI=true`, as `.ci/run` sets it) that is a failure naming the archive.

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
const MODULE_NOT_LOADED: &str =
    "the driver libraries are present but the kernel module is not loaded";

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

    // The libraries load and have every function headroom calls (R470 is the floor itself),
    // but the kernel module is not loaded: a broken driver, never a reason to simulate.
    let broken = |o: &Out, what: &str| {
        assert_eq!(o.code, 2, "{what}: {}", o.stderr);
        for fact in [NO_DEVICE, NVML_NOT_LOADED, MODULE_NOT_LOADED] {
            assert!(o.stderr.contains(fact), "{what}: {}", o.stderr);
        }
    };
    let d = real(&lib, dir, &["devices", "--json"]);
    broken(&d, "devices --json");
    assert!(d.stderr.contains(&cuda_text), "{}", d.stderr);
    assert_eq!(d.stdout, "");
    broken(&real(&lib, dir, &["devices"]), "devices");
    broken(
        &real(&lib, dir, &["devices", "--backend", "cuda"]),
        "devices --backend cuda",
    );
    // Asked for on purpose, the simulator still lists its profiles.
    let sim = real(&lib, dir, &["devices", "--backend", "sim", "--json"]);
    assert_eq!(sim.code, 0, "{}", sim.stderr);
    let sim: serde_json::Value = serde_json::from_str(&sim.stdout).unwrap();
    let h200 = sim["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["default"] == true)
        .unwrap()
        .clone();

    // run: under auto, --backend cuda and --require-gpu alike, exit 2 and no result.
    let wl = workload(
        dir,
        "one-gib",
        "[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"1GiB\" },\n  { op = \"free\", name = \"a\" },\n]\n",
    );
    let wl = wl.to_str().unwrap();
    for (flags, what) in [
        (&[][..], "auto"),
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
    // --backend sim: the simulated default card.
    let sim_dir = dir.join("sim");
    let r = real(
        &lib,
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
    let s = summary(&sim_dir);
    assert_eq!(s["device"]["backend"], "sim", "{}", s["device"]);
    assert_eq!(s["device"]["total_bytes"], h200["total_bytes"]);
    assert_eq!(s["peaks"]["run"]["own_bytes"]["bytes"].as_u64(), Some(GIB));

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

    // hold: refused under auto as everywhere a GPU is asked for; on the simulator on purpose.
    for flags in [&[][..], &["--backend", "cuda"][..], &["--require-gpu"][..]] {
        let mut args = vec!["hold", "1MiB", "--for", "10ms"];
        args.extend_from_slice(flags);
        let h = real(&lib, dir, &args);
        assert_eq!(h.code, 2, "{flags:?}: {}", h.stderr);
        assert!(h.stderr.contains(NO_DEVICE), "{flags:?}: {}", h.stderr);
        assert!(!h.stdout.contains("holding"), "{flags:?}: {}", h.stdout);
    }
    let h = real(
        &lib,
        dir,
        &["hold", "1MiB", "--for", "10ms", "--backend", "sim"],
    );
    assert_eq!(h.code, 0, "{}", h.stderr);
    assert!(
        h.stdout.starts_with(&format!(
            "holding {MIB} bytes (1.00 MiB) on {} as pid ",
            h200["gpu_name"].as_str().unwrap()
        )),
        "{}",
        h.stdout
    );
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
