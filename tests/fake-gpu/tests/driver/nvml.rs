//! NVML: memory info against CUDA's, devices by UUID, and the process list across processes
//! sharing a state file (a child is this test binary run again), with the release delay after
//! a death, `HIDE_SELF`, and exclusive-process compute mode.

use crate::common::*;
use std::ffi::{CString, c_char};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "FAKE_GPU_TEST_CHILD";

fn device() -> nvmlDevice_t {
    let mut d = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(
        unsafe { nvmlDeviceGetHandleByIndex_v2(0, &mut d) },
        NVML_SUCCESS
    );
    d
}

fn memory(d: nvmlDevice_t) -> nvmlMemory_v2_t {
    let mut m = nvmlMemory_v2_t {
        version: NVML_MEMORY_V2,
        total: 0,
        reserved: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: a versioned struct and a device handle.
    assert_eq!(
        unsafe { nvmlDeviceGetMemoryInfo_v2(d, &mut m) },
        NVML_SUCCESS
    );
    m
}

fn processes(d: nvmlDevice_t) -> Vec<(u32, u64)> {
    let mut n = 0u32;
    // SAFETY: the count query with a null buffer.
    let r = unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d, &mut n, std::ptr::null_mut()) };
    if n == 0 {
        assert_eq!(r, NVML_SUCCESS);
        return vec![];
    }
    assert_eq!(r, NVML_ERROR_INSUFFICIENT_SIZE);
    let blank = nvmlProcessInfo_t {
        pid: 0,
        usedGpuMemory: 0,
        gpuInstanceId: 0,
        computeInstanceId: 0,
    };
    let mut v = vec![blank; n as usize];
    // SAFETY: a buffer of `n` entries.
    assert_eq!(
        unsafe { nvmlDeviceGetComputeRunningProcesses_v3(d, &mut n, v.as_mut_ptr()) },
        NVML_SUCCESS
    );
    let mut out: Vec<(u32, u64)> = v[..n as usize]
        .iter()
        .map(|p| (p.pid, p.usedGpuMemory))
        .collect();
    out.sort();
    out
}

#[test]
fn nvml_memory_agrees_with_cuda_before_and_after_a_context() {
    let _g = testing::driver(&[]);
    // SAFETY: plain calls with valid out-pointers and buffers.
    unsafe {
        assert_eq!(nvmlDeviceGetCount_v2(&mut 0), NVML_ERROR_UNINITIALIZED);
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        let d = device();
        let m = memory(d);
        assert_eq!(
            (m.total, m.reserved, m.used, m.free),
            (4 * GIB + 64 * MIB, 64 * MIB, 0, 4 * GIB)
        );
        let mut v1 = nvmlMemory_t {
            total: 0,
            free: 0,
            used: 0,
        };
        assert_eq!(nvmlDeviceGetMemoryInfo(d, &mut v1), NVML_SUCCESS);
        assert_eq!(
            (v1.total, v1.used, v1.free),
            (4 * GIB + 64 * MIB, 64 * MIB, 4 * GIB)
        );
        let mut wrong = nvmlMemory_v2_t {
            version: 1,
            total: 0,
            reserved: 0,
            free: 0,
            used: 0,
        };
        assert_eq!(
            nvmlDeviceGetMemoryInfo_v2(d, &mut wrong),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
        assert!(processes(d).is_empty());
        ok(cuInit(0));
        let mut ctx = std::ptr::null_mut();
        ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(cuCtxSetCurrent(ctx));
        let p = alloc(100 * MIB);
        let m = memory(d);
        assert_eq!(m.used, 256 * MIB + 100 * MIB);
        assert_eq!(m.free, free_mem());
        assert_eq!(processes(d), vec![(std::process::id(), 356 * MIB)]);
        free(p);
        // Lookups by UUID use the same string CUDA's UUID gives.
        let mut uuid = [0 as c_char; 96];
        assert_eq!(nvmlDeviceGetUUID(d, uuid.as_mut_ptr(), 96), NVML_SUCCESS);
        let mut by_uuid = std::ptr::null_mut();
        assert_eq!(
            nvmlDeviceGetHandleByUUID(uuid.as_ptr(), &mut by_uuid),
            NVML_SUCCESS
        );
        assert_eq!(by_uuid, d);
        let unknown = CString::new("GPU-00000000-0000-0000-0000-000000000000").unwrap();
        assert_eq!(
            nvmlDeviceGetHandleByUUID(unknown.as_ptr(), &mut by_uuid),
            NVML_ERROR_NOT_FOUND
        );
        assert_eq!(
            nvmlDeviceGetUUID(d, uuid.as_mut_ptr(), 10),
            NVML_ERROR_INSUFFICIENT_SIZE
        );
        let mut ver = 0;
        assert_eq!(nvmlSystemGetCudaDriverVersion_v2(&mut ver), NVML_SUCCESS);
        assert_eq!(ver, 12040);
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
        assert_eq!(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    }
}

/// A child process (this binary, running `nvml::child`) with the given settings and role.
fn spawn(role: &str, vars: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "nvml::child", "--nocapture", "--test-threads=1"])
        .env(CHILD, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.find("child: ").map(|i| l[i..].to_string()))
        .expect("the child reports");
    // Keep reading, so the child's last words never meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, line)
}

/// The child's side: a context and 512 MiB, or a context attempt, then wait for stdin to close.
#[test]
fn child() {
    let Ok(role) = std::env::var(CHILD) else {
        return;
    };
    let keys = ["HEADROOM_FAKE_STATE", "HEADROOM_FAKE_COMPUTE_MODE"];
    let vars: Vec<(String, String)> = keys
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let _g = testing::driver(&refs);
    // SAFETY: plain calls with valid out-pointers.
    let r = unsafe {
        ok(cuInit(0));
        let mut ctx = std::ptr::null_mut();
        let r = cuDevicePrimaryCtxRetain(&mut ctx, 0);
        if r == 0 {
            ok(cuCtxSetCurrent(ctx));
        }
        r
    };
    if role == "hold" {
        alloc(512 * MIB);
    }
    println!("child: {}", error_name(r));
    if role == "busy-exit" {
        // A stream still busy for a minute must not keep the process from exiting.
        let k = kernels();
        k.spin(stream(CU_STREAM_NON_BLOCKING), 60_000_000_000);
        return;
    }
    let _ = std::io::stdin().lines().count();
}

fn state_file(tag: &str) -> String {
    let p = std::env::temp_dir().join(format!("fake-gpu-nvml-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p.to_string_lossy().into_owned()
}

#[test]
fn processes_share_the_device_and_a_dead_one_is_released_late() {
    let state = state_file("share");
    let vars = [
        ("HEADROOM_FAKE_STATE", state.as_str()),
        ("HEADROOM_FAKE_RELEASE_DELAY", "400ms"),
    ];
    let _g = setup(&vars);
    let (mut child, line) = spawn("hold", &vars);
    assert_eq!(line, "child: CUDA_SUCCESS");
    let me = std::process::id();
    // The child's context (256 MiB) and allocation (512 MiB) show in this process's free memory.
    assert_eq!(free_mem(), 4 * GIB - 256 * MIB - 768 * MIB);
    // SAFETY: plain NVML calls.
    unsafe { assert_eq!(nvmlInit_v2(), NVML_SUCCESS) };
    let d = device();
    let mut want = vec![(me, 256 * MIB), (child.id(), 768 * MIB)];
    want.sort();
    assert_eq!(processes(d), want);
    child.kill().unwrap();
    child.wait().unwrap();
    let died = Instant::now();
    // Dead, not listed, but its memory is still counted for the release delay.
    assert_eq!(processes(d), vec![(me, 256 * MIB)]);
    assert_eq!(memory(d).used, 256 * MIB + 768 * MIB);
    while died.elapsed() < Duration::from_millis(300) {
        assert_eq!(free_mem(), 4 * GIB - 1024 * MIB);
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(free_mem(), 4 * GIB - 256 * MIB);
    assert_eq!(memory(d).used, 256 * MIB);
    // SAFETY: plain NVML call.
    unsafe { assert_eq!(nvmlShutdown(), NVML_SUCCESS) };
    let _ = std::fs::remove_file(state);
}

#[test]
fn a_busy_stream_does_not_keep_a_process_alive() {
    let t0 = Instant::now();
    let (mut child, line) = spawn("busy-exit", &[]);
    assert_eq!(line, "child: CUDA_SUCCESS");
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "exit waited for the stream"
    );
}

#[test]
fn hide_self_leaves_this_process_out_of_the_list() {
    let state = state_file("hide");
    let _g = setup(&[
        ("HEADROOM_FAKE_STATE", &state),
        ("HEADROOM_FAKE_NVML_HIDE_SELF", "1"),
    ]);
    let (mut child, _) = spawn("hold", &[("HEADROOM_FAKE_STATE", &state)]);
    // SAFETY: plain NVML calls.
    unsafe { assert_eq!(nvmlInit_v2(), NVML_SUCCESS) };
    let d = device();
    assert_eq!(processes(d), vec![(child.id(), 768 * MIB)]);
    assert_eq!(
        memory(d).used,
        1024 * MIB,
        "memory info still counts this process"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // SAFETY: plain NVML call.
    unsafe { assert_eq!(nvmlShutdown(), NVML_SUCCESS) };
    let _ = std::fs::remove_file(state);
}

#[test]
fn exclusive_process_mode_refuses_a_second_context() {
    let state = state_file("exclusive");
    let vars = [
        ("HEADROOM_FAKE_STATE", state.as_str()),
        ("HEADROOM_FAKE_COMPUTE_MODE", "exclusive_process"),
    ];
    let _g = setup(&vars);
    let mut mode = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        ok(cuDeviceGetAttribute(
            &mut mode,
            CU_DEVICE_ATTRIBUTE_COMPUTE_MODE,
            0,
        ));
        assert_eq!(mode as u32, CU_COMPUTEMODE_EXCLUSIVE_PROCESS);
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        let mut m = 0u32;
        assert_eq!(nvmlDeviceGetComputeMode(device(), &mut m), NVML_SUCCESS);
        assert_eq!(m, CU_COMPUTEMODE_EXCLUSIVE_PROCESS);
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
    }
    let (mut child, line) = spawn("try", &vars);
    assert_eq!(line, "child: CUDA_ERROR_DEVICE_UNAVAILABLE");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_file(state);
}
