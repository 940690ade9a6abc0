// stack_4k, stack_16k, stack_64k: kernels whose every thread needs a 4, 16 or 64 KiB frame.
//
// Launching one makes the driver raise the context's per-thread stack reservation for every
// thread the device can hold (frame x threads per SM x SMs), memory that no allocator reports
// and that is not given back while the context lives. The frame is an array written and read
// through indices known only at run time, so the compiler must keep all of it in local memory.
// `store` is 0 at run time; the compiler cannot know that, so the sum stays live.

template <unsigned int WORDS>
__device__ __forceinline__ void churn(unsigned int* out, unsigned int seed, unsigned int store)
{
    unsigned int frame[WORDS];
    // i -> (i * odd + seed) mod WORDS is a permutation (WORDS is a power of two): every element
    // is written once, at a place the compiler cannot compute.
    for (unsigned int i = 0; i < WORDS; i++) {
        frame[(i * 2654435761u + seed) & (WORDS - 1)] = i ^ seed;
    }
    unsigned int sum = 0;
    for (unsigned int i = 0; i < WORDS; i++) {
        sum += frame[(i * 40503u + threadIdx.x + seed) & (WORDS - 1)];
    }
    if (store != 0) {
        out[threadIdx.x] = sum;
    }
}

extern "C" __global__ void stack_4k(unsigned int* out, unsigned int seed, unsigned int store)
{
    churn<1024>(out, seed, store);
}

extern "C" __global__ void stack_16k(unsigned int* out, unsigned int seed, unsigned int store)
{
    churn<4096>(out, seed, store);
}

extern "C" __global__ void stack_64k(unsigned int* out, unsigned int seed, unsigned int store)
{
    churn<16384>(out, seed, store);
}
