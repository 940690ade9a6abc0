//! libnvidia-ml.so.1 loaded at run time: the NVML functions headroom calls, with their C
//! layouts from nvml.h, and NVML's return codes as errors.
//!
//! Every function but `nvmlInit_v2` is optional: a library without one (an older driver branch)
//! answers `NvmlError::MissingSymbol` for it, so a caller can fall back to an older version of
//! the call. `nvmlShutdown` runs when the session is dropped.

use std::ffi::{CStr, c_char, c_uint, c_ulonglong, c_void};

/// `nvmlDevice_t`: an opaque handle, valid while the session that gave it lives.
pub type Handle = *mut c_void;
/// `nvmlReturn_t`.
type Return = c_uint;

const NVML_SUCCESS: Return = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: Return = 7;
/// `NVML_VALUE_NOT_AVAILABLE` (-1) as the unsigned field holds it.
pub const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE`, `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
const DEVICE_STRING_BYTES: usize = 96;
/// `NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE`.
const DRIVER_VERSION_BYTES: usize = 80;

/// `nvmlMemory_t`, filled by `nvmlDeviceGetMemoryInfo`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryV1 {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t`, filled by `nvmlDeviceGetMemoryInfo_v2` (R510 and newer).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)`, the struct's size with 2 in the top byte.
const MEMORY_V2_VERSION: c_uint = (std::mem::size_of::<MemoryV2>() as c_uint) | (2 << 24);

/// One running compute process as NVML listed it, whatever the record's layout in memory.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub used_gpu_memory: u64,
    /// `NVML_VALUE_NOT_AVAILABLE` as `u32::MAX` outside MIG; absent from a 16-byte record.
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// The record layouts NVML's process lists have written, by size (nvml.h of each release):
/// `nvmlProcessInfo_v1_t` (pid, usedGpuMemory: 16 bytes), `nvmlProcessInfo_v2_t` (+ GPU and
/// compute instance ids: 24 bytes; `_v2` of the call on every branch, `_v3` from R510 on), and
/// the record `_v3` wrote on 535.43.02 through 535.86 (+ `usedGpuCcProtectedMemory`: 32
/// bytes) without a new name. The size is read from what the driver wrote, never from the
/// symbol's name.
pub const RECORD_BYTES: [usize; 3] = [24, 32, 16];
/// The largest record: a list buffer has room for this many bytes per process.
const MAX_RECORD_BYTES: usize = 32;
/// What an unwritten byte of a list buffer holds. No field's top byte can be it: a pid is below
/// 2^31, a byte count below 2^56, the instance ids are small or `0xffff_ffff`.
const SENTINEL: u8 = 0xa5;

/// The record size NVML used for `count` records in `buf` (filled with `SENTINEL` before the
/// call): the one whose `count` records end exactly where the written bytes end. `None` when
/// no known layout fits.
pub fn record_bytes(buf: &[u8], count: usize) -> Option<usize> {
    let written = buf
        .iter()
        .rposition(|b| *b != SENTINEL)
        .map_or(0, |p| p + 1);
    RECORD_BYTES
        .into_iter()
        .find(|size| count * size == written && count * size <= buf.len())
}

/// The `count` records of `size` bytes at the start of `buf`.
pub fn decode_records(buf: &[u8], count: usize, size: usize) -> Vec<ProcessInfo> {
    let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
    (0..count)
        .map(|i| {
            let r = i * size;
            let (gi, ci) = if size >= 24 {
                (u32_at(r + 16), u32_at(r + 20))
            } else {
                (u32::MAX, u32::MAX)
            };
            ProcessInfo {
                pid: u32_at(r),
                used_gpu_memory: u64_at(r + 8),
                gpu_instance_id: gi,
                compute_instance_id: ci,
            }
        })
        .collect()
}

/// Why an NVML call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlError {
    /// libnvidia-ml.so.1 could not be loaded: the loader's message.
    Load(String),
    /// The library lacks this function.
    MissingSymbol(&'static str),
    /// NVML returned this code.
    Code(u32),
    /// NVML wrote a string that is not UTF-8.
    NotUtf8,
    /// Memory info v2 failed, then v1: both errors.
    Both(Box<NvmlError>, Box<NvmlError>),
    /// NVML wrote process records of no layout nvml.h ever gave them: the bytes it wrote.
    UnknownLayout { count: u32, written_bytes: usize },
}

/// NVML's return codes (nvml.h): name and meaning.
const CODES: &[(u32, &str, &str)] = &[
    (
        1,
        "NVML_ERROR_UNINITIALIZED",
        "NVML was not first initialized with nvmlInit",
    ),
    (
        2,
        "NVML_ERROR_INVALID_ARGUMENT",
        "a supplied argument was invalid",
    ),
    (
        3,
        "NVML_ERROR_NOT_SUPPORTED",
        "the requested operation is not available on the target device",
    ),
    (
        4,
        "NVML_ERROR_NO_PERMISSION",
        "the current user does not have permission to perform this operation",
    ),
    (
        5,
        "NVML_ERROR_ALREADY_INITIALIZED",
        "NVML was already initialized",
    ),
    (
        6,
        "NVML_ERROR_NOT_FOUND",
        "a query to find an object was unsuccessful",
    ),
    (
        7,
        "NVML_ERROR_INSUFFICIENT_SIZE",
        "an input argument is not large enough",
    ),
    (
        8,
        "NVML_ERROR_INSUFFICIENT_POWER",
        "device's external power cables are not properly attached",
    ),
    (
        9,
        "NVML_ERROR_DRIVER_NOT_LOADED",
        "NVIDIA driver is not loaded",
    ),
    (10, "NVML_ERROR_TIMEOUT", "the provided timeout was reached"),
    (
        11,
        "NVML_ERROR_IRQ_ISSUE",
        "NVIDIA kernel detected an interrupt issue with a device",
    ),
    (
        12,
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        "a shared library couldn't be found or loaded",
    ),
    (
        13,
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        "a function couldn't be found in a shared library",
    ),
    (
        14,
        "NVML_ERROR_CORRUPTED_INFOROM",
        "the infoROM is corrupted",
    ),
    (
        15,
        "NVML_ERROR_GPU_IS_LOST",
        "device fell off the bus or has otherwise become inaccessible",
    ),
    (
        16,
        "NVML_ERROR_RESET_REQUIRED",
        "device requires a reset before it can be used again",
    ),
    (
        17,
        "NVML_ERROR_OPERATING_SYSTEM",
        "device control has been blocked by the operating system/cgroups",
    ),
    (
        18,
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        "RM detects a driver/library version mismatch",
    ),
    (
        19,
        "NVML_ERROR_IN_USE",
        "operation cannot be performed because the GPU is currently in use",
    ),
    (20, "NVML_ERROR_MEMORY", "insufficient memory"),
    (21, "NVML_ERROR_NO_DATA", "no data"),
    (
        22,
        "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
        "the requested vgpu operation is not available on the target device because ECC is enabled",
    ),
    (
        23,
        "NVML_ERROR_INSUFFICIENT_RESOURCES",
        "ran out of critical resources, other than memory",
    ),
    (
        24,
        "NVML_ERROR_FREQ_NOT_SUPPORTED",
        "the frequency is not supported",
    ),
    (
        25,
        "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        "the provided version is invalid or unsupported",
    ),
    (
        26,
        "NVML_ERROR_DEPRECATED",
        "the requested functionality has been deprecated",
    ),
    (
        27,
        "NVML_ERROR_NOT_READY",
        "the system is not ready for the request",
    ),
    (28, "NVML_ERROR_GPU_NOT_FOUND", "no GPUs were found"),
    (
        29,
        "NVML_ERROR_INVALID_STATE",
        "resource is in an invalid state",
    ),
    (
        999,
        "NVML_ERROR_UNKNOWN",
        "an internal driver error occurred",
    ),
];

impl NvmlError {
    /// `NVML_ERROR_…` for an error NVML returned.
    pub fn name(&self) -> Option<&'static str> {
        match self {
            NvmlError::Code(c) => CODES.iter().find(|e| e.0 == *c).map(|e| e.1),
            _ => None,
        }
    }

    pub fn is_code(&self, name: &str) -> bool {
        self.name() == Some(name)
    }
}

impl std::fmt::Display for NvmlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlError::Load(why) => write!(f, "{why}"),
            NvmlError::MissingSymbol(name) => write!(f, "the library has no {name}"),
            NvmlError::Code(c) => match CODES.iter().find(|e| e.0 == *c) {
                Some(e) => write!(f, "{}", e.2),
                None => write!(f, "NVML returned {c}"),
            },
            NvmlError::NotUtf8 => write!(f, "NVML returned a string that is not UTF-8"),
            NvmlError::Both(v2, v1) => write!(
                f,
                "nvmlDeviceGetMemoryInfo_v2: {}; nvmlDeviceGetMemoryInfo: {}",
                named(v2),
                named(v1)
            ),
            NvmlError::UnknownLayout {
                count,
                written_bytes,
            } => write!(
                f,
                "NVML wrote {written_bytes} bytes for {count} process records, a layout of none \
                 of {RECORD_BYTES:?} bytes; the list is not read"
            ),
        }
    }
}

impl std::error::Error for NvmlError {}

/// `NVML_ERROR_X (text)`, or the text where NVML gave no code.
fn named(e: &NvmlError) -> String {
    match e.name() {
        Some(n) => format!("{n} ({e})"),
        None => e.to_string(),
    }
}

fn check(code: Return) -> Result<(), NvmlError> {
    if code == NVML_SUCCESS {
        Ok(())
    } else {
        Err(NvmlError::Code(code))
    }
}

/// `nvmlDeviceGetComputeRunningProcesses_v*`: the records are written into a byte buffer,
/// their size found afterwards (`record_bytes`).
type ProcessListFn = unsafe extern "C" fn(Handle, *mut c_uint, *mut c_void) -> Return;

/// The functions this module calls, looked up once when the session opens.
struct Fns {
    shutdown: Option<unsafe extern "C" fn() -> Return>,
    driver_version: Option<unsafe extern "C" fn(*mut c_char, c_uint) -> Return>,
    count: Option<unsafe extern "C" fn(*mut c_uint) -> Return>,
    by_index: Option<unsafe extern "C" fn(c_uint, *mut Handle) -> Return>,
    by_uuid: Option<unsafe extern "C" fn(*const c_char, *mut Handle) -> Return>,
    name: Option<unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> Return>,
    uuid: Option<unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> Return>,
    index: Option<unsafe extern "C" fn(Handle, *mut c_uint) -> Return>,
    memory_v1: Option<unsafe extern "C" fn(Handle, *mut MemoryV1) -> Return>,
    memory_v2: Option<unsafe extern "C" fn(Handle, *mut MemoryV2) -> Return>,
    processes_v3: Option<ProcessListFn>,
    processes_v2: Option<ProcessListFn>,
    mig_mode: Option<unsafe extern "C" fn(Handle, *mut c_uint, *mut c_uint) -> Return>,
    max_mig_devices: Option<unsafe extern "C" fn(Handle, *mut c_uint) -> Return>,
    mig_by_index: Option<unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> Return>,
    is_mig: Option<unsafe extern "C" fn(Handle, *mut c_uint) -> Return>,
    mig_parent: Option<unsafe extern "C" fn(Handle, *mut Handle) -> Return>,
    gpu_instance_id: Option<unsafe extern "C" fn(Handle, *mut c_uint) -> Return>,
    compute_instance_id: Option<unsafe extern "C" fn(Handle, *mut c_uint) -> Return>,
}

/// The function `name` of `lib` as a pointer of type `T`, or `None` where the library lacks it.
///
/// # Safety
/// `T` must be the function's C signature, and the pointer is used only while `lib` is loaded.
unsafe fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Option<T> {
    let bytes = format!("{name}\0");
    // SAFETY: the caller states `T` is the symbol's type; the copy outlives the `Symbol` borrow
    // but not the library, which the session keeps loaded until after its last call.
    unsafe { lib.get::<T>(bytes.as_bytes()) }.ok().map(|s| *s)
}

/// An initialized NVML: `nvmlInit_v2` has succeeded, and `nvmlShutdown` runs on drop.
pub struct Nvml {
    fns: Fns,
    /// Cleared when `nvmlDeviceGetMemoryInfo_v2` fails at run time: v1 is asked from then on.
    memory_v2_usable: std::sync::atomic::AtomicBool,
    /// Kept loaded while the function pointers in `fns` are in use.
    _lib: libloading::Library,
}

// SAFETY: NVML is thread-safe (nvml.h: simultaneous calls from several threads are allowed),
// and the session holds only the library and pointers into it.
unsafe impl Send for Nvml {}
// SAFETY: as for `Send`: every call goes to NVML, which serializes what needs it.
unsafe impl Sync for Nvml {}

impl Nvml {
    /// Loads libnvidia-ml.so.1 and calls `nvmlInit_v2`.
    pub fn init() -> Result<Nvml, NvmlError> {
        const LIB: &str = "libnvidia-ml.so.1";
        // SAFETY: loading the library runs its initializers, as every NVML user does.
        let lib = unsafe { libloading::Library::new(LIB) }.map_err(|e| {
            // libloading says "dlopen failed" and keeps the loader's own message as the source.
            let why =
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
            NvmlError::Load(why)
        })?;
        // SAFETY: each type below is the C signature nvml.h gives the named function.
        let fns = unsafe {
            Fns {
                shutdown: sym(&lib, "nvmlShutdown"),
                driver_version: sym(&lib, "nvmlSystemGetDriverVersion"),
                count: sym(&lib, "nvmlDeviceGetCount_v2"),
                by_index: sym(&lib, "nvmlDeviceGetHandleByIndex_v2"),
                by_uuid: sym(&lib, "nvmlDeviceGetHandleByUUID"),
                name: sym(&lib, "nvmlDeviceGetName"),
                uuid: sym(&lib, "nvmlDeviceGetUUID"),
                index: sym(&lib, "nvmlDeviceGetIndex"),
                memory_v1: sym(&lib, "nvmlDeviceGetMemoryInfo"),
                memory_v2: sym(&lib, "nvmlDeviceGetMemoryInfo_v2"),
                processes_v3: sym(&lib, "nvmlDeviceGetComputeRunningProcesses_v3"),
                processes_v2: sym(&lib, "nvmlDeviceGetComputeRunningProcesses_v2"),
                mig_mode: sym(&lib, "nvmlDeviceGetMigMode"),
                max_mig_devices: sym(&lib, "nvmlDeviceGetMaxMigDeviceCount"),
                mig_by_index: sym(&lib, "nvmlDeviceGetMigDeviceHandleByIndex"),
                is_mig: sym(&lib, "nvmlDeviceIsMigDeviceHandle"),
                mig_parent: sym(&lib, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle"),
                gpu_instance_id: sym(&lib, "nvmlDeviceGetGpuInstanceId"),
                compute_instance_id: sym(&lib, "nvmlDeviceGetComputeInstanceId"),
            }
        };
        // SAFETY: `nvmlInit_v2` takes no arguments and returns an `nvmlReturn_t`.
        let init: unsafe extern "C" fn() -> Return =
            unsafe { sym(&lib, "nvmlInit_v2") }.ok_or(NvmlError::MissingSymbol("nvmlInit_v2"))?;
        let watched = crate::watch::call("nvmlInit_v2");
        // SAFETY: the library is loaded; `nvmlInit_v2` may be called at any time.
        check(unsafe { init() })?;
        drop(watched);
        Ok(Nvml {
            fns,
            memory_v2_usable: std::sync::atomic::AtomicBool::new(true),
            _lib: lib,
        })
    }

    pub fn sys_driver_version(&self) -> Result<String, NvmlError> {
        let (f, _watched) = need(self.fns.driver_version, "nvmlSystemGetDriverVersion")?;
        // SAFETY: NVML writes at most `len` bytes, NUL included, into the buffer.
        read_string(DRIVER_VERSION_BYTES, |buf, len| unsafe { f(buf, len) })
    }

    pub fn device_count(&self) -> Result<u32, NvmlError> {
        let (f, _watched) = need(self.fns.count, "nvmlDeviceGetCount_v2")?;
        let mut n: c_uint = 0;
        // SAFETY: one uint is written through a valid pointer.
        check(unsafe { f(&mut n) })?;
        Ok(n)
    }

    pub fn device_by_index(&self, index: u32) -> Result<Device<'_>, NvmlError> {
        let (f, _watched) = need(self.fns.by_index, "nvmlDeviceGetHandleByIndex_v2")?;
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: one handle is written through a valid pointer.
        check(unsafe { f(index, &mut h) })?;
        Ok(self.device(h))
    }

    pub fn device_by_uuid(&self, uuid: &str) -> Result<Device<'_>, NvmlError> {
        let (f, _watched) = need(self.fns.by_uuid, "nvmlDeviceGetHandleByUUID")?;
        let c = std::ffi::CString::new(uuid).map_err(|_| NvmlError::Code(2))?;
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: the UUID is a NUL-terminated string; one handle is written through `h`.
        check(unsafe { f(c.as_ptr(), &mut h) })?;
        Ok(self.device(h))
    }

    fn device(&self, handle: Handle) -> Device<'_> {
        Device { nvml: self, handle }
    }

    /// A device of this session from a handle it gave before (`Device::raw`).
    pub fn device_from(&self, raw: RawHandle) -> Device<'_> {
        self.device(raw.0)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        if let Some(f) = self.fns.shutdown {
            let _watched = crate::watch::call("nvmlShutdown");
            // SAFETY: this session initialized NVML and makes no call after this one.
            unsafe { f() };
        }
    }
}

/// The entry point `name`, watched (`crate::watch`) until the guard returned with it is
/// dropped: every NVML call goes through here, so a hung one is named.
fn need<T>(f: Option<T>, name: &'static str) -> Result<(T, crate::watch::CallGuard), NvmlError> {
    let f = f.ok_or(NvmlError::MissingSymbol(name))?;
    Ok((f, crate::watch::call(name)))
}

/// A string NVML writes into a buffer of `bytes` bytes.
fn read_string(
    bytes: usize,
    call: impl FnOnce(*mut c_char, c_uint) -> Return,
) -> Result<String, NvmlError> {
    let mut buf = vec![0 as c_char; bytes];
    check(call(buf.as_mut_ptr(), bytes as c_uint))?;
    // NVML terminates what it writes; the last byte is kept zero in case it did not.
    buf[bytes - 1] = 0;
    // SAFETY: the buffer is NUL-terminated (its last byte is zero).
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    s.to_str()
        .map(str::to_string)
        .map_err(|_| NvmlError::NotUtf8)
}

/// A device handle kept beside its session, to be looked up once and read many times.
#[derive(Debug, Clone, Copy)]
pub struct RawHandle(Handle);

// SAFETY: an opaque token NVML accepts from any thread; never dereferenced here.
unsafe impl Send for RawHandle {}
// SAFETY: as for `Send`.
unsafe impl Sync for RawHandle {}

/// One device (a GPU or a MIG instance) of an NVML session.
#[derive(Clone, Copy)]
pub struct Device<'a> {
    nvml: &'a Nvml,
    handle: Handle,
}

// SAFETY: a handle is an opaque token that NVML accepts from any thread (NVML is thread-safe).
unsafe impl Send for Device<'_> {}
// SAFETY: as for `Send`; the handle is never written through.
unsafe impl Sync for Device<'_> {}

impl Device<'_> {
    fn fns(&self) -> &Fns {
        &self.nvml.fns
    }

    /// The handle, to keep beside the session (`Nvml::device_from`).
    pub fn raw(&self) -> RawHandle {
        RawHandle(self.handle)
    }

    pub fn name(&self) -> Result<String, NvmlError> {
        let (f, _watched) = need(self.fns().name, "nvmlDeviceGetName")?;
        // SAFETY: the handle is this session's; NVML writes at most `len` bytes.
        read_string(DEVICE_STRING_BYTES, |b, l| unsafe { f(self.handle, b, l) })
    }

    pub fn uuid(&self) -> Result<String, NvmlError> {
        let (f, _watched) = need(self.fns().uuid, "nvmlDeviceGetUUID")?;
        // SAFETY: the handle is this session's; NVML writes at most `len` bytes.
        read_string(DEVICE_STRING_BYTES, |b, l| unsafe { f(self.handle, b, l) })
    }

    pub fn index(&self) -> Result<u32, NvmlError> {
        self.uint(self.fns().index, "nvmlDeviceGetIndex")
    }

    /// A call that writes one uint for the device.
    fn uint(
        &self,
        f: Option<unsafe extern "C" fn(Handle, *mut c_uint) -> Return>,
        name: &'static str,
    ) -> Result<u32, NvmlError> {
        let (f, _watched) = need(f, name)?;
        let mut v: c_uint = 0;
        // SAFETY: the handle is this session's; one uint is written through a valid pointer.
        check(unsafe { f(self.handle, &mut v) })?;
        Ok(v)
    }

    /// A call that writes one device handle for the device.
    fn handle_of(&self, call: impl FnOnce(*mut Handle) -> Return) -> Result<Device<'_>, NvmlError> {
        let mut h: Handle = std::ptr::null_mut();
        check(call(&mut h))?;
        Ok(self.nvml.device(h))
    }

    /// Whether v2 of memory info is worth asking: the library has it and it has not failed.
    pub fn memory_v2_usable(&self) -> bool {
        self.fns().memory_v2.is_some()
            && self
                .nvml
                .memory_v2_usable
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// After a failure of v2 at run time: ask v1 from now on.
    pub fn forget_memory_v2(&self) {
        let usable = &self.nvml.memory_v2_usable;
        usable.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// `nvmlDeviceGetMemoryInfo_v2`.
    pub fn memory_v2(&self) -> Result<MemoryV2, NvmlError> {
        let (f, _watched) = need(self.fns().memory_v2, "nvmlDeviceGetMemoryInfo_v2")?;
        let mut m = MemoryV2 {
            version: MEMORY_V2_VERSION,
            ..MemoryV2::default()
        };
        // SAFETY: the handle is this session's and `m` is the versioned struct NVML fills.
        check(unsafe { f(self.handle, &mut m) })?;
        Ok(m)
    }

    /// `nvmlDeviceGetMemoryInfo`.
    pub fn memory_v1(&self) -> Result<MemoryV1, NvmlError> {
        let (f, _watched) = need(self.fns().memory_v1, "nvmlDeviceGetMemoryInfo")?;
        let mut m = MemoryV1::default();
        // SAFETY: the handle is this session's and `m` is the v1 struct NVML fills.
        check(unsafe { f(self.handle, &mut m) })?;
        Ok(m)
    }

    /// `nvmlDeviceGetComputeRunningProcesses_v3`.
    pub fn processes_v3(&self) -> Result<Vec<ProcessInfo>, NvmlError> {
        let (f, _watched) = need(
            self.fns().processes_v3,
            "nvmlDeviceGetComputeRunningProcesses_v3",
        )?;
        self.process_list(f)
    }

    /// `nvmlDeviceGetComputeRunningProcesses_v2`: every branch from R450 on has it, with the
    /// 24-byte `nvmlProcessInfo_v2_t` in every nvml.h since.
    pub fn processes_v2(&self) -> Result<Vec<ProcessInfo>, NvmlError> {
        let (f, _watched) = need(
            self.fns().processes_v2,
            "nvmlDeviceGetComputeRunningProcesses_v2",
        )?;
        self.process_list(f)
    }

    /// Asks for the count, then for the list with room for a few processes started between,
    /// each with room for the largest record; the record size is read from what was written.
    fn process_list(&self, f: ProcessListFn) -> Result<Vec<ProcessInfo>, NvmlError> {
        let mut count: c_uint = 0;
        // SAFETY: a null list with a count of 0 asks for the count only.
        match unsafe { f(self.handle, &mut count, std::ptr::null_mut()) } {
            NVML_SUCCESS => return Ok(Vec::new()),
            NVML_ERROR_INSUFFICIENT_SIZE => {}
            other => return Err(NvmlError::Code(other)),
        }
        count += 5;
        // u64 words: the buffer is aligned for the records' 8-byte fields.
        let words = count as usize * MAX_RECORD_BYTES / 8;
        let mut buf = vec![u64::from_ne_bytes([SENTINEL; 8]); words];
        // SAFETY: `buf` has room for `count` records of the largest layout NVML ever wrote, and
        // NVML writes at most `count` records.
        check(unsafe { f(self.handle, &mut count, buf.as_mut_ptr().cast()) })?;
        // SAFETY: `buf` is `words` initialized u64s, seen as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), words * 8) };
        let n = count as usize;
        let size = record_bytes(bytes, n).ok_or_else(|| NvmlError::UnknownLayout {
            count,
            written_bytes: bytes
                .iter()
                .rposition(|b| *b != SENTINEL)
                .map_or(0, |p| p + 1),
        })?;
        Ok(decode_records(bytes, n, size))
    }

    /// MIG mode: (current, pending), 1 for enabled.
    pub fn mig_mode(&self) -> Result<(u32, u32), NvmlError> {
        let (f, _watched) = need(self.fns().mig_mode, "nvmlDeviceGetMigMode")?;
        let (mut current, mut pending): (c_uint, c_uint) = (0, 0);
        // SAFETY: the handle is this session's; two uints are written through valid pointers.
        check(unsafe { f(self.handle, &mut current, &mut pending) })?;
        Ok((current, pending))
    }

    pub fn max_mig_device_count(&self) -> Result<u32, NvmlError> {
        self.uint(self.fns().max_mig_devices, "nvmlDeviceGetMaxMigDeviceCount")
    }

    pub fn mig_device_by_index(&self, index: u32) -> Result<Device<'_>, NvmlError> {
        let (f, _watched) = need(
            self.fns().mig_by_index,
            "nvmlDeviceGetMigDeviceHandleByIndex",
        )?;
        // SAFETY: the handle is this session's; one handle is written through a valid pointer.
        self.handle_of(|h| unsafe { f(self.handle, index, h) })
    }

    pub fn is_mig_device_handle(&self) -> Result<bool, NvmlError> {
        Ok(self.uint(self.fns().is_mig, "nvmlDeviceIsMigDeviceHandle")? != 0)
    }

    pub fn mig_parent(&self) -> Result<Device<'_>, NvmlError> {
        let (f, _watched) = need(
            self.fns().mig_parent,
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        )?;
        // SAFETY: the handle is this session's; one handle is written through a valid pointer.
        self.handle_of(|h| unsafe { f(self.handle, h) })
    }

    pub fn gpu_instance_id(&self) -> Result<u32, NvmlError> {
        self.uint(self.fns().gpu_instance_id, "nvmlDeviceGetGpuInstanceId")
    }

    pub fn compute_instance_id(&self) -> Result<u32, NvmlError> {
        self.uint(
            self.fns().compute_instance_id,
            "nvmlDeviceGetComputeInstanceId",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_codes_are_nvml_h_s() {
        // nvml.h: nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2) on a 40-byte struct.
        assert_eq!(MEMORY_V2_VERSION, 0x0200_0028);
        assert_eq!(std::mem::size_of::<MemoryV1>(), 24);
        let e = NvmlError::Code(9);
        assert_eq!(e.name(), Some("NVML_ERROR_DRIVER_NOT_LOADED"));
        assert_eq!(e.to_string(), "NVIDIA driver is not loaded");
        assert!(NvmlError::Code(4).is_code("NVML_ERROR_NO_PERMISSION"));
        assert_eq!(NvmlError::Code(999).name(), Some("NVML_ERROR_UNKNOWN"));
        assert_eq!(NvmlError::Code(77).name(), None);
        assert_eq!(NvmlError::Code(77).to_string(), "NVML returned 77");
        assert_eq!(NvmlError::MissingSymbol("nvmlInit_v2").name(), None);
    }

    /// `count` records of `size` bytes as a driver writes them into a sentinel-filled buffer
    /// with room for `capacity` records of 32 bytes.
    fn written(records: &[(u32, u64, u32, u32, u64)], size: usize, capacity: usize) -> Vec<u8> {
        let mut buf = vec![SENTINEL; capacity * MAX_RECORD_BYTES];
        for (i, &(pid, used, gi, ci, cc)) in records.iter().enumerate() {
            let r = &mut buf[i * size..(i + 1) * size];
            r[..4].copy_from_slice(&pid.to_ne_bytes());
            // The padding after the pid is written too, as a C struct copy does.
            r[4..8].copy_from_slice(&[0; 4]);
            r[8..16].copy_from_slice(&used.to_ne_bytes());
            if size >= 24 {
                r[16..20].copy_from_slice(&gi.to_ne_bytes());
                r[20..24].copy_from_slice(&ci.to_ne_bytes());
            }
            if size == 32 {
                r[24..32].copy_from_slice(&cc.to_ne_bytes());
            }
        }
        buf
    }

    #[test]
    fn every_record_layout_is_read_at_its_own_size() {
        let ps: Vec<(u32, u64, u32, u32, u64)> = (0..20u32)
            .map(|i| (4000 + i, (i as u64 + 1) << 20, u32::MAX, u32::MAX, 0))
            .collect();
        for size in [16, 24, 32] {
            let buf = written(&ps, size, 25);
            assert_eq!(record_bytes(&buf, 20), Some(size), "{size}");
            let read = decode_records(&buf, 20, size);
            let got: Vec<(u32, u64)> = read.iter().map(|p| (p.pid, p.used_gpu_memory)).collect();
            let want: Vec<(u32, u64)> = ps.iter().map(|p| (p.0, p.1)).collect();
            assert_eq!(got, want, "{size}");
        }
        // MIG ids of 0 and a byte count NVML could not read are still records' ends.
        let mig = [(7, u64::MAX, 1, 0, 0), (8, 4096, 2, 0, 0)];
        let buf = written(&mig, 24, 7);
        assert_eq!(record_bytes(&buf, 2), Some(24));
        assert_eq!(decode_records(&buf, 2, 24)[1].gpu_instance_id, 2);
        // Read as 24-byte records, the 32-byte ones of 535.54.03 give the second process the
        // first one's protected-memory count as its pid: the defect this guards against.
        let buf = written(&ps, 32, 25);
        assert_ne!(decode_records(&buf, 20, 24)[1].pid, 4001);
        // Bytes that end inside a record are no layout at all.
        let mut odd = written(&ps[..1], 24, 5);
        odd[40] = 0;
        assert_eq!(record_bytes(&odd, 1), None);
    }
}
