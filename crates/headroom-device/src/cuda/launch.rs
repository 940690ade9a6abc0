//! Kernel launches on the real GPU: the embedded PTX of `crate::kernels`, loaded once per context.
//!
//! Modules are JIT-loaded one at a time, when `load_module` asks for one (a run loads the ones
//! its workload needs before its idle reading) or at a function's first launch; loading
//! `verify`'s module also allocates its 16-byte result buffer. Driver operations (memset,
//! memcpy) need no module and never load one. What to launch (function, arguments, grid)
//! comes from `crate::kernels`; this file only talks to the driver. The context must be current
//! on the calling thread for every method and for `Drop`: `CudaDevice` binds it first.

use std::cell::Cell;
use std::ffi::{CStr, CString, c_void};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;

use super::driver_err;
use crate::kernels::{self, Arg, Call, Function, Module, VERIFY_RESULT_BYTES, VERIFY_RESULT_INIT};
use crate::{
    DevResult, DeviceError, DeviceInfo, Kernel, KernelOutcome, Mismatch, StackChange, fill_pattern,
};

// The two memsets of `reset_verify_result` write exactly this.
const _: () = assert!(VERIFY_RESULT_INIT[0] == 0 && VERIFY_RESULT_INIT[1] == u64::MAX);

/// A function handle and how many of its blocks one SM holds.
#[derive(Debug, Clone, Copy)]
struct Loaded {
    handle: sys::CUfunction,
    resident_blocks_per_sm: u32,
}

/// The loaded kernels of one context.
pub(crate) struct KernelSet {
    modules: [Cell<Option<sys::CUmodule>>; Module::COUNT],
    functions: [Cell<Option<Loaded>>; Function::COUNT],
    /// `verify`'s result: mismatch count and lowest differing address (two u64); 0 until
    /// `verify`'s module is loaded.
    verify_result: Cell<sys::CUdeviceptr>,
    multiprocessors: u32,
    threads_per_multiprocessor: u32,
    /// For error messages: "550.54.15 (CUDA 12.4)".
    driver_version: String,
}

// `Cell` keeps the set `!Sync`, so one thread at a time uses it.
// SAFETY: the handles are driver objects, usable from any thread where their context is current.
unsafe impl Send for KernelSet {}

impl KernelSet {
    /// A set with nothing loaded yet.
    pub(crate) fn new(info: &DeviceInfo) -> DevResult<KernelSet> {
        let device =
            result::device::get(info.index as i32).map_err(|e| driver_err("cuDeviceGet", 0, e))?;
        // SAFETY: `device` is a valid device handle from cuDeviceGet.
        let threads_per_multiprocessor = unsafe {
            result::device::get_attribute(
                device,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            )
        }
        .map_err(|e| driver_err("cuDeviceGetAttribute", 0, e))?;
        Ok(KernelSet {
            modules: std::array::from_fn(|_| Cell::new(None)),
            functions: std::array::from_fn(|_| Cell::new(None)),
            verify_result: Cell::new(0),
            multiprocessors: info.multiprocessors,
            threads_per_multiprocessor: threads_per_multiprocessor.max(0) as u32,
            driver_version: info.driver_version.clone(),
        })
    }

    /// Loads module `m` and looks up each of its functions.
    pub(crate) fn load_module(&self, m: Module) -> DevResult<()> {
        for f in Function::ALL.into_iter().filter(|f| f.module() == m) {
            self.function(f)?;
        }
        Ok(())
    }

    /// How many modules are loaded.
    pub(crate) fn modules_loaded(&self) -> u32 {
        self.modules.iter().filter(|m| m.get().is_some()).count() as u32
    }

    /// The plan of `kernel`, with `verify`'s module (and so its result buffer) loaded first.
    fn plan(&self, kernel: &Kernel) -> DevResult<Option<Call>> {
        if matches!(kernel, Kernel::Verify { .. }) {
            self.function(Function::Verify)?;
        }
        kernels::plan(kernel, self.verify_result.get())
    }

    /// Queues `kernel` on `stream`; a `Verify` waits and returns what it found, a `Stack`
    /// what the driver did to the stack limit.
    pub(crate) fn launch(&self, kernel: Kernel, stream: sys::CUstream) -> DevResult<KernelOutcome> {
        let Some(call) = self.plan(&kernel)? else {
            driver_operation(kernel, stream)?;
            return Ok(KernelOutcome::default());
        };
        let mut outcome = KernelOutcome::default();
        match kernel {
            Kernel::Verify { ptr, bytes, seed } => {
                self.reset_verify_result(stream)?;
                self.enqueue(&call, stream)?;
                outcome.mismatch = self.read_verify_result(stream, ptr, bytes, seed)?;
            }
            Kernel::Stack { .. } => {
                let loaded = self.function(call.function)?;
                // SAFETY: `handle` is a live function of the current context.
                let local = unsafe {
                    result::function::get_function_attribute(
                        loaded.handle,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                    )
                }
                .map_err(|e| self.kernel_err("cuFuncGetAttribute", call.function, 0, e))?;
                let limit_before = stack_limit()?;
                self.enqueue(&call, stream)?;
                outcome.stack = Some(StackChange {
                    local_bytes_per_thread: local.max(0) as u64,
                    limit_before_bytes: limit_before,
                    limit_after_bytes: stack_limit()?,
                });
            }
            _ => self.enqueue(&call, stream)?,
        }
        Ok(outcome)
    }

    /// GPU time of `repeats` launches of the kernel `call` plans, back to back (see `timed`).
    ///
    /// Module loading, argument checks and `verify`'s buffer reset happen before the first
    /// event, so only the launches are timed. `verify` is not read back here.
    pub(crate) fn timed(
        &self,
        kernel: Kernel,
        stream: sys::CUstream,
        repeats: u32,
    ) -> DevResult<u64> {
        let Some(call) = self.plan(&kernel)? else {
            return timed(stream, repeats, || driver_operation(kernel, stream));
        };
        self.function(call.function)?;
        if call.function == Function::Verify {
            self.reset_verify_result(stream)?;
        }
        timed(stream, repeats, || self.enqueue(&call, stream))
            .map_err(|e| self.name_kernel(call.function, e))
    }

    /// Launches `call` on `stream` with the grid `kernels::geometry` gives for this device.
    fn enqueue(&self, call: &Call, stream: sys::CUstream) -> DevResult<()> {
        let f = call.function;
        let loaded = self.function(f)?;
        let g = kernels::geometry(
            call.work,
            self.multiprocessors,
            loaded.resident_blocks_per_sm,
        );
        // The driver reads each parameter through its pointer during cuLaunchKernel, so the
        // values must stay in place until it returns: `args` is dropped only after the call.
        let mut args: Vec<Arg> = call.args.clone();
        let mut params: Vec<*mut c_void> = args.iter_mut().map(Arg::value_ptr).collect();
        // `params` has one pointer per parameter, each to a value of the type the PTX declares
        // (crate::kernels' tests check this against the PTX). The device pointers the kernel
        // follows were checked for alignment by `plan`; that they lie in live allocations is
        // the caller's part.
        // SAFETY: a live function of the current context, with one value of each PTX parameter.
        unsafe {
            result::launch_kernel(
                loaded.handle,
                (g.grid_blocks, 1, 1),
                (g.block_threads, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| {
            let bytes = match f.frame_bytes() {
                Some(_) => kernels::stack_reservation_bytes(
                    self.local_bytes(loaded.handle).unwrap_or(0),
                    self.multiprocessors,
                    self.threads_per_multiprocessor,
                ),
                None => 0,
            };
            self.kernel_err("cuLaunchKernel", f, bytes, e)
        })?;
        drop(args);
        Ok(())
    }

    /// A function's local memory per thread, as the driver compiled it.
    fn local_bytes(&self, handle: sys::CUfunction) -> Option<u32> {
        // SAFETY: `handle` is a live function of the current context.
        unsafe {
            result::function::get_function_attribute(
                handle,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
            )
        }
        .ok()
        .map(|v| v.max(0) as u32)
    }

    /// Sets `verify`'s result to no mismatch (count 0, address all ones), in stream order.
    fn reset_verify_result(&self, stream: sys::CUstream) -> DevResult<()> {
        // SAFETY: `verify_result` is a live 16-byte allocation of this context.
        unsafe { result::memset_d8_async(self.verify_result.get(), 0x00, 8, stream) }
            .map_err(|e| driver_err("cuMemsetD8Async", 0, e))?;
        // SAFETY: as above; bytes 8..16 are the address word.
        unsafe { result::memset_d8_async(self.verify_result.get() + 8, 0xFF, 8, stream) }
            .map_err(|e| driver_err("cuMemsetD8Async", 0, e))
    }

    /// Waits for `verify`, reads its result and, on a mismatch, the first wrong word itself.
    fn read_verify_result(
        &self,
        stream: sys::CUstream,
        ptr: u64,
        bytes: u64,
        seed: u32,
    ) -> DevResult<Option<Mismatch>> {
        let mut raw = [0u64; 2];
        // `raw` is not read before the stream is synchronized below.
        // SAFETY: `verify_result` holds two u64; the copy is ordered after `verify` on `stream`.
        unsafe { result::memcpy_dtoh_async(&mut raw, self.verify_result.get(), stream) }
            .map_err(|e| self.kernel_err("cuMemcpyDtoHAsync", Function::Verify, 0, e))?;
        self.synchronize(stream, Function::Verify)?;
        let Some((count, first_address)) = kernels::decode_verify(raw, ptr, bytes)? else {
            return Ok(None);
        };
        let mut actual = [0u32; 1];
        // SAFETY: `first_address` lies in the verified range (decode_verify), a live allocation.
        unsafe { result::memcpy_dtoh_async(&mut actual, first_address, stream) }
            .map_err(|e| driver_err("cuMemcpyDtoHAsync", 0, e))?;
        self.synchronize(stream, Function::Verify)?;
        Ok(Some(Mismatch {
            count,
            first_address,
            expected: fill_pattern(first_address, seed),
            actual: actual[0],
        }))
    }

    fn synchronize(&self, stream: sys::CUstream, f: Function) -> DevResult<()> {
        // SAFETY: `stream` is a live stream of the current context.
        unsafe { result::stream::synchronize(stream) }
            .map_err(|e| self.kernel_err("cuStreamSynchronize", f, 0, e))
    }

    /// The function `f`, loading its module on first use.
    fn function(&self, f: Function) -> DevResult<Loaded> {
        if let Some(loaded) = self.functions[f.index()].get() {
            return Ok(loaded);
        }
        let module = self.module(f)?;
        let name = CString::new(f.name()).map_err(|_| {
            DeviceError::Invalid(format!("kernel name {:?} contains a NUL byte", f.name()))
        })?;
        // SAFETY: `module` is a live module of the current context.
        let handle = unsafe { result::module::get_function(module, name) }
            .map_err(|e| self.kernel_err("cuModuleGetFunction", f, 0, e))?;
        let resident_blocks_per_sm = match f.block_threads() {
            // SAFETY: `handle` is a function the driver just returned from a loaded module.
            Some(block) => unsafe {
                result::occupancy::max_active_block_per_multiprocessor(handle, block as i32, 0)
            }
            .map_err(|e| self.kernel_err("cuOccupancyMaxActiveBlocksPerMultiprocessor", f, 0, e))?
            .max(0) as u32,
            None => 1,
        };
        let loaded = Loaded {
            handle,
            resident_blocks_per_sm,
        };
        self.functions[f.index()].set(Some(loaded));
        Ok(loaded)
    }

    /// The module of `f`, JIT-loaded from the embedded PTX on first use.
    fn module(&self, f: Function) -> DevResult<sys::CUmodule> {
        let m = f.module();
        if let Some(module) = self.modules[m.index()].get() {
            return Ok(module);
        }
        let module = load_ptx(m.ptx()).map_err(|(e, log)| {
            match self.kernel_err("cuModuleLoadDataEx", f, 0, e) {
                DeviceError::Driver { call, detail } if !log.is_empty() => DeviceError::Driver {
                    call,
                    detail: format!("{detail}; JIT log: {log}"),
                },
                other => other,
            }
        })?;
        self.modules[m.index()].set(Some(module));
        if m == Module::Verify && self.verify_result.get() == 0 {
            // SAFETY: the context is current; the buffer is only written by memsets and `verify`.
            let buf = unsafe { result::malloc_sync(VERIFY_RESULT_BYTES as usize) }
                .map_err(|e| driver_err("cuMemAlloc", VERIFY_RESULT_BYTES, e))?;
            self.verify_result.set(buf);
        }
        Ok(module)
    }

    /// Adds the kernel's name to a driver error raised while timing it.
    fn name_kernel(&self, f: Function, e: DeviceError) -> DeviceError {
        match e {
            DeviceError::Driver { call, detail } => DeviceError::Driver {
                call,
                detail: format!(
                    "kernel {} (kernels/{}.ptx): {detail}; driver {}",
                    f.name(),
                    f.module().name(),
                    self.driver_version
                ),
            },
            other => other,
        }
    }

    /// A driver error that names the kernel, the driver's error and the driver version.
    /// Out-of-memory stays `OutOfMemory` (with `bytes`) so that callers record it as one.
    fn kernel_err(
        &self,
        call: &'static str,
        f: Function,
        bytes: u64,
        e: DriverError,
    ) -> DeviceError {
        let hint = match e.0 {
            sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            | sys::CUresult::CUDA_ERROR_INVALID_PTX => {
                format!("; {}", crate::floor::ptx_hint())
            }
            _ => String::new(),
        };
        match driver_err(call, bytes, e) {
            DeviceError::Driver { call, detail } => DeviceError::Driver {
                call,
                detail: format!(
                    "kernel {} (kernels/{}.ptx): {detail}; driver {}{hint}",
                    f.name(),
                    f.module().name(),
                    self.driver_version
                ),
            },
            other => other,
        }
    }
}

impl Drop for KernelSet {
    fn drop(&mut self) {
        // Errors cannot be returned from here; the context is being torn down anyway.
        if self.verify_result.get() != 0 {
            // cuMemFree waits for work still using the buffer.
            // SAFETY: allocated by `module` with cuMemAlloc in this context and freed once here.
            let _ = unsafe { result::free_sync(self.verify_result.get()) };
        }
        for module in &self.modules {
            if let Some(module) = module.take() {
                // SAFETY: loaded by this set and unloaded once here.
                let _ = unsafe { result::module::unload(module) };
            }
        }
    }
}

/// `Memset` and `DriverCopy`: driver operations, the peers the kernels are measured against.
/// They need no module, so they never load one.
pub(crate) fn driver_operation(kernel: Kernel, stream: sys::CUstream) -> DevResult<()> {
    match kernel {
        Kernel::Memset { ptr, bytes, value } => {
            // SAFETY: the caller passes a range inside a live allocation of this context.
            unsafe { sys::cuMemsetD32Async(ptr, value, (bytes / 4) as usize, stream) }
                .result()
                .map_err(|e| driver_err("cuMemsetD32Async", 0, e))
        }
        Kernel::DriverCopy { dst, src, bytes } => {
            // SAFETY: the caller passes two ranges inside live allocations of this context.
            unsafe { result::memcpy_dtod_async(dst, src, bytes as usize, stream) }
                .map_err(|e| driver_err("cuMemcpyDtoDAsync", 0, e))
        }
        other => Err(DeviceError::Invalid(format!(
            "{} is a kernel, not a driver operation",
            other.name()
        ))),
    }
}

/// GPU time of `repeats` calls of `enqueue` back to back, between two events on `stream`.
pub(crate) fn timed(
    stream: sys::CUstream,
    repeats: u32,
    mut enqueue: impl FnMut() -> DevResult<()>,
) -> DevResult<u64> {
    let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
    let start = result::event::create(flags).map_err(|e| driver_err("cuEventCreate", 0, e))?;
    let end = match result::event::create(flags) {
        Ok(end) => end,
        Err(e) => {
            // SAFETY: `start` was created above and is destroyed once.
            let _ = unsafe { result::event::destroy(start) };
            return Err(driver_err("cuEventCreate", 0, e));
        }
    };
    let mut run = || -> DevResult<u64> {
        // SAFETY: `start` and `stream` are live handles of the current context.
        unsafe { result::event::record(start, stream) }
            .map_err(|e| driver_err("cuEventRecord", 0, e))?;
        for _ in 0..repeats {
            enqueue()?;
        }
        // SAFETY: `end` and `stream` are live handles of the current context.
        unsafe { result::event::record(end, stream) }
            .map_err(|e| driver_err("cuEventRecord", 0, e))?;
        // SAFETY: `end` was recorded on a live stream just above.
        unsafe { result::event::synchronize(end) }
            .map_err(|e| driver_err("cuEventSynchronize", 0, e))?;
        // SAFETY: both events were recorded on the same stream and `end` has completed.
        let ms = unsafe { result::event::elapsed(start, end) }
            .map_err(|e| driver_err("cuEventElapsedTime", 0, e))?;
        Ok((ms as f64 * 1e6) as u64)
    };
    let out = run();
    // SAFETY: the events were created above and are destroyed once.
    unsafe {
        let _ = result::event::destroy(start);
        let _ = result::event::destroy(end);
    }
    out
}

/// Bytes of each JIT log buffer handed to the driver.
const JIT_LOG_BYTES: usize = 8192;

/// JIT-compiles `image` with the driver, keeping its error log: on failure, the error and
/// what the JIT compiler said (the PTX line it refused, the ISA version it wanted).
fn load_ptx(image: &CStr) -> Result<sys::CUmodule, (DriverError, String)> {
    use sys::CUjit_option as O;
    let mut error_log = vec![0u8; JIT_LOG_BYTES];
    let mut info_log = vec![0u8; JIT_LOG_BYTES];
    let mut options = [
        O::CU_JIT_ERROR_LOG_BUFFER,
        O::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        O::CU_JIT_INFO_LOG_BUFFER,
        O::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    // Sizes travel in the pointer-sized value slots, as the driver API documents.
    let mut values: [*mut c_void; 4] = [
        error_log.as_mut_ptr().cast(),
        JIT_LOG_BYTES as *mut c_void,
        info_log.as_mut_ptr().cast(),
        JIT_LOG_BYTES as *mut c_void,
    ];
    let mut module = std::mem::MaybeUninit::uninit();
    // SAFETY: `image` is NUL-terminated PTX; each option has its documented value type (a
    // buffer that outlives the call, or its size); the context is current.
    let _watched = crate::watch::call("cuModuleLoadDataEx");
    let rc = unsafe {
        sys::cuModuleLoadDataEx(
            module.as_mut_ptr(),
            image.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    match rc.result() {
        // SAFETY: the driver wrote a module handle on success.
        Ok(()) => Ok(unsafe { module.assume_init() }),
        Err(e) => {
            let text = |b: &[u8]| {
                let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
                String::from_utf8_lossy(&b[..end]).trim().to_string()
            };
            let log = [text(&error_log), text(&info_log)]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" / ");
            Err((e, log))
        }
    }
}

/// The context's per-thread stack limit (`cuCtxGetLimit(CU_LIMIT_STACK_SIZE)`).
fn stack_limit() -> DevResult<u64> {
    result::ctx::get_limit(sys::CUlimit::CU_LIMIT_STACK_SIZE)
        .map(|v| v as u64)
        .map_err(|e| driver_err("cuCtxGetLimit", 0, e))
}
