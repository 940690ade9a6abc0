// touch: one 4-byte access every stride_bytes, to make a buffer resident fast.
//
// The access is `red.global.or.b32 [p], 0` (p converted to a global address): a write to the
// word that leaves its value as it was, so a touched buffer still verifies (the simulator models
// touch as not changing contents). It is written in inline PTX because a compiler may turn an
// atomicOr with 0 into a load or drop it. Word i is at byte offset i * stride_bytes; the host
// passes how many fit.

extern "C" __global__ void __launch_bounds__(256)
touch(unsigned int* ptr, unsigned long long touches, unsigned long long stride_bytes)
{
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
    char* base = (char*)ptr;
    for (unsigned long long i = tid; i < touches; i += nthreads) {
        unsigned int* p = (unsigned int*)(base + i * stride_bytes);
        asm volatile("{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %0;\n\tred.global.or.b32 [g], 0;\n\t}"
                     :
                     : "l"(p)
                     : "memory");
    }
}
