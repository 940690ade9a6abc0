//! Asynchronous streams: work returns before it runs, synchronize waits, unordered streams
//! race, events order and time the work.

use crate::common::*;
use std::time::{Duration, Instant};

#[test]
fn a_launch_returns_before_the_work_and_synchronize_waits_for_it() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let t0 = Instant::now();
    k.spin(s, 200_000_000);
    assert!(
        t0.elapsed() < Duration::from_millis(50),
        "the launch waited for the kernel"
    );
    // SAFETY: a live stream.
    err(unsafe { cuStreamQuery(s) }, CUDA_ERROR_NOT_READY);
    sync(s);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    // SAFETY: a live stream.
    ok(unsafe { cuStreamQuery(s) });
}

#[test]
fn time_scale_shortens_modeled_work() {
    let _g = setup(&[("HEADROOM_FAKE_TIME_SCALE", "0.01")]);
    let k = kernels();
    let t0 = Instant::now();
    k.spin(std::ptr::null_mut(), 2_000_000_000);
    sync(std::ptr::null_mut());
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert!(t0.elapsed() >= Duration::from_millis(20));
}

/// `fill` on `s` behind a 200 ms spin, then a pageable `cuMemcpyHtoD` of one word into the
/// buffer, then `verify` on `s`: what verify finds.
fn corrupt_after_fill(flags: u32) -> (u64, u64) {
    let k = kernels();
    let s = stream(flags);
    let buf = alloc(64 * MIB);
    k.spin(s, 200_000_000);
    k.fill(s, buf, 64 * MIB, 7);
    let word = 0xdead_beefu32;
    // SAFETY: 4 bytes from a live host value into a live allocation.
    ok(unsafe { cuMemcpyHtoD_v2(buf + MIB, (&word as *const u32).cast(), 4) });
    let r = k.verify(s, buf, 64 * MIB, 7);
    free(buf);
    r
}

#[test]
fn a_legacy_stream_copy_overtakes_a_fill_on_a_non_blocking_stream() {
    let _g = setup(&[]);
    let t0 = Instant::now();
    // The copy returns at once and lands while the fill still waits: the fill overwrites it.
    assert_eq!(corrupt_after_fill(CU_STREAM_NON_BLOCKING), (0, u64::MAX));
    assert!(t0.elapsed() >= Duration::from_millis(200));
}

#[test]
fn a_blocking_stream_is_ordered_with_the_legacy_stream() {
    let _g = setup(&[]);
    let (bad, first) = corrupt_after_fill(0);
    assert_eq!(bad, 1, "the copy waits for the blocking stream's fill");
    assert!(first % (2 * MIB) == MIB, "{first:#x}");
}

#[test]
fn events_time_the_work_as_executed() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let (mut a, mut b, mut untimed) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    let mut ms = 0f32;
    // SAFETY: valid out-pointers; live events and streams.
    unsafe {
        ok(cuEventCreate(&mut a, 0));
        ok(cuEventCreate(&mut b, 0));
        ok(cuEventCreate(&mut untimed, CU_EVENT_DISABLE_TIMING));
        err(cuEventCreate(&mut a, 64), CUDA_ERROR_INVALID_VALUE);
        ok(cuEventQuery(a));
        err(cuEventElapsedTime(&mut ms, a, b), CUDA_ERROR_INVALID_HANDLE);
        k.spin(s, 100_000_000);
        ok(cuEventRecord(a, s));
        k.spin(s, 60_000_000);
        ok(cuEventRecord(b, s));
        ok(cuEventRecord(untimed, s));
        err(cuEventQuery(b), CUDA_ERROR_NOT_READY);
        err(cuEventElapsedTime(&mut ms, a, b), CUDA_ERROR_NOT_READY);
        ok(cuEventSynchronize(b));
        ok(cuEventQuery(b));
        ok(cuEventElapsedTime(&mut ms, a, b));
        assert!((ms - 60.0).abs() < 0.5, "{ms} ms between the records");
        ok(cuEventElapsedTime_v2(&mut ms, b, a));
        assert!((ms + 60.0).abs() < 0.5, "{ms}");
        err(
            cuEventElapsedTime(&mut ms, a, untimed),
            CUDA_ERROR_INVALID_HANDLE,
        );
        ok(cuEventDestroy_v2(untimed));
        err(cuEventQuery(untimed), CUDA_ERROR_INVALID_HANDLE);
    }
}

#[test]
fn stream_wait_event_orders_two_streams() {
    let _g = setup(&[]);
    let k = kernels();
    let (x, y) = (
        stream(CU_STREAM_NON_BLOCKING),
        stream(CU_STREAM_NON_BLOCKING),
    );
    let buf = alloc(MIB);
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer; live events and streams.
    unsafe {
        ok(cuEventCreate(&mut e, CU_EVENT_DISABLE_TIMING));
        k.spin(x, 150_000_000);
        k.fill(x, buf, MIB, 3);
        ok(cuEventRecord(e, x));
        ok(cuStreamWaitEvent(y, e, 0));
    }
    // `y` verifies after `x` filled: nothing is wrong.
    assert_eq!(k.verify(y, buf, MIB, 3), (0, u64::MAX));
    // SAFETY: a live stream.
    ok(unsafe { cuStreamQuery(x) });
}

#[test]
fn context_synchronize_waits_for_every_stream() {
    let _g = setup(&[]);
    let k = kernels();
    let (x, y) = (stream(CU_STREAM_NON_BLOCKING), stream(0));
    let t0 = Instant::now();
    k.spin(x, 120_000_000);
    k.spin(y, 80_000_000);
    // SAFETY: a plain call.
    ok(unsafe { cuCtxSynchronize() });
    assert!(t0.elapsed() >= Duration::from_millis(120));
    // SAFETY: live streams; the legacy stream cannot be destroyed.
    unsafe {
        ok(cuStreamQuery(y));
        ok(cuStreamDestroy_v2(x));
        err(cuStreamQuery(x), CUDA_ERROR_INVALID_HANDLE);
        err(
            cuStreamDestroy_v2(std::ptr::null_mut()),
            CUDA_ERROR_INVALID_HANDLE,
        );
    }
}
