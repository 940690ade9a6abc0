// fill: writes fill_pattern(addr, seed) to every 4-byte word of [ptr, ptr + 4 * words).
//
// Grid-stride over 16-byte vectors (uint4 stores) on the 16-byte-aligned body; the up to three
// words before it (head) and after it (tail) are written one by one, so any word count and any
// 4-byte-aligned pointer works. src/kernels.rs mirrors this index arithmetic in its tests.

#define UNROLL 4

// ---- pattern (keep identical in fill.cu and verify.cu) ----
// fill_pattern(addr, seed) of src/device/mod.rs is pattern_mix(pattern_key(addr, seed)).
// For a 16-byte-aligned addr, the key of the word at addr + 4 * i is pattern_key(addr, seed) ^ i
// (the low two bits of addr >> 2 are zero and addr >> 34 is the same for all four words), so a
// vector needs one key and four mixes.
__device__ __forceinline__ unsigned int pattern_key(unsigned long long addr, unsigned int seed)
{
    const unsigned int lo = (unsigned int)(addr >> 2);
    const unsigned int hi = (unsigned int)(addr >> 34);
    return lo ^ (hi * 0x9E3779B1u) ^ seed;
}

// murmur3's 32-bit finalizer.
__device__ __forceinline__ unsigned int pattern_mix(unsigned int x)
{
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}
// ---- end pattern ----

// ---- split (keep identical in fill.cu, verify.cu and stream.cu) ----
// Words before the first 16-byte boundary at or after addr (0 to 3, at most `words`).
__device__ __forceinline__ unsigned long long head_words(unsigned long long addr, unsigned long long words)
{
    const unsigned long long head = ((16ull - (addr & 15ull)) & 15ull) >> 2;
    return head < words ? head : words;
}
// ---- end split ----

extern "C" __global__ void __launch_bounds__(256)
fill(unsigned int* __restrict__ ptr, unsigned long long words, unsigned int seed)
{
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long addr = (unsigned long long)ptr;
    const unsigned long long head = head_words(addr, words);
    const unsigned long long vecs = (words - head) >> 2;
    const unsigned long long tail_start = head + (vecs << 2);

    for (unsigned long long i = tid; i < head; i += nthreads) {
        ptr[i] = pattern_mix(pattern_key(addr + 4 * i, seed));
    }
    for (unsigned long long i = tail_start + tid; i < words; i += nthreads) {
        ptr[i] = pattern_mix(pattern_key(addr + 4 * i, seed));
    }

    uint4* __restrict__ body = (uint4*)(ptr + head);
    const unsigned long long body_addr = addr + 4 * head;
    for (unsigned long long v = tid; v < vecs; v += nthreads * UNROLL) {
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            const unsigned long long j = v + u * nthreads;
            if (j < vecs) {
                const unsigned int key = pattern_key(body_addr + 16 * j, seed);
                body[j] = make_uint4(pattern_mix(key), pattern_mix(key ^ 1u), pattern_mix(key ^ 2u),
                                     pattern_mix(key ^ 3u));
            }
        }
    }
}
