//! Driver branches (`HEADROOM_FAKE_DRIVER`): the versions CUDA and NVML report, the JIT's
//! newest PTX ISA at its boundary, and the symbols a branch lacks, absent to `dlsym` in the
//! filter library `scripts/fake-gpu` builds (checked in a child process run through the script,
//! as headroom runs).

use std::ffi::{CStr, c_char, c_int};
use std::process::Command;

use crate::common::*;
use crate::modules::load_ex;

/// NVML's driver version and CUDA version.
fn nvml_versions() -> (String, i32, i32) {
    let mut text = [0 as c_char; 96];
    let (mut v1, mut v2) = (0, 0);
    // SAFETY: plain NVML calls with valid buffers.
    unsafe {
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        assert_eq!(
            nvmlSystemGetDriverVersion(text.as_mut_ptr(), 96),
            NVML_SUCCESS
        );
        assert_eq!(nvmlSystemGetCudaDriverVersion(&mut v1), NVML_SUCCESS);
        assert_eq!(nvmlSystemGetCudaDriverVersion_v2(&mut v2), NVML_SUCCESS);
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
    }
    // SAFETY: NUL-terminated by the call.
    let text = unsafe { CStr::from_ptr(text.as_ptr()) };
    (text.to_string_lossy().into_owned(), v1, v2)
}

fn cuda_version() -> i32 {
    let mut v = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuDriverGetVersion(&mut v) });
    v
}

#[test]
fn each_branch_reports_its_cuda_and_nvml_versions() {
    let expected: &[(&str, i32, &str)] = &[
        ("450", 11000, "450.00"),
        ("460", 11020, "460.00"),
        ("470", 11040, "470.256.02"),
        ("525", 12000, "525.00"),
        ("535", 12020, "535.261.03"),
        ("545", 12030, "545.00"),
        ("550", 12040, "550.163.01"),
        ("555", 12050, "555.00"),
        ("560", 12060, "560.00"),
        ("565", 12070, "565.00"),
        ("570", 12080, "570.00"),
        ("575", 12090, "575.00"),
        ("580", 13000, "580.95.05"),
        ("535.104.05", 12020, "535.104.05"),
        (" 470 ", 11040, "470.256.02"),
    ];
    for &(setting, cuda, nvml) in expected {
        let _g = testing::driver(&[("HEADROOM_FAKE_DRIVER", setting)]);
        assert_eq!(cuda_version(), cuda, "{setting}");
        assert_eq!(nvml_versions(), (nvml.to_string(), cuda, cuda), "{setting}");
    }
    // Unset: the fake as it always was.
    let _g = testing::driver(&[]);
    assert_eq!(cuda_version(), 12040);
    assert_eq!(nvml_versions(), ("550.54.15".to_string(), 12040, 12040));
    drop(_g);
    for bad in ["455", "abc", "535.x", "535..1"] {
        let _g = testing::driver_unchecked(&[("HEADROOM_FAKE_DRIVER", bad)]);
        // SAFETY: plain calls.
        unsafe {
            err(cuInit(0), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(nvmlInit_v2(), NVML_ERROR_UNKNOWN, "{bad}");
        }
    }
    let e = config::Config::from_vars(|k| (k == "HEADROOM_FAKE_DRIVER").then(|| "455".into()))
        .unwrap_err();
    assert!(
        e.contains("HEADROOM_FAKE_DRIVER=\"455\"") && e.contains("470, 525"),
        "{e}"
    );
}

/// A PTX module with ISA `version` and no entries.
fn module(version: &str) -> Vec<u8> {
    format!("//\n.version {version}\n.target sm_70\n.address_size 64\n").into_bytes()
}

#[test]
fn the_jit_accepts_its_branchs_isa_and_refuses_the_next() {
    // (branch, newest ISA its CUDA release compiles, the next ISA).
    let cases = [
        ("450", "7.0", "7.1"),
        ("460", "7.2", "7.3"),
        ("470", "7.4", "7.5"),
        ("525", "8.0", "8.1"),
        ("535", "8.2", "8.3"),
        ("545", "8.3", "8.4"),
        ("550", "8.4", "8.5"),
        ("560", "8.5", "8.6"),
        ("565", "8.6", "8.7"),
        ("570", "8.7", "8.8"),
        ("575", "8.8", "9.0"),
        ("580", "9.0", "9.1"),
    ];
    for (branch, newest, next) in cases {
        let _g = setup(&[("HEADROOM_FAKE_DRIVER", branch)]);
        let (r, m, _, error) = load_ex(&module(newest));
        ok(r);
        assert!(error.is_empty(), "{branch}: {error}");
        // SAFETY: a module just loaded.
        ok(unsafe { cuModuleUnload(m) });
        let (r, _, _, error) = load_ex(&module(next));
        err(r, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
        assert_eq!(
            error,
            format!(
                "ptxas application ptx input, line 2; fatal   : Unsupported .version {next}; \
                 current version is '{newest}'"
            ),
            "{branch}"
        );
    }
    // The default driver: ISA 8.4, as before.
    let _g = setup(&[]);
    ok(load_ex(&module("8.4")).0);
    err(
        load_ex(&module("8.5")).0,
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    );
}

const CHILD: &str = "FAKE_GPU_FILTER_CHILD";

/// The child's side: loads `libcuda.so.1` and `libnvidia-ml.so.1` by name, as cudarc and
/// headroom's NVML module do, and reports which symbols `dlsym` finds and what a kept one answers.
#[test]
fn child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    // SAFETY: loading the libraries runs the filter's constructor, which loads the fake.
    let (cuda, nvml) = unsafe {
        (
            libloading::Library::new("libcuda.so.1").unwrap(),
            libloading::Library::new("libnvidia-ml.so.1").unwrap(),
        )
    };
    let found: Vec<&str> = symbols::all()
        .filter(|n| {
            let lib = if symbols::is_cuda(n) { &cuda } else { &nvml };
            // SAFETY: only looked up.
            unsafe { lib.get::<*const ()>(n.as_bytes()) }.is_ok()
        })
        .collect();
    println!("child: found {}", found.join(" "));
    // SAFETY: the symbols have these signatures; the out-pointers and buffer are valid.
    unsafe {
        let version = cuda
            .get::<unsafe extern "C" fn(*mut c_int) -> u32>(b"cuDriverGetVersion")
            .unwrap();
        let mut v = 0;
        assert_eq!(version(&mut v), 0);
        let init = nvml
            .get::<unsafe extern "C" fn() -> u32>(b"nvmlInit_v2")
            .unwrap();
        assert_eq!(init(), 0);
        let text = nvml
            .get::<unsafe extern "C" fn(*mut c_char, u32) -> u32>(b"nvmlSystemGetDriverVersion")
            .unwrap();
        let mut buf = [0 as c_char; 96];
        assert_eq!(text(buf.as_mut_ptr(), 96), 0);
        let nvml_text = CStr::from_ptr(buf.as_ptr()).to_string_lossy();
        println!("child: versions {v} {nvml_text}");
    }
}

/// Runs `child` through `scripts/fake-gpu` with `HEADROOM_FAKE_DRIVER=driver` (unset: `None`):
/// (the symbols found, the versions line).
fn through_script(driver: Option<&str>) -> (Vec<String>, String) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut cmd = Command::new("bash");
    cmd.arg(format!("{root}/scripts/fake-gpu"))
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "branches::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env_remove("HEADROOM_FAKE_DRIVER")
        .env_remove("HEADROOM_FAKE_STATE");
    if let Some(d) = driver {
        cmd.env("HEADROOM_FAKE_DRIVER", d);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{driver:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |tag: &str| {
        stdout
            .lines()
            .find_map(|l| {
                l.split_once(&format!("child: {tag} "))
                    .map(|(_, r)| r.to_string())
            })
            .unwrap_or_else(|| panic!("no {tag} line: {stdout}"))
    };
    let found = line("found").split(' ').map(String::from).collect();
    (found, line("versions"))
}

/// The exported names not in `found`, in the table's order.
fn missing(found: &[String]) -> Vec<&'static str> {
    symbols::all()
        .filter(|n| !found.iter().any(|f| f == n))
        .collect()
}

#[test]
fn a_branch_lacks_the_symbols_of_later_releases() {
    const NEWER_NVML: [&str; 2] = [
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    ];
    const CUDA_11_4: [&str; 5] = [
        "cuDeviceGetUuid_v2",
        "cuGraphInstantiateWithFlags",
        "cuDeviceGraphMemTrim",
        "cuDeviceGetGraphMemAttribute",
        "cuDeviceSetGraphMemAttribute",
    ];
    let pools = [
        "cuMemAllocAsync",
        "cuMemFreeAsync",
        "cuMemAllocFromPoolAsync",
        "cuMemPoolCreate",
        "cuMemPoolDestroy",
        "cuMemPoolGetAttribute",
        "cuMemPoolSetAttribute",
        "cuMemPoolTrimTo",
        "cuDeviceGetDefaultMemPool",
        "cuDeviceGetMemPool",
        "cuDeviceSetMemPool",
    ];
    let mut at_460 = vec!["cuEventElapsedTime_v2"];
    at_460.extend(CUDA_11_4);
    at_460.extend(NEWER_NVML);
    let mut at_450 = at_460.clone();
    at_450.extend(pools);
    at_450.push("cuGraphUpload");
    let cases: Vec<(Option<&str>, Vec<&str>, &str)> = vec![
        (None, vec![], "12040 550.54.15"),
        (Some("450"), at_450, "11000 450.00"),
        (Some("460"), at_460, "11020 460.00"),
        (
            Some("470"),
            [&["cuEventElapsedTime_v2"][..], &NEWER_NVML].concat(),
            "11040 470.256.02",
        ),
        (
            Some("535.104.05"),
            vec!["cuEventElapsedTime_v2"],
            "12020 535.104.05",
        ),
        (Some("580"), vec![], "13000 580.95.05"),
    ];
    for (driver, withheld, versions) in cases {
        let (found, line) = through_script(driver);
        let mut absent = missing(&found);
        absent.sort();
        let mut withheld = withheld;
        withheld.sort();
        assert_eq!(absent, withheld, "{driver:?}");
        assert_eq!(found.len() + absent.len(), symbols::all().count());
        assert_eq!(line, versions, "{driver:?}");
        // The same rule as the fake's own table.
        if let Some(d) = driver {
            let cuda = headroom_fake_gpu::branch::Release::parse(d)
                .unwrap()
                .cuda_version;
            let kept: Vec<&str> = symbols::all()
                .filter(|n| symbols::present(n, cuda))
                .collect();
            assert_eq!(found, kept, "{d}");
        }
    }
}
