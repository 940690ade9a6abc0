//! Modules from PTX with JIT logs, functions, occupancy, launch validation and faults in kernels.

use crate::common::*;
use std::ffi::{CStr, CString, c_char, c_void};

/// `cuModuleLoadDataEx` with info and error logs; returns (status, module, info, error).
pub fn load_ex(image: &[u8]) -> (u32, Handle, String, String) {
    let image = CString::new(image).unwrap();
    let mut info = vec![0 as c_char; 4096];
    let mut error = vec![0 as c_char; 4096];
    let mut options = [
        CU_JIT_INFO_LOG_BUFFER,
        CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        CU_JIT_ERROR_LOG_BUFFER,
        CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 4] = [
        info.as_mut_ptr().cast(),
        4096 as *mut c_void,
        error.as_mut_ptr().cast(),
        4096 as *mut c_void,
    ];
    let mut m = std::ptr::null_mut();
    // SAFETY: four options with their values; the buffers outlive the call.
    let r = unsafe {
        cuModuleLoadDataEx(
            &mut m,
            image.as_ptr().cast(),
            4,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    // SAFETY: the logs are NUL-terminated within their buffers.
    let text = |b: &[c_char]| {
        unsafe { CStr::from_ptr(b.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    let (i, e) = (text(&info), text(&error));
    if !e.is_empty() {
        assert_eq!(
            values[3] as usize,
            e.len() + 1,
            "the size option reports what was written"
        );
    }
    (r, m, i, e)
}

#[test]
fn modules_load_from_ptx_with_jit_logs_and_cost_memory() {
    // The built-in profiles charge nothing for a module; this one charges 2 MiB.
    let profile = std::env::temp_dir().join(format!("fake-modules-{}.toml", std::process::id()));
    let tiny = include_str!("../../../../profiles/tiny-4g.toml");
    std::fs::write(
        &profile,
        format!("{tiny}\n[kernels]\nmodule_bytes = \"2MiB\"\n"),
    )
    .unwrap();
    let _g = setup(&[("HEADROOM_FAKE_PROFILE", profile.to_str().unwrap())]);
    let idle = free_mem();
    let (r, m, info, error) = load_ex(ptx("fill.ptx").as_bytes());
    ok(r);
    assert!(
        info.contains("Compiling entry function 'fill' for 'sm_90'"),
        "{info}"
    );
    assert!(error.is_empty());
    assert_eq!(
        idle - free_mem(),
        2 * MIB,
        "a module costs [kernels] module_bytes (2 MiB)"
    );
    let (r, _, _, error) = load_ex(b".version 9.0\n.target sm_90\n.address_size 64\n");
    err(r, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    assert!(error.contains("Unsupported .version 9.0"), "{error}");
    let (r, _, _, error) = load_ex(b"this is not PTX");
    err(r, CUDA_ERROR_INVALID_PTX);
    assert!(error.contains("not PTX"), "{error}");
    assert_eq!(idle - free_mem(), 2 * MIB, "a refused module costs nothing");
    let n = CString::new("nope").unwrap();
    let mut f = std::ptr::null_mut();
    // SAFETY: a live module, a NUL-terminated name, valid out-pointers.
    unsafe {
        err(
            cuModuleGetFunction(&mut f, m, n.as_ptr()),
            CUDA_ERROR_NOT_FOUND,
        );
        let fill = function(m, "fill");
        ok(cuModuleUnload(m));
        assert_eq!(free_mem(), idle);
        let buf = alloc(MIB);
        err(
            launch(
                fill,
                1,
                256,
                std::ptr::null_mut(),
                &[A::U64(buf), A::U64(4), A::U32(1)],
            ),
            CUDA_ERROR_INVALID_HANDLE,
        );
    }
}

#[test]
fn launches_respect_block_limits_and_occupancy() {
    let _g = setup(&[]);
    let k = kernels();
    let buf = alloc(MIB);
    let args = [A::U64(buf), A::U64(4), A::U32(1)];
    err(
        launch(k.fill, 1, 512, std::ptr::null_mut(), &args),
        CUDA_ERROR_INVALID_VALUE,
    );
    err(
        launch(k.fill, 0, 256, std::ptr::null_mut(), &args),
        CUDA_ERROR_INVALID_VALUE,
    );
    err(
        launch(k.spin, 1, 1025, std::ptr::null_mut(), &[A::U64(1)]),
        CUDA_ERROR_INVALID_VALUE,
    );
    ok(launch(k.spin, 1, 1024, std::ptr::null_mut(), &[A::U64(1)]));
    let occ = |f, b| {
        let mut n = -1;
        // SAFETY: valid out-pointer and function.
        ok(unsafe { cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, f, b, 0) });
        n
    };
    assert_eq!(
        (
            occ(k.fill, 256),
            occ(k.spin, 32),
            occ(k.spin, 1024),
            occ(k.fill, 512)
        ),
        (8, 32, 2, 0)
    );
    let mut v = 0;
    // SAFETY: valid out-pointer and function.
    ok(unsafe { cuFuncGetAttribute(&mut v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k.fill) });
    assert_eq!(v, 256);
}

#[test]
fn kernels_compute_what_the_cuda_sources_do() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let (a, b, c) = (alloc(4 * MIB), alloc(4 * MIB), alloc(4 * MIB));
    k.fill(s, b, 4 * MIB, 1);
    ok(launch(
        k.copy,
        8,
        256,
        s,
        &[A::U64(a), A::U64(b), A::U64(MIB)],
    ));
    assert_eq!(
        k.verify(s, a, 4 * MIB, 1).0,
        MIB,
        "a copy keeps the source addresses' pattern"
    );
    // SAFETY: live device ranges.
    unsafe {
        ok(cuMemsetD32Async(a, 1.5f32.to_bits(), MIB as usize, s));
        ok(cuMemsetD32Async(b, 2.0f32.to_bits(), MIB as usize, s));
    }
    ok(launch(
        k.triad,
        8,
        256,
        s,
        &[A::U64(c), A::U64(a), A::U64(b), A::U64(MIB), A::F32(3.0)],
    ));
    sync(s);
    assert_eq!(f32::from_bits(read_u32(c + 4 * MIB - 4)), 7.5);
    // One wrong word, found at its address.
    k.fill(s, a, 4 * MIB, 2);
    let word = 5u32;
    // SAFETY: 4 bytes from a live host value into a live allocation.
    ok(unsafe { cuMemcpyHtoDAsync_v2(a + 400, (&word as *const u32).cast(), 4, s) });
    assert_eq!(k.verify(s, a, 4 * MIB, 2), (1, a + 400));
}

#[test]
fn an_access_outside_any_allocation_is_a_sticky_illegal_address() {
    let _g = setup(&[]);
    let k = kernels();
    let s = stream(CU_STREAM_NON_BLOCKING);
    let buf = alloc(MIB);
    // One word past the end: the launch succeeds, the kernel faults.
    ok(launch(
        k.fill,
        1,
        256,
        s,
        &[A::U64(buf), A::U64(MIB / 4 + 1), A::U32(1)],
    ));
    err(unsafe_sync(s), CUDA_ERROR_ILLEGAL_ADDRESS);
    let mut p = 0;
    // SAFETY: valid out-pointer.
    err(
        unsafe { cuMemAlloc_v2(&mut p, 64) },
        CUDA_ERROR_ILLEGAL_ADDRESS,
    );
    err(
        unsafe_sync(std::ptr::null_mut()),
        CUDA_ERROR_ILLEGAL_ADDRESS,
    );
    // A fresh primary context after the last release works again.
    // SAFETY: plain calls with valid out-pointers.
    unsafe {
        ok(cuDevicePrimaryCtxRelease_v2(0));
        let mut c = std::ptr::null_mut();
        ok(cuDevicePrimaryCtxRetain(&mut c, 0));
        ok(cuCtxSetCurrent(c));
    }
    assert_eq!(free_mem(), 4 * GIB - 256 * MIB);
}

fn unsafe_sync(s: Handle) -> u32 {
    // SAFETY: a live stream (or the legacy one).
    unsafe { cuStreamSynchronize(s) }
}
