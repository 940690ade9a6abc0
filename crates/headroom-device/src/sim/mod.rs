//! The simulated GPU: the driver's memory rules in deterministic virtual time.
//!
//! Time is a host clock plus one clock per stream (when its queued work finishes). Device calls
//! advance the host clock by the profile's latencies; kernels queue work on their stream;
//! synchronizing makes the host wait. Memory in use is the sum of the context, the stack
//! reservation, plain allocations (page-rounded), the pool's reservation, graph memory and the
//! other processes present at that instant; `cuMemGetInfo` reports the rest as free.

mod capabilities;
mod content;
mod events;
mod graphs;
mod kernels;
mod memory;
mod pages;
mod pool;
mod uuid;
mod vmm;

pub use uuid::{sim_card_identity, sim_uuid};

use std::collections::HashMap;

use crate::prelude::*;
use crate::profile::SimProfile;
use crate::reading::{ModeledMemory, PublishedMemory, Readings};
use crate::{
    Capability, DevPtr, DevResult, DeviceError, DeviceInfo, EventId, GraphId, GraphMemUsage,
    GraphShape, Kernel, MemInfo, NvmlMemory, ProcessUsage, StreamId,
};

use content::ContentModel;
use events::SimEvents;
use graphs::SimGraphs;
use pages::SmallHeap;
use pool::SimPool;
use vmm::SimVmm;

/// Another process holding memory on the simulated device for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenant {
    pub pid: u32,
    pub bytes: u64,
    pub start_ns: u64,
    /// `u64::MAX`: holds it for the whole run.
    pub end_ns: u64,
}

impl Tenant {
    fn present_at(&self, t: u64) -> bool {
        self.start_ns <= t && t < self.end_ns
    }
}

/// Where simulated allocations live: far apart, never reused, so addresses stay unique.
const VA_BASE: DevPtr = 0x7f00_0000_0000;

/// The size-dependent part of an allocation's latency: `per_gib_ns` for each GiB of `bytes`,
/// saturating for sizes no device has.
fn per_gib_ns(per_gib_ns: u64, bytes: u64) -> u64 {
    u64::try_from((u128::from(per_gib_ns) * u128::from(bytes)) >> 30).unwrap_or(u64::MAX)
}

pub struct SimDevice {
    profile: SimProfile,
    info: DeviceInfo,
    host_ns: u64,
    /// Per stream: the time its queued work completes.
    streams: Vec<u64>,
    context_bytes: u64,
    /// Stack reservation above what the context started with.
    stack_extra_bytes: u64,
    stack_per_thread_bytes: u64,
    /// Plain allocations above the small limit: pointer → page-rounded bytes.
    large: HashMap<DevPtr, u64>,
    large_bytes: u64,
    small: SmallHeap,
    pool: SimPool,
    tenants: Vec<Tenant>,
    next_va: DevPtr,
    content: ContentModel,
    /// Requested sizes of live plain and pool allocations (for `fill`/`verify` checks).
    sizes: HashMap<DevPtr, u64>,
    before_context: NvmlMemory,
    events: SimEvents,
    /// Reserved ranges and mapped physical pages (`cuMemMap`), counted in device memory.
    vmm: SimVmm,
    /// Captures, graphs and the graph allocator's memory.
    graphs: SimGraphs,
    /// Modules loaded (`load_kernels`), by `crate::kernels::Module` index.
    modules_loaded: [bool; crate::kernels::Module::COUNT],
    /// Device memory the loaded kernels hold: their modules and `verify`'s result buffer (a
    /// small allocation, modeled as the shared page it opens). Kept until the device closes.
    kernel_bytes: u64,
    /// Where this device publishes its memory for its modeled readings.
    memory: std::sync::Arc<ModeledMemory>,
}

impl SimDevice {
    /// Opens a simulated device: the context is created (its overhead taken) at virtual time
    /// `context_create`, after an NVML reading of the device without it.
    pub fn open(profile: SimProfile, index: u32) -> SimDevice {
        let m = &profile.memory;
        let tenants: Vec<Tenant> = profile
            .other_processes
            .iter()
            .map(|p| Tenant {
                pid: p.pid,
                bytes: p.bytes.0,
                start_ns: p.start.0,
                end_ns: p
                    .duration
                    .map_or(u64::MAX, |d| p.start.0.saturating_add(d.0)),
            })
            .collect();
        let (uuid, mig) = sim_card_identity(&profile, index);
        let info = DeviceInfo {
            backend: crate::BackendKind::Sim,
            profile: Some(profile.name.clone()),
            index,
            name: profile.gpu_name.clone(),
            compute_capability: profile.compute_capability.clone(),
            total_bytes: m.total_bytes.0,
            driver_version: profile.driver_version.clone(),
            multiprocessors: profile.multiprocessors,
            uuid: Some(uuid),
            mig,
            capabilities: profile.capabilities,
        };
        let mut dev = SimDevice {
            info,
            host_ns: 0,
            streams: vec![0],
            context_bytes: 0,
            stack_extra_bytes: 0,
            stack_per_thread_bytes: profile.stack.default_per_thread_bytes.0,
            large: HashMap::new(),
            large_bytes: 0,
            small: SmallHeap::new(m.page_bytes.0, m.small_alloc_spacing_bytes.0),
            pool: SimPool::new(m.pool_granularity_bytes.0),
            tenants,
            next_va: VA_BASE,
            content: ContentModel::default(),
            sizes: HashMap::new(),
            events: SimEvents::default(),
            vmm: SimVmm::new(m.pool_granularity_bytes.0),
            graphs: SimGraphs::new(profile.graphs.exec_bytes_per_node.0),
            before_context: NvmlMemory {
                total_bytes: 0,
                reserved_bytes: Some(0),
                used_bytes: 0,
                free_bytes: 0,
            },
            modules_loaded: [false; crate::kernels::Module::COUNT],
            kernel_bytes: 0,
            memory: Default::default(),
            profile,
        };
        dev.before_context = dev.nvml_at(0);
        dev.host_ns = dev.profile.latency.context_create.0;
        dev.context_bytes = dev.profile.memory.context_overhead_bytes.0;
        dev
    }

    /// NVML's reading taken before the context existed.
    pub fn before_context(&self) -> NvmlMemory {
        self.before_context
    }

    pub fn profile(&self) -> &SimProfile {
        &self.profile
    }

    /// Another process starts holding `bytes` now, for `duration_ns` (`None`: until the end).
    pub fn add_tenant(&mut self, pid: u32, bytes: u64, duration_ns: Option<u64>) {
        let start_ns = self.host_ns;
        self.tenants.push(Tenant {
            pid,
            bytes,
            start_ns,
            end_ns: duration_ns.map_or(u64::MAX, |d| start_ns.saturating_add(d)),
        });
    }

    /// Bytes this process holds on the device, its context included.
    fn own_used_bytes(&self) -> u64 {
        self.context_bytes
            + self.kernel_bytes
            + self.stack_extra_bytes
            + self.large_bytes
            + self.small.bytes_held()
            + self.pool.reserved_bytes()
            + self.vmm.mapped_bytes()
            + self.graphs.device_bytes()
    }

    /// Bytes in use at virtual time `t`, as `cuMemGetInfo` would count them.
    fn used_at(&self, t: u64) -> u64 {
        let others: u64 = self
            .tenants
            .iter()
            .filter(|x| x.present_at(t))
            .map(|x| x.bytes)
            .sum();
        self.own_used_bytes() + others
    }

    fn free_at(&self, t: u64) -> u64 {
        self.info.total_bytes.saturating_sub(self.used_at(t))
    }

    fn nvml_at(&self, t: u64) -> NvmlMemory {
        let total_cuda = self.info.total_bytes;
        let reserved = self.profile.memory.nvml_reserved_bytes.0;
        let used = self.used_at(t).min(total_cuda);
        NvmlMemory {
            total_bytes: total_cuda + reserved,
            reserved_bytes: Some(reserved),
            used_bytes: used,
            free_bytes: total_cuda - used,
        }
    }

    /// A fresh virtual range of `bytes` (page-rounded). Refused as out of memory when the
    /// 64-bit address space has no room left for it (a request near 2^64 bytes).
    fn take_va(&mut self, bytes: u64) -> DevResult<DevPtr> {
        let page = self.profile.memory.page_bytes.0;
        let ptr = self.next_va;
        self.next_va = crate::units::checked_round_up(bytes.max(1), page)
            .and_then(|span| ptr.checked_add(span))
            .ok_or(DeviceError::OutOfMemory {
                requested_bytes: bytes,
            })?;
        Ok(ptr)
    }

    /// Moves the host clock forward. Saturates rather than wraps: durations are capped at
    /// `units::MAX_DURATION_NS`, so only a broken profile could get near `u64::MAX`.
    fn advance(&mut self, ns: u64) {
        self.host_ns = self.host_ns.saturating_add(ns);
    }

    fn stream_index(&self, s: StreamId) -> DevResult<usize> {
        let i = s.0 as usize;
        if i < self.streams.len() {
            Ok(i)
        } else {
            Err(DeviceError::Invalid(format!("unknown stream {}", s.0)))
        }
    }

    /// Queues `duration_ns` of GPU work on a stream after a host-side launch.
    fn enqueue(&mut self, stream: usize, duration_ns: u64) -> u64 {
        self.advance(self.profile.latency.launch.0);
        let start = self.streams[stream].max(self.host_ns);
        self.streams[stream] = start.saturating_add(duration_ns);
        duration_ns
    }

    fn transfer_ns(bytes: f64, per_s: f64) -> u64 {
        (bytes / per_s * 1e9).ceil() as u64
    }

    /// The modeled GPU time of one launch.
    fn kernel_ns(&self, k: &Kernel) -> u64 {
        let b = &self.profile.bandwidth;
        match *k {
            Kernel::Touch {
                bytes,
                stride_bytes,
                ..
            } => {
                let pages = bytes.div_ceil(stride_bytes.max(1));
                Self::transfer_ns(pages as f64, b.touch_pages_per_s)
            }
            Kernel::Fill { bytes, .. } => Self::transfer_ns(bytes as f64, b.fill_bytes_per_s),
            Kernel::Verify { bytes, .. } => Self::transfer_ns(bytes as f64, b.verify_bytes_per_s),
            Kernel::Copy { bytes, .. } | Kernel::DriverCopy { bytes, .. } => {
                Self::transfer_ns(2.0 * bytes as f64, b.copy_bytes_per_s)
            }
            Kernel::Triad { bytes, .. } => {
                Self::transfer_ns(3.0 * bytes as f64, b.copy_bytes_per_s)
            }
            Kernel::Memset { bytes, .. } => Self::transfer_ns(bytes as f64, b.memset_bytes_per_s),
            Kernel::Spin { duration_ns } => duration_ns,
            Kernel::Stack { .. } => 1_000,
        }
    }

    /// Calls the driver refuses on a capturing stream (`stream`), or while any stream captures
    /// (`None`: a device-wide call), with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
    fn refuse_while_capturing(&self, call: &str, stream: Option<StreamId>) -> DevResult<()> {
        let capturing = match stream {
            Some(s) => self.graphs.is_capturing(s),
            None => self.graphs.any_capturing(),
        };
        if capturing {
            return Err(DeviceError::Invalid(format!(
                "{call} while a stream is capturing (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)"
            )));
        }
        Ok(())
    }

    /// The live allocation containing `[ptr, ptr + bytes)`, if there is one.
    fn check_range(&self, what: &'static str, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        let inside = self
            .sizes
            .iter()
            .any(|(base, size)| *base <= ptr && ptr.saturating_add(bytes) <= base + size);
        if inside || self.vmm.covers(ptr, bytes) {
            Ok(())
        } else {
            Err(DeviceError::Invalid(format!(
                "{what}: range {ptr:#x}+{bytes} is not inside a live allocation"
            )))
        }
    }

    fn apply_kernel(&mut self, k: &Kernel) -> DevResult<Option<crate::Mismatch>> {
        match *k {
            Kernel::Touch { ptr, bytes, .. } => self.check_range("touch", ptr, bytes)?,
            Kernel::Fill { ptr, bytes, seed } => {
                self.check_range("fill", ptr, bytes)?;
                self.content.fill(ptr, bytes, seed);
            }
            Kernel::Verify { ptr, bytes, seed } => {
                self.check_range("verify", ptr, bytes)?;
                return Ok(self.content.verify(ptr, bytes, seed));
            }
            Kernel::Copy { dst, src, bytes } | Kernel::DriverCopy { dst, src, bytes } => {
                self.check_range("copy source", src, bytes)?;
                self.check_range("copy destination", dst, bytes)?;
                // Contents are not tracked through copies: the destination becomes unknown.
                self.content.forget(dst, bytes);
            }
            Kernel::Triad { a, b, c, bytes, .. } => {
                self.check_range("triad a", a, bytes)?;
                self.check_range("triad b", b, bytes)?;
                self.check_range("triad c", c, bytes)?;
                self.content.forget(a, bytes);
            }
            Kernel::Memset { ptr, bytes, .. } => {
                self.check_range("memset", ptr, bytes)?;
                self.content.forget(ptr, bytes);
            }
            Kernel::Spin { .. } => {}
            Kernel::Stack { frame_bytes } => {
                // The kernel that runs is the smallest `stack_*` variant that holds the frame,
                // as on the real GPU; its frame is what the driver reserves for.
                let f = crate::kernels::stack_function(frame_bytes)?;
                let per_thread = f.frame_bytes().unwrap_or(frame_bytes) as u64;
                if per_thread > self.stack_per_thread_bytes {
                    let threads = self.profile.multiprocessors as u64
                        * self.profile.stack.threads_per_multiprocessor as u64;
                    let base = self.profile.stack.default_per_thread_bytes.0;
                    let extra = (per_thread - base) * threads;
                    let grow = extra - self.stack_extra_bytes;
                    if grow > self.free_at(self.host_ns) {
                        return Err(DeviceError::OutOfMemory {
                            requested_bytes: grow,
                        });
                    }
                    self.stack_per_thread_bytes = per_thread;
                    self.stack_extra_bytes = extra;
                }
            }
        }
        Ok(None)
    }
}

impl DeviceCore for SimDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn now_ns(&self) -> u64 {
        self.host_ns
    }

    fn mem_info(&mut self) -> DevResult<MemInfo> {
        self.advance(self.profile.latency.mem_get_info.0);
        Ok(MemInfo {
            free_bytes: self.free_at(self.host_ns),
            total_bytes: self.info.total_bytes,
        })
    }

    fn sleep(&mut self, duration_ns: u64) {
        self.advance(duration_ns);
    }

    fn publish_memory(&self) {
        // Between calls only modeled other processes change free memory.
        self.memory.publish(PublishedMemory {
            total_bytes: self.info.total_bytes,
            own_used_bytes: self.own_used_bytes(),
            others: self
                .tenants
                .iter()
                .map(|x| (x.start_ns, x.end_ns, x.bytes))
                .collect(),
        });
    }

    fn alloc_rounding(&self) -> crate::rounding::AllocRounding {
        crate::rounding::AllocRounding::of_profile(&self.profile)
    }

    fn simulated(&self) -> Option<&dyn Simulated> {
        Some(self)
    }

    fn simulated_mut(&mut self) -> Option<&mut dyn Simulated> {
        Some(self)
    }
}

impl Observe for SimDevice {
    fn nvml_memory(&mut self) -> Option<NvmlMemory> {
        self.advance(self.profile.latency.nvml_memory.0);
        Some(self.nvml_at(self.host_ns))
    }

    fn processes(&mut self) -> Option<Vec<ProcessUsage>> {
        let t = self.host_ns;
        let mine = self.own_used_bytes();
        let mut v = vec![ProcessUsage {
            pid: std::process::id(),
            used_bytes: Some(mine),
            is_self: true,
        }];
        v.extend(
            self.tenants
                .iter()
                .filter(|x| x.present_at(t))
                .map(|x| ProcessUsage {
                    pid: x.pid,
                    used_bytes: Some(x.bytes),
                    is_self: false,
                }),
        );
        Some(v)
    }

    fn readings(&mut self) -> DevResult<Readings> {
        self.publish_memory();
        Ok(Readings::Modeled {
            query_ns: self.profile.latency.mem_get_info.0,
            now_ns: self.host_ns,
            memory: self.memory.clone(),
        })
    }

    fn release_all(&mut self) -> DevResult<()> {
        self.host_ns = self
            .host_ns
            .max(self.streams.iter().copied().max().unwrap_or(0));
        // Tenants a workload started end with it; the profile's own stay.
        let now = self.host_ns;
        let first_runtime = self.profile.other_processes.len();
        for t in &mut self.tenants[first_runtime..] {
            t.end_ns = t.end_ns.min(now);
        }

        self.vmm.clear();
        self.graphs.clear();
        self.events.clear();
        self.large.clear();
        self.large_bytes = 0;
        self.small.clear();
        self.pool.clear();
        self.sizes.clear();
        self.content.clear();
        Ok(())
    }
}

impl Simulated for SimDevice {
    fn add_simulated_tenant(&mut self, pid: u32, bytes: u64, duration_ns: u64) -> DevResult<()> {
        // A tenant is a process with a context of its own, as a `headroom hold` child is.
        let held = bytes.saturating_add(self.profile.memory.context_overhead_bytes.0);
        if held > self.free_at(self.host_ns) {
            return Err(DeviceError::OutOfMemory {
                requested_bytes: held,
            });
        }
        self.add_tenant(pid, held, Some(duration_ns));
        Ok(())
    }
}

impl Streams for SimDevice {
    fn create_stream(&mut self) -> DevResult<StreamId> {
        self.advance(self.profile.latency.stream_create.0);
        self.streams.push(self.host_ns);
        Ok(StreamId(self.streams.len() as u32 - 1))
    }

    fn stream_synchronize(&mut self, stream: StreamId) -> DevResult<()> {
        let i = self.stream_index(stream)?;
        self.refuse_while_capturing("cuStreamSynchronize", Some(stream))?;
        self.host_ns = self
            .host_ns
            .max(self.streams[i])
            .saturating_add(self.profile.latency.synchronize.0);
        self.pool.synchronized(Some(stream), self.host_ns);
        Ok(())
    }

    fn synchronize(&mut self) -> DevResult<()> {
        self.refuse_while_capturing("cuCtxSynchronize", None)?;
        let busy = self.streams.iter().copied().max().unwrap_or(0);
        self.host_ns = self
            .host_ns
            .max(busy)
            .saturating_add(self.profile.latency.synchronize.0);
        self.pool.synchronized(None, self.host_ns);
        Ok(())
    }

    fn record_event(&mut self, stream: StreamId) -> DevResult<EventId> {
        self.sim_record_event(stream)
    }

    fn event_query(&mut self, event: EventId) -> DevResult<bool> {
        self.sim_event_query(event)
    }

    fn event_synchronize(&mut self, event: EventId) -> DevResult<()> {
        self.sim_event_synchronize(event)
    }

    fn event_destroy(&mut self, event: EventId) -> DevResult<()> {
        self.sim_event_destroy(event)
    }
}

impl VirtualMemory for SimDevice {
    fn vmm_granularity(&mut self) -> DevResult<u64> {
        self.require(
            Capability::VirtualMemoryManagement,
            "cuMemGetAllocationGranularity",
        )?;
        Ok(self.vmm.granularity())
    }

    fn vmm_reserve(&mut self, bytes: u64) -> DevResult<DevPtr> {
        self.sim_vmm_reserve(bytes)
    }

    fn vmm_map(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.sim_vmm_map(ptr, bytes)
    }

    fn vmm_unmap(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.sim_vmm_unmap(ptr, bytes)
    }

    fn vmm_free(&mut self, ptr: DevPtr) -> DevResult<()> {
        self.sim_vmm_free(ptr)
    }
}

impl Graphs for SimDevice {
    fn graph_begin_capture(&mut self, stream: StreamId) -> DevResult<()> {
        self.sim_graph_begin_capture(stream)
    }

    fn graph_end_capture(&mut self, stream: StreamId) -> DevResult<(GraphId, GraphShape)> {
        self.sim_graph_end_capture(stream)
    }

    fn graph_malloc(&mut self, bytes: u64, stream: StreamId) -> DevResult<DevPtr> {
        self.sim_graph_malloc(bytes, stream)
    }

    fn graph_free(&mut self, ptr: DevPtr, stream: StreamId) -> DevResult<()> {
        self.sim_graph_free(ptr, stream)
    }

    fn graph_instantiate(&mut self, graph: GraphId, auto_free_on_launch: bool) -> DevResult<()> {
        self.sim_graph_instantiate(graph, auto_free_on_launch)
    }

    fn graph_upload(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()> {
        self.sim_graph_upload(graph, stream)
    }

    fn graph_launch(&mut self, graph: GraphId, stream: StreamId) -> DevResult<()> {
        self.sim_graph_launch(graph, stream)
    }

    fn graph_destroy(&mut self, graph: GraphId) -> DevResult<()> {
        self.sim_graph_destroy(graph)
    }

    fn graph_mem_trim(&mut self) -> DevResult<()> {
        self.sim_graph_mem_trim()
    }

    fn graph_mem_usage(&mut self) -> DevResult<GraphMemUsage> {
        Ok(self.graphs.usage())
    }
}

#[cfg(test)]
mod tests;
