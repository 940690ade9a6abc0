//! The driver's state in this process: devices, their primary contexts and memory, and every
//! handle handed out, behind one lock; and each thread's current context.
//!
//! Handles are tagged numbers, never addresses, so a stale handle is an error. A device's
//! memory in use (what `cuMemGetInfo` and NVML see) is the sum of its context (overhead and
//! stack reservation), loaded modules, plain allocations' pages, pools' reservations, VMM
//! physical memory and graph memory; it is published to the shared table at every change.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use crate::abi::{CUresult, Handle};
use crate::config::{self, Config};
use crate::content::Content;
use crate::errors::*;
use crate::graphs::{Capture, ExecRec, GraphMem, GraphRec};
use crate::kernels::Kind;
use crate::memory::{AddressSpace, PlainHeap, Regions};
use crate::pool::Pool;
use crate::ptx::Entry;
use crate::shared::SharedTable;
use crate::stream::{EventTimes, StreamShared};
use crate::vmm::Vmm;

/// Handle kinds, in the top byte of a handle's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    Context = 0xC1,
    Stream = 0x51,
    Event = 0xE1,
    Module = 0x3D,
    Function = 0xF1,
    Pool = 0x90,
    Graph = 0x6A,
    Exec = 0x6E,
    Nvml = 0x4E,
}

pub fn handle(tag: Tag, id: u64) -> Handle {
    (((tag as u64) << 56) | id) as usize as Handle
}

pub fn id_of(tag: Tag, h: Handle) -> Result<u64, CUresult> {
    let v = h as usize as u64;
    if v >> 56 == tag as u64 {
        Ok(v & ((1 << 56) - 1))
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

pub struct Context {
    pub refcount: u32,
    pub sticky: Arc<AtomicU32>,
    /// Per-thread stack (`CU_LIMIT_STACK_SIZE`).
    pub stack_limit: u64,
    /// The legacy NULL stream's id.
    pub legacy: u64,
    /// Other limits as set (`cuCtxSetLimit`).
    pub limits: HashMap<u32, u64>,
}

pub struct Device {
    pub index: u32,
    pub ctx: Option<Context>,
    /// Context overhead plus the stack reservation above the default (0 without a context).
    pub ctx_bytes: u64,
    pub module_bytes: u64,
    pub plain: PlainHeap,
    /// Requested size of each live plain allocation, and its region id.
    pub plain_live: HashMap<u64, (u64, u64)>,
    pub pools: HashMap<u64, Pool>,
    pub default_pool: u64,
    pub current_pool: u64,
    pub vmm_bytes: u64,
    pub graph: GraphMem,
    pub regions: Regions,
    pub content: Arc<Mutex<Content>>,
    pub slot: Option<usize>,
}

impl Device {
    pub fn used(&self) -> u64 {
        self.ctx_bytes
            + self.module_bytes
            + self.plain.bytes()
            + self.pools.values().map(|p| p.reserved()).sum::<u64>()
            + self.vmm_bytes
            + self.graph.device_bytes()
    }
}

pub struct StreamRec {
    pub device: u32,
    pub shared: Arc<StreamShared>,
    pub legacy: bool,
    /// Ordered with the legacy stream (created without `CU_STREAM_NON_BLOCKING`).
    pub blocking: bool,
    pub capture: Option<Capture>,
    /// Per other stream: the latest of its operations this stream was made to wait for.
    pub waited: HashMap<u64, u64>,
}

pub struct EventRec {
    pub device: u32,
    pub flags: u32,
    pub times: Arc<EventTimes>,
    /// The latest record: stream, its operation number, the record's number.
    pub recorded: Option<(Arc<StreamShared>, u64, u64)>,
    pub records: u64,
}

pub struct ModuleRec {
    pub device: u32,
    pub functions: Vec<u64>,
}

pub struct FuncRec {
    pub device: u32,
    pub module: u64,
    pub entry: Entry,
    pub kind: Kind,
}

pub struct Driver {
    pub cfg: Arc<Config>,
    pub generation: u64,
    pub initialized: bool,
    pub nvml_sessions: u32,
    pub shared: SharedTable,
    pub devices: Vec<Device>,
    pub va: AddressSpace,
    next_id: u64,
    pub streams: HashMap<u64, StreamRec>,
    pub events: HashMap<u64, EventRec>,
    pub modules: HashMap<u64, ModuleRec>,
    pub functions: HashMap<u64, FuncRec>,
    pub graphs: HashMap<u64, GraphRec>,
    pub execs: HashMap<u64, ExecRec>,
    pub vmm: Vmm,
}

static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);

thread_local! {
    /// This thread's context stack (device indices), for the driver generation it was set in.
    static CURRENT: RefCell<(u64, Vec<u32>)> = const { RefCell::new((0, Vec::new())) };
}

/// Runs `f` on the driver, made from the current settings on first use (or after they change).
pub fn try_with_driver<R>(f: impl FnOnce(&mut Driver) -> R) -> Result<R, String> {
    let loaded = config::loaded();
    let cfg = loaded.config.clone()?;
    let mut guard = DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    if guard
        .as_ref()
        .is_none_or(|d| d.generation != loaded.generation)
    {
        if let Some(old) = guard.take() {
            old.shutdown();
        }
        *guard = Some(Driver::new(cfg, loaded.generation)?);
    }
    Ok(f(guard.as_mut().expect("made above")))
}

pub fn with_driver<R>(f: impl FnOnce(&mut Driver) -> R) -> Option<R> {
    try_with_driver(f).ok()
}

/// The CUDA call convention: a driver that cannot start reads as not initialized.
pub fn cu<R>(f: impl FnOnce(&mut Driver) -> Result<R, CUresult>) -> Result<R, CUresult> {
    try_with_driver(f).unwrap_or(Err(CUDA_ERROR_NOT_INITIALIZED))
}

pub fn thread_stack<R>(generation: u64, f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != generation {
            *c = (generation, Vec::new());
        }
        f(&mut c.1)
    })
}

impl Driver {
    fn new(cfg: Arc<Config>, generation: u64) -> Result<Driver, String> {
        let shared = SharedTable::open(cfg.state_path.as_deref(), cfg.release_delay)?;
        let m = &cfg.profile.memory;
        let mut d = Driver {
            generation,
            initialized: false,
            nvml_sessions: 0,
            shared,
            devices: Vec::new(),
            va: AddressSpace::default(),
            next_id: 1,
            streams: HashMap::new(),
            events: HashMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
            vmm: Vmm::default(),
            cfg: cfg.clone(),
        };
        for index in 0..cfg.cuda.len() as u32 {
            let pool_id = d.next_id();
            let mut pools = HashMap::new();
            pools.insert(
                pool_id,
                Pool::new(pool_id, index, m.pool_granularity_bytes.0, 0),
            );
            d.devices.push(Device {
                index,
                ctx: None,
                ctx_bytes: 0,
                module_bytes: 0,
                plain: PlainHeap::new(
                    m.page_bytes.0,
                    m.small_alloc_limit_bytes.0,
                    m.small_alloc_spacing_bytes.0,
                ),
                plain_live: HashMap::new(),
                pools,
                default_pool: pool_id,
                current_pool: pool_id,
                vmm_bytes: 0,
                graph: GraphMem::default(),
                regions: Regions::default(),
                content: Arc::new(Mutex::new(Content::default())),
                slot: None,
            });
        }
        Ok(d)
    }

    /// Ends this driver (new settings): workers finish, slots are given back.
    fn shutdown(self) {
        for s in self.streams.values() {
            s.shared.close();
        }
        for d in &self.devices {
            if let Some(slot) = d.slot {
                self.shared.release(slot);
            }
        }
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn require_init(&self) -> Result<(), CUresult> {
        if self.initialized {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_INITIALIZED)
        }
    }

    /// A device ordinal, checked.
    pub fn device(&self, ordinal: i32) -> Result<u32, CUresult> {
        self.require_init()?;
        if ordinal >= 0 && (ordinal as usize) < self.devices.len() {
            Ok(ordinal as u32)
        } else {
            Err(CUDA_ERROR_INVALID_DEVICE)
        }
    }

    /// The device of the calling thread's current context, whatever its error state.
    pub fn current_any(&self) -> Result<u32, CUresult> {
        self.require_init()?;
        let top = thread_stack(self.generation, |s| s.last().copied());
        match top {
            Some(d) if self.devices[d as usize].ctx.is_some() => Ok(d),
            _ => Err(CUDA_ERROR_INVALID_CONTEXT),
        }
    }

    /// The device of the current context; a context with a sticky error returns it.
    pub fn current(&self) -> Result<u32, CUresult> {
        let d = self.current_any()?;
        let sticky = self.sticky(d);
        if sticky != 0 { Err(sticky) } else { Ok(d) }
    }

    pub fn sticky(&self, device: u32) -> CUresult {
        self.devices[device as usize]
            .ctx
            .as_ref()
            .map_or(0, |c| c.sticky.load(SeqCst))
    }

    pub fn dev(&mut self, device: u32) -> &mut Device {
        &mut self.devices[device as usize]
    }

    /// Writes this process's usage of `device` to the shared table.
    pub fn publish(&mut self, device: u32) {
        let d = &self.devices[device as usize];
        if let Some(slot) = d.slot {
            self.shared.set_used(slot, d.used());
        }
    }

    /// Free device memory, every process counted.
    pub fn free_bytes(&self, device: u32) -> u64 {
        self.cfg
            .total_bytes(device)
            .saturating_sub(self.shared.device_used(self.cfg.memory_key(device)))
    }

    /// `Ok` if `bytes` more fit on `device`, else out of memory.
    pub fn reserve(&self, device: u32, bytes: u64) -> Result<(), CUresult> {
        if bytes <= self.free_bytes(device) {
            Ok(())
        } else {
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
    }

    /// The memory of `device`'s context with a per-thread stack of `limit`.
    pub fn ctx_bytes_for(&self, device: u32, limit: u64) -> u64 {
        let p = &self.cfg.profile;
        let threads =
            self.cfg.multiprocessors(device) as u64 * p.stack.threads_per_multiprocessor as u64;
        let base = p.memory.context_overhead_bytes.0;
        let default = p.stack.default_per_thread_bytes.0;
        if limit >= default {
            base + (limit - default) * threads
        } else {
            base.saturating_sub((default - limit) * threads)
        }
    }

    /// Changes the stack limit of `device`'s context, taking or giving back its reservation.
    pub fn set_stack_limit(&mut self, device: u32, limit: u64) -> Result<(), CUresult> {
        let new = self.ctx_bytes_for(device, limit);
        let old = self.devices[device as usize].ctx_bytes;
        if new > old {
            self.reserve(device, new - old)?;
        }
        let d = self.dev(device);
        d.ctx_bytes = new;
        if let Some(c) = d.ctx.as_mut() {
            c.stack_limit = limit;
        }
        self.publish(device);
        Ok(())
    }

    /// The stream a handle names for the current context (0 and the legacy handles: the NULL
    /// stream). Checks that it belongs to `device`.
    pub fn stream_id(&self, device: u32, h: Handle) -> Result<u64, CUresult> {
        let v = h as usize;
        if v == 0 || v == crate::abi::CU_STREAM_LEGACY || v == crate::abi::CU_STREAM_PER_THREAD {
            let ctx = self.devices[device as usize].ctx.as_ref();
            return ctx.map(|c| c.legacy).ok_or(CUDA_ERROR_INVALID_CONTEXT);
        }
        let id = id_of(Tag::Stream, h)?;
        match self.streams.get(&id) {
            Some(s) if s.device == device => Ok(id),
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    }

    /// Makes a stream (and its worker) on `device`.
    pub fn make_stream(
        &mut self,
        device: u32,
        legacy: bool,
        blocking: bool,
    ) -> Result<u64, CUresult> {
        let id = self.next_id();
        let sticky = self.devices[device as usize]
            .ctx
            .as_ref()
            .map(|c| c.sticky.clone())
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let shared = StreamShared::spawn(id, device, sticky).map_err(|e| {
            eprintln!("headroom-fake-gpu: {e}");
            CUDA_ERROR_OUT_OF_MEMORY
        })?;
        self.streams.insert(
            id,
            StreamRec {
                device,
                shared,
                legacy,
                blocking,
                capture: None,
                waited: HashMap::new(),
            },
        );
        Ok(id)
    }

    /// Streams of `device`, capturing ones excepted (they have nothing queued).
    pub fn device_streams(&self, device: u32) -> Vec<Arc<StreamShared>> {
        self.streams
            .values()
            .filter(|s| s.device == device && s.capture.is_none())
            .map(|s| s.shared.clone())
            .collect()
    }
}

/// Marks the calling thread's context with a sticky error (an injected fault).
pub fn poison_current(code: CUresult) {
    with_driver(|d| {
        if let Ok(dev) = d.current_any()
            && let Some(c) = d.devices[dev as usize].ctx.as_ref()
        {
            let _ = c.sticky.compare_exchange(0, code, SeqCst, SeqCst);
        }
    });
}
