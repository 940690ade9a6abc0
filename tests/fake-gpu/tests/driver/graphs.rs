//! Stream capture and CUDA graphs: allocation and free nodes, executable memory, upload,
//! launch, the relaunch rule, graph memory attributes and trim.

use crate::common::*;

fn graph_attr(a: u32) -> u64 {
    let mut v = 0u64;
    // SAFETY: the graph memory attributes are u64.
    ok(unsafe { cuDeviceGetGraphMemAttribute(0, a, (&mut v as *mut u64).cast()) });
    v
}

fn usage() -> [u64; 4] {
    [0, 1, 2, 3].map(graph_attr)
}

fn capture_alloc(s: Handle, bytes: u64) -> u64 {
    let mut p = 0;
    // SAFETY: valid out-pointer and a capturing stream.
    ok(unsafe { cuMemAllocAsync(&mut p, bytes as usize, s) });
    p
}

/// Captures: 256 MiB workspace touched and freed, then a 16 MiB output filled and left live.
fn capture(k: &Kernels, s: Handle) -> (Handle, u64) {
    // SAFETY: a live non-blocking stream.
    ok(unsafe { cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED) });
    let idle = free_mem();
    let ws = capture_alloc(s, 256 * MIB);
    assert_eq!(
        free_mem(),
        idle,
        "an allocation node takes no memory at capture"
    );
    ok(launch(
        k.touch,
        8,
        256,
        s,
        &[A::U64(ws), A::U64(4096), A::U64(64 << 10)],
    ));
    // SAFETY: a graph allocation of this capture.
    ok(unsafe { cuMemFreeAsync(ws, s) });
    let out = capture_alloc(s, 16 * MIB);
    k.fill(s, out, 16 * MIB, 9);
    let mut g = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the stream captures.
    ok(unsafe { cuStreamEndCapture(s, &mut g) });
    (g, out)
}

#[test]
fn graphs_take_memory_when_launched_and_keep_it_until_trimmed() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    // SAFETY: the legacy stream cannot capture.
    err(
        unsafe { cuStreamBeginCapture_v2(std::ptr::null_mut(), 0) },
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    );
    let (g, out) = capture(&k, s);
    let idle = free_mem();
    let mut exec = std::ptr::null_mut();
    // SAFETY: valid out-pointers, live graphs and streams throughout.
    unsafe {
        ok(cuGraphInstantiateWithFlags(
            &mut exec,
            g,
            CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
        ));
        assert_eq!(
            idle - free_mem(),
            2 * 10 * 1024,
            "two kernel nodes × 10 KiB"
        );
        ok(cuGraphUpload(exec, s));
        assert_eq!(usage(), [256 * MIB, 256 * MIB, 256 * MIB, 256 * MIB]);
        ok(cuGraphLaunch(exec, s));
        assert_eq!(usage(), [272 * MIB, 272 * MIB, 272 * MIB, 272 * MIB]);
        assert_eq!(idle - free_mem(), 272 * MIB + 20 * 1024);
        sync(s);
        assert_eq!(
            k.verify(s, out, 16 * MIB, 9),
            (0, u64::MAX),
            "the fill node ran"
        );
        // Auto-free: a relaunch frees the last launch's output first.
        ok(cuGraphLaunch(exec, s));
        assert_eq!(usage()[0], 272 * MIB);
        // Freed outside the graph, in stream order: used drops, reserved stays.
        ok(cuMemFreeAsync(out, s));
        assert_eq!(usage()[..3], [256 * MIB, 272 * MIB, 272 * MIB]);
        ok(cuGraphExecDestroy(exec));
        ok(cuGraphDestroy(g));
        assert_eq!(
            usage()[..3],
            [0, 272 * MIB, 272 * MIB],
            "destroyed, still reserved"
        );
        sync(s);
        ok(cuDeviceGraphMemTrim(0));
        assert_eq!(usage()[2], 0);
        assert_eq!(free_mem(), idle);
        let mut zero = 0u64;
        ok(cuDeviceSetGraphMemAttribute(
            0,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
            (&mut zero as *mut u64).cast(),
        ));
        assert_eq!(usage()[3], 0);
        zero = 5;
        err(
            cuDeviceSetGraphMemAttribute(
                0,
                CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
                (&mut zero as *mut u64).cast(),
            ),
            CUDA_ERROR_INVALID_VALUE,
        );
    }
}

#[test]
fn a_relaunch_with_live_allocations_needs_auto_free() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let (g, out) = capture(&k, s);
    let mut exec = std::ptr::null_mut();
    // SAFETY: valid out-pointers, live graphs and streams throughout.
    unsafe {
        ok(cuGraphInstantiateWithFlags(&mut exec, g, 0));
        let mut second = std::ptr::null_mut();
        err(
            cuGraphInstantiateWithFlags(&mut second, g, 0),
            CUDA_ERROR_NOT_SUPPORTED,
        );
        ok(cuGraphLaunch(exec, s));
        let before = usage();
        err(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(usage(), before, "a refused launch changes nothing");
        ok(cuMemFreeAsync(out, s));
        ok(cuGraphLaunch(exec, s));
        sync(s);
    }
}

#[test]
fn synchronizing_a_capturing_stream_invalidates_the_capture() {
    let _g = setup(&[]);
    let s = stream(CU_STREAM_NON_BLOCKING);
    let mut status = 9;
    let mut g = std::ptr::null_mut();
    // SAFETY: valid out-pointers and a live stream throughout.
    unsafe {
        ok(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        ok(cuStreamIsCapturing(s, &mut status));
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        err(
            cuStreamSynchronize(s),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        );
        ok(cuStreamIsCapturing(s, &mut status));
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        err(
            cuStreamEndCapture(s, &mut g),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        );
        assert!(g.is_null());
        ok(cuStreamIsCapturing(s, &mut status));
        assert_eq!(status, CU_STREAM_CAPTURE_STATUS_NONE);
        err(cuStreamEndCapture(s, &mut g), CUDA_ERROR_ILLEGAL_STATE);
        // Freeing memory that is not a graph allocation inside a capture is refused.
        let plain = alloc(MIB);
        ok(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        err(cuMemFreeAsync(plain, s), CUDA_ERROR_INVALID_VALUE);
        err(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
}
