//! The real GPU through cudarc's driver API: the only place (with `launch.rs`) that calls CUDA.
//!
//! cudarc loads libcuda at run time and panics when it is missing, so `open` checks for the
//! library first and returns a plain error instead. Raw driver calls (`result::*`) are used
//! rather than cudarc's owning slices because the harness manages pointers itself: allocators
//! above need addresses and sizes, not typed buffers. Every allocation is tracked here so that
//! `release_all` (and `Drop`) can give everything back, also after an OOM or an interrupt.

mod capabilities;
mod events;
mod graphs;
mod launch;
mod pool;
mod probe;
mod vmm;

pub use capabilities::device_capabilities;
pub use probe::{
    DeviceFacts, NoGpu, cuda_driver_version, device_facts, driver_cuda_version, probe,
};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaContext;
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;

use crate::kernels::Module;
use crate::nvml::NvmlDevice;
use crate::prelude::*;
use crate::reading::{RawReading, Reader, Readings};
use crate::{
    DevPtr, DevResult, DeviceError, DeviceInfo, EventId, Kernel, KernelOutcome, MemInfo,
    NvmlMemory, PoolConfig, ProcessUsage, StreamId,
};

pub(crate) use launch::KernelSet;

/// A raw stream handle that may move between threads with the device that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stream(sys::CUstream);
// SAFETY: a CUstream is an opaque driver handle usable from any thread with the context current.
unsafe impl Send for Stream {}

#[derive(Debug, Clone, Copy)]
struct Pool(sys::CUmemoryPool);
// SAFETY: a CUmemoryPool is an opaque driver handle usable from any thread.
unsafe impl Send for Pool {}

/// Turns a driver error into ours, keeping out-of-memory apart.
/// Calls that allocate driver state of a size nobody asked for: an out-of-memory there is the
/// driver's own, not a refused request of known bytes.
const CREATES_STATE: &[&str] = &[
    "cuDevicePrimaryCtxRetain",
    "cuCtxCreate",
    "cuStreamCreate",
    "cuEventCreate",
    "cuModuleLoadDataEx",
];

pub(crate) fn driver_err(call: &'static str, bytes: u64, e: DriverError) -> DeviceError {
    if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY && bytes == 0 && CREATES_STATE.contains(&call)
    {
        return DeviceError::Driver {
            call,
            detail: "CUDA_ERROR_OUT_OF_MEMORY: the device had no room for the driver's own \
                     state (a context, stream, event or module: no request of a known size)"
                .into(),
        };
    }
    if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return DeviceError::OutOfMemory {
            requested_bytes: bytes,
        };
    }
    // A library that cannot name its own errors (a stub's cuGetErrorName fails too) still has
    // the code's name in cudarc's table.
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("{:?}", e.0));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let detail = if text.is_empty() {
        name
    } else {
        format!("{name} ({text})")
    };
    DeviceError::Driver { call, detail }
}

pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    origin: Instant,
    streams: Vec<Stream>,
    pool: Option<Pool>,
    pool_config: PoolConfig,
    plain: HashMap<DevPtr, u64>,
    /// Live pool allocations: pointer → bytes.
    pooled: HashMap<DevPtr, u64>,
    nvml: Option<NvmlDevice>,
    kernels: Option<KernelSet>,
    events: events::CudaEvents,
    vmm: vmm::CudaVmm,
    graphs: graphs::CudaGraphs,
    /// `CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT`: the driver ends a kernel that runs too long
    /// (a display GPU, WSL2: about 2 s), so a long spin goes as launches of `SPIN_SLICE_NS`.
    kernel_exec_timeout: bool,
    /// Whether the split of a long spin has been said (once per device).
    spin_split_said: bool,
}

/// The longest spin one launch takes where the driver has a kernel-exec timeout: well under
/// the ~2 s of a Windows/WSL2 watchdog and the X server's.
pub const SPIN_SLICE_NS: u64 = 500_000_000;

/// The launches a spin of `duration_ns` takes: one, or slices of at most `SPIN_SLICE_NS` where
/// the driver has a kernel-exec timeout.
pub fn spin_slices(duration_ns: u64, timeout: bool) -> Vec<u64> {
    if !timeout || duration_ns <= SPIN_SLICE_NS {
        return vec![duration_ns];
    }
    let n = duration_ns.div_ceil(SPIN_SLICE_NS);
    (0..n)
        .map(|i| (duration_ns - i * SPIN_SLICE_NS).min(SPIN_SLICE_NS))
        .collect()
}

impl CudaDevice {
    /// Opens device `index`. Call `probe` first: without libcuda cudarc would panic.
    /// Returns the device and NVML's reading from before the context existed.
    pub fn open(index: u32) -> DevResult<(CudaDevice, Option<NvmlMemory>, u64)> {
        let facts = device_facts(index)?;
        if let Some(why) = crate::floor::below_volta(&facts.name, &facts.compute_capability) {
            return Err(DeviceError::Invalid(why));
        }
        let nvml = NvmlDevice::open(&facts.uuid);
        let mig = facts.mig(nvml.as_ref());
        let before_context = nvml.as_ref().and_then(|n| n.memory());
        let origin = Instant::now();
        let watched = crate::watch::call("cuDevicePrimaryCtxRetain");
        let ctx = CudaContext::new(index as usize)
            .map_err(|e| driver_err("cuDevicePrimaryCtxRetain", 0, e))?;
        drop(watched);
        let context_create_ns = origin.elapsed().as_nanos() as u64;
        // SAFETY: the harness never uses cudarc's owning slices, which are what tracking protects.
        unsafe { ctx.disable_event_tracking() };
        let _watched = crate::watch::call("cuStreamCreate");
        let main = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| driver_err("cuStreamCreate", 0, e))?;
        let driver_version = nvml
            .as_ref()
            .and_then(|n| n.driver_version())
            .map(|v| format!("{v} (CUDA {})", cuda_driver_version()))
            .unwrap_or_else(cuda_driver_version);
        let _watched = crate::watch::call("cuMemGetInfo");
        let (_, total) = ctx
            .mem_get_info()
            .map_err(|e| driver_err("cuMemGetInfo", 0, e))?;
        let info = DeviceInfo {
            backend: crate::BackendKind::Cuda,
            profile: None,
            index,
            name: facts.name,
            compute_capability: facts.compute_capability,
            total_bytes: total as u64,
            driver_version,
            multiprocessors: facts.multiprocessors,
            uuid: Some(facts.uuid),
            capabilities: device_capabilities(index)?,
            mig,
        };
        let dev = CudaDevice {
            ctx,
            info,
            origin,
            streams: vec![Stream(main)],
            pool: None,
            pool_config: PoolConfig::default(),
            plain: HashMap::new(),
            pooled: HashMap::new(),
            nvml,
            kernels: None,
            events: events::CudaEvents::default(),
            vmm: vmm::CudaVmm::default(),
            graphs: graphs::CudaGraphs::default(),
            kernel_exec_timeout: kernel_exec_timeout(index),
            spin_split_said: false,
        };
        Ok((dev, before_context, context_create_ns))
    }

    fn stream(&self, s: StreamId) -> DevResult<sys::CUstream> {
        self.streams
            .get(s.0 as usize)
            .map(|x| x.0)
            .ok_or_else(|| DeviceError::Invalid(format!("unknown stream {}", s.0)))
    }

    /// A kernel may only touch memory inside a live allocation: a stray write would fault the
    /// whole context, so ranges are checked here as the simulator checks them.
    fn check_range(&self, what: &str, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        let inside = |(base, size): (&DevPtr, &u64)| {
            *base <= ptr && ptr.saturating_add(bytes) <= base + size
        };
        if self.plain.iter().any(inside)
            || self.pooled.iter().any(inside)
            || self.graphs.covers(ptr, bytes)
        {
            Ok(())
        } else {
            Err(DeviceError::Invalid(format!(
                "{what}: range {ptr:#x}+{bytes} is not inside a live allocation"
            )))
        }
    }

    fn check_kernel_ranges(&self, k: &Kernel) -> DevResult<()> {
        match *k {
            Kernel::Touch { ptr, bytes, .. }
            | Kernel::Fill { ptr, bytes, .. }
            | Kernel::Verify { ptr, bytes, .. }
            | Kernel::Memset { ptr, bytes, .. } => self.check_range(k.name(), ptr, bytes),
            Kernel::Copy { dst, src, bytes } | Kernel::DriverCopy { dst, src, bytes } => {
                self.check_range(k.name(), src, bytes)?;
                self.check_range(k.name(), dst, bytes)
            }
            Kernel::Triad { a, b, c, bytes, .. } => {
                self.check_range(k.name(), a, bytes)?;
                self.check_range(k.name(), b, bytes)?;
                self.check_range(k.name(), c, bytes)
            }
            Kernel::Spin { .. } | Kernel::Stack { .. } => Ok(()),
        }
    }

    fn bind(&self) -> DevResult<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_err("cuCtxSetCurrent", 0, e))
    }

    fn kernels(&mut self) -> DevResult<&KernelSet> {
        if self.kernels.is_none() {
            self.bind()?;
            let set = KernelSet::new(&self.info)?;
            self.kernels = Some(set);
        }
        Ok(self.kernels.as_ref().expect("just loaded"))
    }
}

impl DeviceCore for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn mem_info(&mut self) -> DevResult<MemInfo> {
        let _watched = crate::watch::call("cuMemGetInfo");
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(|e| driver_err("cuMemGetInfo", 0, e))?;
        Ok(MemInfo {
            free_bytes: free as u64,
            total_bytes: total as u64,
        })
    }

    fn sleep(&mut self, duration_ns: u64) {
        std::thread::sleep(std::time::Duration::from_nanos(duration_ns));
    }
}

impl Observe for CudaDevice {
    fn nvml_memory(&mut self) -> Option<NvmlMemory> {
        self.nvml.as_ref()?.memory()
    }

    fn processes(&mut self) -> Option<Vec<ProcessUsage>> {
        self.nvml.as_ref()?.processes()
    }

    fn readings(&mut self) -> DevResult<Readings> {
        Ok(Readings::Measured(Box::new(CudaReader {
            ctx: self.ctx.clone(),
            origin: self.origin,
        })))
    }

    fn release_all(&mut self) -> DevResult<()> {
        let _watched = crate::watch::call("cuCtxSynchronize");
        self.bind()?;
        let mut first_err = None;
        let mut note = |r: DevResult<()>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        let handles: Vec<sys::CUstream> = self.streams.iter().map(|s| s.0).collect();
        note(
            self.graphs
                .release_all(&handles, handles[0], self.info.index as i32),
        );
        note(result::ctx::synchronize().map_err(|e| driver_err("cuCtxSynchronize", 0, e)));
        let main = self.streams[0].0;
        for (ptr, _) in self.pooled.drain() {
            // SAFETY: `ptr` is a live pool allocation of this device, freed exactly once here.
            note(
                unsafe { result::free_async(ptr, main) }
                    .map_err(|e| driver_err("cuMemFreeAsync", 0, e)),
            );
        }
        for (ptr, _) in self.plain.drain() {
            // SAFETY: `ptr` is a live cuMemAlloc allocation of this device, freed exactly once here.
            note(unsafe { result::free_sync(ptr) }.map_err(|e| driver_err("cuMemFree", 0, e)));
        }
        note(result::ctx::synchronize().map_err(|e| driver_err("cuCtxSynchronize", 0, e)));
        note(self.vmm.release_all());
        if let Some(Pool(pool)) = self.pool {
            // SAFETY: the pool is live and now holds no outstanding allocation.
            note(
                unsafe { result::mem_pool::trim_to(pool, 0) }
                    .map_err(|e| driver_err("cuMemPoolTrimTo", 0, e)),
            );
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn processes_or_why(&mut self) -> Result<Vec<ProcessUsage>, String> {
        match &self.nvml {
            Some(n) => n.processes_or_why(),
            None => Err("NVML is not available for this device: no process list".into()),
        }
    }
}

impl Memory for CudaDevice {
    fn malloc(&mut self, bytes: u64) -> DevResult<DevPtr> {
        if bytes == 0 {
            return Err(DeviceError::Invalid("cuMemAlloc of 0 bytes".into()));
        }
        self.bind()?;
        let _watched = crate::watch::call("cuMemAlloc");
        // SAFETY: the context is current; the returned memory is only handed out as an address.
        let ptr = unsafe { result::malloc_sync(bytes as usize) }
            .map_err(|e| driver_err("cuMemAlloc", bytes, e))?;
        self.plain.insert(ptr, bytes);
        Ok(ptr)
    }

    fn free(&mut self, ptr: DevPtr) -> DevResult<()> {
        if self.plain.remove(&ptr).is_none() {
            return Err(DeviceError::Invalid(format!(
                "cuMemFree of {ptr:#x}, which is not a live allocation"
            )));
        }
        self.bind()?;
        let _watched = crate::watch::call("cuMemFree");
        // SAFETY: `ptr` came from cuMemAlloc on this context and was not freed (checked above).
        unsafe { result::free_sync(ptr) }.map_err(|e| driver_err("cuMemFree", 0, e))
    }
}

impl Streams for CudaDevice {
    fn create_stream(&mut self) -> DevResult<StreamId> {
        self.bind()?;
        let s = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| driver_err("cuStreamCreate", 0, e))?;
        self.streams.push(Stream(s));
        Ok(StreamId(self.streams.len() as u32 - 1))
    }

    fn stream_synchronize(&mut self, stream: StreamId) -> DevResult<()> {
        let s = self.stream(stream)?;
        self.bind()?;
        let _watched = crate::watch::call("cuStreamSynchronize");
        // SAFETY: `s` is a live stream created by this device.
        unsafe { result::stream::synchronize(s) }
            .map_err(|e| driver_err("cuStreamSynchronize", 0, e))
    }

    fn synchronize(&mut self) -> DevResult<()> {
        self.bind()?;
        let _watched = crate::watch::call("cuCtxSynchronize");
        result::ctx::synchronize().map_err(|e| driver_err("cuCtxSynchronize", 0, e))
    }

    fn record_event(&mut self, stream: StreamId) -> DevResult<EventId> {
        let s = self.stream(stream)?;
        self.bind()?;
        self.events.record(s)
    }

    fn event_query(&mut self, event: EventId) -> DevResult<bool> {
        self.bind()?;
        self.events.query(event)
    }

    fn event_synchronize(&mut self, event: EventId) -> DevResult<()> {
        self.bind()?;
        self.events.synchronize(event)
    }

    fn event_destroy(&mut self, event: EventId) -> DevResult<()> {
        self.events.destroy(event)
    }
}

/// Whether the driver has a kernel-exec timeout on device `index` (0 where it cannot say).
fn kernel_exec_timeout(index: u32) -> bool {
    let Ok(dev) = result::device::get(index as i32) else {
        return false;
    };
    use sys::CUdevice_attribute as A;
    // SAFETY: `dev` is a valid device handle from cuDeviceGet.
    unsafe { result::device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT) }
        .is_ok_and(|v| v != 0)
}

impl Kernels for CudaDevice {
    fn launch(&mut self, kernel: Kernel, stream: StreamId) -> DevResult<KernelOutcome> {
        let s = self.stream(stream)?;
        let capturing = self.graphs.is_capturing(stream.0 as usize);
        if capturing && matches!(kernel, Kernel::Verify { .. } | Kernel::Stack { .. }) {
            return Err(DeviceError::Invalid(format!(
                "{} cannot be captured into a graph",
                kernel.name()
            )));
        }
        self.check_kernel_ranges(&kernel)?;
        self.bind()?;
        let outcome = match kernel {
            // Driver operations need no module: a `hold` child or a memset never JIT-compiles.
            Kernel::Memset { .. } | Kernel::DriverCopy { .. } => {
                launch::driver_operation(kernel, s)?;
                KernelOutcome::default()
            }
            Kernel::Spin { duration_ns } if self.kernel_exec_timeout && !capturing => {
                let slices = spin_slices(duration_ns, true);
                if slices.len() > 1 && !self.spin_split_said {
                    self.spin_split_said = true;
                    crate::notice::say(crate::notice::Notice::Note(&format!(
                        "the driver ends kernels that run too long on this GPU \
                         (CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT): a spin of {duration_ns} ns \
                         runs as {} launches of at most {SPIN_SLICE_NS} ns, back to back on its \
                         stream",
                        slices.len()
                    )));
                }
                let set = self.kernels()?;
                for slice in slices {
                    set.launch(Kernel::Spin { duration_ns: slice }, s)?;
                }
                KernelOutcome::default()
            }
            _ => self.kernels()?.launch(kernel, s)?,
        };
        if capturing {
            self.graphs.note_kernel(stream.0 as usize);
        }
        Ok(outcome)
    }

    fn timed_launch(&mut self, kernel: Kernel, stream: StreamId, repeats: u32) -> DevResult<u64> {
        let s = self.stream(stream)?;
        if self.graphs.is_capturing(stream.0 as usize) {
            return Err(DeviceError::Invalid(
                "a timed launch cannot run on a capturing stream".into(),
            ));
        }
        self.check_kernel_ranges(&kernel)?;
        self.bind()?;
        match kernel {
            Kernel::Memset { .. } | Kernel::DriverCopy { .. } => {
                launch::timed(s, repeats, || launch::driver_operation(kernel, s))
            }
            _ => self.kernels()?.timed(kernel, s, repeats),
        }
    }

    fn load_kernels(&mut self, modules: &[Module]) -> DevResult<u32> {
        self.bind()?;
        let set = self.kernels()?;
        let before = set.modules_loaded();
        for m in modules {
            set.load_module(*m)?;
        }
        Ok(set.modules_loaded() - before)
    }

    fn write_word(&mut self, addr: DevPtr, value: u32, stream: StreamId) -> DevResult<()> {
        let s = self.stream(stream)?;
        self.check_range("write_word", addr, 4)?;
        self.bind()?;
        // A synchronous copy would run on the legacy stream, which is not ordered with the
        // harness's non-blocking streams: a `fill` still running there could overwrite it.
        let word = [value];
        // SAFETY: `addr` lies inside a live allocation (checked above); `word` outlives the
        // copy because the stream is synchronized before it goes out of scope.
        unsafe { result::memcpy_htod_async(addr, &word, s) }
            .map_err(|e| driver_err("cuMemcpyHtoDAsync", 4, e))?;
        // SAFETY: `s` is a live stream created by this device.
        unsafe { result::stream::synchronize(s) }
            .map_err(|e| driver_err("cuStreamSynchronize", 0, e))
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if let Err(e) = self.release_all() {
            let w = format!("releasing device memory at exit: {e}");
            crate::notice::say(crate::notice::Notice::Warning(&w));
        }
        self.kernels.take();
        let _ = self.events.destroy_all();
        if let Some(Pool(pool)) = self.pool.take() {
            // SAFETY: every allocation from the pool was freed by release_all above.
            let _ = unsafe { result::mem_pool::destroy(pool) };
        }
        for Stream(s) in self.streams.drain(..) {
            // SAFETY: each stream was created by this device and is destroyed once.
            let _ = unsafe { result::stream::destroy(s) };
        }
    }
}

/// `cuMemGetInfo` from a thread of its own, in this device's context and on its clock.
struct CudaReader {
    ctx: Arc<CudaContext>,
    origin: Instant,
}

impl Reader for CudaReader {
    fn bind(&mut self) -> Result<(), String> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_err("cuCtxSetCurrent", 0, e).to_string())
    }

    fn read(&self) -> Result<RawReading, String> {
        let _watched = crate::watch::call("cuMemGetInfo");
        self.read_bare()
    }

    fn read_bare(&self) -> Result<RawReading, String> {
        let (free, total) =
            result::mem_get_info().map_err(|e| driver_err("cuMemGetInfo", 0, e).to_string())?;
        Ok(RawReading {
            t_ns: crate::reading::since(self.origin),
            free_bytes: free as u64,
            total_bytes: total as u64,
            nvml: None,
        })
    }

    fn now_ns(&self) -> u64 {
        crate::reading::since(self.origin)
    }
}
