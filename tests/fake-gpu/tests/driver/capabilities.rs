//! Capabilities turned off (`HEADROOM_FAKE_DISABLE`), `CUDA_VISIBLE_DEVICES` without MIG, and
//! every profile headroom ships serving as a fake device.

use std::ffi::c_int;

use crate::common::*;
use crate::memory::prop;
use headroom_fake_gpu::topology::gpu_uuid;

fn attribute(a: u32) -> c_int {
    let mut v = -1;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuDeviceGetAttribute(&mut v, a, 0) });
    v
}

/// (pools attribute, its handle types, VMM attribute, cuMemAllocAsync, cuDeviceGetMemPool,
/// cuMemGetAllocationGranularity, cuMemAddressReserve, cuMemCreate).
fn probe() -> (c_int, c_int, c_int, [u32; 5]) {
    let s = stream(CU_STREAM_NON_BLOCKING);
    let p = prop();
    // SAFETY: valid out-pointers and properties; what is made is freed below.
    let codes = unsafe {
        let mut ptr = 0;
        let alloc = cuMemAllocAsync(&mut ptr, (4 * MIB) as usize, s);
        if alloc == 0 {
            ok(cuMemFreeAsync(ptr, s));
        }
        let mut pool = std::ptr::null_mut();
        let get_pool = cuDeviceGetMemPool(&mut pool, 0);
        let mut g = 0usize;
        let gran = cuMemGetAllocationGranularity(&mut g, &p, 0);
        let mut base = 0;
        let reserve = cuMemAddressReserve(&mut base, (4 * MIB) as usize, 0, 0, 0);
        if reserve == 0 {
            ok(cuMemAddressFree(base, (4 * MIB) as usize));
        }
        let mut h = 0;
        let create = cuMemCreate(&mut h, (2 * MIB) as usize, &p, 0);
        if create == 0 {
            ok(cuMemRelease(h));
        }
        [alloc, get_pool, gran, reserve, create]
    };
    sync(s);
    (
        attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
        attribute(CU_DEVICE_ATTRIBUTE_MEMPOOL_HANDLE_TYPES),
        attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
        codes,
    )
}

#[test]
fn disabled_capabilities_read_zero_and_refuse_their_calls() {
    const NO: u32 = CUDA_ERROR_NOT_SUPPORTED;
    let cases = [
        ("", (1, 1, 1, [0, 0, 0, 0, 0])),
        ("memory_pools", (0, 0, 1, [NO, NO, 0, 0, 0])),
        ("vmm", (1, 1, 0, [0, 0, NO, NO, NO])),
        (" memory_pools , vmm ", (0, 0, 0, [NO, NO, NO, NO, NO])),
    ];
    for (setting, want) in cases {
        let _g = setup(&[("HEADROOM_FAKE_DISABLE", setting)]);
        let idle = free_mem();
        assert_eq!(probe(), want, "HEADROOM_FAKE_DISABLE={setting:?}");
        // Plain allocations stay.
        free(alloc(64 * MIB));
        assert_eq!(free_mem(), idle);
    }
    let e = config::Config::from_vars(|k| (k == "HEADROOM_FAKE_DISABLE").then(|| "graphs".into()))
        .unwrap_err();
    assert!(
        e.contains("\"graphs\" is not a capability; use memory_pools, vmm"),
        "{e}"
    );
}

/// (CUDA device count, each device's UUID, total and PCI bus id).
fn visible() -> Vec<(String, u64, c_int)> {
    let mut n = 0;
    // SAFETY: plain calls with valid out-pointers.
    unsafe {
        ok(cuInit(0));
        ok(cuDeviceGetCount(&mut n));
        (0..n)
            .map(|i| {
                let mut u = CUuuid { bytes: [0; 16] };
                ok(cuDeviceGetUuid(&mut u, i));
                let mut total = 0usize;
                ok(cuDeviceTotalMem_v2(&mut total, i));
                let mut bus = 0;
                ok(cuDeviceGetAttribute(&mut bus, 33, i));
                let text = headroom_fake_gpu::topology::uuid_text("GPU", u.bytes.map(|b| b as u8));
                (text, total as u64, bus)
            })
            .collect()
    }
}

#[test]
fn cuda_visible_devices_picks_and_orders_gpus() {
    let node = [("HEADROOM_FAKE_PROFILE", "8xh100-80g")];
    let card = |g: u32, mib: u64| (gpu_uuid(g), mib * MIB, g as c_int + 1);
    let (big, small) = (81089, 80961);
    let uuid5 = gpu_uuid(5);
    let cases = [
        ("3,0", vec![card(3, small), card(0, big)]),
        ("1,9,2", vec![card(1, big)]),
        (uuid5.as_str(), vec![card(5, big)]),
        (&uuid5[..uuid5.len() - 2], vec![]),
    ];
    for (setting, want) in cases {
        let mut vars = node.to_vec();
        vars.push(("CUDA_VISIBLE_DEVICES", setting));
        let _g = testing::driver(&vars);
        if want.is_empty() {
            // SAFETY: plain calls with a valid out-pointer.
            unsafe {
                err(cuInit(0), CUDA_ERROR_NO_DEVICE);
                err(cuDeviceGetCount(&mut 0), CUDA_ERROR_NOT_INITIALIZED);
            }
        } else {
            assert_eq!(visible(), want, "CUDA_VISIBLE_DEVICES={setting:?}");
        }
    }
    // Memory of CUDA device 0 under "3,0" is GPU 3's in NVML, which ignores the variable.
    let _g = setup(&[
        ("HEADROOM_FAKE_PROFILE", "8xh100-80g"),
        ("CUDA_VISIBLE_DEVICES", "3,0"),
    ]);
    let p = alloc(GIB);
    let used = |i: u32| {
        let mut d = std::ptr::null_mut();
        let mut m = nvmlMemory_t {
            total: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: plain NVML calls with valid out-pointers.
        unsafe {
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(i, &mut d), NVML_SUCCESS);
            assert_eq!(nvmlDeviceGetMemoryInfo(d, &mut m), NVML_SUCCESS);
        }
        (m.total, m.used)
    };
    // SAFETY: plain NVML call.
    unsafe { assert_eq!(nvmlInit_v2(), NVML_SUCCESS) };
    let h100 = profile::Profile::resolve("h100-80g").unwrap();
    let reserved = h100.memory.nvml_reserved_bytes.0;
    let context = h100.memory.context_overhead_bytes.0;
    assert_eq!(used(3), (small * MIB + reserved, reserved + context + GIB));
    assert_eq!(used(0), (big * MIB + reserved, reserved));
    free(p);
}

#[test]
fn every_shipped_profile_serves_by_name() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".toml").map(String::from))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "{names:?}");
    for name in &names {
        let d = profile::Devices::resolve(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Its [[mig]] table, if any, reads as MIG instances.
        let mig = d.profile.mig_profiles().unwrap();
        assert_eq!(mig.len(), d.profile.mig.len(), "{name}");
        let _g = setup(&[("HEADROOM_FAKE_PROFILE", name)]);
        let mut total = 0usize;
        // SAFETY: valid out-pointer.
        ok(unsafe { cuDeviceTotalMem_v2(&mut total, 0) });
        let want = d
            .card_totals
            .as_ref()
            .map_or(d.profile.memory.total_bytes.0, |t| t[0]);
        assert_eq!(total as u64, want, "{name}");
    }
}
