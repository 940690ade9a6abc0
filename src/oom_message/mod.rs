//! Out-of-memory messages found in arbitrary text, read into typed, format-tagged records.
//!
//! Pure: no I/O, no printing. `find_all` reads a whole log; `LineScanner` takes a child's
//! output line by line (for `watch`); `import torch` calls the same readers. Every size keeps
//! the text it was printed as and the interval of bytes that text can stand for
//! (`size`), so nothing downstream claims more precision than the message had.
//!
//! Each format is read the way its framework writes it, learnt from the source (the files and
//! commits are listed in `SOURCES` and in the README). What no reader accepts is never
//! guessed at: `suspicious_lines` lists the lines that mention running out of memory in a way
//! none of the formats covers, for the caller to report as not recognized.

mod cursor;
mod driver;
mod nccl;
mod pytorch;
mod scan;
pub mod size;
mod vllm;
mod xla;

use serde::Serialize;

pub use scan::LineScanner;
pub use size::{ByteRange, Quantity};

/// Where a message sits in the text it was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Span {
    /// Byte offset of the first byte of the message.
    pub start_byte: usize,
    /// Byte offset one past its last byte.
    pub end_byte: usize,
    /// 1-based line of its first byte.
    pub line: usize,
}

/// One out-of-memory message: where it was, its text, and what it says.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct OomMessage {
    #[serde(flatten)]
    pub span: Span,
    /// The message exactly as it appears in the input (line breaks included).
    pub text: String,
    /// The exception or log prefix printed right before it, e.g. `torch.OutOfMemoryError`.
    pub raised_as: Option<String>,
    #[serde(flatten)]
    pub detail: Detail,
}

impl OomMessage {
    pub fn format(&self) -> Format {
        self.detail.format()
    }
}

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
        /// "Tried to allocate": the allocator's rounded size, not the tensor's.
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
    },
    /// PyTorch before 2.1: "(GPU 0; X total capacity; Y already allocated; …)".
    PytorchCachingLegacy {
        device_kind: Option<String>,
        requested: Quantity,
        device_index: u32,
        device_total: Quantity,
        allocated: Quantity,
        device_free: Quantity,
        allowed: Option<Quantity>,
        /// "reserved in total by PyTorch" (or "cached" before 1.6).
        reserved: Quantity,
    },
    /// PyTorch's `cudaMallocAsync` backend.
    PytorchCudaMallocAsync {
        device_index: u32,
        allocated: Option<Quantity>,
        requested: Option<Quantity>,
        device_total: Option<Quantity>,
        device_free: Option<Quantity>,
        /// "PyTorch limit (set by user-supplied memory fraction)".
        limit: Option<Quantity>,
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
        kv_cache_tokens: u64,
    },
    /// XLA (JAX, TensorFlow): `RESOURCE_EXHAUSTED: Out of memory while trying to allocate`.
    XlaResourceExhausted {
        requested: Quantity,
        /// "Out of host memory": pinned host memory, not the GPU.
        host_memory: bool,
    },
    /// tsl's BFC allocator (TensorFlow, XLA) logging a refused request.
    TfBfcAllocator {
        allocator: String,
        requested: Quantity,
        rounded_bytes: Option<u64>,
        op: Option<String>,
        /// The caller retries and says this is not a failure (`with freed_by_count=`).
        not_a_failure: bool,
        /// The allocator's statistics printed after the message, when the log has them.
        stats: Option<BfcStats>,
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
    CublasAllocFailed { call: Option<String> },
    /// StreamExecutor (TensorFlow, XLA): "failed to allocate X (N bytes) from device".
    StreamExecutorAlloc { requested_bytes: u64 },
    /// The driver's or runtime's own error, with nothing else said.
    CudaDriver {
        /// As printed: `CUDA_ERROR_OUT_OF_MEMORY`, `cudaErrorMemoryAllocation`,
        /// `CUDA error: out of memory`.
        error: String,
    },
}

/// The formats, as `format` names them in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    PytorchCaching,
    PytorchCachingLegacy,
    PytorchCudaMallocAsync,
    VllmStartupFreeMemory,
    VllmNoKvCacheMemory,
    VllmKvCacheTooSmall,
    VllmMaxSeqLen,
    XlaResourceExhausted,
    TfBfcAllocator,
    TfOomTensor,
    NcclCalloc,
    NcclCudaFailure,
    CublasAllocFailed,
    StreamExecutorAlloc,
    CudaDriver,
}

impl Detail {
    pub fn format(&self) -> Format {
        match self {
            Detail::PytorchCaching { .. } => Format::PytorchCaching,
            Detail::PytorchCachingLegacy { .. } => Format::PytorchCachingLegacy,
            Detail::PytorchCudaMallocAsync { .. } => Format::PytorchCudaMallocAsync,
            Detail::VllmStartupFreeMemory { .. } => Format::VllmStartupFreeMemory,
            Detail::VllmNoKvCacheMemory {} => Format::VllmNoKvCacheMemory,
            Detail::VllmKvCacheTooSmall { .. } => Format::VllmKvCacheTooSmall,
            Detail::VllmMaxSeqLen { .. } => Format::VllmMaxSeqLen,
            Detail::XlaResourceExhausted { .. } => Format::XlaResourceExhausted,
            Detail::TfBfcAllocator { .. } => Format::TfBfcAllocator,
            Detail::TfOomTensor { .. } => Format::TfOomTensor,
            Detail::NcclCalloc { .. } => Format::NcclCalloc,
            Detail::NcclCudaFailure { .. } => Format::NcclCudaFailure,
            Detail::CublasAllocFailed { .. } => Format::CublasAllocFailed,
            Detail::StreamExecutorAlloc { .. } => Format::StreamExecutorAlloc,
            Detail::CudaDriver { .. } => Format::CudaDriver,
        }
    }
}

impl Format {
    pub const ALL: [Format; 15] = [
        Format::PytorchCaching,
        Format::PytorchCachingLegacy,
        Format::PytorchCudaMallocAsync,
        Format::VllmStartupFreeMemory,
        Format::VllmNoKvCacheMemory,
        Format::VllmKvCacheTooSmall,
        Format::VllmMaxSeqLen,
        Format::XlaResourceExhausted,
        Format::TfBfcAllocator,
        Format::TfOomTensor,
        Format::NcclCalloc,
        Format::NcclCudaFailure,
        Format::CublasAllocFailed,
        Format::StreamExecutorAlloc,
        Format::CudaDriver,
    ];

    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Format::PytorchCaching => "pytorch-caching",
            Format::PytorchCachingLegacy => "pytorch-caching-legacy",
            Format::PytorchCudaMallocAsync => "pytorch-cuda-malloc-async",
            Format::VllmStartupFreeMemory => "vllm-startup-free-memory",
            Format::VllmNoKvCacheMemory => "vllm-no-kv-cache-memory",
            Format::VllmKvCacheTooSmall => "vllm-kv-cache-too-small",
            Format::VllmMaxSeqLen => "vllm-max-seq-len",
            Format::XlaResourceExhausted => "xla-resource-exhausted",
            Format::TfBfcAllocator => "tf-bfc-allocator",
            Format::TfOomTensor => "tf-oom-tensor",
            Format::NcclCalloc => "nccl-calloc",
            Format::NcclCudaFailure => "nccl-cuda-failure",
            Format::CublasAllocFailed => "cublas-alloc-failed",
            Format::StreamExecutorAlloc => "stream-executor-alloc",
            Format::CudaDriver => "cuda-driver",
        }
    }

    /// What the format looks like, for the "not recognized" list.
    pub fn example(self) -> &'static str {
        match self {
            Format::PytorchCaching => {
                "PyTorch ≥ 2.1: CUDA out of memory. Tried to allocate X. GPU N has a total capacity of X of which X is free. …"
            }
            Format::PytorchCachingLegacy => {
                "PyTorch < 2.1: CUDA out of memory. Tried to allocate X (GPU N; X total capacity; X already allocated; X free; X reserved in total by PyTorch)"
            }
            Format::PytorchCudaMallocAsync => {
                "PyTorch cudaMallocAsync: Allocation on device N would exceed allowed memory. (out of memory)"
            }
            Format::VllmStartupFreeMemory => {
                "vLLM: Free memory on device (F/T GiB) on startup is less than desired GPU memory utilization (U, X GiB)"
            }
            Format::VllmNoKvCacheMemory => "vLLM: No available memory for the cache blocks.",
            Format::VllmKvCacheTooSmall => {
                "vLLM: To serve at least one request with the model's max seq len (L), X GiB KV cache is needed, which is larger than the available KV cache memory (X GiB)"
            }
            Format::VllmMaxSeqLen => {
                "vLLM < V1: The model's max seq len (L) is larger than the maximum number of tokens that can be stored in KV cache (N)"
            }
            Format::XlaResourceExhausted => {
                "XLA/JAX: RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes."
            }
            Format::TfBfcAllocator => {
                "TensorFlow/XLA: Allocator (GPU_0_bfc) ran out of memory trying to allocate X (rounded to N)"
            }
            Format::TfOomTensor => {
                "TensorFlow: OOM when allocating tensor with shape[…] and type … on … by allocator …"
            }
            Format::NcclCalloc => "NCCL: NCCL WARN Failed to CUDA calloc N bytes",
            Format::NcclCudaFailure => {
                "NCCL: NCCL WARN Cuda failure 'out of memory' (or Cuda failure 2 'out of memory')"
            }
            Format::CublasAllocFailed => {
                "cuBLAS: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
            }
            Format::StreamExecutorAlloc => {
                "StreamExecutor: failed to allocate X (N bytes) from device: CUDA_ERROR_OUT_OF_MEMORY"
            }
            Format::CudaDriver => {
                "CUDA: CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation, CUDA error: out of memory"
            }
        }
    }
}

/// The framework sources each reader was learnt from (repository, file, commit read).
pub const SOURCES: &[(&str, &str, &str)] = &[
    (
        "pytorch/pytorch",
        "c10/cuda/CUDACachingAllocator.cpp (malloc, reportProcessMemoryInfo, format_size)",
        "eb42ad6eca0ce61e7c581212b4bf32f991425571, 001074d25084fdb87a799823e395a50f5ec044d3",
    ),
    (
        "pytorch/pytorch",
        "c10/cuda/CUDAMallocAsyncAllocator.cpp (mallocAsync); aten/src/ATen/cuda/Exceptions.h (TORCH_CUDABLAS_CHECK)",
        "as indexed",
    ),
    (
        "vllm-project/vllm",
        "vllm/v1/core/kv_cache_utils.py (_check_enough_kv_cache_memory), vllm/v1/worker/utils.py (request_memory), vllm/utils/mem_utils.py (format_gib), vllm/worker/worker.py (raise_if_cache_size_invalid)",
        "001cabc1be16a59a70d720ed61a13b678c060a18, a6d5c39009eb73797b276cc557ca9659c396ca14",
    ),
    (
        "openxla/xla",
        "xla/stream_executor/integrations/tf_allocator_adapter.cc (MemoryAllocationError), xla/tsl/framework/bfc_allocator.cc, xla/tsl/framework/allocator.cc (AllocatorStats::DebugString), tsl numbers.cc (HumanReadableNumBytes)",
        "370cfa8d30b2fdf224fabb57fc0263f6f14b07e0, 00df9eefeb544aab362c8934848ba94cdf262394",
    ),
    (
        "tensorflow/tensorflow",
        "tensorflow/core/framework/op_kernel.cc (OpKernelContext::allocate_tensor), stream_executor/cuda/cuda_driver.cc",
        "as indexed",
    ),
    (
        "NVIDIA/nccl",
        "src/include/alloc.h (ncclCudaCallocDebug), src/include/checks.h (CUDACHECK, CUCHECK)",
        "as indexed",
    ),
];

/// Every message in `text`, in order of position. Linear in the length of the text.
pub fn find_all(text: &str) -> Vec<OomMessage> {
    scan::find_all(text)
}

/// A line that mentions running out of memory but belongs to no recognized message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Unrecognized {
    pub line: usize,
    pub text: String,
}

/// Lines of `text` that speak of out-of-memory and lie outside every message in `found`.
pub fn suspicious_lines(text: &str, found: &[OomMessage]) -> Vec<Unrecognized> {
    scan::suspicious_lines(text, found)
}
