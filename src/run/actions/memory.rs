//! `allocate` and `free`: through the workload's allocator, or straight from the driver
//! (`via = "driver"`, memory outside any allocator, as NCCL or cuBLAS take it).

use crate::alloc::OomRequest;
use crate::device::{DeviceError, StreamId};
use crate::run::actions::{Done, Failure, Target};
use crate::run::holdings::LiveAlloc;
use crate::workload::Via;
pub(super) fn allocate(
    t: &mut Target,
    name: &str,
    bytes: u64,
    via: Via,
    stream: StreamId,
) -> Result<Done, Failure> {
    // What the step may newly take from the driver, in the device's whole pages: the same
    // `cuMemAlloc` is checked alike whether the workload or a direct allocator makes it.
    let rounding = t.dev.alloc_rounding();
    let need = rounding.at_most_bytes(match via {
        Via::Driver => bytes,
        Via::Allocator => t.alloc.driver_bytes_for(bytes),
    });
    t.check_floor(need)?;
    let t0 = t.dev.now_ns();
    let result = match via {
        Via::Driver => t
            .dev
            .malloc(bytes)
            .map(|ptr| (ptr, bytes))
            .map_err(|e| match e {
                DeviceError::OutOfMemory { .. } => Failure::Oom {
                    request: Box::new(OomRequest {
                        requested_bytes: bytes,
                        rounded_bytes: rounding.charged_bytes(bytes),
                        driver_request_bytes: bytes,
                        pool: "driver".into(),
                        stream,
                        retries: vec![],
                    }),
                    latency_ns: 0,
                },
                other => other.into(),
            }),
        Via::Allocator => t
            .alloc
            .allocate(&mut *t.dev, bytes, stream)
            .map(|b| (b.ptr, b.size_bytes))
            .map_err(Failure::from),
    };
    let latency_ns = t.dev.now_ns() - t0;
    match result {
        Ok((ptr, size)) => {
            let stream_name = t.held.stream_name(stream);
            t.held.insert(
                name.to_string(),
                LiveAlloc {
                    ptr,
                    bytes,
                    via,
                    stream: stream_name,
                },
            );
            Ok(Done {
                requested_bytes: Some(bytes),
                size_bytes: Some(size),
                latency_ns,
                detail: format!("{ptr:#x}"),
                ..Done::default()
            })
        }
        Err(Failure::Oom { request, .. }) => Err(Failure::Oom {
            request,
            latency_ns,
        }),
        Err(e) => Err(e),
    }
}

pub(super) fn free(t: &mut Target, name: &str) -> Result<Done, Failure> {
    let a = t
        .held
        .remove(name)
        .ok_or_else(|| Failure::Error(format!("{name:?} is not live")))?;
    let t0 = t.dev.now_ns();
    let r = match a.via {
        Via::Driver => t.dev.free(a.ptr).map_err(|e| e.to_string()),
        Via::Allocator => t.alloc.free(&mut *t.dev, a.ptr).map_err(|e| e.to_string()),
    };
    let latency_ns = t.dev.now_ns() - t0;
    r.map_err(Failure::Error)?;
    Ok(Done {
        requested_bytes: Some(a.bytes),
        ..Done::timed(latency_ns)
    })
}
