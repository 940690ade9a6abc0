//! Primary contexts (retain, release, destruction) and the rules for queueing work: the legacy
//! NULL stream's implicit ordering with blocking streams, and capture.
//!
//! A primary context takes `context_overhead_bytes` (its default stack included) at the first
//! retain and gives everything back at the last release. In exclusive-process compute mode a
//! second process cannot create one (`CUDA_ERROR_DEVICE_UNAVAILABLE`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use crate::abi::CUresult;
use crate::errors::*;
use crate::graphs::{GraphMem, Node};
use crate::memory::Regions;
use crate::pool::Pool;
use crate::state::{Context, Driver};
use crate::stream::{Dep, StreamShared, Work};

impl Driver {
    pub fn retain(&mut self, device: u32) -> Result<(), CUresult> {
        if let Some(c) = self.dev(device).ctx.as_mut() {
            c.refcount += 1;
            return Ok(());
        }
        let key = self.cfg.memory_key(device);
        if self.cfg.exclusive_process && self.shared.other_context(key).is_some() {
            return Err(CUDA_ERROR_DEVICE_UNAVAILABLE);
        }
        let default_stack = self.cfg.profile.stack.default_per_thread_bytes.0;
        let bytes = self.ctx_bytes_for(device, default_stack);
        self.reserve(device, bytes)?;
        let slot = self.shared.claim(key).map_err(|e| {
            eprintln!("headroom-fake-gpu: {e}");
            CUDA_ERROR_OUT_OF_MEMORY
        })?;
        self.shared.set_context(slot, true);
        let d = self.dev(device);
        d.slot = Some(slot);
        d.ctx_bytes = bytes;
        d.ctx = Some(Context {
            refcount: 1,
            sticky: Arc::new(AtomicU32::new(0)),
            stack_limit: default_stack,
            legacy: 0,
            limits: HashMap::new(),
        });
        match self.make_stream(device, true, true) {
            Ok(legacy) => {
                if let Some(c) = self.dev(device).ctx.as_mut() {
                    c.legacy = legacy;
                }
                self.publish(device);
                Ok(())
            }
            Err(e) => {
                self.destroy_context(device);
                Err(e)
            }
        }
    }

    pub fn release(&mut self, device: u32) -> Result<(), CUresult> {
        let c = self
            .dev(device)
            .ctx
            .as_mut()
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        c.refcount -= 1;
        if c.refcount == 0 {
            self.destroy_context(device);
        }
        Ok(())
    }

    /// The last release: every stream, module, graph and allocation of the context goes.
    pub fn destroy_context(&mut self, device: u32) {
        let dropped: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.device == device)
            .map(|(id, _)| *id)
            .collect();
        for id in dropped {
            if let Some(s) = self.streams.remove(&id) {
                s.shared.close();
            }
        }
        self.events.retain(|_, e| e.device != device);
        self.modules.retain(|_, m| m.device != device);
        self.functions.retain(|_, f| f.device != device);
        self.graphs.retain(|_, g| g.device != device);
        self.execs.retain(|_, e| e.device != device);
        self.vmm_forget_device(device);
        let m = &self.cfg.profile.memory;
        let (gran, page, limit, spacing) = (
            m.pool_granularity_bytes.0,
            m.page_bytes.0,
            m.small_alloc_limit_bytes.0,
            m.small_alloc_spacing_bytes.0,
        );
        let slot = {
            let d = self.dev(device);
            d.ctx = None;
            d.ctx_bytes = 0;
            d.module_bytes = 0;
            d.plain = crate::memory::PlainHeap::new(page, limit, spacing);
            d.plain_live.clear();
            d.pools.retain(|id, _| *id == d.default_pool);
            let default = d.default_pool;
            d.pools.insert(default, Pool::new(default, device, gran, 0));
            d.current_pool = default;
            d.vmm_bytes = 0;
            d.graph = GraphMem::default();
            d.regions = Regions::default();
            d.content
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .forget_all();
            d.slot.take()
        };
        if let Some(slot) = slot {
            self.shared.release(slot);
        }
    }

    /// Queues `work` on stream `id`, or records it as a node while the stream captures.
    /// Returns the stream and the operation's number when it was queued.
    pub fn submit(
        &mut self,
        id: u64,
        work: Work,
        duration: Duration,
    ) -> Result<Option<(Arc<StreamShared>, u64)>, CUresult> {
        self.submit_after(id, Vec::new(), work, duration)
    }

    /// `submit`, also waiting for `extra` (an event the stream was told to wait for).
    pub fn submit_after(
        &mut self,
        id: u64,
        extra: Vec<Dep>,
        work: Work,
        duration: Duration,
    ) -> Result<Option<(Arc<StreamShared>, u64)>, CUresult> {
        let s = self.streams.get_mut(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(c) = s.capture.as_mut() {
            if c.invalidated {
                return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
            }
            c.nodes.push(Node::Work { work, duration });
            return Ok(None);
        }
        let mut deps = self.legacy_deps(id)?;
        deps.extend(extra);
        let s = &self.streams[&id];
        let seq = s.shared.push(deps, duration, work);
        Ok(Some((s.shared.clone(), seq)))
    }

    /// What an operation queued on stream `id` must wait for under the legacy stream rules:
    /// on the NULL stream, all earlier work of blocking streams; on a blocking stream, all
    /// earlier work of the NULL stream. Non-blocking streams wait for nothing.
    fn legacy_deps(&mut self, id: u64) -> Result<Vec<Dep>, CUresult> {
        let s = &self.streams[&id];
        let device = s.device;
        let mut deps = Vec::new();
        if s.legacy {
            let mut implicit = false;
            for other in self.streams.values_mut() {
                if other.device != device || other.legacy || !other.blocking {
                    continue;
                }
                if let Some(c) = other.capture.as_mut() {
                    c.invalidated = true;
                    implicit = true;
                } else if let Some(d) = other.shared.pending_dep() {
                    deps.push(d);
                }
            }
            if implicit {
                return Err(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
            }
        } else if s.blocking {
            let legacy = self.devices[device as usize].ctx.as_ref().map(|c| c.legacy);
            if let Some(l) = legacy.and_then(|l| self.streams.get(&l)) {
                deps.extend(l.shared.pending_dep());
            }
        }
        Ok(deps)
    }

    /// The point a synchronize of stream `id` waits for: everything queued on it (on the
    /// NULL stream, through a marker, also the blocking streams' earlier work). A capturing
    /// stream cannot be synchronized, and the capture is invalidated.
    pub fn sync_point(&mut self, id: u64) -> Result<(Arc<StreamShared>, u64), CUresult> {
        let s = self.streams.get_mut(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(c) = s.capture.as_mut() {
            c.invalidated = true;
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if s.legacy {
            if let Some(point) = self.submit(id, Work::Nothing, Duration::ZERO)? {
                return Ok(point);
            }
        }
        let s = &self.streams[&id];
        Ok((s.shared.clone(), s.shared.enqueued()))
    }
}
