//! The rules every diagnosis shares: one CUDA context per process is no one's fault, a free
//! margin below one allocation page is no room, fragmentation needs a floor, and the sizes
//! past which a figure cannot be real.
//!
//! **The CUDA context.** Before a process allocates anything it holds its context: the
//! kernels of the libraries it loaded, the stack reservation (stack × SMs × threads per SM),
//! cuBLAS handles. It costs about 300–550 MiB on recent GPUs with lazy module loading (287 MiB
//! measured by PyTorch on one card), which CUDA has offered since 11.7 and made the Linux
//! default in 12.2; before it, a context with every library's kernels took 1 GiB or more.
//! Memory "outside the allocator" is blamed on someone only for what lies beyond one context,
//! taken at the top of its range so that no context's worth is ever called a cause:
//!
//! | message era | card (device total) | one context |
//! | --- | --- | --- |
//! | lazy loading (PyTorch ≥ 2.1's sentence form, `cudaMallocAsync`, vLLM) | ≤ 24 GiB | 512 MiB |
//! | lazy loading | > 24 GiB | 640 MiB |
//! | eager loading (PyTorch < 2.1's parenthesis, THC, TensorFlow 1.x) | any | 1 GiB |

use super::interval::Iv;

const MIB: i128 = 1 << 20;
const GIB: i128 = 1 << 30;

/// The driver maps device memory in 2 MiB pages (allocations above 1 MiB take whole pages):
/// a free margin smaller than this after the request is no room at all.
pub const ROOM_MARGIN_BYTES: i128 = 2 * MIB;

/// When the process's framework loaded its kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// CUDA's lazy module loading: only the kernels used are loaded.
    Lazy,
    /// Every kernel of every library loaded when the context is created.
    Eager,
}

/// One CUDA context's worth of device memory for a card of `device_total` bytes.
pub fn context_bytes(device_total: Iv, era: Era) -> i128 {
    match era {
        Era::Eager => GIB,
        Era::Lazy if device_total.low > 24 * GIB => 640 * MIB,
        Era::Lazy => 512 * MIB,
    }
}

/// The context figure as people read it.
pub fn context_text(bytes: i128) -> String {
    Iv::exact(bytes).to_string()
}

/// Reserved-but-unallocated memory is called fragmentation only when it is at least this
/// share of the reserved pool: the caching allocator's own rounding (512 B blocks, 2 MiB and
/// 20 MiB segments) leaves a few percent unallocated in any pool.
pub const FRAGMENTATION_MIN_SHARE_OF_RESERVED: f64 = 0.05;

/// …and at least this share of the request: a remnant far smaller than the request is the
/// pool's slack, not memory the request was waiting for.
pub const FRAGMENTATION_MIN_SHARE_OF_REQUEST: f64 = 0.5;

/// No device holds this much (1 PiB): a figure above it is a size computed wrong or a
/// counter that wrapped, not memory.
pub const IMPOSSIBLE_BYTES: i128 = 1 << 50;

/// Where Linux on x86-64 maps a process's stack and shared libraries: from `0x7f00_0000_0000`
/// to the top of user space (2^47 bytes, 128 TiB). A size in that range (127–128 TiB) is an
/// address read as a size (an uninitialized field, a pointer passed where a length was
/// expected), not a request anyone computed.
pub const ADDRESS_LOW_BYTES: i128 = 0x7f00_0000_0000;
pub const ADDRESS_HIGH_BYTES: i128 = 1 << 47;

/// Whether every value `iv` stands for lies where x86-64 Linux maps stacks and libraries.
pub fn address_like(iv: super::interval::Iv) -> bool {
    iv.low >= ADDRESS_LOW_BYTES && iv.high < ADDRESS_HIGH_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_grows_with_the_card_and_the_loading_era() {
        let t4 = Iv::exact(15 * GIB);
        let h100 = Iv::exact(79 * GIB);
        assert_eq!(context_bytes(t4, Era::Lazy), 512 * MIB);
        assert_eq!(context_bytes(h100, Era::Lazy), 640 * MIB);
        assert_eq!(context_bytes(t4, Era::Eager), GIB);
        assert_eq!(context_text(640 * MIB), "640.00 MiB");
    }
}
