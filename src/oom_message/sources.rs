//! The framework sources each reader was learnt from.

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
    (
        "pytorch/pytorch",
        "aten/src/THC/THCGeneral.cpp (__THCudaCheck)",
        "010705bb6c05ec97db6a3a53abc31cddf2fe6eb4",
    ),
    (
        "pytorch/pytorch",
        "aten/src/ATen/mps/MPSAllocator.mm (alloc_buffer_block, format_size)",
        "02011e0d",
    ),
    (
        "vllm-project/vllm",
        "vllm/v1/worker/gpu_model_runner.py (_dummy_sampler_run)",
        "as indexed",
    ),
    (
        "openxla/xla",
        "xla/service/buffer_assignment.cc (BufferAssignment::StatsString); the stream_executor device memory allocator (StreamExecutorMemoryAllocator::Allocate)",
        "bfbc776e6233f97b5fb13bbc6022834f61646b62",
    ),
    (
        "tensorflow/tensorflow",
        "tensorflow/stream_executor/cuda/cuda_driver.cc (DeviceAllocate, UnifiedMemoryAllocate, HostAllocate, CreateContext); tensorflow/core/common_runtime/gpu/gpu_device.cc",
        "4ccbd3e97c47b28a0102d64b9bb6ed569f40834e, 637eae5b82bba256600fe421c8dc8c019e18162c",
    ),
    (
        "ggml-org/llama.cpp",
        "ggml/src/ggml-cuda/ggml-cuda.cu (ggml_backend_cuda_buffer_type_alloc_buffer, ggml_cuda_error), ggml/src/ggml-alloc.c",
        "00108827",
    ),
    (
        "PaddlePaddle/Paddle",
        "paddle/phi/core/memory/allocation/cuda_allocator.cc (CUDAAllocator::AllocateImpl), string::HumanReadableSize",
        "4fd9ccec",
    ),
    (
        "cupy/cupy",
        "cupy/cuda/memory.pyx (OutOfMemoryError)",
        "6b6d9563, f9d79632",
    ),
    (
        "microsoft/onnxruntime",
        "onnxruntime/core/framework/bfc_arena.cc (AllocateRawInternal)",
        "009aae13",
    ),
];
