//! What a message says, by format: the figures each framework prints, under the names that
//! framework gives them, every size a `Quantity` (printed text + byte interval) or exact bytes.

use serde::Serialize;

use super::Quantity;
use super::figures::Figure;
use super::generic::MemorySpace;

/// A process in PyTorch's list (NVML's compute processes on the device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProcessUse {
    pub pid: u64,
    pub used: Quantity,
}

/// What the framework's allocator hint at the end of a PyTorch message suggested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TorchHint {
    ExpandableSegments,
    MaxSplitSizeMb,
}

/// TensorFlow's BFC allocator statistics (`AllocatorStats::DebugString`), exact bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BfcStats {
    /// 1-based line where `Stats:` was printed.
    pub line: usize,
    /// Byte offset of `Stats:` (the line is counted from it once the message's line is known).
    #[serde(skip)]
    pub(crate) offset: usize,
    pub limit_bytes: Option<u64>,
    pub in_use_bytes: Option<u64>,
    pub max_in_use_bytes: Option<u64>,
    pub largest_free_block_bytes: Option<u64>,
    /// `MaxAllocSize:`, the largest single allocation the allocator made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_alloc_size_bytes: Option<u64>,
}

/// A GPU's memory as TensorFlow announced it at start-up (`gpu_device.cc`: "Found device N
/// with properties: … totalMemory: X freeMemory: Y", from 1.14 "… deviceMemorySize: X").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TfDeviceProperties {
    /// 1-based line where "Found device" was printed.
    pub line: usize,
    /// Byte offset of "Found device" (the line is counted once the message's line is known).
    #[serde(skip)]
    pub(crate) offset: usize,
    /// The `N` of "Found device N".
    pub device_index: u32,
    /// The device's whole memory.
    pub total: Quantity,
    /// Free when TensorFlow started, before it took its pool: not the free memory at the
    /// failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_at_startup: Option<Quantity>,
}

/// XLA's `BufferAssignment stats:` after a `RESOURCE_EXHAUSTED` (what the executable needs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BufferAssignment {
    pub parameter: Option<Quantity>,
    pub constant: Option<Quantity>,
    pub maybe_live_out: Option<Quantity>,
    pub preallocated_temp: Option<Quantity>,
    pub preallocated_temp_fragmentation: Option<Quantity>,
    /// All of the executable's buffers at once: what it needs on the device.
    pub total_allocation: Option<Quantity>,
    pub total_fragmentation: Option<Quantity>,
}

/// Which memory a StreamExecutor allocation asked the driver for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// `cuMemAlloc`: device memory.
    Device,
    /// `cuMemAllocManaged`: unified memory (`TF_FORCE_UNIFIED_MEMORY`).
    Unified,
    /// `cuMemHostAlloc`: pinned host memory, not the GPU.
    Host,
}

/// What a message says, by format. Field names carry what PyTorch, vLLM, XLA… call the
/// quantity; every size is a `Quantity` (printed text + byte interval) or exact bytes.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "format", rename_all = "kebab-case")]
pub enum Detail {
    /// PyTorch's native caching allocator, the sentence form (2.1 and later).
    PytorchCaching {
        /// `CUDA`, `HIP` or another device prefix; `None` for plain `Out of memory.`
        device_kind: Option<String>,
        /// "Tried to allocate": the allocator's rounded size, not the tensor's ("more than
        /// 1EB" for sizes past 2^60 bytes).
        requested: Quantity,
        device_index: Option<u32>,
        device_total: Option<Quantity>,
        device_free: Option<Quantity>,
        /// "Process P has X memory in use": other PIDs as NVML sees them (this process too,
        /// under its host PID, when it runs in a container).
        processes: Vec<ProcessUse>,
        /// "Including non-PyTorch memory, this process has X memory in use".
        this_process: Option<Quantity>,
        /// "X allowed;": the cap from `set_per_process_memory_fraction`.
        allowed: Option<Quantity>,
        /// "Of the allocated memory X is allocated by PyTorch": allocated bytes plus the free
        /// blocks cached in private pools.
        allocated: Option<Quantity>,
        /// "with X allocated in private pools (e.g., CUDA Graphs)": free blocks cached in
        /// graph pools, which other allocations cannot use.
        private_pools: Option<Quantity>,
        /// "X is reserved by PyTorch but unallocated": reserved − allocated − private pools.
        reserved_unallocated: Option<Quantity>,
        hint: Option<TorchHint>,
        /// The message stops before its last sentence (a quote cut short).
        truncated: bool,
        /// The message ends at ". GPU ": PyTorch printed the device index, an 8-bit integer,
        /// as a character, and index 0 is the NUL byte that ends the text (pytorch/pytorch#123984).
        /// `device_index` is then 0.
        cut_at_device: bool,
    },
    /// PyTorch before 2.1 (and torch_npu): "(GPU 0; X total capacity; Y already allocated; …)".
    PytorchCachingLegacy {
        device_kind: Option<String>,
        requested: Quantity,
        device_index: Option<u32>,
        device_total: Option<Quantity>,
        allocated: Option<Quantity>,
        /// torch_npu's "X current active".
        active: Option<Quantity>,
        device_free: Option<Quantity>,
        allowed: Option<Quantity>,
        /// "X reserved in total by PyTorch" (1.4 to 2.0): everything the allocator holds.
        reserved: Option<Quantity>,
        /// "X cached)" (before 1.4): what the allocator holds beyond the allocated bytes,
        /// `amount_cached − amount_allocated` in that release's allocator.
        cached: Option<Quantity>,
        /// The parenthesis stops before its last figure (a quote cut short).
        truncated: bool,
    },
    /// PyTorch's `cudaMallocAsync` backend.
    PytorchCudaMallocAsync {
        /// The device; a message cut at the device (`cut_at_device`) was on device 0.
        device_index: u32,
        allocated: Option<Quantity>,
        requested: Option<Quantity>,
        device_total: Option<Quantity>,
        device_free: Option<Quantity>,
        /// "PyTorch limit (set by user-supplied memory fraction)"; 2^64 bytes when none is set.
        limit: Option<Quantity>,
        /// The message is "Allocation on device " and nothing more: PyTorch printed the device
        /// index, an 8-bit integer, as a character, and index 0 is the NUL byte that ends the
        /// text, so the table never reached the log (pytorch/pytorch#168369).
        cut_at_device: bool,
    },
    /// PyTorch on Apple silicon: "MPS backend out of memory (MPS allocated: X, other
    /// allocations: X, max allowed: X). Tried to allocate X on private pool."
    PytorchMps {
        /// "MPS allocated": the heaps PyTorch's MPS allocator holds.
        allocated: Quantity,
        /// "other allocations": this process's Metal memory outside those heaps.
        other_allocations: Quantity,
        /// "max allowed": the high watermark (`PYTORCH_MPS_HIGH_WATERMARK_RATIO` × the
        /// device's recommended working set); absent when the watermark is off.
        max_allowed: Option<Quantity>,
        requested: Quantity,
        /// `private` or `shared`.
        pool: String,
    },
    /// PyTorch ≤ 0.4's THC: "cuda runtime error (2) : out of memory at FILE:LINE", or its
    /// "THCudaCheck FAIL file=… line=… error=2 : out of memory".
    ThcRuntimeError {
        error_code: i64,
        /// `FILE:LINE` of the failing check.
        location: Option<String>,
        /// The call in or next to the message that shows the process was creating its CUDA
        /// context (or the first state right after it).
        context_creation: Option<String>,
    },
    /// vLLM refuses to start: free memory below `gpu_memory_utilization × total`.
    VllmStartupFreeMemory {
        device: Option<String>,
        device_free: Quantity,
        device_total: Quantity,
        gpu_memory_utilization: String,
        requested: Quantity,
    },
    /// vLLM: the profile run left nothing for the KV cache.
    VllmNoKvCacheMemory {},
    /// vLLM: one request at `max_model_len` needs more KV cache than is available.
    VllmKvCacheTooSmall {
        max_model_len: u64,
        kv_cache_needed: Quantity,
        kv_cache_available: Quantity,
        estimated_max_model_len: Option<u64>,
    },
    /// vLLM before V1: `max_model_len` above the tokens the KV cache holds.
    VllmMaxSeqLen {
        max_model_len: u64,
        /// `None` when the paste cut the message after its first count (an issue title).
        kv_cache_tokens: Option<u64>,
    },
    /// vLLM's sampler warm-up ran out of memory after the KV cache took its budget.
    VllmSamplerWarmup { dummy_requests: u64 },
    /// XLA (JAX, TensorFlow): `RESOURCE_EXHAUSTED: Out of memory while trying to allocate`.
    XlaResourceExhausted {
        requested: Quantity,
        /// "Out of host memory": pinned host memory, not the GPU.
        host_memory: bool,
        /// The `BufferAssignment stats:` printed after it, when the text has them.
        buffer_assignment: Option<BufferAssignment>,
    },
    /// XLA's device allocator: "Failed to allocate request for X (NB) on device ordinal N".
    XlaAllocateRequest {
        requested: Quantity,
        requested_bytes: u64,
        device_index: u32,
    },
    /// tsl's BFC allocator (TensorFlow, XLA) logging a refused request.
    TfBfcAllocator {
        /// `GPU_0_bfc`, `xla_gpu_host_bfc`…; absent in TensorFlow 1.0's wording.
        allocator: Option<String>,
        /// The `N` of `GPU_N_bfc`.
        device_index: Option<u32>,
        /// A host allocator (`cuda_host_bfc`, `xla_gpu_host_bfc`, `gpu_host_bfc`): pinned host
        /// memory, not the GPU.
        host_memory: bool,
        requested: Quantity,
        rounded_bytes: Option<u64>,
        op: Option<String>,
        /// "with freed_by_count=N": chunks the allocator freed before giving up.
        freed_by_count: Option<u64>,
        /// The caller retries and says this is not a failure.
        not_a_failure: bool,
        /// The allocator's statistics printed after the message, when the log has them.
        stats: Option<BfcStats>,
        /// The sizes of `DumpMemoryLog`'s `Bin (S): …` lines right after the message, one list
        /// per bin: its chunk size S, then the sizes the line prints in order (allocated for
        /// chunks, in use, client-requested); unlabelled (they describe the pool, not the
        /// request).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        bins: Vec<Vec<Figure>>,
    },
    /// TensorFlow: "OOM when allocating tensor with shape[…] and type … on … by allocator …".
    TfOomTensor {
        shape: String,
        dtype: Option<String>,
        device: Option<String>,
        device_index: Option<u32>,
        allocator: Option<String>,
        /// Elements × dtype size, when the shape and dtype are fully known.
        tensor_bytes: Option<u64>,
        /// The BFC allocator's `Stats:` block printed right before the message (its
        /// `DumpMemoryLog` ends with it, then the memory map line, then this error), when the
        /// paste holds it without the allocator's own warning or dump.
        #[serde(skip_serializing_if = "Option::is_none")]
        stats: Option<BfcStats>,
        /// The device's memory as TensorFlow announced it at start-up, earlier in the log (the
        /// same device index where the message names one).
        #[serde(skip_serializing_if = "Option::is_none")]
        device_properties: Option<TfDeviceProperties>,
    },
    /// TensorFlow's GPU device: "Ran out of GPU memory when allocating N bytes for OP" or
    /// "EigenAllocator for GPU ran out of memory when allocating N".
    TfGpuOomBytes {
        requested_bytes: u64,
        op: Option<String>,
    },
    /// NCCL's `WARN Failed to CUDA calloc N bytes`.
    NcclCalloc {
        device_index: Option<u32>,
        requested_bytes: u64,
    },
    /// NCCL's `WARN Cuda failure 'out of memory'` (runtime) or `Cuda failure 2 '…'` (driver).
    NcclCudaFailure {
        device_index: Option<u32>,
        error_code: Option<i64>,
    },
    /// cuBLAS could not get device memory (`CUBLAS_STATUS_ALLOC_FAILED`).
    CublasAllocFailed {
        call: Option<String>,
        /// CNTK's "GPU=N".
        device_index: Option<u32>,
    },
    /// StreamExecutor (TensorFlow, XLA): "failed to allocate X (N bytes) from device",
    /// "failed to alloc N bytes unified memory", "failed to alloc N bytes on host".
    StreamExecutorAlloc {
        requested_bytes: u64,
        memory: MemoryKind,
    },
    /// StreamExecutor could not create the context: "failed call to cuDevicePrimaryCtxRetain:
    /// CUDA_ERROR_OUT_OF_MEMORY; total memory reported: N".
    StreamExecutorContext {
        call: String,
        device_index: Option<u32>,
        device_total_bytes: Option<u64>,
    },
    /// ggml (llama.cpp, ollama): "allocating X MiB on device N: cudaMalloc failed: out of memory".
    GgmlCudaAlloc {
        requested: Quantity,
        device_index: u32,
        /// The buffer named on the next line ("failed to allocate CUDA0 buffer of size N").
        buffer: Option<String>,
        buffer_bytes: Option<u64>,
    },
    /// ggml's `CUDA_CHECK`: "CUDA error: out of memory / current device: N, in function F at
    /// FILE:LINE / STMT" (or before 2024 "CUDA error 2 at FILE:LINE: out of memory").
    GgmlCudaError {
        /// `CUDA`, `ROCm` or `MUSA`.
        backend: String,
        error_code: Option<i64>,
        device_index: Option<u32>,
        function: Option<String>,
        call: Option<String>,
        context_creation: Option<String>,
    },
    /// PaddlePaddle: "Out of memory error on GPU N. Cannot allocate X memory on GPU N, X memory
    /// has been allocated and available memory is only X."
    PaddleOutOfMemory {
        device_index: u32,
        requested: Quantity,
        /// "X memory has been allocated": the whole device's use (`total − available` in
        /// `cuda_allocator.cc`), every process included.
        allocated: Option<Quantity>,
        device_free: Quantity,
        /// `FLAGS_gpu_memory_limit_mb` when the message says a limit is set.
        memory_limit_mb: Option<u64>,
    },
    /// CuPy: "Out of memory allocating N bytes (allocated so far: N bytes[, limit set to: N
    /// bytes])", or before v6 "out of memory to allocate N bytes (total N bytes)".
    CupyOutOfMemory {
        requested_bytes: u64,
        /// What CuPy's memory pool holds.
        allocated_bytes: Option<u64>,
        limit_bytes: Option<u64>,
    },
    /// ONNX Runtime's arena: "BFCArena::AllocateRawInternal … Failed to allocate memory for
    /// requested buffer of size N".
    OnnxruntimeBfcArena { requested_bytes: u64 },
    /// Any other out-of-memory wording, read by principle (`generic`): every size figure of
    /// its sentences, labelled by the words around it.
    Generic {
        /// The words that say memory ran out, as printed ("out of memory", `OutOfMemory`…).
        wording: String,
        /// The runtime its words name, when they name one.
        runtime: Option<String>,
        /// Which memory ran out: the GPU's device memory, or memory headroom does not measure.
        memory: MemorySpace,
        /// Every size figure, labelled (`label` null when no word around it says what it is).
        figures: Vec<Figure>,
    },
    /// The driver's or runtime's own error, with nothing else said.
    CudaDriver {
        /// As printed: `CUDA_ERROR_OUT_OF_MEMORY`, `cudaErrorMemoryAllocation`,
        /// `CUDA error: out of memory`.
        error: String,
        context_creation: Option<String>,
    },
}

macro_rules! formats {
    ($($variant:ident => $name:literal, $example:literal;)*) => {
        /// The formats, as `format` names them in JSON.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema)]
        #[serde(rename_all = "kebab-case")]
        pub enum Format { $($variant,)* }

        impl Format {
            pub const ALL: &'static [Format] = &[$(Format::$variant,)*];

            /// The JSON name.
            pub fn name(self) -> &'static str {
                match self { $(Format::$variant => $name,)* }
            }

            /// What the format looks like, for the "not recognized" list.
            pub fn example(self) -> &'static str {
                match self { $(Format::$variant => $example,)* }
            }
        }

        impl Detail {
            pub fn format(&self) -> Format {
                match self { $(Detail::$variant { .. } => Format::$variant,)* }
            }
        }
    };
}

formats! {
    PytorchCaching => "pytorch-caching",
        "PyTorch ≥ 2.1: CUDA out of memory. Tried to allocate X. GPU N has a total capacity of X of which X is free. …";
    PytorchCachingLegacy => "pytorch-caching-legacy",
        "PyTorch < 2.1: CUDA out of memory. Tried to allocate X (GPU N; X total capacity; X already allocated; X free; X reserved in total by PyTorch | X cached)";
    PytorchCudaMallocAsync => "pytorch-cuda-malloc-async",
        "PyTorch cudaMallocAsync: Allocation on device N would exceed allowed memory. (out of memory)";
    PytorchMps => "pytorch-mps",
        "PyTorch MPS: MPS backend out of memory (MPS allocated: X, other allocations: X, max allowed: X). Tried to allocate X on private pool";
    ThcRuntimeError => "thc-runtime-error",
        "PyTorch ≤ 0.4: cuda runtime error (2) : out of memory at FILE:LINE";
    VllmStartupFreeMemory => "vllm-startup-free-memory",
        "vLLM: Free memory on device (F/T GiB) on startup is less than desired GPU memory utilization (U, X GiB)";
    VllmNoKvCacheMemory => "vllm-no-kv-cache-memory",
        "vLLM: No available memory for the cache blocks.";
    VllmKvCacheTooSmall => "vllm-kv-cache-too-small",
        "vLLM: To serve at least one request with the model's max seq len (L), X GiB KV cache is needed, which is larger than the available KV cache memory (X GiB)";
    VllmMaxSeqLen => "vllm-max-seq-len",
        "vLLM < V1: The model's max seq len (L) is larger than the maximum number of tokens that can be stored in KV cache (N)";
    VllmSamplerWarmup => "vllm-sampler-warmup",
        "vLLM: CUDA out of memory occurred when warming up sampler with N dummy requests.";
    XlaResourceExhausted => "xla-resource-exhausted",
        "XLA/JAX: RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes. [BufferAssignment stats: …]";
    XlaAllocateRequest => "xla-allocate-request",
        "XLA/JAX: RESOURCE_EXHAUSTED: Failed to allocate request for X (NB) on device ordinal N";
    TfBfcAllocator => "tf-bfc-allocator",
        "TensorFlow/XLA: Allocator (GPU_0_bfc) ran out of memory trying to allocate X (rounded to N)";
    TfOomTensor => "tf-oom-tensor",
        "TensorFlow: OOM when allocating tensor with shape[…] and type … on … by allocator …";
    TfGpuOomBytes => "tf-gpu-oom-bytes",
        "TensorFlow: Ran out of GPU memory when allocating N bytes for OP";
    NcclCalloc => "nccl-calloc",
        "NCCL: NCCL WARN Failed to CUDA calloc N bytes";
    NcclCudaFailure => "nccl-cuda-failure",
        "NCCL: NCCL WARN Cuda failure 'out of memory' (or Cuda failure 2 'out of memory')";
    CublasAllocFailed => "cublas-alloc-failed",
        "cuBLAS: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`";
    StreamExecutorAlloc => "stream-executor-alloc",
        "StreamExecutor: failed to allocate X (N bytes) from device: CUDA_ERROR_OUT_OF_MEMORY";
    StreamExecutorContext => "stream-executor-context",
        "StreamExecutor: failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY; total memory reported: N";
    GgmlCudaAlloc => "ggml-cuda-alloc",
        "ggml: allocating X MiB on device N: cudaMalloc failed: out of memory";
    GgmlCudaError => "ggml-cuda-error",
        "ggml: CUDA error: out of memory / current device: N, in function F at FILE:LINE";
    PaddleOutOfMemory => "paddle-out-of-memory",
        "PaddlePaddle: Out of memory error on GPU N. Cannot allocate X memory on GPU N, X memory has been allocated and available memory is only X.";
    CupyOutOfMemory => "cupy-out-of-memory",
        "CuPy: Out of memory allocating N bytes (allocated so far: N bytes)";
    OnnxruntimeBfcArena => "onnxruntime-bfc-arena",
        "ONNX Runtime: BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size N";
    Generic => "generic",
        "Any runtime: a sentence that says memory ran out (out of memory, OutOfMemory, ALLOC_FAILED, not enough memory, …) and the sizes around it, each labelled by its words";
    CudaDriver => "cuda-driver",
        "CUDA: CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation, CUDA error: out of memory";
}
