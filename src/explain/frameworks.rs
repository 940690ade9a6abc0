//! PyTorch MPS, THC, ggml, PaddlePaddle, CuPy, ONNX Runtime and XLA's device allocator: most
//! print the request and little else, so what they decide is said and the rest left
//! undecided; an error raised while the CUDA context was being created blames whoever holds
//! the device.

use super::context::{IMPOSSIBLE_BYTES, ROOM_MARGIN_BYTES};
use super::interval::{Iv, Verdict};
use super::{Diagnosis, cause, nvidia_smi_check};
use crate::oom_message::{BufferAssignment, Detail, Quantity};

fn exact(bytes: u64) -> Iv {
    Iv::exact(i128::from(bytes))
}

/// A request no device could hold: the size was computed wrong.
fn absurd_request(d: &mut Diagnosis, request: Iv) -> bool {
    if super::context::address_like(request) {
        super::torch::address_as_size(d, &request.to_string());
        return true;
    }
    if request.ge(Iv::exact(IMPOSSIBLE_BYTES)) != Verdict::Yes {
        return false;
    }
    d.summary = format!(
        "The request ({request}) is larger than any device holds: the size was computed wrong (a shape from uninitialized or negative dimensions, an overflow), not memory."
    );
    d.findings.push(
        "Print the shapes of the failing operation's inputs: a size this large never comes from memory pressure.".into(),
    );
    true
}

/// An out-of-memory error from context creation: this process held nothing yet.
pub(super) fn context_creation(d: &mut Diagnosis, call: &str) {
    d.cause = Some(cause::OTHER_PROCESS);
    d.summary = format!(
        "The error came while the CUDA context was being created ({call}): this process held no device memory yet, so whoever holds the device (another process, a display, a leftover job) left too little for even a context."
    );
    nvidia_smi_check(d);
    d.check(
        "CUDA_VISIBLE_DEVICES=N python train.py",
        "runs on a device no one else is using, once nvidia-smi shows which one",
    );
}

fn undecided_no_figures(d: &mut Diagnosis, summary: String, why: &str) {
    d.summary = summary;
    d.undecided(
        "Who holds the memory the request could not get?".into(),
        vec![
            cause::CAPACITY,
            cause::OTHER_PROCESS,
            cause::OUTSIDE_ALLOCATOR,
        ],
        why.into(),
    );
    nvidia_smi_check(d);
}

pub(super) fn diagnose(detail: &Detail, d: &mut Diagnosis) {
    match detail {
        Detail::PytorchMps {
            allocated,
            other_allocations,
            max_allowed,
            requested,
            ..
        } => mps(
            d,
            allocated,
            other_allocations,
            max_allowed.as_ref(),
            requested,
        ),
        Detail::ThcRuntimeError {
            context_creation: Some(call),
            ..
        }
        | Detail::GgmlCudaError {
            context_creation: Some(call),
            ..
        } => context_creation(d, call),
        Detail::StreamExecutorContext {
            call,
            device_total_bytes,
            ..
        } => {
            if let Some(t) = device_total_bytes
                && exact(*t).ge(Iv::exact(IMPOSSIBLE_BYTES)) == Verdict::Yes
            {
                d.findings.push(format!(
                    "The figures contradict each other: the total memory reported ({t} bytes) is more than any device holds; the driver's counter wrapped, which happens when the device is in a bad state (a reboot or a driver reload clears it)."
                ));
            }
            context_creation(d, call);
        }
        Detail::ThcRuntimeError { .. } => {
            undecided_no_figures(
                d,
                "THC's caching allocator could not get device memory; PyTorch 0.4 and before printed no figures.".into(),
                "the error carries no figure; torch.cuda.memory_allocated() and nvidia-smi at the failing step tell",
            );
            snapshot_checks_old(d);
        }
        Detail::GgmlCudaError { call, .. } => undecided_no_figures(
            d,
            format!(
                "ggml's CUDA call{} failed for lack of device memory.",
                call.as_deref().map(|c| format!(" {c}")).unwrap_or_default()
            ),
            "ggml prints no figure with the error; the load log's per-device buffer sizes and the free memory it reported at start decide it",
        ),
        Detail::GgmlCudaAlloc {
            requested,
            buffer_bytes,
            ..
        } => {
            let r = buffer_bytes.map_or(Iv::of(requested), exact);
            d.bytes("requested_bytes", "the buffer's exact size when printed", r);
            if absurd_request(d, r) {
                return;
            }
            undecided_no_figures(
                d,
                format!(
                    "ggml could not allocate a {} buffer on the device.",
                    requested.printed
                ),
                "ggml prints no free or total figure here; the load log's \"using device … MiB free\" line and the other buffers decide it",
            );
            d.check(
                "llama-server -m MODEL --n-gpu-layers N --ctx-size C",
                "fewer layers on the GPU or a shorter context shrink the buffers ggml allocates",
            );
        }
        Detail::PaddleOutOfMemory {
            requested,
            allocated,
            device_free,
            memory_limit_mb,
            ..
        } => paddle(
            d,
            requested,
            allocated.as_ref(),
            device_free,
            *memory_limit_mb,
        ),
        Detail::CupyOutOfMemory {
            requested_bytes,
            allocated_bytes,
            limit_bytes,
        } => cupy(d, *requested_bytes, *allocated_bytes, *limit_bytes),
        Detail::OnnxruntimeBfcArena { requested_bytes } => {
            let r = d.bytes("requested_bytes", "as printed", exact(*requested_bytes));
            if absurd_request(d, r) {
                return;
            }
            undecided_no_figures(
                d,
                "ONNX Runtime's arena could not extend itself for the request.".into(),
                "the arena prints only the request; the log's \"Extending BFCArena\" and \"Total allocated bytes\" lines (log severity 0) and nvidia-smi decide it",
            );
            d.check(
                "python -c \"import onnxruntime as ort; so = ort.SessionOptions(); so.log_severity_level = 0\"",
                "verbose logs show every arena extension and its total, to set against the device",
            );
        }
        Detail::XlaAllocateRequest {
            requested_bytes, ..
        } => {
            d.bytes("requested_bytes", "as printed", exact(*requested_bytes));
            undecided_no_figures(
                d,
                "XLA's device allocator could not get the buffer from its pool.".into(),
                "JAX preallocates 75% of the GPU by default, so its pool can be full while a quarter of the device is free",
            );
            d.check(
                "XLA_PYTHON_CLIENT_MEM_FRACTION=.90 python train.py",
                "a larger preallocated pool, if the peak fits the device but not 75% of it",
            );
        }
        Detail::TfGpuOomBytes {
            requested_bytes, ..
        } => {
            d.bytes("requested_bytes", "as printed", exact(*requested_bytes));
            if *requested_bytes == 0 {
                d.findings.push(
                    "The request is 0 bytes: an allocator that cannot serve 0 bytes has a size computed wrong upstream, not a full device.".into(),
                );
            }
            undecided_no_figures(
                d,
                "TensorFlow's GPU device could not allocate for an operation.".into(),
                "the line names the request only; the BFC allocator's statistics logged before it decide it",
            );
        }
        _ => {}
    }
}

fn snapshot_checks_old(d: &mut Diagnosis) {
    d.check_python(
        "print(torch.cuda.memory_allocated(), torch.cuda.memory_cached())",
        "before the failing step: what the caching allocator held",
    );
}

/// MPS: the watermark is a cap on PyTorch's heaps plus this process's other Metal memory.
fn mps(
    d: &mut Diagnosis,
    allocated: &Quantity,
    other: &Quantity,
    max_allowed: Option<&Quantity>,
    requested: &Quantity,
) {
    let (a, o, r) = (Iv::of(allocated), Iv::of(other), Iv::of(requested));
    let need = d.bytes(
        "allocated_plus_other_plus_request_bytes",
        "MPS allocated + other allocations + requested",
        a.plus(o).plus(r),
    );
    let Some(m) = max_allowed.map(Iv::of) else {
        d.summary = format!(
            "Metal refused {} with the watermark off: the system's unified memory is exhausted.",
            requested.printed
        );
        d.undecided(
            "What fills the unified memory?".into(),
            vec![cause::CAPACITY, cause::OTHER_PROCESS],
            "with no watermark the message gives no limit to compare with".into(),
        );
        return;
    };
    let shortfall = d.bytes(
        "shortfall_bytes",
        "needed − max allowed",
        need.minus(m).non_negative(),
    );
    // Without the other allocations, would PyTorch's own heaps plus the request have fit?
    match m.minus(a).minus(r).ge(Iv::exact(ROOM_MARGIN_BYTES)) {
        Verdict::Yes => {
            d.cause = Some(cause::OUTSIDE_ALLOCATOR);
            d.summary = format!(
                "MPS refused {} at the {} watermark: this process's Metal memory outside PyTorch's heaps ({}) is more than the {shortfall} shortfall; PyTorch's own {} plus the request would have fit.",
                requested.printed, m, other.printed, allocated.printed
            );
            d.check(
                "python -c \"import torch; print(torch.mps.driver_allocated_memory(), torch.mps.current_allocated_memory())\"",
                "the driver's total against PyTorch's heaps: their difference is the memory outside them (MPSGraph caches, other frameworks)",
            );
        }
        Verdict::No => {
            d.cause = Some(cause::CAPACITY);
            d.summary = format!(
                "MPS refused {}: PyTorch's own {} plus the request exceed the {} watermark whatever else the process holds.",
                requested.printed, allocated.printed, m
            );
            d.ruled_out.push(format!(
                "not outside-allocator: without the {} of other allocations the request still would not fit",
                other.printed
            ));
        }
        Verdict::Undecided => d.undecided(
            "Did the other allocations or PyTorch's own heaps fill the watermark?".into(),
            vec![cause::OUTSIDE_ALLOCATOR, cause::CAPACITY],
            "PyTorch's heaps plus the request are at the watermark within the printed precision"
                .into(),
        ),
    }
    d.check(
        "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 python app.py",
        "lifts the watermark (the message's own advice; the system may then swap or fail instead)",
    );
}

/// Paddle prints the device's use (total − available), not its own share.
fn paddle(
    d: &mut Diagnosis,
    requested: &Quantity,
    used: Option<&Quantity>,
    free: &Quantity,
    limit_mb: Option<u64>,
) {
    let (r, f) = (Iv::of(requested), Iv::of(free));
    if let Some(u) = used {
        let total = d.bytes(
            "device_total_bytes",
            "allocated (the device's use) + available",
            Iv::of(u).plus(f),
        );
        if r.gt(total) == Verdict::Yes {
            d.cause = Some(cause::CAPACITY);
            d.summary = format!(
                "The request ({}) is larger than the whole device ({total}): no holder could have made room.",
                requested.printed
            );
            return;
        }
    }
    if let Some(mb) = limit_mb {
        d.findings.push(format!(
            "FLAGS_gpu_memory_limit_mb caps Paddle at {mb} MB: the totals in the message are the cap's, not the card's."
        ));
    }
    d.bytes(
        "shortfall_bytes",
        "requested − available",
        r.minus(f).non_negative(),
    );
    undecided_no_figures(
        d,
        format!(
            "Paddle could not allocate {} with {} available on the device.",
            requested.printed, free.printed
        ),
        "the \"allocated\" figure is the whole device's use, every process included; Paddle's own share is not in the message",
    );
    d.check(
        "python -c \"import paddle; print(paddle.device.cuda.memory_allocated(), paddle.device.cuda.memory_reserved())\"",
        "Paddle's own share of the device, to set against the message's device-wide figure",
    );
}

fn cupy(d: &mut Diagnosis, requested: u64, allocated: Option<u64>, limit: Option<u64>) {
    let r = d.bytes("requested_bytes", "as printed", exact(requested));
    if let (Some(a), Some(l)) = (allocated, limit) {
        let need = d.bytes(
            "allocated_plus_request_bytes",
            "allocated so far + requested",
            exact(a).plus(r),
        );
        if need.gt(exact(l)) == Verdict::Yes {
            d.cause = Some(cause::FRACTION_CAP);
            d.summary = format!(
                "CuPy's pool limit refused it: {need} allocated plus requested is over the {} limit set with set_limit.",
                exact(l)
            );
            return;
        }
        d.ruled_out
            .push(format!("not the pool limit: {need} is within {}", exact(l)));
    }
    undecided_no_figures(
        d,
        format!(
            "CuPy could not allocate {}{}.",
            exact(requested),
            allocated
                .map(|a| format!(" with {} already in its pool", exact(a)))
                .unwrap_or_default()
        ),
        "CuPy prints what its pool holds, not the device's free memory",
    );
    d.check_python(
        "print(cupy.get_default_memory_pool().used_bytes(), cupy.get_default_memory_pool().total_bytes())",
        "live bytes against cached bytes: a large cache can be freed with free_all_blocks()",
    );
}

/// XLA's buffer assignment: what the executable needs at once, against the request.
pub(super) fn buffer_assignment(d: &mut Diagnosis, request: Iv, stats: &BufferAssignment) {
    if let Some(total) = stats.total_allocation.as_ref() {
        let t = d.bytes(
            "executable_total_bytes",
            "BufferAssignment total allocation",
            Iv::of(total),
        );
        d.findings.push(format!(
            "The executable needs {t} at once (parameters, outputs and temporaries); the pool must hold that plus every other live array."
        ));
    }
    if let Some(temp) = stats.preallocated_temp.as_ref()
        && Iv::of(temp).ge(request) == Verdict::Yes
        && request.ge(Iv::of(temp)) == Verdict::Yes
    {
        d.findings.push(
            "The request is the executable's temporary buffer: rematerialization or a smaller batch shrinks it.".into(),
        );
    }
}
