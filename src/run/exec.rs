//! Executing one planned action on the device, with its event row and reading.

use std::sync::atomic::Ordering;

use anyhow::{Context, bail};

use crate::alloc::AllocError;
use crate::device::{DevPtr, DeviceError, Kernel, StreamId};
use crate::record::timeline::EventRow;
use crate::report::summary::MismatchRecord;
use crate::run::{LiveAlloc, Runner, Stop};

use crate::units::{Bytes, MIB, round_up};
use crate::workload::{Action, Planned, Via};

/// What one action did, for its row in `events.csv`.
pub(super) struct Done {
    pub(super) requested_bytes: Option<u64>,
    pub(super) size_bytes: Option<u64>,
    pub(super) latency_ns: u64,
    pub(super) detail: String,
}

impl Done {
    pub(super) fn timed(latency_ns: u64) -> Done {
        Done {
            requested_bytes: None,
            size_bytes: None,
            latency_ns,
            detail: String::new(),
        }
    }
}

/// How an action failed, if it did.
pub(super) enum Failure {
    Oom {
        request: Box<crate::alloc::OomRequest>,
        latency_ns: u64,
    },
    /// The step would go below the free-memory floor; it was not run.
    Floor(String),
    Error(String),
}

impl From<DeviceError> for Failure {
    fn from(e: DeviceError) -> Self {
        Failure::Error(e.to_string())
    }
}

impl Runner<'_, '_> {
    pub(super) fn stream(&mut self, name: &str) -> anyhow::Result<StreamId> {
        if let Some(s) = self.streams.get(name) {
            return Ok(*s);
        }
        let s = self
            .dev
            .create_stream()
            .with_context(|| format!("cannot create stream {name:?}"))?;
        self.streams.insert(name.to_string(), s);
        Ok(s)
    }

    fn ptr_of(&self, name: &str) -> anyhow::Result<(DevPtr, u64)> {
        self.live
            .get(name)
            .map(|a| (a.ptr, a.bytes))
            .or_else(|| self.graphs.ptr_of(name))
            .with_context(|| format!("{name:?} is not live"))
    }

    /// Allocates `name[0]`, `name[1]`, … until the allocator or the device refuses (or the
    /// free-memory floor is reached, unless OOM is allowed). The refusal ends the fill; it is
    /// Runs one action. `Ok(Some(stop))` ends the run early; `Err` is a failure to run.
    pub(crate) fn exec(&mut self, phase: &str, p: &Planned) -> anyhow::Result<Option<Stop>> {
        match &p.action {
            Action::FillDevice {
                name,
                bytes,
                via,
                stream,
            } => return self.fill_device(phase, p, name, *bytes, *via, stream),
            Action::FreeGroup { name, keep_every } => {
                return self.free_group(phase, p, name, *keep_every);
            }
            _ => {}
        }
        let stream_name = p.action.stream().unwrap_or("main").to_string();
        let stream = self.stream(&stream_name)?;
        let name = p.action.name().unwrap_or("").to_string();
        let is_alloc = matches!(p.action, Action::Allocate { .. });
        if !is_alloc && self.failed_names.contains(&name) {
            let done = Done {
                detail: format!("skipped: the allocation of {name:?} failed earlier"),
                ..Done::timed(0)
            };
            self.row(phase, p, &name, &stream_name, &done, "skipped", None)?;
            return Ok(None);
        }
        // Readings due before this action see the state before it.
        self.pump();
        let res = self.act(p, stream);
        if is_alloc {
            if matches!(res, Err(Failure::Oom { .. })) {
                self.failed_names.insert(name.clone());
            } else {
                self.failed_names.remove(&name);
            }
        }

        match res {
            Ok(done) => {
                // A device error that surfaces only at the reading (a kernel that faulted
                // asynchronously) is this step's: its row names the call and the error.
                let r = match self.event_reading() {
                    Ok(r) => r,
                    Err(e) => {
                        let detail = format!("the reading after the step failed: {e:#}");
                        let failed = Done {
                            detail: detail.clone(),
                            ..done
                        };
                        self.row(phase, p, &name, &stream_name, &failed, "error", None)?;
                        bail!("{} {name}: {detail}", p.action.op())
                    }
                };
                self.row(
                    phase,
                    p,
                    &name,
                    &stream_name,
                    &done,
                    "ok",
                    Some(r.device_free_bytes),
                )?;
                Ok(None)
            }
            Err(Failure::Oom {
                request,
                latency_ns,
            }) => {
                let r = self.event_reading()?;
                let rec = self.oom_record(phase, p, &name, &stream_name, &request, r)?;
                let detail = format!(
                    "{}: {}",
                    rec.diagnosis.observation,
                    crate::cause::join(&rec.diagnosis.causes, ", ")
                );
                let done = Done {
                    requested_bytes: Some(request.requested_bytes),
                    size_bytes: Some(request.rounded_bytes),
                    latency_ns,
                    detail,
                };
                self.row(
                    phase,
                    p,
                    &name,
                    &stream_name,
                    &done,
                    "oom",
                    Some(r.device_free_bytes),
                )?;
                self.ooms.push(rec);
                Ok(Some(Stop::Oom))
            }
            Err(Failure::Floor(msg)) => {
                let done = Done {
                    detail: msg.clone(),
                    ..Done::timed(0)
                };
                self.row(phase, p, &name, &stream_name, &done, "stopped", None)?;
                Ok(Some(Stop::Floor(format!(
                    "phase {phase:?}, step {}: {msg}",
                    p.label
                ))))
            }
            Err(Failure::Error(msg)) => {
                let done = Done {
                    detail: msg.clone(),
                    ..Done::timed(0)
                };
                self.row(phase, p, &name, &stream_name, &done, "error", None)?;
                bail!("{} {name}: {msg}", p.action.op())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn row(
        &mut self,
        phase: &str,
        p: &Planned,
        name: &str,
        stream: &str,
        d: &Done,
        result: &str,
        free: Option<u64>,
    ) -> anyhow::Result<()> {
        self.events
            .write(&EventRow {
                t_ns: self.dev.now_ns(),
                phase,
                step: &p.label,
                op: p.action.op(),
                name,
                stream,
                requested_bytes: d.requested_bytes,
                size_bytes: d.size_bytes,
                latency_ns: d.latency_ns,
                result,
                device_free_bytes: free,
                detail: &d.detail,
            })
            .context("writing events.csv")
    }

    /// Checks the free-memory floor before a step that may take `need_bytes` from the driver.
    pub(super) fn check_floor(&mut self, need_bytes: u64) -> Result<(), Failure> {
        if self.allow_oom {
            return Ok(());
        }
        let mem = self.dev.mem_info()?;
        if mem.free_bytes < need_bytes.saturating_add(self.keep_free_bytes) {
            return Err(Failure::Floor(format!(
                "this step may take {} from the driver with {} free, which would leave less than the {} floor; pass --allow-oom to go past free memory",
                Bytes(need_bytes),
                Bytes(mem.free_bytes),
                Bytes(self.keep_free_bytes)
            )));
        }
        Ok(())
    }

    fn launch(
        &mut self,
        kernel: Kernel,
        stream: StreamId,
    ) -> Result<crate::device::KernelOutcome, Failure> {
        if matches!(kernel, Kernel::Stack { .. }) {
            self.context_grew = true;
        }
        match self.dev.launch(kernel, stream) {
            Ok(o) => Ok(o),
            Err(DeviceError::OutOfMemory { requested_bytes }) => Err(Failure::Oom {
                request: Box::new(crate::alloc::OomRequest {
                    requested_bytes,
                    rounded_bytes: requested_bytes,
                    driver_request_bytes: requested_bytes,
                    pool: format!("driver ({} launch)", kernel.name()),
                    stream,
                    retries: vec![],
                }),
                latency_ns: 0,
            }),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn act(&mut self, p: &Planned, stream: StreamId) -> Result<Done, Failure> {
        let lookup = |s: &Self, n: &str| s.ptr_of(n).map_err(|e| Failure::Error(e.to_string()));
        match &p.action {
            Action::Allocate {
                name, bytes, via, ..
            } => {
                let bytes = *bytes;
                let need = match via {
                    Via::Driver => round_up(bytes, 2 * MIB),
                    Via::Allocator => self.alloc.driver_bytes_for(bytes),
                };
                self.check_floor(need)?;
                let t0 = self.dev.now_ns();
                let result = match via {
                    Via::Driver => {
                        self.dev
                            .malloc(bytes)
                            .map(|ptr| (ptr, bytes))
                            .map_err(|e| match e {
                                DeviceError::OutOfMemory { .. } => {
                                    AllocError::OutOfMemory(Box::new(crate::alloc::OomRequest {
                                        requested_bytes: bytes,
                                        rounded_bytes: if bytes > MIB {
                                            round_up(bytes, 2 * MIB)
                                        } else {
                                            bytes
                                        },
                                        driver_request_bytes: bytes,
                                        pool: "driver".into(),
                                        stream,
                                        retries: vec![],
                                    }))
                                }
                                other => AllocError::Device(other),
                            })
                    }
                    Via::Allocator => self
                        .alloc
                        .allocate(&mut *self.dev, bytes, stream)
                        .map(|b| (b.ptr, b.size_bytes)),
                };
                let latency_ns = self.dev.now_ns() - t0;
                self.alloc_latency.record(latency_ns);
                match result {
                    Ok((ptr, size)) => {
                        if *via == Via::Driver {
                            self.driver_bytes += bytes;
                        }
                        self.live.insert(
                            name.clone(),
                            LiveAlloc {
                                ptr,
                                bytes,
                                via: *via,
                            },
                        );
                        Ok(Done {
                            requested_bytes: Some(bytes),
                            size_bytes: Some(size),
                            latency_ns,
                            detail: format!("{ptr:#x}"),
                        })
                    }
                    Err(AllocError::OutOfMemory(request)) => Err(Failure::Oom {
                        request,
                        latency_ns,
                    }),
                    Err(e) => Err(Failure::Error(e.to_string())),
                }
            }
            Action::Free { name } => {
                let a = self
                    .live
                    .remove(name)
                    .ok_or_else(|| Failure::Error(format!("{name:?} is not live")))?;
                let t0 = self.dev.now_ns();
                let r = match a.via {
                    Via::Driver => {
                        self.driver_bytes -= a.bytes;
                        self.dev.free(a.ptr).map_err(|e| e.to_string())
                    }
                    Via::Allocator => self
                        .alloc
                        .free(&mut *self.dev, a.ptr)
                        .map_err(|e| e.to_string()),
                };
                let latency_ns = self.dev.now_ns() - t0;
                self.free_latency.record(latency_ns);
                r.map_err(Failure::Error)?;
                Ok(Done {
                    requested_bytes: Some(a.bytes),
                    ..Done::timed(latency_ns)
                })
            }
            Action::Touch {
                name, stride_bytes, ..
            } => {
                let (ptr, bytes) = lookup(self, name)?;
                let t0 = self.dev.now_ns();
                self.launch(
                    Kernel::Touch {
                        ptr,
                        bytes,
                        stride_bytes: *stride_bytes,
                    },
                    stream,
                )?;
                Ok(Done {
                    requested_bytes: Some(bytes),
                    ..Done::timed(self.dev.now_ns() - t0)
                })
            }
            Action::Fill { name, seed, .. } => {
                let (ptr, bytes) = lookup(self, name)?;
                let t0 = self.dev.now_ns();
                self.launch(
                    Kernel::Fill {
                        ptr,
                        bytes,
                        seed: *seed,
                    },
                    stream,
                )?;
                Ok(Done {
                    requested_bytes: Some(bytes),
                    ..Done::timed(self.dev.now_ns() - t0)
                })
            }
            Action::Verify { name, seed, .. } => {
                let (ptr, bytes) = lookup(self, name)?;
                let t0 = self.dev.now_ns();
                let out = self.launch(
                    Kernel::Verify {
                        ptr,
                        bytes,
                        seed: *seed,
                    },
                    stream,
                )?;
                let latency_ns = self.dev.now_ns() - t0;
                let detail = match out.mismatch {
                    None => "0 mismatches".to_string(),
                    Some(m) => {
                        self.mismatches.push(MismatchRecord {
                            phase: self.wl.phases[self.phase as usize].name.clone(),
                            step: p.label.clone(),
                            name: name.clone(),
                            bytes,
                            mismatch: m,
                        });
                        format!(
                            "{} mismatches; first at {:#x} (offset {}): expected {:#010x}, read {:#010x}",
                            m.count,
                            m.first_address,
                            m.first_address - ptr,
                            m.expected,
                            m.actual
                        )
                    }
                };
                Ok(Done {
                    requested_bytes: Some(bytes),
                    size_bytes: None,
                    latency_ns,
                    detail,
                })
            }
            Action::Corrupt {
                name,
                offset_bytes,
                value,
                ..
            } => {
                let (ptr, _) = lookup(self, name)?;
                self.dev.write_word(ptr + offset_bytes, *value, stream)?;
                Ok(Done {
                    detail: format!("{:#x} = {value:#010x}", ptr + offset_bytes),
                    ..Done::timed(0)
                })
            }
            Action::Copy { src, dst, .. } => {
                let (s_ptr, bytes) = lookup(self, src)?;
                let (d_ptr, _) = lookup(self, dst)?;
                let t0 = self.dev.now_ns();
                self.launch(
                    Kernel::Copy {
                        dst: d_ptr,
                        src: s_ptr,
                        bytes,
                    },
                    stream,
                )?;
                Ok(Done {
                    requested_bytes: Some(bytes),
                    ..Done::timed(self.dev.now_ns() - t0)
                })
            }
            Action::Triad {
                a, b, c, scalar, ..
            } => {
                let (a, bytes) = lookup(self, a)?;
                let (b, _) = lookup(self, b)?;
                let (c, _) = lookup(self, c)?;
                let t0 = self.dev.now_ns();
                self.launch(
                    Kernel::Triad {
                        a,
                        b,
                        c,
                        bytes,
                        scalar: *scalar,
                    },
                    stream,
                )?;
                Ok(Done {
                    requested_bytes: Some(bytes),
                    ..Done::timed(self.dev.now_ns() - t0)
                })
            }
            Action::Tenant { bytes, duration_ns } => self.tenant(*bytes, *duration_ns),
            Action::FillDevice { .. } | Action::FreeGroup { .. } => Err(Failure::Error(
                "internal: a fill or group free must go through Runner::exec, which expands it"
                    .into(),
            )),
            Action::BeginCapture { .. }
            | Action::EndCapture { .. }
            | Action::GraphAllocate { .. }
            | Action::GraphFree { .. }
            | Action::Instantiate { .. }
            | Action::Upload { .. }
            | Action::Replay { .. }
            | Action::DestroyGraph { .. }
            | Action::TrimGraphMemory
            | Action::GraphsReport(_) => self.graph_act(p, stream),
            Action::Spin { duration_ns, .. } => {
                self.launch(
                    Kernel::Spin {
                        duration_ns: *duration_ns,
                    },
                    stream,
                )?;
                Ok(Done::timed(0))
            }
            Action::Sleep { duration_ns } => {
                self.sleep(*duration_ns)?;
                Ok(Done::timed(*duration_ns))
            }
            Action::Synchronize { stream: which } => {
                let t0 = self.dev.now_ns();
                match which {
                    Some(_) => self.dev.stream_synchronize(stream)?,
                    None => self.dev.synchronize()?,
                }
                self.alloc
                    .refresh(&mut *self.dev)
                    .map_err(|e| Failure::Error(e.to_string()))?;
                Ok(Done::timed(self.dev.now_ns() - t0))
            }
            Action::Trim { keep_bytes } => {
                // A trim cannot release blocks whose frees are still queued: let them land.
                self.dev.synchronize()?;
                self.dev.pool_trim(*keep_bytes)?;
                self.alloc
                    .refresh(&mut *self.dev)
                    .map_err(|e| Failure::Error(e.to_string()))?;
                Ok(Done::timed(0))
            }
            Action::EmptyCache => {
                let released = self
                    .alloc
                    .empty_cache(&mut *self.dev)
                    .map_err(|e| Failure::Error(e.to_string()))?;
                Ok(Done {
                    size_bytes: Some(released),
                    detail: format!("released {}", Bytes(released)),
                    ..Done::timed(0)
                })
            }
            Action::RecordStream { name, .. } => {
                let (ptr, _) = lookup(self, name)?;
                self.alloc
                    .record_stream(&mut *self.dev, ptr, stream)
                    .map_err(|e| Failure::Error(e.to_string()))?;
                Ok(Done::timed(0))
            }
            Action::Stack { frame_bytes } => {
                let frame_bytes = u32::try_from(*frame_bytes).map_err(|_| {
                    Failure::Error(format!("stack frame {frame_bytes} is too large"))
                })?;
                let out = self.launch(Kernel::Stack { frame_bytes }, stream)?;
                let detail = out.stack.map_or_else(String::new, |s| {
                    format!(
                        "per-thread stack limit {} -> {} (the kernel uses {} of local memory per thread)",
                        Bytes(s.limit_before_bytes),
                        Bytes(s.limit_after_bytes),
                        Bytes(s.local_bytes_per_thread)
                    )
                });
                Ok(Done {
                    detail,
                    ..Done::timed(0)
                })
            }
        }
    }

    /// Starts another tenant: a `headroom hold` child where processes are launched, and the
    /// The host waits, in slices on a real GPU so the sampler is drained and Ctrl-C is heard.
    fn sleep(&mut self, duration_ns: u64) -> Result<(), Failure> {
        if self.dev.info().is_sim() {
            self.dev.sleep(duration_ns);
            return Ok(());
        }
        const SLICE_NS: u64 = 20_000_000;
        let end = self.dev.now_ns() + duration_ns;
        loop {
            let now = self.dev.now_ns();
            if now >= end {
                return Ok(());
            }
            if self.interrupted.load(Ordering::Relaxed) {
                return Err(Failure::Error("interrupted during sleep".into()));
            }
            self.dev.sleep((end - now).min(SLICE_NS));
            self.pump();
        }
    }
}
