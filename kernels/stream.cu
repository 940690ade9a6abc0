// copy (dst = src) and triad (a = b + scalar * c on f32): the bandwidth peers of cuMemcpyDtoD.
//
// Same grid-stride shape as fill.cu: 16-byte vector loads and stores on the aligned body, one
// word at a time on the head and tail. When the pointers are not aligned alike modulo 16 no
// common vector body exists, and every word is moved one by one (correct, slower).

#define UNROLL 4

// ---- split (keep identical in fill.cu, verify.cu and stream.cu) ----
// Words before the first 16-byte boundary at or after addr (0 to 3, at most `words`).
__device__ __forceinline__ unsigned long long head_words(unsigned long long addr, unsigned long long words)
{
    const unsigned long long head = ((16ull - (addr & 15ull)) & 15ull) >> 2;
    return head < words ? head : words;
}
// ---- end split ----

extern "C" __global__ void __launch_bounds__(256)
copy(unsigned int* __restrict__ dst, const unsigned int* __restrict__ src, unsigned long long words)
{
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long addr = (unsigned long long)dst;
    if (((addr ^ (unsigned long long)src) & 15ull) != 0) {
        for (unsigned long long i = tid; i < words; i += nthreads) {
            dst[i] = src[i];
        }
        return;
    }
    const unsigned long long head = head_words(addr, words);
    const unsigned long long vecs = (words - head) >> 2;
    const unsigned long long tail_start = head + (vecs << 2);

    for (unsigned long long i = tid; i < head; i += nthreads) {
        dst[i] = src[i];
    }
    for (unsigned long long i = tail_start + tid; i < words; i += nthreads) {
        dst[i] = src[i];
    }

    uint4* __restrict__ d = (uint4*)(dst + head);
    const uint4* __restrict__ s = (const uint4*)(src + head);
    for (unsigned long long v = tid; v < vecs; v += nthreads * UNROLL) {
        uint4 w[UNROLL];
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            const unsigned long long j = v + u * nthreads;
            if (j < vecs) {
                w[u] = s[j];
            }
        }
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            const unsigned long long j = v + u * nthreads;
            if (j < vecs) {
                d[j] = w[u];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
triad(float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c,
      unsigned long long words, float scalar)
{
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long addr = (unsigned long long)a;
    if ((((addr ^ (unsigned long long)b) | (addr ^ (unsigned long long)c)) & 15ull) != 0) {
        for (unsigned long long i = tid; i < words; i += nthreads) {
            a[i] = fmaf(scalar, c[i], b[i]);
        }
        return;
    }
    const unsigned long long head = head_words(addr, words);
    const unsigned long long vecs = (words - head) >> 2;
    const unsigned long long tail_start = head + (vecs << 2);

    for (unsigned long long i = tid; i < head; i += nthreads) {
        a[i] = fmaf(scalar, c[i], b[i]);
    }
    for (unsigned long long i = tail_start + tid; i < words; i += nthreads) {
        a[i] = fmaf(scalar, c[i], b[i]);
    }

    float4* __restrict__ av = (float4*)(a + head);
    const float4* __restrict__ bv = (const float4*)(b + head);
    const float4* __restrict__ cv = (const float4*)(c + head);
    for (unsigned long long v = tid; v < vecs; v += nthreads * UNROLL) {
        float4 x[UNROLL];
        float4 y[UNROLL];
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            const unsigned long long j = v + u * nthreads;
            if (j < vecs) {
                x[u] = bv[j];
                y[u] = cv[j];
            }
        }
#pragma unroll
        for (unsigned int u = 0; u < UNROLL; u++) {
            const unsigned long long j = v + u * nthreads;
            if (j < vecs) {
                av[j] = make_float4(fmaf(scalar, y[u].x, x[u].x), fmaf(scalar, y[u].y, x[u].y),
                                    fmaf(scalar, y[u].z, x[u].z), fmaf(scalar, y[u].w, x[u].w));
            }
        }
    }
}
