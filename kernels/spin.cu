// spin: keeps its stream busy for duration_ns of GPU time, read from %globaltimer.
//
// Launched as one block of one thread; it holds one warp slot on one SM and nothing else.
// %globaltimer ticks in nanoseconds but may advance in steps of about a microsecond, so the
// kernel ends within a step after duration_ns.

__device__ __forceinline__ unsigned long long global_timer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void spin(unsigned long long duration_ns)
{
    const unsigned long long start = global_timer_ns();
    while (global_timer_ns() - start < duration_ns) {
    }
}
