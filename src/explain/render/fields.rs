//! The figures of each format, in the order the message prints them, for the text report.

use crate::oom_message::{BfcStats, BufferAssignment, Detail, Quantity};

pub(super) enum Field<'a> {
    Size(&'a Quantity),
    Bytes(u64),
    Text(String),
}

type Rows<'a> = Vec<(String, Field<'a>)>;

fn size<'a>(f: &mut Rows<'a>, name: &str, q: Option<&'a Quantity>) {
    if let Some(q) = q {
        f.push((name.to_string(), Field::Size(q)));
    }
}

fn bytes(f: &mut Rows<'_>, name: &str, b: Option<u64>) {
    if let Some(b) = b {
        f.push((name.to_string(), Field::Bytes(b)));
    }
}

fn text(f: &mut Rows<'_>, name: &str, t: Option<impl ToString>) {
    if let Some(t) = t {
        f.push((name.to_string(), Field::Text(t.to_string())));
    }
}

fn bfc_stats(f: &mut Rows<'_>, s: &BfcStats) {
    for (name, v) in [
        ("pool limit", s.limit_bytes),
        ("pool in use", s.in_use_bytes),
        ("pool max in use", s.max_in_use_bytes),
        ("largest free block", s.largest_free_block_bytes),
        ("largest allocation", s.max_alloc_size_bytes),
    ] {
        bytes(f, &format!("{name} (line {})", s.line), v);
    }
}

fn buffer_assignment<'a>(f: &mut Rows<'a>, b: &'a BufferAssignment) {
    size(f, "parameter allocation", b.parameter.as_ref());
    size(f, "constant allocation", b.constant.as_ref());
    size(f, "maybe_live_out", b.maybe_live_out.as_ref());
    size(f, "preallocated temp", b.preallocated_temp.as_ref());
    size(
        f,
        "temp fragmentation",
        b.preallocated_temp_fragmentation.as_ref(),
    );
    size(f, "total allocation", b.total_allocation.as_ref());
    size(f, "total fragmentation", b.total_fragmentation.as_ref());
}

/// The figures of a message, in the order it prints them.
pub(super) fn fields(detail: &Detail) -> Rows<'_> {
    let mut f: Rows = Vec::new();
    match detail {
        Detail::PytorchCaching {
            requested,
            device_index,
            device_total,
            device_free,
            processes,
            this_process,
            allowed,
            allocated,
            private_pools,
            reserved_unallocated,
            ..
        } => {
            size(&mut f, "requested", Some(requested));
            text(&mut f, "device_index", *device_index);
            size(&mut f, "device_total", device_total.as_ref());
            size(&mut f, "device_free", device_free.as_ref());
            for p in processes {
                f.push((format!("process {}", p.pid), Field::Size(&p.used)));
            }
            size(&mut f, "this_process", this_process.as_ref());
            size(&mut f, "allowed", allowed.as_ref());
            size(&mut f, "allocated", allocated.as_ref());
            size(&mut f, "private_pools", private_pools.as_ref());
            size(
                &mut f,
                "reserved_unallocated",
                reserved_unallocated.as_ref(),
            );
        }
        Detail::PytorchCachingLegacy {
            requested,
            device_index,
            device_total,
            allocated,
            active,
            device_free,
            allowed,
            reserved,
            cached,
            ..
        } => {
            size(&mut f, "requested", Some(requested));
            text(&mut f, "device_index", *device_index);
            size(&mut f, "device_total", device_total.as_ref());
            size(&mut f, "allocated", allocated.as_ref());
            size(&mut f, "active", active.as_ref());
            size(&mut f, "device_free", device_free.as_ref());
            size(&mut f, "allowed", allowed.as_ref());
            size(&mut f, "reserved", reserved.as_ref());
            size(&mut f, "cached", cached.as_ref());
        }
        Detail::PytorchCudaMallocAsync {
            device_index,
            allocated,
            requested,
            device_total,
            device_free,
            limit,
            ..
        } => {
            text(&mut f, "device_index", Some(device_index));
            size(&mut f, "allocated", allocated.as_ref());
            size(&mut f, "requested", requested.as_ref());
            size(&mut f, "device_total", device_total.as_ref());
            size(&mut f, "device_free", device_free.as_ref());
            size(&mut f, "limit", limit.as_ref());
        }
        Detail::PytorchMps {
            allocated,
            other_allocations,
            max_allowed,
            requested,
            pool,
        } => {
            size(&mut f, "allocated", Some(allocated));
            size(&mut f, "other_allocations", Some(other_allocations));
            size(&mut f, "max_allowed", max_allowed.as_ref());
            size(&mut f, "requested", Some(requested));
            text(&mut f, "pool", Some(pool));
        }
        Detail::ThcRuntimeError {
            error_code,
            location,
            context_creation,
        } => {
            text(&mut f, "error_code", Some(error_code));
            text(&mut f, "location", location.as_ref());
            text(&mut f, "context creation", context_creation.as_ref());
        }
        Detail::VllmStartupFreeMemory {
            device,
            device_free,
            device_total,
            gpu_memory_utilization,
            requested,
        } => {
            text(&mut f, "device", device.as_ref());
            size(&mut f, "device_free", Some(device_free));
            size(&mut f, "device_total", Some(device_total));
            text(
                &mut f,
                "gpu_memory_utilization",
                Some(gpu_memory_utilization),
            );
            size(&mut f, "requested", Some(requested));
        }
        Detail::VllmNoKvCacheMemory {} => {}
        Detail::VllmKvCacheTooSmall {
            max_model_len,
            kv_cache_needed,
            kv_cache_available,
            estimated_max_model_len,
        } => {
            text(&mut f, "max_model_len", Some(max_model_len));
            size(&mut f, "kv_cache_needed", Some(kv_cache_needed));
            size(&mut f, "kv_cache_available", Some(kv_cache_available));
            text(&mut f, "estimated_max_model_len", *estimated_max_model_len);
        }
        Detail::VllmMaxSeqLen {
            max_model_len,
            kv_cache_tokens,
        } => {
            text(&mut f, "max_model_len", Some(max_model_len));
            text(&mut f, "kv_cache_tokens", kv_cache_tokens.as_ref());
        }
        Detail::VllmSamplerWarmup { dummy_requests } => {
            text(&mut f, "dummy_requests", Some(dummy_requests));
        }
        Detail::XlaResourceExhausted {
            requested,
            buffer_assignment: stats,
            ..
        } => {
            size(&mut f, "requested", Some(requested));
            if let Some(b) = stats {
                buffer_assignment(&mut f, b);
            }
        }
        Detail::XlaAllocateRequest {
            requested,
            device_index,
            ..
        } => {
            size(&mut f, "requested", Some(requested));
            text(&mut f, "device_index", Some(device_index));
        }
        Detail::TfBfcAllocator {
            allocator,
            requested,
            rounded_bytes,
            op,
            freed_by_count,
            stats,
            bins,
            ..
        } => {
            text(&mut f, "allocator", allocator.as_ref());
            size(&mut f, "requested", Some(requested));
            bytes(&mut f, "rounded", *rounded_bytes);
            text(&mut f, "op", op.as_ref());
            text(&mut f, "freed_by_count", *freed_by_count);
            // Per bin: its chunk size, then the sizes its line prints.
            for bin in bins {
                let [size, rest @ ..] = bin.as_slice() else {
                    continue;
                };
                let sizes: Vec<&str> = rest.iter().map(|q| q.quantity.printed.as_str()).collect();
                text(
                    &mut f,
                    &format!("bin ({})", size.quantity.printed),
                    Some(sizes.join(" / ")),
                );
            }
            if let Some(s) = stats {
                bfc_stats(&mut f, s);
            }
        }
        Detail::TfOomTensor {
            shape,
            dtype,
            device,
            allocator,
            stats,
            device_properties,
            ..
        } => {
            text(&mut f, "shape", Some(shape));
            text(&mut f, "dtype", dtype.as_ref());
            text(&mut f, "device", device.as_ref());
            text(&mut f, "allocator", allocator.as_ref());
            if let Some(s) = stats {
                bfc_stats(&mut f, s);
            }
            if let Some(p) = device_properties {
                size(
                    &mut f,
                    &format!("device total (line {})", p.line),
                    Some(&p.total),
                );
                size(
                    &mut f,
                    &format!("free at start-up (line {})", p.line),
                    p.free_at_startup.as_ref(),
                );
            }
        }
        Detail::TfGpuOomBytes {
            requested_bytes,
            op,
        } => {
            bytes(&mut f, "requested", Some(*requested_bytes));
            text(&mut f, "op", op.as_ref());
        }
        Detail::NcclCalloc {
            device_index,
            requested_bytes,
        } => {
            text(&mut f, "device_index", *device_index);
            bytes(&mut f, "requested", Some(*requested_bytes));
        }
        Detail::NcclCudaFailure {
            device_index,
            error_code,
        } => {
            text(&mut f, "device_index", *device_index);
            text(&mut f, "error_code", *error_code);
        }
        Detail::CublasAllocFailed { call, device_index } => {
            text(&mut f, "call", call.as_ref());
            text(&mut f, "device_index", *device_index);
        }
        Detail::StreamExecutorAlloc {
            requested_bytes,
            memory,
        } => {
            bytes(&mut f, "requested", Some(*requested_bytes));
            text(&mut f, "memory", Some(format!("{memory:?}").to_lowercase()));
        }
        Detail::StreamExecutorContext {
            call,
            device_index,
            device_total_bytes,
        } => {
            text(&mut f, "call", Some(call));
            text(&mut f, "device_index", *device_index);
            bytes(&mut f, "total memory reported", *device_total_bytes);
        }
        Detail::GgmlCudaAlloc {
            requested,
            device_index,
            buffer,
            buffer_bytes,
        } => {
            size(&mut f, "requested", Some(requested));
            text(&mut f, "device_index", Some(device_index));
            text(&mut f, "buffer", buffer.as_ref());
            bytes(&mut f, "buffer size", *buffer_bytes);
        }
        Detail::GgmlCudaError {
            backend,
            error_code,
            device_index,
            function,
            call,
            context_creation,
        } => {
            text(&mut f, "backend", Some(backend));
            text(&mut f, "error_code", *error_code);
            text(&mut f, "device_index", *device_index);
            text(&mut f, "function", function.as_ref());
            text(&mut f, "call", call.as_ref());
            text(&mut f, "context creation", context_creation.as_ref());
        }
        Detail::PaddleOutOfMemory {
            device_index,
            requested,
            allocated,
            device_free,
            memory_limit_mb,
        } => {
            text(&mut f, "device_index", Some(device_index));
            size(&mut f, "requested", Some(requested));
            size(&mut f, "allocated (device)", allocated.as_ref());
            size(&mut f, "device_free", Some(device_free));
            text(&mut f, "memory_limit_mb", *memory_limit_mb);
        }
        Detail::CupyOutOfMemory {
            requested_bytes,
            allocated_bytes,
            limit_bytes,
        } => {
            bytes(&mut f, "requested", Some(*requested_bytes));
            bytes(&mut f, "allocated so far", *allocated_bytes);
            bytes(&mut f, "limit", *limit_bytes);
        }
        Detail::OnnxruntimeBfcArena { requested_bytes } => {
            bytes(&mut f, "requested", Some(*requested_bytes));
        }
        Detail::Generic {
            wording,
            runtime,
            memory,
            figures,
        } => {
            text(&mut f, "wording", Some(wording));
            text(&mut f, "runtime", runtime.as_ref());
            text(&mut f, "memory", Some(memory.words()));
            for x in figures {
                let name = x.label.map_or("unlabelled", |l| l.as_str());
                f.push((name.to_string(), Field::Size(&x.quantity)));
            }
        }
        Detail::CudaDriver {
            error,
            context_creation,
        } => {
            text(&mut f, "error", Some(error));
            text(&mut f, "context creation", context_creation.as_ref());
        }
    }
    f
}
