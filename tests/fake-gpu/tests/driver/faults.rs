//! Fault injection: the Nth call, every call, a hang, sticky errors (at a call and in a
//! kernel after its launch returned), NVML faults, and a malformed specification.

use crate::common::*;
use std::time::{Duration, Instant};

#[test]
fn the_nth_call_fails_and_changes_nothing() {
    let _g = setup(&[(
        "HEADROOM_FAKE_FAULTS",
        "cuMemAlloc_v2@2=CUDA_ERROR_OUT_OF_MEMORY",
    )]);
    let idle = free_mem();
    let a = alloc(64 * MIB);
    let mut p = 0;
    // SAFETY: valid out-pointer.
    err(
        unsafe { cuMemAlloc_v2(&mut p, 64) },
        CUDA_ERROR_OUT_OF_MEMORY,
    );
    assert_eq!(idle - free_mem(), 64 * MIB);
    let b = alloc(64 * MIB);
    free(a);
    free(b);
    assert_eq!(free_mem(), idle);
}

#[test]
fn every_call_fails_with_a_star() {
    let _g = setup(&[(
        "HEADROOM_FAKE_FAULTS",
        "cuStreamCreate@*=CUDA_ERROR_OUT_OF_MEMORY",
    )]);
    for _ in 0..3 {
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        err(
            unsafe { cuStreamCreate(&mut s, 0) },
            CUDA_ERROR_OUT_OF_MEMORY,
        );
    }
}

#[test]
fn a_hang_blocks_the_call_then_it_proceeds() {
    let _g = setup(&[("HEADROOM_FAKE_FAULTS", "cuStreamSynchronize@1=hang:300ms")]);
    let t0 = Instant::now();
    sync(std::ptr::null_mut());
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let t1 = Instant::now();
    sync(std::ptr::null_mut());
    assert!(
        t1.elapsed() < Duration::from_millis(100),
        "only the first call hangs"
    );
}

#[test]
fn a_sticky_error_at_launch_surfaces_when_the_kernel_has_run() {
    let _g = setup(&[(
        "HEADROOM_FAKE_FAULTS",
        "cuLaunchKernel@2=CUDA_ERROR_ILLEGAL_ADDRESS",
    )]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let buf = alloc(MIB);
    k.spin(s, 100_000_000);
    k.fill(s, buf, MIB, 1);
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointers, live events and streams.
    unsafe {
        ok(cuEventCreate(&mut e, 0));
        ok(cuEventRecord(e, s));
        // Before the kernel has run, the context still works.
        err(cuEventQuery(e), CUDA_ERROR_NOT_READY);
        err(cuEventSynchronize(e), CUDA_ERROR_ILLEGAL_ADDRESS);
        err(cuEventQuery(e), CUDA_ERROR_ILLEGAL_ADDRESS);
        err(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
        let (mut f, mut t) = (0usize, 0usize);
        err(cuMemGetInfo_v2(&mut f, &mut t), CUDA_ERROR_ILLEGAL_ADDRESS);
        // Calls that need no context still answer.
        let mut n = 0;
        ok(cuDeviceGetCount(&mut n));
    }
}

#[test]
fn a_sticky_error_at_a_call_poisons_the_context() {
    let _g = setup(&[(
        "HEADROOM_FAKE_FAULTS",
        "cuMemAlloc_v2@1=CUDA_ERROR_ECC_UNCORRECTABLE",
    )]);
    let mut p = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        err(cuMemAlloc_v2(&mut p, 64), CUDA_ERROR_ECC_UNCORRECTABLE);
        err(cuMemAlloc_v2(&mut p, 64), CUDA_ERROR_ECC_UNCORRECTABLE);
        err(cuCtxSynchronize(), CUDA_ERROR_ECC_UNCORRECTABLE);
    }
}

#[test]
fn nvml_calls_can_fail_too() {
    let _g = testing::driver(&[(
        "HEADROOM_FAKE_FAULTS",
        "nvmlInit_v2@1=NVML_ERROR_LIBRARY_NOT_FOUND",
    )]);
    // SAFETY: plain NVML calls.
    unsafe {
        assert_eq!(nvmlInit_v2(), NVML_ERROR_LIBRARY_NOT_FOUND);
        assert_eq!(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
        assert_eq!(nvmlInit_v2(), NVML_SUCCESS);
        assert_eq!(nvmlShutdown(), NVML_SUCCESS);
    }
}

#[test]
fn a_malformed_specification_fails_initialization() {
    let _g = testing::driver_unchecked(&[(
        "HEADROOM_FAKE_FAULTS",
        "cuMemAlloc_v2@three=CUDA_ERROR_OUT_OF_MEMORY",
    )]);
    // SAFETY: plain calls.
    unsafe {
        err(cuInit(0), CUDA_ERROR_INVALID_VALUE);
        let mut n = 0;
        err(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(nvmlInit_v2(), NVML_ERROR_UNKNOWN);
    }
    let e = config::Config::from_vars(|k| {
        (k == "HEADROOM_FAKE_FAULTS")
            .then(|| "cuMemAlloc_v2@three=CUDA_ERROR_OUT_OF_MEMORY".to_string())
    })
    .unwrap_err();
    assert!(e.contains("cuMemAlloc_v2@three"), "{e}");
}
