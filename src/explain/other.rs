//! XLA, TensorFlow, NCCL, cuBLAS and driver messages. Most print the request alone, so the
//! cause is undecided unless the allocator's statistics are in the same log; what they do
//! decide (an exact request, the BFC pool's limit and largest free block) is stated.

use super::interval::{Iv, Verdict};
use super::{Diagnosis, Explanation, cause, nvidia_smi_check};
use crate::oom_message::{BfcStats, Detail, Format, MemoryKind};

pub(super) fn diagnose(detail: &Detail, earlier: &[Explanation], d: &mut Diagnosis) {
    match detail {
        Detail::XlaResourceExhausted {
            requested,
            host_memory: true,
            ..
        } => {
            d.bytes("requested_bytes", "as printed", Iv::of(requested));
            d.summary = format!(
                "XLA ran out of pinned host memory (not GPU memory) allocating {}.",
                requested.printed
            );
            d.findings
                .push("XLA caps pinned host memory at 64 GB by default.".into());
            d.check(
                "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB=128 python train.py",
                "raises XLA's pinned host memory limit (the message's own advice)",
            );
        }
        Detail::XlaResourceExhausted {
            requested,
            buffer_assignment,
            ..
        } => {
            d.bytes("requested_bytes", "as printed", Iv::of(requested));
            if let Some(stats) = buffer_assignment {
                super::frameworks::buffer_assignment(d, Iv::of(requested), stats);
            }
            if !lean_on_bfc(d, earlier, None) {
                d.summary = format!(
                    "XLA's allocator refused {}; the message says nothing else.",
                    requested.printed
                );
                d.undecided(
                    "Was the pool full, capped, or shared with another process?".into(),
                    vec![cause::CAPACITY, cause::FRACTION_CAP, cause::OTHER_PROCESS],
                    "JAX preallocates 75% of the GPU by default, so its pool can be full while a quarter of the device is free".into(),
                );
            }
            d.check(
                "XLA_PYTHON_CLIENT_PREALLOCATE=false python train.py",
                "allocates on demand, so nvidia-smi shows the program's real peak",
            );
            d.check(
                "XLA_PYTHON_CLIENT_MEM_FRACTION=.90 python train.py",
                "a larger preallocated pool, if the peak fits the device but not 75% of it",
            );
            bfc_log_check(d);
            nvidia_smi_check(d);
        }
        Detail::TfBfcAllocator {
            requested,
            rounded_bytes,
            not_a_failure,
            host_memory,
            stats,
            ..
        } => {
            let r = rounded_bytes.map_or(Iv::of(requested), |b| Iv::exact(i128::from(b)));
            d.bytes("requested_bytes", "rounded request (exact when printed)", r);
            if *host_memory {
                d.findings.push(
                    "This allocator holds pinned host memory, not GPU memory: the host's locked-page limit or RAM ran out.".into(),
                );
            }
            if *not_a_failure {
                d.summary = "Not an out-of-memory error: the allocator logs a failed attempt the caller retries (it may only have run slower).".into();
                return;
            }
            match stats {
                Some(s) => bfc_stats(d, r, s),
                None => {
                    d.summary = format!(
                        "The BFC allocator refused {}; its statistics are not in the text.",
                        requested.printed
                    );
                    d.undecided(
                        "Was the pool full or fragmented?".into(),
                        vec![cause::CAPACITY, cause::FRAGMENTATION],
                        "the Stats: block printed after this message (Limit, InUse, LargestFreeBlock) decides it".into(),
                    );
                    bfc_log_check(d);
                }
            }
        }
        Detail::TfOomTensor {
            tensor_bytes,
            allocator,
            stats,
            device_properties,
            ..
        } => {
            let tensor = tensor_bytes.map(|b| {
                d.bytes(
                    "tensor_bytes",
                    "elements × dtype size",
                    Iv::exact(i128::from(b)),
                )
            });
            let device_total = device_properties.as_ref().map(|p| {
                d.findings.push(format!(
                    "TensorFlow announced device {} at start-up (line {}) with {} of memory{}.",
                    p.device_index,
                    p.line,
                    p.total.printed,
                    p.free_at_startup.as_ref().map_or(String::new(), |f| format!(
                        " and {} free then, before it took its pool: not what was free at this failure",
                        f.printed
                    ))
                ));
                d.bytes(
                    "device_total_bytes",
                    "the device's memory as announced at start-up",
                    Iv::of(&p.total),
                )
            });
            if let Some(s) = stats {
                d.findings.push(format!(
                    "The allocator's Stats: block on line {}, printed right before this error, is its own: TensorFlow logs it when the allocation fails, then the error.",
                    s.line
                ));
                match tensor {
                    Some(r) => bfc_stats(d, r, s),
                    None => {
                        d.summary = "TensorFlow could not allocate a tensor of a size the message does not fix; the allocator's statistics are listed.".into();
                        d.undecided(
                            "Was the pool full or fragmented?".into(),
                            vec![cause::CAPACITY, cause::FRAGMENTATION],
                            "the tensor's size is not known, to set against the pool's free memory"
                                .into(),
                        );
                    }
                }
            } else if let (Some(r), Some(total)) = (tensor, device_total)
                && r.gt(total) == Verdict::Yes
            {
                d.cause = Some(cause::CAPACITY);
                d.summary = format!(
                    "The tensor alone ({r}) is larger than the device's whole memory ({total})."
                );
            } else if !lean_on_bfc(d, earlier, allocator.as_deref()) {
                d.summary = "TensorFlow could not allocate a tensor; the allocator's log that decides why is not in the text.".into();
                d.undecided(
                    "Was the pool full or fragmented, or the device shared?".into(),
                    vec![cause::CAPACITY, cause::FRAGMENTATION, cause::OTHER_PROCESS],
                    "TensorFlow logs the BFC allocator's statistics before this error; they decide it".into(),
                );
                bfc_log_check(d);
            }
            d.check_python(
                "print(tf.config.experimental.get_memory_info('GPU:0'))",
                "before the failing step: the allocator's current and peak bytes against the device",
            );
            nvidia_smi_check(d);
        }
        Detail::NcclCalloc { .. } | Detail::NcclCudaFailure { .. } => {
            if let Detail::NcclCalloc {
                requested_bytes, ..
            } = detail
            {
                d.bytes(
                    "requested_bytes",
                    "as printed",
                    Iv::exact(i128::from(*requested_bytes)),
                );
            }
            d.summary = "NCCL could not get device memory for its own buffers, which it allocates outside the framework's allocator.".into();
            d.findings.push(
                "NCCL communicators take 0.5–1.6 GB each and grow at the first collective; a framework's cache may already hold the memory they need.".into(),
            );
            d.undecided(
                "Why was there no room for NCCL?".into(),
                vec![
                    cause::OUTSIDE_ALLOCATOR,
                    cause::OTHER_PROCESS,
                    cause::CAPACITY,
                ],
                "the message names no figure but NCCL's own request".into(),
            );
            d.check(
                "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC python train.py",
                "logs each buffer NCCL allocates, to add to the framework's reserved memory",
            );
            nvidia_smi_check(d);
        }
        Detail::CublasAllocFailed { .. } => {
            d.summary = "cuBLAS could not allocate device memory for its handle or workspace, outside the framework's allocator.".into();
            d.undecided(
                "Was the device full, or is this a later symptom of an earlier failure?".into(),
                vec![cause::OUTSIDE_ALLOCATOR, cause::CAPACITY],
                "cuBLAS reports no figure; after a failed kernel (a device-side assert) later calls fail the same way".into(),
            );
            d.check(
                "CUDA_LAUNCH_BLOCKING=1 python train.py",
                "reports an earlier failing kernel at its own call, if there is one",
            );
            nvidia_smi_check(d);
        }
        Detail::StreamExecutorAlloc {
            requested_bytes,
            memory,
        } => {
            d.bytes(
                "requested_bytes",
                "as printed",
                Iv::exact(i128::from(*requested_bytes)),
            );
            d.summary = match memory {
                MemoryKind::Device => "The driver refused a region for TensorFlow's or XLA's pool.",
                MemoryKind::Unified => "The driver refused unified memory (cuMemAllocManaged) for TensorFlow's or XLA's pool: device and host together were short.",
                MemoryKind::Host => "The driver refused pinned host memory (cuMemHostAlloc): the host's RAM or its locked-page limit ran out, not the GPU.",
            }
            .into();
            d.findings.push(
                "TensorFlow and XLA log this while creating or growing their pool and retry smaller sizes; it is fatal only when an OOM error follows.".into(),
            );
            d.undecided(
                "Who holds the memory the pool could not get?".into(),
                vec![cause::OTHER_PROCESS, cause::CAPACITY],
                "the line gives only the request".into(),
            );
            nvidia_smi_check(d);
        }
        Detail::CudaDriver {
            context_creation: Some(call),
            ..
        } => super::frameworks::context_creation(d, call),
        Detail::CudaDriver { error, .. } => {
            d.summary = "The CUDA driver refused an allocation that no framework allocator reported: a context creation, a library workspace or a direct cudaMalloc.".into();
            if !error.to_ascii_lowercase().contains("memory") {
                d.findings.push(format!(
                    "\"{error}\" names the error by its number: status 2 is out of memory in the CUDA driver API (CUDA_ERROR_OUT_OF_MEMORY), the runtime API (cudaErrorMemoryAllocation) and HIP (hipErrorOutOfMemory)."
                ));
            }
            d.undecided(
                "Who holds the memory?".into(),
                vec![
                    cause::OTHER_PROCESS,
                    cause::HELD_OUTSIDE_ANY_ALLOCATOR,
                    cause::CAPACITY,
                ],
                "the error carries no figure".into(),
            );
            nvidia_smi_check(d);
            d.check(
                "CUDA_LAUNCH_BLOCKING=1 python train.py",
                "puts the failure at the call that made it",
            );
        }
        _ => {}
    }
}

fn bfc_log_check(d: &mut Diagnosis) {
    d.check(
        "TF_CPP_MIN_LOG_LEVEL=0 python train.py 2>&1 | tee oom.log; headroom explain --file oom.log",
        "keeps the allocator's dump (Limit, InUse, LargestFreeBlock) next to the error, which decides the case",
    );
}

/// With the pool's statistics: full (capacity) or fragmented.
fn bfc_stats(d: &mut Diagnosis, r: Iv, s: &BfcStats) {
    let (Some(limit), Some(in_use)) = (s.limit_bytes, s.in_use_bytes) else {
        d.summary =
            "The BFC allocator refused the request; its statistics lack Limit or InUse.".into();
        return;
    };
    let free = d.bytes(
        "pool_free_bytes",
        "Limit − InUse",
        Iv::exact(i128::from(limit) - i128::from(in_use)),
    );
    d.fraction(
        "pool_in_use_share",
        "InUse / Limit",
        Iv::exact(i128::from(in_use)),
        Iv::exact(i128::from(limit)),
    );
    let largest = s.largest_free_block_bytes.map(|b| Iv::exact(i128::from(b)));
    match (free.ge(r), largest.map(|l| l.ge(r))) {
        (Verdict::Yes, Some(Verdict::No)) => {
            d.cause = Some(cause::FRAGMENTATION);
            d.summary = format!(
                "The pool had {free} free, enough for the {r} request, but its largest free block was {}.",
                largest.unwrap_or(Iv::exact(0))
            );
            d.check(
                "TF_GPU_ALLOCATOR=cuda_malloc_async python train.py",
                "the driver's stream-ordered pool instead of BFC, as TensorFlow's own message suggests for fragmentation",
            );
        }
        (Verdict::No, _) => {
            d.cause = Some(cause::CAPACITY);
            d.summary = format!(
                "The pool's limit ({}) was reached: {} in use left {free}, less than the {r} request.",
                Iv::exact(i128::from(limit)),
                Iv::exact(i128::from(in_use))
            );
            d.findings.push(
                "The limit is what the framework took at start: nearly all free memory by default, less under per_process_gpu_memory_fraction, a memory_limit, or JAX's XLA_PYTHON_CLIENT_MEM_FRACTION.".into(),
            );
            d.ruled_out.push(format!(
                "not fragmentation: only {free} of the pool was free, less than the request"
            ));
        }
        _ => {
            d.summary =
                "The BFC allocator refused the request; its statistics do not decide why.".into();
            d.undecided(
                "Was the pool full or fragmented?".into(),
                vec![cause::CAPACITY, cause::FRAGMENTATION],
                format!(
                    "pool free {free} against the {r} request, largest free block not decisive"
                ),
            );
        }
    }
}

/// Takes the cause from the BFC allocator's explanation of the same event, logged earlier.
fn lean_on_bfc(d: &mut Diagnosis, earlier: &[Explanation], allocator: Option<&str>) -> bool {
    let Some(e) = earlier.iter().rev().find(|e| {
        e.message.format() == Format::TfBfcAllocator
            && match (&e.message.detail, allocator) {
                (
                    Detail::TfBfcAllocator {
                        allocator: a,
                        not_a_failure,
                        ..
                    },
                    Some(want),
                ) => a.as_deref() == Some(want) && !not_a_failure,
                (Detail::TfBfcAllocator { not_a_failure, .. }, None) => !not_a_failure,
                _ => false,
            }
    }) else {
        return false;
    };
    d.cause = e.cause;
    d.secondary_causes = e.secondary_causes.clone();
    d.undecided = e.undecided.clone();
    d.summary = format!(
        "The same event as the allocator's message on line {}: {}",
        e.message.span.line, e.summary
    );
    true
}
