//! Modules ("JIT-compiled" from PTX, with JIT info and error logs), functions, occupancy and
//! kernel launches.
//!
//! A loaded module costs the profile's `[kernels] module_bytes` of device memory until it is
//! unloaded. A launch whose function needs a larger per-thread stack than the context has
//! raises the limit (never lowered again) and reserves it for every resident thread; if that
//! does not fit, the launch fails with out of memory. Block sizes above 1024 threads or above
//! the function's `__launch_bounds__` are invalid.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use crate::abi::*;
use crate::errors::*;
use crate::ffi::{cuda, out, take_kernel_fault};
use crate::kernels::{Kind, Launch, read_args};
use crate::ptx;
use crate::state::{Driver, FuncRec, ModuleRec, Tag, cu, handle, id_of};
use crate::stream::Work;

/// Where the caller wants JIT logs: (buffer, capacity, index of the size option).
#[derive(Default)]
struct Logs {
    info: Option<(*mut c_char, usize, usize)>,
    error: Option<(*mut c_char, usize, usize)>,
    wall_time: Option<usize>,
}

/// Loads `image` on the current device; returns the module and (info log, error log).
fn load(d: &mut Driver, image: *const c_void) -> (Result<u64, CUresult>, String, String) {
    let dev = match d.current() {
        Ok(dev) => dev,
        Err(e) => return (Err(e), String::new(), String::new()),
    };
    if image.is_null() {
        return (Err(CUDA_ERROR_INVALID_VALUE), String::new(), String::new());
    }
    // SAFETY: the caller passes a NUL-terminated image (PTX text is NUL-terminated).
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_bytes();
    let (major, minor) = d.cfg.profile.capability();
    let sm = (major * 10 + minor) as u32;
    let m = match ptx::parse(text, sm, d.cfg.release.max_ptx) {
        Ok(m) => m,
        Err(r) => return (Err(r.code), String::new(), r.log),
    };
    let bytes = d.cfg.profile.kernels.module_bytes.0;
    if d.reserve(dev, bytes).is_err() {
        return (
            Err(CUDA_ERROR_OUT_OF_MEMORY),
            String::new(),
            "out of memory loading the module".into(),
        );
    }
    let module = d.next_id();
    let mut info = String::from("ptxas info    : 0 bytes gmem\n");
    let mut functions = Vec::new();
    for e in m.entries {
        let Some(kind) = Kind::of(&e) else {
            info.push_str(&format!(
                "fake driver   : entry function '{}' is not one of headroom's kernels; it cannot be launched\n",
                e.name
            ));
            continue;
        };
        let cmem: usize = e.params.iter().map(|p| p.size()).sum();
        info.push_str(&format!(
            "ptxas info    : Compiling entry function '{0}' for 'sm_{sm}'\n\
             ptxas info    : Function properties for {0}\n    \
             {1} bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
             ptxas info    : Used 32 registers, {2} bytes cmem[0]\n",
            e.name,
            e.local_bytes,
            544 + cmem
        ));
        let id = d.next_id();
        d.functions.insert(
            id,
            FuncRec {
                device: dev,
                module,
                entry: e,
                kind,
            },
        );
        functions.push(id);
    }
    d.modules.insert(
        module,
        ModuleRec {
            device: dev,
            functions,
        },
    );
    d.dev(dev).module_bytes += bytes;
    d.publish(dev);
    (Ok(module), info, String::new())
}

/// Writes a log into a caller's buffer and its length (with the NUL) into the size option.
///
/// # Safety
/// `buf` must be valid for `cap` bytes and `values` for `index + 1` entries.
unsafe fn put_log(slot: Option<(*mut c_char, usize, usize)>, log: &str, values: *mut *mut c_void) {
    let Some((buf, cap, index)) = slot else {
        return;
    };
    // SAFETY: the caller's buffer holds `cap` bytes.
    unsafe { crate::ffi::write_cstr(buf, cap, log) };
    let written = if cap == 0 {
        0
    } else {
        log.len().min(cap - 1) + 1
    };
    // SAFETY: `index` is one of the caller's option slots.
    unsafe { *values.add(index) = written as *mut c_void };
}

fn load_ex(
    module: *mut Handle,
    image: *const c_void,
    n: c_uint,
    options: *const u32,
    values: *mut *mut c_void,
) -> Result<(), CUresult> {
    if module.is_null() || (n > 0 && (options.is_null() || values.is_null())) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut logs = Logs::default();
    let (mut info_buf, mut info_cap, mut err_buf, mut err_cap) = (None, None, None, None);
    for i in 0..n as usize {
        // SAFETY: the caller passes `n` options and `n` values.
        let (opt, val) = unsafe { (*options.add(i), *values.add(i)) };
        match opt {
            CU_JIT_INFO_LOG_BUFFER => info_buf = Some(val.cast::<c_char>()),
            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES => info_cap = Some((val as usize, i)),
            CU_JIT_ERROR_LOG_BUFFER => err_buf = Some(val.cast::<c_char>()),
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES => err_cap = Some((val as usize, i)),
            CU_JIT_WALL_TIME => logs.wall_time = Some(i),
            o if o < CU_JIT_NUM_OPTIONS => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    if let (Some(b), Some((c, i))) = (info_buf, info_cap) {
        logs.info = Some((b, c, i));
    }
    if let (Some(b), Some((c, i))) = (err_buf, err_cap) {
        logs.error = Some((b, c, i));
    }
    let started = std::time::Instant::now();
    let (r, info, error) = cu(|d| Ok(load(d, image)))?;
    // SAFETY: the buffers and slots come from the caller's option arrays.
    unsafe {
        put_log(logs.info, &info, values);
        put_log(logs.error, &error, values);
        if let Some(i) = logs.wall_time {
            let ms = started.elapsed().as_secs_f32() * 1e3;
            *values.add(i) = ms.to_bits() as usize as *mut c_void;
        }
    }
    let id = r?;
    // SAFETY: checked non-null above.
    unsafe { out(module, handle(Tag::Module, id)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CUresult {
    cuda("cuModuleLoadData", || {
        load_ex(module, image, 0, std::ptr::null(), std::ptr::null_mut())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    num_options: c_uint,
    options: *mut u32,
    values: *mut *mut c_void,
) -> CUresult {
    cuda("cuModuleLoadDataEx", || {
        load_ex(module, image, num_options, options, values)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleUnload(hmod: Handle) -> CUresult {
    cuda("cuModuleUnload", || {
        cu(|d| {
            d.current_any()?;
            let id = id_of(Tag::Module, hmod)?;
            let m = d.modules.remove(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            for f in m.functions {
                d.functions.remove(&f);
            }
            let bytes = d.cfg.profile.kernels.module_bytes.0;
            let device = d.dev(m.device);
            device.module_bytes = device.module_bytes.saturating_sub(bytes);
            d.publish(m.device);
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(
    hfunc: *mut Handle,
    hmod: Handle,
    name: *const c_char,
) -> CUresult {
    cuda("cuModuleGetFunction", || {
        if name.is_null() || hfunc.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller passes a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        let f = cu(|d| {
            d.current()?;
            let m = d
                .modules
                .get(&id_of(Tag::Module, hmod)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            m.functions
                .iter()
                .copied()
                .find(|f| d.functions[f].entry.name.as_bytes() == name)
                .ok_or(CUDA_ERROR_NOT_FOUND)
        })?;
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { out(hfunc, handle(Tag::Function, f)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: u32,
    hfunc: Handle,
) -> CUresult {
    cuda("cuFuncGetAttribute", || {
        let v = cu(|d| {
            d.require_init()?;
            let f = d
                .functions
                .get(&id_of(Tag::Function, hfunc)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            let (major, minor) = d.cfg.profile.capability();
            Ok(match attrib {
                CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => {
                    f.entry.max_threads.unwrap_or(1024).min(1024) as c_int
                }
                CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES | CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES => 0,
                CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES => f.entry.local_bytes as c_int,
                CU_FUNC_ATTRIBUTE_NUM_REGS => 32,
                CU_FUNC_ATTRIBUTE_PTX_VERSION => 84,
                CU_FUNC_ATTRIBUTE_BINARY_VERSION => major * 10 + minor,
                a if a < CU_FUNC_ATTRIBUTE_MAX => 0,
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            })
        })?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(pi, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    num_blocks: *mut c_int,
    func: Handle,
    block_size: c_int,
    _dynamic_smem: usize,
) -> CUresult {
    cuda("cuOccupancyMaxActiveBlocksPerMultiprocessor", || {
        let v = cu(|d| {
            d.current()?;
            let f = d
                .functions
                .get(&id_of(Tag::Function, func)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if block_size <= 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if block_size as u32 > f.entry.max_threads.unwrap_or(1024).min(1024) {
                return Ok(0);
            }
            let per_sm = d.cfg.profile.stack.threads_per_multiprocessor / block_size as u32;
            Ok(per_sm.min(32) as c_int)
        })?;
        // SAFETY: the caller passes a valid out-pointer (null is refused).
        unsafe { out(num_blocks, v) }
    })
}

#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    cuda("cuLaunchKernel", || {
        let fault = take_kernel_fault();
        cu(|d| {
            let dev = d.current()?;
            let func = d
                .functions
                .get(&id_of(Tag::Function, f)?)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if func.device != dev {
                return Err(CUDA_ERROR_INVALID_HANDLE);
            }
            let sid = d.stream_id(dev, stream)?;
            let threads = block_x as u64 * block_y as u64 * block_z as u64;
            let bounds = func.entry.max_threads.unwrap_or(1024).min(1024) as u64;
            let grid_ok =
                grid_x > 0 && grid_y > 0 && grid_z > 0 && grid_y <= 65535 && grid_z <= 65535;
            let block_ok = threads > 0 && block_x <= 1024 && block_y <= 1024 && block_z <= 64;
            if !grid_ok || !block_ok || threads > bounds || shared_bytes > 48 << 10 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if params.is_null() && !func.entry.params.is_empty() {
                return Err(if extra.is_null() {
                    CUDA_ERROR_INVALID_VALUE
                } else {
                    CUDA_ERROR_NOT_SUPPORTED
                });
            }
            // SAFETY: the caller passes one pointer per parameter, each to a value of its type.
            let args = unsafe { read_args(params, &func.entry) };
            let (kind, local) = (func.kind, func.entry.local_bytes);
            let limit = d.devices[dev as usize]
                .ctx
                .as_ref()
                .map_or(0, |c| c.stack_limit);
            if local as u64 > limit {
                d.set_stack_limit(dev, local as u64)?;
            }
            let launch = Launch {
                kind,
                args,
                block_threads: threads as u32,
                local_bytes: local,
                fault,
            };
            let duration = launch.duration(&d.cfg);
            let mut launch = launch;
            // The driver's watchdog ends a kernel that runs past its limit.
            if let Some(limit) = d.cfg.kernel_exec_timeout {
                if duration > d.cfg.scaled(limit.as_secs_f64()) {
                    launch.fault = Some(CUDA_ERROR_LAUNCH_TIMEOUT);
                }
            }
            d.submit(sid, Work::Kernel(launch), duration).map(|_| ())
        })
    })
}
