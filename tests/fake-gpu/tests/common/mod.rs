//! Helpers for driving the fake's C ABI in-process, as cudarc would.

#![allow(dead_code)]

use std::ffi::{CStr, CString, c_void};
use std::sync::MutexGuard;

pub use headroom_fake_gpu::abi::*;
pub use headroom_fake_gpu::errors::*;
pub use headroom_fake_gpu::*;

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// The name of a CUresult, for assertion messages.
pub fn name(r: u32) -> String {
    errors::cuda_name(r)
}

#[track_caller]
pub fn ok(r: u32) {
    assert_eq!(r, 0, "expected CUDA_SUCCESS, got {}", name(r));
}

#[track_caller]
pub fn err(r: u32, want: u32) {
    assert_eq!(r, want, "expected {}, got {}", name(want), name(r));
}

/// A fresh driver with `vars`, initialized, with device 0's primary context current.
pub fn setup(vars: &[(&str, &str)]) -> MutexGuard<'static, ()> {
    let g = testing::driver(vars);
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        ok(cuInit(0));
        let mut ctx = std::ptr::null_mut();
        ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(cuCtxSetCurrent(ctx));
    }
    g
}

pub fn current_ctx() -> Handle {
    let mut c = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuCtxGetCurrent(&mut c) });
    c
}

pub fn free_mem() -> u64 {
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    ok(unsafe { cuMemGetInfo_v2(&mut f, &mut t) });
    f as u64
}

pub fn alloc(bytes: u64) -> u64 {
    let mut p = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuMemAlloc_v2(&mut p, bytes as usize) });
    p
}

pub fn free(p: u64) {
    // SAFETY: a pointer from cuMemAlloc_v2.
    ok(unsafe { cuMemFree_v2(p) });
}

pub fn stream(flags: u32) -> Handle {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuStreamCreate(&mut s, flags) });
    s
}

/// `cuStreamQuery`'s answer.
pub fn query(s: Handle) -> u32 {
    // SAFETY: a live stream.
    unsafe { cuStreamQuery(s) }
}

/// Waits, without synchronizing, until the stream has run everything queued on it.
pub fn wait_idle(s: Handle) {
    while query(s) != 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

pub fn sync(s: Handle) {
    // SAFETY: a live stream.
    ok(unsafe { cuStreamSynchronize(s) });
}

/// A NUL-terminated copy of `kernels/<file>`.
pub fn ptx(file: &str) -> CString {
    let path = format!("{}/../../kernels/{file}", env!("CARGO_MANIFEST_DIR"));
    CString::new(std::fs::read(path).expect("kernel PTX")).expect("no NUL in PTX")
}

pub fn load(file: &str) -> Handle {
    let image = ptx(file);
    let mut m = std::ptr::null_mut();
    // SAFETY: a NUL-terminated PTX image.
    ok(unsafe { cuModuleLoadData(&mut m, image.as_ptr().cast()) });
    m
}

pub fn function(module: Handle, name: &str) -> Handle {
    let n = CString::new(name).unwrap();
    let mut f = std::ptr::null_mut();
    // SAFETY: a live module and a NUL-terminated name.
    ok(unsafe { cuModuleGetFunction(&mut f, module, n.as_ptr()) });
    f
}

/// One kernel argument.
#[derive(Clone, Copy)]
pub enum A {
    U32(u32),
    U64(u64),
    F32(f32),
}

/// `cuLaunchKernel` with one-dimensional grid and block; returns its status.
pub fn launch(f: Handle, grid: u32, block: u32, s: Handle, args: &[A]) -> u32 {
    let mut vals: Vec<A> = args.to_vec();
    let mut ptrs: Vec<*mut c_void> = vals
        .iter_mut()
        .map(|a| match a {
            A::U32(v) => (v as *mut u32).cast(),
            A::U64(v) => (v as *mut u64).cast(),
            A::F32(v) => (v as *mut f32).cast(),
        })
        .collect();
    // SAFETY: one pointer per parameter, each to a value of the PTX's type.
    unsafe {
        cuLaunchKernel(
            f,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            s,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

/// The kernels of headroom, loaded once per test.
pub struct Kernels {
    pub fill: Handle,
    pub verify: Handle,
    pub spin: Handle,
    pub touch: Handle,
    pub copy: Handle,
    pub triad: Handle,
}

pub fn kernels() -> Kernels {
    let stream = load("stream.ptx");
    Kernels {
        fill: function(load("fill.ptx"), "fill"),
        verify: function(load("verify.ptx"), "verify"),
        spin: function(load("spin.ptx"), "spin"),
        touch: function(load("touch.ptx"), "touch"),
        copy: function(stream, "copy"),
        triad: function(stream, "triad"),
    }
}

impl Kernels {
    pub fn fill(&self, s: Handle, ptr: u64, bytes: u64, seed: u32) {
        ok(launch(
            self.fill,
            8,
            256,
            s,
            &[A::U64(ptr), A::U64(bytes / 4), A::U32(seed)],
        ));
    }

    pub fn spin(&self, s: Handle, ns: u64) {
        ok(launch(self.spin, 1, 1, s, &[A::U64(ns)]));
    }

    /// Runs `verify` on `s` into a fresh result buffer; waits; returns (mismatches, first).
    pub fn verify(&self, s: Handle, ptr: u64, bytes: u64, seed: u32) -> (u64, u64) {
        let result = alloc(16);
        let init = [0u64, u64::MAX];
        // SAFETY: 16 bytes from a live host array into a live 16-byte allocation.
        unsafe {
            ok(cuMemcpyHtoDAsync_v2(result, init.as_ptr().cast(), 16, s));
        }
        ok(launch(
            self.verify,
            8,
            256,
            s,
            &[A::U64(ptr), A::U64(bytes / 4), A::U32(seed), A::U64(result)],
        ));
        let mut out = [0u64; 2];
        // SAFETY: 16 bytes into a live host array, read after the stream is synchronized.
        unsafe {
            ok(cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), result, 16, s));
        }
        sync(s);
        free(result);
        (out[0], out[1])
    }
}

pub fn read_u32(ptr: u64) -> u32 {
    let mut v = 0u32;
    // SAFETY: 4 bytes into a live u32.
    ok(unsafe { cuMemcpyDtoH_v2((&mut v as *mut u32).cast(), ptr, 4) });
    v
}

pub fn error_name(r: u32) -> String {
    let mut p = std::ptr::null();
    // SAFETY: valid out-pointer; the result is a static string.
    unsafe {
        cuGetErrorName(r, &mut p);
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}
