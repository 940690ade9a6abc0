//! Stream-ordered pools: reuse order (grow before waiting on another stream), pending frees,
//! release threshold at synchronize, trim, attributes.

use crate::common::*;
use std::ffi::{c_int, c_void};

fn pool() -> Handle {
    let props = CUmemPoolProps {
        allocType: CU_MEM_ALLOCATION_TYPE_PINNED,
        handleTypes: 0,
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        },
        win32SecurityAttributes: std::ptr::null_mut(),
        maxSize: 0,
        reserved: [0; 56],
    };
    let mut p = std::ptr::null_mut();
    // SAFETY: valid properties and out-pointer.
    ok(unsafe { cuMemPoolCreate(&mut p, &props) });
    p
}

fn alloc_on(p: Handle, bytes: u64, s: Handle) -> Result<u64, u32> {
    let mut ptr = 0;
    // SAFETY: valid out-pointer, live pool and stream.
    match unsafe { cuMemAllocFromPoolAsync(&mut ptr, bytes as usize, p, s) } {
        0 => Ok(ptr),
        e => Err(e),
    }
}

fn free_on(ptr: u64, s: Handle) {
    // SAFETY: a live pool allocation and stream.
    ok(unsafe { cuMemFreeAsync(ptr, s) });
}

fn attr(p: Handle, a: u32) -> u64 {
    let mut v = 0u64;
    // SAFETY: the usage attributes are u64.
    ok(unsafe { cuMemPoolGetAttribute(p, a, (&mut v as *mut u64).cast()) });
    v
}

fn set_flag(p: Handle, a: u32, on: bool) {
    let mut v: c_int = on as c_int;
    // SAFETY: the reuse attributes are int.
    ok(unsafe { cuMemPoolSetAttribute(p, a, (&mut v as *mut c_int).cast::<c_void>()) });
}

fn set_threshold(p: Handle, bytes: u64) {
    let mut v = bytes;
    // SAFETY: the release threshold is u64.
    ok(unsafe {
        cuMemPoolSetAttribute(
            p,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut v as *mut u64).cast(),
        )
    });
}

#[test]
fn the_pool_grows_before_it_waits_on_another_stream() {
    let _g = setup(&[]);
    let k = kernels();
    let p = pool();
    let (a, b) = (
        stream(CU_STREAM_NON_BLOCKING),
        stream(CU_STREAM_NON_BLOCKING),
    );
    let x = alloc_on(p, GIB, a).unwrap();
    k.spin(a, 300_000_000);
    free_on(x, a);
    // The free is pending on `a`; `b` gets new memory rather than waiting.
    let y = alloc_on(p, GIB, b).unwrap();
    assert_ne!(y, x);
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * GIB);
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), GIB);
    // Once the device is full, `b` reuses `x` and waits for `a` (internal dependency).
    let hog = alloc(free_mem() - 512 * MIB);
    let z = alloc_on(p, GIB, b).unwrap();
    assert_eq!(z, x);
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * GIB);
    // SAFETY: a live stream.
    err(unsafe { cuStreamQuery(b) }, CUDA_ERROR_NOT_READY);
    // A block freed earlier on the same stream is reused in stream order.
    free_on(z, b);
    assert_eq!(alloc_on(p, GIB, b), Ok(x));
    free(hog);
}

#[test]
fn without_internal_dependencies_a_full_device_refuses() {
    let _g = setup(&[]);
    let k = kernels();
    let p = pool();
    set_flag(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, false);
    let (a, b) = (
        stream(CU_STREAM_NON_BLOCKING),
        stream(CU_STREAM_NON_BLOCKING),
    );
    let x = alloc_on(p, GIB, a).unwrap();
    k.spin(a, 200_000_000);
    free_on(x, a);
    let hog = alloc(free_mem() - 512 * MIB);
    let before = free_mem();
    assert_eq!(alloc_on(p, GIB, b), Err(CUDA_ERROR_OUT_OF_MEMORY));
    assert_eq!(free_mem(), before, "a refused allocation changes nothing");
    sync(a);
    // After its stream was synchronized the block is free for anyone... but the release
    // threshold (0) gave it back to the device at that synchronize.
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
    assert_eq!(alloc_on(p, GIB, b).map(|_| ()), Ok(()));
    free(hog);
}

#[test]
fn opportunistic_reuse_takes_a_completed_free() {
    let _g = setup(&[]);
    let p = pool();
    let (a, b) = (
        stream(CU_STREAM_NON_BLOCKING),
        stream(CU_STREAM_NON_BLOCKING),
    );
    let x = alloc_on(p, 64 * MIB, a).unwrap();
    free_on(x, a);
    // Let the worker run the free without any synchronize observing it.
    wait_idle(a);
    assert_eq!(alloc_on(p, 64 * MIB, b), Ok(x));
    free_on(x, b);
    sync(b);
    set_flag(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, false);
    let y = alloc_on(p, 64 * MIB, a).unwrap();
    free_on(y, a);
    wait_idle(a);
    assert_ne!(
        alloc_on(p, 64 * MIB, b),
        Ok(y),
        "completed but not known to `b`: grows"
    );
}

#[test]
fn synchronize_releases_above_the_threshold_and_trim_releases_completed_frees() {
    let _g = setup(&[]);
    let k = kernels();
    let p = pool();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let idle = free_mem();
    set_threshold(p, 32 * MIB);
    let small = alloc_on(p, 15 * MIB, s).unwrap();
    let large = alloc_on(p, 47 * MIB, s).unwrap();
    assert_eq!(
        attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
        64 * MIB,
        "2 MiB granularity"
    );
    assert_eq!(idle - free_mem(), 64 * MIB);
    free_on(small, s);
    free_on(large, s);
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
    sync(s);
    // Above 32 MiB: the largest free block (48 MiB) goes back; 16 MiB stays.
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 16 * MIB);
    assert_eq!(idle - free_mem(), 16 * MIB);
    // Trim never releases a free still pending on its stream.
    set_threshold(p, u64::MAX);
    let x = alloc_on(p, 100 * MIB, s).unwrap();
    k.spin(s, 150_000_000);
    free_on(x, s);
    // SAFETY: a live pool.
    ok(unsafe { cuMemPoolTrimTo(p, 0) });
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 100 * MIB);
    sync(s);
    // SAFETY: a live pool.
    ok(unsafe { cuMemPoolTrimTo(p, 0) });
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
    assert_eq!(free_mem(), idle);
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 116 * MIB);
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 100 * MIB);
    let mut zero = 0u64;
    // SAFETY: the high-water attributes are u64; 0 resets them.
    ok(unsafe {
        cuMemPoolSetAttribute(
            p,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            (&mut zero as *mut u64).cast(),
        )
    });
    assert_eq!(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0);
}

#[test]
fn the_default_pool_serves_cu_mem_alloc_async() {
    let _g = setup(&[]);
    let s = stream(CU_STREAM_NON_BLOCKING);
    let mut def = std::ptr::null_mut();
    let mut cur = std::ptr::null_mut();
    // SAFETY: valid out-pointers throughout.
    unsafe {
        ok(cuDeviceGetDefaultMemPool(&mut def, 0));
        ok(cuDeviceGetMemPool(&mut cur, 0));
        assert_eq!(def, cur);
        let mut ptr = 0;
        ok(cuMemAllocAsync(&mut ptr, (3 * MIB) as usize, s));
        assert_eq!(attr(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 4 * MIB);
        ok(cuMemFreeAsync(ptr, s));
        err(cuMemFreeAsync(ptr, s), CUDA_ERROR_INVALID_VALUE);
        err(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
    }
}
