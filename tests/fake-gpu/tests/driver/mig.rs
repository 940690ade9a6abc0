//! MIG mode (`HEADROOM_FAKE_MIG`) on the test profile `tests/fake-gpu/profiles/mig-8g.toml`
//! (8 GiB, 14 SMs; instances 1g.1gb = 1 GiB / 2 SMs, 2g.2gb = 2 GiB / 4 SMs, 3g.4gb =
//! 3.75 GiB / 6 SMs): CUDA sees one instance, with its own total, SMs and UUID; NVML's MIG
//! handles; process lists refused without privileges; processes on different instances do not
//! see each other's memory (a child process on another instance).

use std::ffi::{CStr, CString, c_char};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common::*;
use headroom_fake_gpu::topology::{gpu_uuid, mig_uuid};

const PROFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/mig-8g.toml");
const MIG: &str = "1g.1gb,2g.2gb,3g.4gb";

fn vars<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("HEADROOM_FAKE_PROFILE", PROFILE),
        ("HEADROOM_FAKE_DEVICES", "2"),
        ("HEADROOM_FAKE_MIG", MIG),
    ];
    v.extend_from_slice(extra);
    v
}

/// (device count, total, SMs, v1 UUID, v2 UUID, name) of CUDA device 0, after `cuInit`.
fn cuda_view() -> (i32, u64, i32, [u8; 16], [u8; 16], String) {
    // SAFETY: plain calls with valid out-pointers and buffers.
    unsafe {
        ok(cuInit(0));
        let mut n = 0;
        ok(cuDeviceGetCount(&mut n));
        let mut total = 0usize;
        ok(cuDeviceTotalMem_v2(&mut total, 0));
        let mut sms = 0;
        ok(cuDeviceGetAttribute(
            &mut sms,
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            0,
        ));
        let (mut v1, mut v2) = (CUuuid { bytes: [0; 16] }, CUuuid { bytes: [0; 16] });
        ok(cuDeviceGetUuid(&mut v1, 0));
        ok(cuDeviceGetUuid_v2(&mut v2, 0));
        let mut name = [0 as c_char; 128];
        ok(cuDeviceGetName(name.as_mut_ptr(), 128, 0));
        (
            n,
            total as u64,
            sms,
            v1.bytes.map(|b| b as u8),
            v2.bytes.map(|b| b as u8),
            CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
        )
    }
}

/// The text form of UUID bytes.
fn text(prefix: &str, b: [u8; 16]) -> String {
    headroom_fake_gpu::topology::uuid_text(prefix, b)
}

#[test]
fn cuda_sees_one_instance_with_its_own_total_sms_and_uuid() {
    let _g = testing::driver(&vars(&[]));
    let (n, total, sms, v1, v2, name) = cuda_view();
    assert_eq!((n, total, sms), (1, GIB, 2));
    assert_eq!(text("GPU", v1), gpu_uuid(0), "v1: the parent GPU");
    assert_eq!(text("MIG", v2), mig_uuid(0, 0), "v2: the instance");
    assert_eq!(name, "MIG test 8 GiB GPU (fake driver) MIG 1g.1gb");
    // A context: 256 MiB of the instance's 1 GiB; the stack reservation is per instance SM.
    // SAFETY: plain calls with valid out-pointers.
    unsafe {
        let mut ctx = std::ptr::null_mut();
        ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(cuCtxSetCurrent(ctx));
        assert_eq!(free_mem(), 768 * MIB);
        ok(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 2048));
        // 1 KiB more per thread × 2 SMs × 2048 threads.
        assert_eq!(free_mem(), 768 * MIB - 4 * MIB);
        err(
            cuMemAlloc_v2(&mut 0, (800 * MIB) as usize),
            CUDA_ERROR_OUT_OF_MEMORY,
        );
    }
    drop(_g);
    // CUDA_VISIBLE_DEVICES: a MIG UUID picks that instance; an index, its GPU's first one.
    let wanted = mig_uuid(1, 2);
    let _g = testing::driver(&vars(&[("CUDA_VISIBLE_DEVICES", &wanted)]));
    let (n, total, sms, v1, v2, name) = cuda_view();
    assert_eq!((n, total, sms), (1, 3 * GIB + 3 * GIB / 4, 6));
    assert_eq!((text("GPU", v1), text("MIG", v2)), (gpu_uuid(1), wanted));
    assert!(name.ends_with(" MIG 3g.4gb"), "{name}");
    drop(_g);
    let _g = testing::driver(&vars(&[("CUDA_VISIBLE_DEVICES", "1")]));
    let (_, _, _, _, v2, _) = cuda_view();
    assert_eq!(text("MIG", v2), mig_uuid(1, 0));
    drop(_g);
    let unknown = mig_uuid(5, 0);
    for hidden in [unknown.as_str(), "", "7"] {
        let _g = testing::driver(&vars(&[("CUDA_VISIBLE_DEVICES", hidden)]));
        // SAFETY: plain call.
        err(unsafe { cuInit(0) }, CUDA_ERROR_NO_DEVICE);
    }
}

#[test]
fn mig_settings_are_checked_against_the_profile() {
    let cfg = |profile: &str, mig: &str| {
        let map = [
            ("HEADROOM_FAKE_PROFILE", profile),
            ("HEADROOM_FAKE_MIG", mig),
        ];
        config::Config::from_vars(|k| {
            map.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    };
    let e = cfg(PROFILE, "1g.1gb,4g.4gb").unwrap_err();
    assert!(
        e.contains("\"4g.4gb\" is not a MIG profile of mig-8g")
            && e.contains("1g.1gb, 2g.2gb, 3g.4gb, 7g.8gb"),
        "{e}"
    );
    let e = cfg("tiny-4g", "1g.1gb").unwrap_err();
    assert!(e.contains("tiny-4g has no [[mig]] table"), "{e}");
    let e = cfg(PROFILE, "1g.1gb,7g.8gb").unwrap_err();
    assert!(e.contains("more than mig-8g's"), "{e}");
    let e = cfg(PROFILE, &["1g.1gb"; 8].join(",")).unwrap_err();
    assert!(e.contains("at most 7"), "{e}");
    let c = cfg(PROFILE, &["1g.1gb"; 7].join(",")).unwrap();
    assert_eq!(c.total_bytes(0), GIB);
    // A setting the driver refuses makes cuInit fail.
    let _g = testing::driver_unchecked(&vars(&[("HEADROOM_FAKE_MIG", "1g.2gb")]));
    // SAFETY: plain call.
    err(unsafe { cuInit(0) }, CUDA_ERROR_INVALID_VALUE);
}

fn handle_at(i: u32) -> nvmlDevice_t {
    let mut d = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(
        unsafe { nvmlDeviceGetHandleByIndex_v2(i, &mut d) },
        NVML_SUCCESS
    );
    d
}

fn mig_at(gpu: nvmlDevice_t, i: u32) -> Result<nvmlDevice_t, u32> {
    let mut d = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    match unsafe { nvmlDeviceGetMigDeviceHandleByIndex(gpu, i, &mut d) } {
        NVML_SUCCESS => Ok(d),
        e => Err(e),
    }
}

fn nvml_text(
    f: unsafe extern "C" fn(nvmlDevice_t, *mut c_char, u32) -> u32,
    d: nvmlDevice_t,
) -> String {
    let mut b = [0 as c_char; 96];
    // SAFETY: a buffer of 96 bytes.
    assert_eq!(unsafe { f(d, b.as_mut_ptr(), 96) }, NVML_SUCCESS);
    // SAFETY: NUL-terminated by the call.
    unsafe { CStr::from_ptr(b.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn memory(d: nvmlDevice_t) -> (u64, u64, u64, u64) {
    let mut m = nvmlMemory_v2_t {
        version: NVML_MEMORY_V2,
        total: 0,
        reserved: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: a versioned struct.
    assert_eq!(
        unsafe { nvmlDeviceGetMemoryInfo_v2(d, &mut m) },
        NVML_SUCCESS
    );
    (m.total, m.reserved, m.used, m.free)
}

type ProcessList = unsafe extern "C" fn(nvmlDevice_t, *mut u32, *mut nvmlProcessInfo_t) -> u32;

/// The process list: Ok((pid, bytes, GPU instance, compute instance)) or the error.
fn processes(d: nvmlDevice_t) -> Result<Vec<(u32, u64, u32, u32)>, u32> {
    processes_by(nvmlDeviceGetComputeRunningProcesses_v3, d)
}

fn processes_by(f: ProcessList, d: nvmlDevice_t) -> Result<Vec<(u32, u64, u32, u32)>, u32> {
    let blank = nvmlProcessInfo_t {
        pid: 0,
        usedGpuMemory: 0,
        gpuInstanceId: 0,
        computeInstanceId: 0,
    };
    let mut v = vec![blank; 8];
    let mut n = 8u32;
    // SAFETY: a buffer of 8 entries.
    match unsafe { f(d, &mut n, v.as_mut_ptr()) } {
        NVML_SUCCESS => {}
        e => return Err(e),
    }
    let mut out: Vec<_> = v[..n as usize]
        .iter()
        .map(|p| (p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId))
        .collect();
    out.sort();
    Ok(out)
}

#[test]
fn nvml_lists_mig_handles_with_their_memory_and_refuses_process_lists() {
    let _g = setup(&vars(&[]));
    let p = alloc(100 * MIB);
    let me = std::process::id();
    // SAFETY: plain NVML calls with valid out-pointers.
    unsafe {
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        let mut n = 0;
        assert_eq!(nvmlDeviceGetCount_v2(&mut n), NVML_SUCCESS);
        assert_eq!(n, 2, "physical GPUs");
        let gpu = handle_at(1);
        let (mut cur, mut pending) = (9, 9);
        assert_eq!(
            nvmlDeviceGetMigMode(gpu, &mut cur, &mut pending),
            NVML_SUCCESS
        );
        assert_eq!((cur, pending), (1, 1));
        assert_eq!(nvmlDeviceGetMaxMigDeviceCount(gpu, &mut n), NVML_SUCCESS);
        assert_eq!(n, 7);
        assert_eq!(mig_at(gpu, 3), Err(NVML_ERROR_NOT_FOUND));
        assert_eq!(mig_at(gpu, 7), Err(NVML_ERROR_INVALID_ARGUMENT));
        for k in 0..3 {
            let m = mig_at(gpu, k).unwrap();
            assert_eq!(mig_at(m, 0), Err(NVML_ERROR_INVALID_ARGUMENT));
            let mut is = 9;
            assert_eq!(nvmlDeviceIsMigDeviceHandle(m, &mut is), NVML_SUCCESS);
            assert_eq!(is, 1);
            let mut parent = std::ptr::null_mut();
            assert_eq!(
                nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, &mut parent),
                NVML_SUCCESS
            );
            assert_eq!(parent, gpu);
            let (mut gi, mut ci) = (0, 9);
            assert_eq!(nvmlDeviceGetGpuInstanceId(m, &mut gi), NVML_SUCCESS);
            assert_eq!(nvmlDeviceGetComputeInstanceId(m, &mut ci), NVML_SUCCESS);
            assert_eq!((gi, ci), (k + 1, 0));
            let uuid = nvml_text(nvmlDeviceGetUUID, m);
            assert_eq!(uuid, mig_uuid(1, k));
            let c = CString::new(uuid).unwrap();
            let mut by_uuid = std::ptr::null_mut();
            assert_eq!(
                nvmlDeviceGetHandleByUUID(c.as_ptr(), &mut by_uuid),
                NVML_SUCCESS
            );
            assert_eq!(by_uuid, m);
        }
        let mut is = 9;
        assert_eq!(nvmlDeviceIsMigDeviceHandle(gpu, &mut is), NVML_SUCCESS);
        assert_eq!(is, 0);
        let mut out = std::ptr::null_mut();
        assert_eq!(
            nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu, &mut out),
            NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            nvmlDeviceGetGpuInstanceId(gpu, &mut n),
            NVML_ERROR_NOT_SUPPORTED
        );
        let third = mig_at(gpu, 2).unwrap();
        assert_eq!(
            nvml_text(nvmlDeviceGetName, third),
            format!("{} MIG 3g.4gb", nvml_text(nvmlDeviceGetName, gpu))
        );
        // This process runs on GPU 0's first instance: its context and 100 MiB show there and
        // in GPU 0's whole-GPU figures, not on the other instances.
        let gpu0 = handle_at(0);
        let mine = mig_at(gpu0, 0).unwrap();
        let used = 256 * MIB + 100 * MIB;
        assert_eq!(memory(mine), (GIB, 0, used, GIB - used));
        assert_eq!(free_mem(), GIB - used, "NVML's free is CUDA's");
        assert_eq!(memory(mig_at(gpu0, 1).unwrap()), (2 * GIB, 0, 0, 2 * GIB));
        assert_eq!(
            memory(gpu0),
            (8 * GIB + 64 * MIB, 64 * MIB, used, 8 * GIB - used)
        );
        assert_eq!(memory(gpu).2, 0);
        for d in [gpu0, mine] {
            assert_eq!(processes(d), Err(NVML_ERROR_NO_PERMISSION));
            let mut count = 0;
            assert_eq!(
                nvmlDeviceGetComputeRunningProcesses_v3(d, &mut count, std::ptr::null_mut()),
                NVML_ERROR_NO_PERMISSION
            );
        }
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
    }
    free(p);
    drop(_g);
    // Privileged: the lists, with each process's GPU and compute instance.
    let _g = setup(&vars(&[("HEADROOM_FAKE_PRIVILEGED", "1")]));
    // SAFETY: plain NVML calls.
    unsafe { assert_eq!(nvmlInit_v2(), NVML_SUCCESS) };
    let gpu0 = handle_at(0);
    let row = (me, 256 * MIB, 1, 0);
    assert_eq!(processes(mig_at(gpu0, 0).unwrap()), Ok(vec![row]));
    assert_eq!(processes(mig_at(gpu0, 1).unwrap()), Ok(vec![]));
    assert_eq!(processes(gpu0), Ok(vec![row]));
    // R450's _v2 fills the same record.
    assert_eq!(
        processes_by(nvmlDeviceGetComputeRunningProcesses_v2, gpu0),
        Ok(vec![row])
    );
    drop(_g);
    // Out of MIG mode: a MIG-capable card says so, another does not support the query.
    for (profile, want) in [
        (PROFILE, NVML_SUCCESS),
        ("tiny-4g", NVML_ERROR_NOT_SUPPORTED),
    ] {
        let _g = testing::driver(&[("HEADROOM_FAKE_PROFILE", profile)]);
        // SAFETY: plain NVML calls with valid out-pointers.
        unsafe {
            assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
            let (mut cur, mut pending) = (9, 9);
            assert_eq!(
                nvmlDeviceGetMigMode(handle_at(0), &mut cur, &mut pending),
                want
            );
            if want == NVML_SUCCESS {
                assert_eq!((cur, pending), (0, 0));
                assert_eq!(mig_at(handle_at(0), 0), Err(NVML_ERROR_NOT_FOUND));
            }
            assert!(processes(handle_at(0)).is_ok());
        }
    }
}

const CHILD: &str = "FAKE_GPU_MIG_CHILD";

/// The child's side: a context and 512 MiB on the instance `CUDA_VISIBLE_DEVICES` names; it
/// reports its free and total memory, then waits for stdin to close.
#[test]
fn child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let keys = [
        "HEADROOM_FAKE_STATE",
        "HEADROOM_FAKE_PROFILE",
        "HEADROOM_FAKE_DEVICES",
        "HEADROOM_FAKE_MIG",
        "CUDA_VISIBLE_DEVICES",
    ];
    let vars: Vec<(String, String)> = keys
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let _g = setup(&refs);
    alloc(512 * MIB);
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    ok(unsafe { cuMemGetInfo_v2(&mut f, &mut t) });
    println!("child: {f} {t}");
    let _ = std::io::stdin().lines().count();
}

#[test]
fn processes_on_different_instances_do_not_see_each_others_memory() {
    let state = std::env::temp_dir().join(format!("fake-gpu-mig-{}", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let state = state.to_string_lossy().into_owned();
    let base = vars(&[
        ("HEADROOM_FAKE_STATE", state.as_str()),
        ("HEADROOM_FAKE_PRIVILEGED", "1"),
    ]);
    let _g = setup(&base);
    let second = mig_uuid(0, 1);
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "mig::child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("CUDA_VISIBLE_DEVICES", &second)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in &base {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.find("child: ").map(|i| l[i + 7..].to_string()))
        .expect("the child reports");
    // Keep reading, so the child's last words never meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    // The child sees its 2 GiB instance with only its own context and allocation.
    let used = 256 * MIB + 512 * MIB;
    assert_eq!(line, format!("{} {}", 2 * GIB - used, 2 * GIB));
    // This process, on the first instance, sees only its own context.
    assert_eq!(free_mem(), GIB - 256 * MIB);
    // NVML sees both: each on its instance, and the whole GPU their sum.
    // SAFETY: plain NVML calls.
    unsafe { assert_eq!(nvmlInit_v2(), NVML_SUCCESS) };
    let gpu0 = handle_at(0);
    assert_eq!(memory(mig_at(gpu0, 1).unwrap()).2, used);
    assert_eq!(memory(gpu0).2, used + 256 * MIB);
    let mut want = vec![
        (std::process::id(), 256 * MIB, 1, 0),
        (child.id(), used, 2, 0),
    ];
    want.sort();
    assert_eq!(processes(gpu0), Ok(want));
    drop(child.stdin.take());
    child.wait().unwrap();
    let _ = std::fs::remove_file(&state);
}
