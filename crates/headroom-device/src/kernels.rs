//! The GPU kernels of `kernels/`: the embedded PTX, what each `Kernel` launches, and where.
//!
//! Everything here is pure, so it is tested without a GPU: `plan` turns a `Kernel` into a `Call`
//! (function, exact argument list, amount of work), `geometry` sizes the grid, and
//! `device/cuda/launch.rs` loads the PTX and launches. The tests mirror the index arithmetic of
//! the `.cu` files on the CPU to show that the grid-stride loops visit every word exactly once,
//! and read the parameter lists out of the committed PTX to check the argument packing.

use std::ffi::{CStr, c_void};

use crate::{DevPtr, DevResult, DeviceError, Kernel};

/// Threads per block of the grid-stride kernels (their `__launch_bounds__(256)`).
pub const BLOCK_THREADS: u32 = 256;
/// 16-byte vectors a thread handles per round of its loop (`UNROLL` in the `.cu` files).
pub const UNROLL: u64 = 4;
/// Bytes of one vector load or store (`uint4`, `float4`).
pub const VECTOR_BYTES: u64 = 16;
/// Bytes of one word: every kernel works on 4-byte words.
pub const WORD_BYTES: u64 = 4;
/// Threads per block of a `stack_*` launch. Its grid is one full wave (every SM holding as
/// many blocks as it can), so the launch itself reaches the occupancy the driver sizes the
/// stack reservation for: small blocks would hit the limit on blocks per SM first.
pub const STACK_BLOCK_THREADS: u32 = 256;
/// `verify`'s result buffer: the mismatch count and the lowest differing address, two u64.
pub const VERIFY_RESULT_BYTES: u64 = 16;
/// What the result buffer holds before `verify` runs: no mismatch, no address.
pub const VERIFY_RESULT_INIT: [u64; 2] = [0, u64::MAX];

/// The PTX of `kernels/<file>`, NUL-terminated as `cuModuleLoadData` wants it.
macro_rules! embedded_ptx {
    ($file:literal) => {
        match CStr::from_bytes_with_nul(
            concat!(include_str!(concat!("../../../kernels/", $file)), "\0").as_bytes(),
        ) {
            Ok(ptx) => ptx,
            Err(_) => panic!(concat!("kernels/", $file, " contains a NUL byte")),
        }
    };
}

const TOUCH_PTX: &CStr = embedded_ptx!("touch.ptx");
const FILL_PTX: &CStr = embedded_ptx!("fill.ptx");
const VERIFY_PTX: &CStr = embedded_ptx!("verify.ptx");
const STREAM_PTX: &CStr = embedded_ptx!("stream.ptx");
const SPIN_PTX: &CStr = embedded_ptx!("spin.ptx");
const STACK_PTX: &CStr = embedded_ptx!("stack.ptx");

/// One PTX module: one `kernels/<name>.cu` compiled by NVRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    Touch,
    Fill,
    Verify,
    Stream,
    Spin,
    Stack,
}

impl Module {
    pub const COUNT: usize = 6;
    pub const ALL: [Module; Module::COUNT] = [
        Module::Touch,
        Module::Fill,
        Module::Verify,
        Module::Stream,
        Module::Spin,
        Module::Stack,
    ];

    /// The file stem in `kernels/`.
    pub fn name(self) -> &'static str {
        match self {
            Module::Touch => "touch",
            Module::Fill => "fill",
            Module::Verify => "verify",
            Module::Stream => "stream",
            Module::Spin => "spin",
            Module::Stack => "stack",
        }
    }

    /// The embedded PTX text.
    pub fn ptx(self) -> &'static CStr {
        match self {
            Module::Touch => TOUCH_PTX,
            Module::Fill => FILL_PTX,
            Module::Verify => VERIFY_PTX,
            Module::Stream => STREAM_PTX,
            Module::Spin => SPIN_PTX,
            Module::Stack => STACK_PTX,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The type of one kernel parameter, as the PTX declares it (`.param .u64` and so on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    U32,
    U64,
    F32,
}

/// One `extern "C" __global__` function of a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Function {
    Touch,
    Fill,
    Verify,
    Copy,
    Triad,
    Spin,
    Stack4K,
    Stack16K,
    Stack64K,
}

impl Function {
    pub const COUNT: usize = 9;
    pub const ALL: [Function; Function::COUNT] = [
        Function::Touch,
        Function::Fill,
        Function::Verify,
        Function::Copy,
        Function::Triad,
        Function::Spin,
        Function::Stack4K,
        Function::Stack16K,
        Function::Stack64K,
    ];

    /// The entry name in the PTX.
    pub fn name(self) -> &'static str {
        match self {
            Function::Touch => "touch",
            Function::Fill => "fill",
            Function::Verify => "verify",
            Function::Copy => "copy",
            Function::Triad => "triad",
            Function::Spin => "spin",
            Function::Stack4K => "stack_4k",
            Function::Stack16K => "stack_16k",
            Function::Stack64K => "stack_64k",
        }
    }

    pub fn module(self) -> Module {
        match self {
            Function::Touch => Module::Touch,
            Function::Fill => Module::Fill,
            Function::Verify => Module::Verify,
            Function::Copy | Function::Triad => Module::Stream,
            Function::Spin => Module::Spin,
            Function::Stack4K | Function::Stack16K | Function::Stack64K => Module::Stack,
        }
    }

    /// The parameter list, in order (pointers are `.u64`).
    pub fn params(self) -> &'static [Param] {
        use Param::*;
        match self {
            // ptr, touches, stride_bytes
            Function::Touch => &[U64, U64, U64],
            // ptr, words, seed
            Function::Fill => &[U64, U64, U32],
            // ptr, words, seed, result
            Function::Verify => &[U64, U64, U32, U64],
            // dst, src, words
            Function::Copy => &[U64, U64, U64],
            // a, b, c, words, scalar
            Function::Triad => &[U64, U64, U64, U64, F32],
            // duration_ns
            Function::Spin => &[U64],
            // out, seed, store
            Function::Stack4K | Function::Stack16K | Function::Stack64K => &[U64, U32, U32],
        }
    }

    /// Threads per block of a launch, where the occupancy query needs one: the grid-stride
    /// kernels' and the `stack_*` kernels' (their grids are sized from it), `None` otherwise.
    pub fn block_threads(self) -> Option<u32> {
        if self.grid_stride() {
            Some(BLOCK_THREADS)
        } else if self.frame_bytes().is_some() {
            Some(STACK_BLOCK_THREADS)
        } else {
            None
        }
    }

    /// True for the grid-stride kernels, whose grid is sized by `geometry`.
    pub fn grid_stride(self) -> bool {
        matches!(
            self,
            Function::Touch | Function::Fill | Function::Verify | Function::Copy | Function::Triad
        )
    }

    /// The per-thread frame of a `stack_*` variant.
    pub fn frame_bytes(self) -> Option<u32> {
        STACK_VARIANTS
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(b, _)| *b)
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The `stack_*` variants by frame size, smallest first.
pub const STACK_VARIANTS: [(u32, Function); 3] = [
    (4 * 1024, Function::Stack4K),
    (16 * 1024, Function::Stack16K),
    (64 * 1024, Function::Stack64K),
];

/// The smallest `stack_*` variant whose frame holds `frame_bytes`.
pub fn stack_function(frame_bytes: u32) -> DevResult<Function> {
    STACK_VARIANTS
        .iter()
        .find(|(bytes, _)| *bytes >= frame_bytes)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            DeviceError::Invalid(format!(
                "stack: a frame of {frame_bytes} bytes is larger than the largest kernel's \
                 ({} bytes)",
                STACK_VARIANTS[STACK_VARIANTS.len() - 1].0
            ))
        })
}

/// What the driver must reserve for a per-thread frame of `frame_bytes` on the whole device:
/// every thread every multiprocessor can hold gets one (an estimate: the driver rounds).
pub fn stack_reservation_bytes(
    frame_bytes: u32,
    multiprocessors: u32,
    threads_per_multiprocessor: u32,
) -> u64 {
    frame_bytes as u64 * multiprocessors as u64 * threads_per_multiprocessor as u64
}

/// One kernel argument with its exact type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    U32(u32),
    U64(u64),
    F32(f32),
}

impl Arg {
    pub fn param(&self) -> Param {
        match self {
            Arg::U32(_) => Param::U32,
            Arg::U64(_) => Param::U64,
            Arg::F32(_) => Param::F32,
        }
    }

    /// A pointer to the value itself, as `cuLaunchKernel` wants each entry of `kernelParams`.
    pub fn value_ptr(&mut self) -> *mut c_void {
        match self {
            Arg::U32(v) => (v as *mut u32).cast(),
            Arg::U64(v) => (v as *mut u64).cast(),
            Arg::F32(v) => (v as *mut f32).cast(),
        }
    }
}

/// How much parallel work a launch has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// A grid-stride loop with work for at most `threads` threads (more would find none).
    GridStride { threads: u64 },
    /// One block of exactly `threads` threads.
    OneBlock { threads: u32 },
    /// One full wave of `block_threads`-thread blocks: every SM as full as it can be.
    FullWave { block_threads: u32 },
}

/// Grid and block of a launch (one-dimensional).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub grid_blocks: u32,
    pub block_threads: u32,
}

impl Geometry {
    pub fn threads(&self) -> u64 {
        self.grid_blocks as u64 * self.block_threads as u64
    }
}

/// The grid for `work` on a device with `multiprocessors` SMs, each of which holds
/// `resident_blocks_per_sm` blocks of the function at once (what
/// `cuOccupancyMaxActiveBlocksPerMultiprocessor` says for `BLOCK_THREADS`).
///
/// A grid-stride kernel gets one full wave at most: more blocks would wait for a second wave
/// and finish late, fewer leave SMs idle. Small work gets fewer blocks, never zero.
pub fn geometry(work: Work, multiprocessors: u32, resident_blocks_per_sm: u32) -> Geometry {
    match work {
        Work::GridStride { threads } => {
            let wave = multiprocessors.max(1) as u64 * resident_blocks_per_sm.max(1) as u64;
            let wanted = threads.div_ceil(BLOCK_THREADS as u64).max(1);
            Geometry {
                grid_blocks: wanted.min(wave).min(i32::MAX as u64) as u32,
                block_threads: BLOCK_THREADS,
            }
        }
        Work::FullWave { block_threads } => Geometry {
            grid_blocks: (multiprocessors.max(1) as u64 * resident_blocks_per_sm.max(1) as u64)
                .min(i32::MAX as u64) as u32,
            block_threads,
        },
        Work::OneBlock { threads } => Geometry {
            grid_blocks: 1,
            block_threads: threads,
        },
    }
}

/// A kernel launch: which function, its arguments in order, and how much work it has.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub function: Function,
    pub args: Vec<Arg>,
    pub work: Work,
}

/// Threads a vector kernel over `words` words can use: one per `UNROLL` vectors.
fn vector_threads(words: u64) -> u64 {
    words.div_ceil(VECTOR_BYTES / WORD_BYTES).div_ceil(UNROLL)
}

/// Number of words `touch` accesses in `bytes`: at offsets 0, stride, 2 * stride, ... while
/// the whole word fits.
pub fn touch_count(bytes: u64, stride_bytes: u64) -> u64 {
    if bytes < WORD_BYTES || stride_bytes == 0 {
        0
    } else {
        (bytes - WORD_BYTES) / stride_bytes + 1
    }
}

fn word_aligned(kernel: &'static str, what: &str, ptr: DevPtr) -> DevResult<()> {
    if ptr % WORD_BYTES == 0 {
        Ok(())
    } else {
        Err(DeviceError::Invalid(format!(
            "{kernel}: {what} {ptr:#x} is not 4-byte aligned"
        )))
    }
}

fn whole_words(kernel: &'static str, bytes: u64) -> DevResult<u64> {
    if bytes % WORD_BYTES == 0 {
        Ok(bytes / WORD_BYTES)
    } else {
        Err(DeviceError::Invalid(format!(
            "{kernel}: {bytes} bytes is not a whole number of 4-byte words"
        )))
    }
}

/// The launch for `kernel`, or `None` for the driver operations (`Memset`, `DriverCopy`).
///
/// `verify_result` is the device address of `verify`'s result buffer (`VERIFY_RESULT_BYTES`).
/// Pointers must be 4-byte aligned; `Fill` and `Verify` cover `bytes / 4` whole words (a
/// trailing partial word is left alone, as on the simulator); `Copy` and `Triad` need a whole
/// number of words.
pub fn plan(kernel: &Kernel, verify_result: DevPtr) -> DevResult<Option<Call>> {
    let call = match *kernel {
        Kernel::Touch {
            ptr,
            bytes,
            stride_bytes,
        } => {
            word_aligned("touch", "pointer", ptr)?;
            if stride_bytes == 0 || stride_bytes % WORD_BYTES != 0 {
                return Err(DeviceError::Invalid(format!(
                    "touch: stride of {stride_bytes} bytes is not a positive multiple of 4"
                )));
            }
            let touches = touch_count(bytes, stride_bytes);
            Call {
                function: Function::Touch,
                args: vec![Arg::U64(ptr), Arg::U64(touches), Arg::U64(stride_bytes)],
                work: Work::GridStride { threads: touches },
            }
        }
        Kernel::Fill { ptr, bytes, seed } => {
            word_aligned("fill", "pointer", ptr)?;
            let words = bytes / WORD_BYTES;
            Call {
                function: Function::Fill,
                args: vec![Arg::U64(ptr), Arg::U64(words), Arg::U32(seed)],
                work: Work::GridStride {
                    threads: vector_threads(words),
                },
            }
        }
        Kernel::Verify { ptr, bytes, seed } => {
            word_aligned("verify", "pointer", ptr)?;
            let words = bytes / WORD_BYTES;
            Call {
                function: Function::Verify,
                args: vec![
                    Arg::U64(ptr),
                    Arg::U64(words),
                    Arg::U32(seed),
                    Arg::U64(verify_result),
                ],
                work: Work::GridStride {
                    threads: vector_threads(words),
                },
            }
        }
        Kernel::Copy { dst, src, bytes } => {
            word_aligned("copy", "destination", dst)?;
            word_aligned("copy", "source", src)?;
            let words = whole_words("copy", bytes)?;
            Call {
                function: Function::Copy,
                args: vec![Arg::U64(dst), Arg::U64(src), Arg::U64(words)],
                work: Work::GridStride {
                    threads: vector_threads(words),
                },
            }
        }
        Kernel::Triad {
            a,
            b,
            c,
            bytes,
            scalar,
        } => {
            word_aligned("triad", "a", a)?;
            word_aligned("triad", "b", b)?;
            word_aligned("triad", "c", c)?;
            let words = whole_words("triad", bytes)?;
            Call {
                function: Function::Triad,
                args: vec![
                    Arg::U64(a),
                    Arg::U64(b),
                    Arg::U64(c),
                    Arg::U64(words),
                    Arg::F32(scalar),
                ],
                work: Work::GridStride {
                    threads: vector_threads(words),
                },
            }
        }
        Kernel::Spin { duration_ns } => Call {
            function: Function::Spin,
            args: vec![Arg::U64(duration_ns)],
            work: Work::OneBlock { threads: 1 },
        },
        Kernel::Stack { frame_bytes } => Call {
            function: stack_function(frame_bytes)?,
            // `store` = 0: nothing is written, so `out` may be null.
            args: vec![Arg::U64(0), Arg::U32(frame_bytes), Arg::U32(0)],
            work: Work::FullWave {
                block_threads: STACK_BLOCK_THREADS,
            },
        },
        Kernel::Memset { .. } | Kernel::DriverCopy { .. } => return Ok(None),
    };
    Ok(Some(call))
}

/// The mismatch count and lowest differing address from `verify`'s result buffer, or `None`
/// when every word matched. An address outside `[ptr, ptr + bytes)` means the result buffer
/// was not what `verify` wrote, and is an error.
pub fn decode_verify(raw: [u64; 2], ptr: DevPtr, bytes: u64) -> DevResult<Option<(u64, DevPtr)>> {
    let [count, first_address] = raw;
    if count == 0 {
        return Ok(None);
    }
    let words = bytes / WORD_BYTES;
    let inside = first_address >= ptr
        && (first_address - ptr) % WORD_BYTES == 0
        && (first_address - ptr) / WORD_BYTES < words;
    if !inside || count > words {
        return Err(DeviceError::Invalid(format!(
            "verify reported {count} mismatches from {first_address:#x}, \
             which does not fit the {bytes} bytes at {ptr:#x}"
        )));
    }
    Ok(Some((count, first_address)))
}

#[cfg(test)]
mod packing_tests;
#[cfg(test)]
mod tests;
