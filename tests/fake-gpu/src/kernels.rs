//! headroom's kernels (`kernels/*.cu`), executed by name on the sparse device memory with the
//! exact parameter layout of the PTX, and their modeled GPU time from the profile's bandwidths.
//!
//! An access outside what a kernel may touch (a live allocation, a mapped VMM range with
//! access, a live graph allocation) is an illegal address, as is a misaligned word.

use std::time::Duration;

use crate::abi::CUresult;
use crate::config::Config;
use crate::errors::{CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_MISALIGNED_ADDRESS};
use crate::ptx::{Entry, Param};

/// What a function does, known by its entry name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Touch,
    Fill,
    Verify,
    Copy,
    Triad,
    Spin,
    Stack,
}

impl Kind {
    /// The kernel an entry is, if its name and parameter list are one of headroom's.
    pub fn of(entry: &Entry) -> Option<Kind> {
        use Param::*;
        let (kind, params): (Kind, &[Param]) = match entry.name.as_str() {
            "touch" => (Kind::Touch, &[U64, U64, U64]),
            "fill" => (Kind::Fill, &[U64, U64, U32]),
            "verify" => (Kind::Verify, &[U64, U64, U32, U64]),
            "copy" => (Kind::Copy, &[U64, U64, U64]),
            "triad" => (Kind::Triad, &[U64, U64, U64, U64, F32]),
            "spin" => (Kind::Spin, &[U64]),
            n if n.starts_with("stack_") => (Kind::Stack, &[U64, U32, U32]),
            _ => return None,
        };
        (entry.params == params).then_some(kind)
    }
}

/// One launch, its arguments read out of `kernelParams` (each widened to u64; f32 as bits).
#[derive(Debug, Clone)]
pub struct Launch {
    pub kind: Kind,
    pub args: Vec<u64>,
    pub block_threads: u32,
    /// The function's per-thread local frame (the `stack_*` kernels' array).
    pub local_bytes: u32,
    /// A sticky error injected at `cuLaunchKernel`: the kernel faults when it runs.
    pub fault: Option<CUresult>,
}

impl Launch {
    fn arg(&self, i: usize) -> u64 {
        self.args.get(i).copied().unwrap_or(0)
    }

    /// Modeled GPU time, from the profile's bandwidth figures.
    pub fn duration(&self, cfg: &Config) -> Duration {
        let b = &cfg.profile.bandwidth;
        let seconds = match self.kind {
            Kind::Touch => self.arg(1) as f64 / b.touch_pages_per_s,
            Kind::Fill => 4.0 * self.arg(1) as f64 / b.fill_bytes_per_s,
            Kind::Verify => 4.0 * self.arg(1) as f64 / b.verify_bytes_per_s,
            Kind::Copy => 8.0 * self.arg(2) as f64 / b.copy_bytes_per_s,
            Kind::Triad => 12.0 * self.arg(3) as f64 / b.copy_bytes_per_s,
            Kind::Spin => self.arg(0) as f64 * 1e-9,
            Kind::Stack => 1e-6,
        };
        cfg.scaled(seconds)
    }

    /// The byte ranges the kernel reads or writes (all of them, before any effect).
    fn ranges(&self) -> Vec<(u64, u64)> {
        let words = |n: u64| n.saturating_mul(4);
        match self.kind {
            Kind::Touch => {
                let (ptr, touches, stride) = (self.arg(0), self.arg(1), self.arg(2));
                if touches == 0 {
                    vec![]
                } else {
                    vec![(ptr, (touches - 1).saturating_mul(stride).saturating_add(4))]
                }
            }
            Kind::Fill | Kind::Verify => vec![(self.arg(0), words(self.arg(1)))],
            Kind::Copy => vec![
                (self.arg(0), words(self.arg(2))),
                (self.arg(1), words(self.arg(2))),
            ],
            Kind::Triad => {
                let n = words(self.arg(3));
                vec![(self.arg(0), n), (self.arg(1), n), (self.arg(2), n)]
            }
            Kind::Spin => vec![],
            Kind::Stack => {
                if self.arg(2) as u32 != 0 {
                    vec![(self.arg(0), words(self.block_threads as u64))]
                } else {
                    vec![]
                }
            }
        }
    }

    /// Runs the kernel on `device`'s memory.
    pub fn execute(&self, device: u32) -> Result<(), CUresult> {
        if let Some(code) = self.fault {
            return Err(code);
        }
        let ranges = self.ranges();
        if ranges.iter().any(|(p, n)| *n > 0 && p % 4 != 0) {
            return Err(CUDA_ERROR_MISALIGNED_ADDRESS);
        }
        // The result buffer `verify` accumulates into is checked now too, as the driver lock
        // must not be taken while the contents are locked.
        let result = (self.kind == Kind::Verify).then(|| self.arg(3));
        let (content, ok, result_ok) = crate::state::with_driver(|d| {
            let dev = d.devices.get(device as usize)?;
            let ok = ranges
                .iter()
                .all(|(p, n)| *n == 0 || dev.regions.covers(*p, *n));
            let result_ok = result.is_none_or(|r| dev.regions.covers(r, 16));
            Some((dev.content.clone(), ok, result_ok))
        })
        .flatten()
        .ok_or(CUDA_ERROR_ILLEGAL_ADDRESS)?;
        if !ok {
            return Err(CUDA_ERROR_ILLEGAL_ADDRESS);
        }
        let mut c = content.lock().unwrap_or_else(|e| e.into_inner());
        match self.kind {
            Kind::Touch | Kind::Spin => {}
            Kind::Fill => c.fill(self.arg(0), self.arg(1), self.arg(2) as u32),
            Kind::Verify => {
                let (bad, first) = c.verify(self.arg(0), self.arg(1), self.arg(2) as u32);
                if bad != 0 {
                    let result = self.arg(3);
                    if result % 8 != 0 {
                        return Err(CUDA_ERROR_MISALIGNED_ADDRESS);
                    }
                    if !result_ok {
                        return Err(CUDA_ERROR_ILLEGAL_ADDRESS);
                    }
                    let mut raw = [0u8; 16];
                    c.read(result, &mut raw);
                    let count = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
                    let low = u64::from_le_bytes(raw[8..].try_into().expect("8 bytes"));
                    raw[..8].copy_from_slice(&count.wrapping_add(bad).to_le_bytes());
                    raw[8..].copy_from_slice(&low.min(first).to_le_bytes());
                    c.write(result, &raw);
                }
            }
            Kind::Copy => c.copy(self.arg(0), self.arg(1), self.arg(2) * 4),
            Kind::Triad => {
                let scalar = f32::from_bits(self.arg(4) as u32);
                c.triad(self.arg(0), self.arg(1), self.arg(2), self.arg(3), scalar)
            }
            Kind::Stack => {
                if self.arg(2) as u32 != 0 {
                    let sum = stack_sum(self.arg(1) as u32, self.local_bytes / 4);
                    let words: Vec<u8> = (0..self.block_threads)
                        .flat_map(|_| sum.to_le_bytes())
                        .collect();
                    c.write(self.arg(0), &words);
                }
            }
        }
        Ok(())
    }
}

/// What every thread of a `stack_*` kernel adds up: its frame of `words` words holds `i ^ seed`
/// for every `i` (written through one permutation, read back through another), so the sum is
/// the same for every thread.
pub fn stack_sum(seed: u32, words: u32) -> u32 {
    (0..words).fold(0u32, |s, i| s.wrapping_add(i ^ seed))
}

/// Reads the arguments of `entry` out of `kernelParams`.
///
/// # Safety
/// `params` must hold one valid pointer per parameter of `entry`, each to a value of its type.
pub unsafe fn read_args(params: *mut *mut std::ffi::c_void, entry: &Entry) -> Vec<u64> {
    entry
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // SAFETY: the caller passes one pointer per parameter, each to a value of its type.
            unsafe {
                let v = *params.add(i);
                match p {
                    Param::U32 | Param::F32 => v.cast::<u32>().read_unaligned() as u64,
                    Param::U64 => v.cast::<u64>().read_unaligned(),
                    Param::Other(1) => v.cast::<u8>().read() as u64,
                    Param::Other(2) => v.cast::<u16>().read_unaligned() as u64,
                    Param::Other(_) => v.cast::<u64>().read_unaligned(),
                }
            }
        })
        .collect()
}
