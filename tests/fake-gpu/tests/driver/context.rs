//! Initialization, devices, contexts and their binding to threads, the stack reservation.

use crate::common::*;
use std::ffi::{CStr, c_char, c_int};

#[test]
fn nothing_works_before_cuinit_and_context_calls_need_a_current_context() {
    let _g = testing::driver(&[("HEADROOM_FAKE_DEVICES", "2")]);
    // SAFETY: valid out-pointers throughout.
    unsafe {
        let mut n = 0;
        err(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
        let (mut f, mut t) = (0usize, 0usize);
        err(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_NOT_INITIALIZED);
        err(cuInit(1), CUDA_ERROR_INVALID_VALUE);
        ok(cuInit(0));
        ok(cuDeviceGetCount(&mut n));
        assert_eq!(n, 2);
        let mut d = 0;
        err(cuDeviceGet(&mut d, 2), CUDA_ERROR_INVALID_DEVICE);
        err(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_INVALID_CONTEXT);
        let mut p = 0;
        err(cuMemAlloc_v2(&mut p, 64), CUDA_ERROR_INVALID_CONTEXT);
        let mut s = std::ptr::null_mut();
        err(cuStreamCreate(&mut s, 0), CUDA_ERROR_INVALID_CONTEXT);
        let mut c = std::ptr::null_mut();
        ok(cuCtxGetCurrent(&mut c));
        assert!(c.is_null());
    }
}

#[test]
fn the_primary_context_is_refcounted_and_bound_per_thread() {
    let _g = testing::driver(&[]);
    // SAFETY: valid out-pointers throughout.
    unsafe {
        ok(cuInit(0));
        let (mut c1, mut c2) = (std::ptr::null_mut(), std::ptr::null_mut());
        ok(cuDevicePrimaryCtxRetain(&mut c1, 0));
        ok(cuDevicePrimaryCtxRetain(&mut c2, 0));
        assert_eq!(c1, c2);
        ok(cuCtxSetCurrent(c1));
        // The context costs its overhead (256 MiB on tiny-4g, default stack included).
        assert_eq!(free_mem(), 4 * GIB - 256 * MIB);
        // Another thread has no current context until it sets one.
        let h = c1 as usize;
        std::thread::spawn(move || {
            let (mut f, mut t) = (0usize, 0usize);
            err(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_INVALID_CONTEXT);
            ok(cuCtxPushCurrent_v2(h as Handle));
            ok(cuMemGetInfo_v2(&mut f, &mut t));
            let mut d: CUdevice = -1;
            ok(cuCtxGetDevice(&mut d));
            assert_eq!(d, 0);
            let mut popped = std::ptr::null_mut();
            ok(cuCtxPopCurrent_v2(&mut popped));
            assert_eq!(popped as usize, h);
            err(cuCtxPopCurrent_v2(&mut popped), CUDA_ERROR_INVALID_CONTEXT);
        })
        .join()
        .unwrap();
        ok(cuDevicePrimaryCtxRelease_v2(0));
        assert_eq!(free_mem(), 4 * GIB - 256 * MIB, "one reference is left");
        let p = alloc(64 * MIB);
        ok(cuDevicePrimaryCtxRelease_v2(0));
        // The context and everything in it are gone.
        let (mut f, mut t) = (0usize, 0usize);
        err(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_INVALID_CONTEXT);
        err(cuCtxSetCurrent(c1), CUDA_ERROR_INVALID_CONTEXT);
        err(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
        // A new primary context starts clean.
        ok(cuDevicePrimaryCtxRetain(&mut c1, 0));
        ok(cuCtxSetCurrent(c1));
        assert_eq!(free_mem(), 4 * GIB - 256 * MIB);
        err(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    }
}

#[test]
fn devices_report_the_profile() {
    let _g = setup(&[("HEADROOM_FAKE_PROFILE", "h200")]);
    let attr = |a: u32| {
        let mut v: c_int = -1;
        // SAFETY: valid out-pointer.
        ok(unsafe { cuDeviceGetAttribute(&mut v, a, 0) });
        v
    };
    assert_eq!(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
    assert_eq!(
        attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
        2048
    );
    assert_eq!(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR), 32);
    assert_eq!(attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 1);
    assert_eq!(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE), 0);
    assert_eq!((attr(75), attr(76)), (9, 0));
    let mut v = 0;
    // SAFETY: valid out-pointers and buffers throughout.
    unsafe {
        err(
            cuDeviceGetAttribute(&mut v, 500, 0),
            CUDA_ERROR_INVALID_VALUE,
        );
        let mut total = 0usize;
        ok(cuDeviceTotalMem_v2(&mut total, 0));
        assert_eq!(total as u64, 143_156 * MIB);
        let mut name = [0 as c_char; 128];
        ok(cuDeviceGetName(name.as_mut_ptr(), 128, 0));
        assert_eq!(
            CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
            "NVIDIA H200 (fake driver)"
        );
        let mut u = CUuuid { bytes: [0; 16] };
        ok(cuDeviceGetUuid_v2(&mut u, 0));
        assert_eq!(u.bytes[0] as u8, 0xfa);
        let mut ver = 0;
        ok(cuDriverGetVersion(&mut ver));
        assert_eq!(ver, 12040);
        let mut s = std::ptr::null();
        ok(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &mut s));
        assert_eq!(CStr::from_ptr(s).to_str().unwrap(), "out of memory");
        err(cuGetErrorName(12345, &mut s), CUDA_ERROR_INVALID_VALUE);
        assert!(s.is_null());
    }
    assert_eq!(
        error_name(CUDA_ERROR_ILLEGAL_ADDRESS),
        "CUDA_ERROR_ILLEGAL_ADDRESS"
    );
}

fn stack_limit() -> u64 {
    let mut v = 0usize;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuCtxGetLimit(&mut v, CU_LIMIT_STACK_SIZE) });
    v as u64
}

#[test]
fn a_deep_stack_kernel_raises_the_limit_and_its_reservation() {
    let _g = setup(&[]);
    let m = load("stack.ptx");
    let (s4, s16, s64) = (
        function(m, "stack_4k"),
        function(m, "stack_16k"),
        function(m, "stack_64k"),
    );
    let local = |f| {
        let mut v = 0;
        // SAFETY: valid out-pointer and function.
        ok(unsafe { cuFuncGetAttribute(&mut v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) });
        v
    };
    assert_eq!((local(s4), local(s16), local(s64)), (4096, 16384, 65536));
    let idle = free_mem();
    assert_eq!(stack_limit(), 1024);
    // tiny-4g: 8 SMs × 2048 threads; the reservation above the default 1 KiB is charged.
    let threads = 8 * 2048;
    let args = [A::U64(0), A::U32(1), A::U32(0)];
    ok(launch(s16, 1, 256, std::ptr::null_mut(), &args));
    assert_eq!(stack_limit(), 16384);
    assert_eq!(idle - free_mem(), (16384 - 1024) * threads);
    ok(launch(s4, 1, 256, std::ptr::null_mut(), &args));
    assert_eq!(stack_limit(), 16384, "never lowered automatically");
    // SAFETY: a plain limit change.
    ok(unsafe { cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024) });
    assert_eq!(free_mem(), idle);
    // A reservation that does not fit fails the launch and changes nothing.
    let hog = alloc(free_mem() - 512 * MIB);
    err(
        launch(s64, 1, 256, std::ptr::null_mut(), &args),
        CUDA_ERROR_OUT_OF_MEMORY,
    );
    assert_eq!(stack_limit(), 1024);
    free(hog);
    // With store set, every thread writes the frame's sum.
    let out = alloc(1024);
    ok(launch(
        s4,
        1,
        32,
        std::ptr::null_mut(),
        &[A::U64(out), A::U32(0), A::U32(1)],
    ));
    sync(std::ptr::null_mut());
    assert_eq!(read_u32(out + 31 * 4), 1023 * 1024 / 2);
}

#[test]
fn each_device_has_its_own_context_uuid_and_memory() {
    let _g = setup(&[("HEADROOM_FAKE_DEVICES", "2")]);
    let ctx0 = current_ctx();
    let a = alloc(GIB);
    let mut ctx1 = std::ptr::null_mut();
    let (mut u0, mut u1) = (CUuuid { bytes: [0; 16] }, CUuuid { bytes: [0; 16] });
    // SAFETY: valid out-pointers throughout.
    unsafe {
        ok(cuDeviceGetUuid(&mut u0, 0));
        ok(cuDeviceGetUuid(&mut u1, 1));
        assert_ne!(u0.bytes, u1.bytes);
        ok(cuDevicePrimaryCtxRetain(&mut ctx1, 1));
        assert_ne!(ctx0, ctx1);
        ok(cuCtxPushCurrent_v2(ctx1));
        assert_eq!(
            free_mem(),
            4 * GIB - 256 * MIB,
            "device 1 does not see device 0's allocation"
        );
        let mut d = -1;
        ok(cuCtxGetDevice(&mut d));
        assert_eq!(d, 1);
        // A device-0 pointer is not device 1's to free.
        err(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
        let mut popped = std::ptr::null_mut();
        ok(cuCtxPopCurrent_v2(&mut popped));
        assert_eq!(free_mem(), 4 * GIB - 256 * MIB - GIB);
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        let mut n = 0;
        assert_eq!(nvmlDeviceGetCount_v2(&mut n), NVML_SUCCESS);
        assert_eq!(n, 2);
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
    }
    free(a);
}
