// verify: reads [ptr, ptr + 4 * words) back and compares every word with fill_pattern(addr, seed).
//
// result[0] += number of words that differ; result[1] = min(result[1], lowest differing address).
// The host sets result to {0, ~0} before the launch and reads the differing word itself. Each
// thread counts on its own and each warp adds once, so a buffer that is wrong everywhere costs
// one atomic per warp, not one per word. Same index arithmetic as fill.cu.

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

__device__ __forceinline__ void check(unsigned int actual, unsigned int expected, unsigned long long addr,
                                      unsigned long long& bad, unsigned long long& first)
{
    if (actual != expected) {
        bad += 1;
        first = addr < first ? addr : first;
    }
}

// The four words of an aligned vector at addr. Words almost always match: one OR of XORs decides,
// and only a vector with a wrong word pays for counting and the address minimum.
__device__ __forceinline__ void check4(uint4 w, unsigned long long addr, unsigned int seed,
                                       unsigned long long& bad, unsigned long long& first)
{
    const unsigned int key = pattern_key(addr, seed);
    const unsigned int e0 = pattern_mix(key);
    const unsigned int e1 = pattern_mix(key ^ 1u);
    const unsigned int e2 = pattern_mix(key ^ 2u);
    const unsigned int e3 = pattern_mix(key ^ 3u);
    if (((w.x ^ e0) | (w.y ^ e1) | (w.z ^ e2) | (w.w ^ e3)) != 0) {
        check(w.x, e0, addr, bad, first);
        check(w.y, e1, addr + 4, bad, first);
        check(w.z, e2, addr + 8, bad, first);
        check(w.w, e3, addr + 12, bad, first);
    }
}

extern "C" __global__ void __launch_bounds__(256)
verify(const unsigned int* __restrict__ ptr, unsigned long long words, unsigned int seed,
       unsigned long long* __restrict__ result)
{
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long addr = (unsigned long long)ptr;
    const unsigned long long head = head_words(addr, words);
    const unsigned long long vecs = (words - head) >> 2;
    const unsigned long long tail_start = head + (vecs << 2);
    unsigned long long bad = 0;
    unsigned long long first = ~0ull;

    for (unsigned long long i = tid; i < head; i += nthreads) {
        check(ptr[i], pattern_mix(pattern_key(addr + 4 * i, seed)), addr + 4 * i, bad, first);
    }
    for (unsigned long long i = tail_start + tid; i < words; i += nthreads) {
        check(ptr[i], pattern_mix(pattern_key(addr + 4 * i, seed)), addr + 4 * i, bad, first);
    }

    const uint4* __restrict__ body = (const uint4*)(ptr + head);
    const unsigned long long body_addr = addr + 4 * head;
    for (unsigned long long v = tid; v < vecs; v += nthreads * UNROLL) {
        // All loads first, so UNROLL of them are in flight per thread.
        uint4 w[UNROLL];
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            const unsigned long long j = v + u * nthreads;
            if (j < vecs) {
                w[u] = body[j];
            }
        }
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            const unsigned long long j = v + u * nthreads;
            if (j < vecs) {
                check4(w[u], body_addr + 16 * j, seed, bad, first);
            }
        }
    }

    // Every thread of the warp gets here (no early return; blocks are whole warps).
#pragma unroll
    for (unsigned int offset = 16; offset > 0; offset >>= 1) {
        const unsigned long long other_bad = __shfl_down_sync(0xFFFFFFFFu, bad, offset);
        const unsigned long long other_first = __shfl_down_sync(0xFFFFFFFFu, first, offset);
        bad += other_bad;
        first = other_first < first ? other_first : first;
    }
    if ((threadIdx.x & 31u) == 0 && bad != 0) {
        atomicAdd(&result[0], bad);
        atomicMin(&result[1], first);
    }
}
