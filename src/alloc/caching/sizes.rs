//! The caching allocator's size arithmetic: rounding, pool choice, segment sizes.
//!
//! Constants and rules as in c10/cuda/CUDACachingAllocator.cpp (`kMinBlockSize`, `kSmallSize`,
//! `kSmallBuffer`, `kMinLargeAlloc`, `kRoundLarge`, `kLargeBuffer`; `round_size`,
//! `roundup_power2_next_division`, `get_allocation_size`, `get_pool`).

use serde::Serialize;

/// `kMinBlockSize`: all sizes are rounded to at least 512 bytes.
pub const MIN_BLOCK_BYTES: u64 = 512;
/// `kSmallSize`: the largest "small" request is 1 MiB.
pub const SMALL_SIZE_BYTES: u64 = 1 << 20;
/// `kSmallBuffer`: small requests are packed into 2 MiB segments (and expandable small pages).
pub const SMALL_BUFFER_BYTES: u64 = 2 << 20;
/// `kMinLargeAlloc`: requests from 1 MiB up to (not including) 10 MiB share 20 MiB segments.
pub const MIN_LARGE_ALLOC_BYTES: u64 = 10 << 20;
/// `kRoundLarge`: larger requests get their own segment, rounded up to 2 MiB.
pub const ROUND_LARGE_BYTES: u64 = 2 << 20;
/// `kLargeBuffer`: the 20 MiB segment (and expandable large page).
pub const LARGE_BUFFER_BYTES: u64 = 20 << 20;
/// `allocate` refuses anything this large or larger, as PyTorch does ("more than 1EB").
pub const ONE_EXA_BYTES: u64 = 1 << 60;
/// Number of `roundup_power2_divisions` intervals: [1 MiB, 2 MiB), …, [32 GiB, 64 GiB) and up;
/// sizes below 1 MiB use the first.
pub const ROUNDUP_INTERVALS: usize = 16;

/// PyTorch's two block pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// Requests of at most 1 MiB (after rounding).
    Small,
    /// Everything else.
    Large,
}

impl PoolKind {
    /// `get_pool`: `size <= kSmallSize` goes to the small pool.
    pub fn for_rounded(rounded_bytes: u64) -> PoolKind {
        if rounded_bytes <= SMALL_SIZE_BYTES {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Page size of an expandable segment in this pool (2 MiB small, 20 MiB large).
    pub fn expandable_page_bytes(self) -> u64 {
        match self {
            PoolKind::Small => SMALL_BUFFER_BYTES,
            PoolKind::Large => LARGE_BUFFER_BYTES,
        }
    }
}

/// `get_allocation_size`: the segment `cudaMalloc` is asked for when no cached block fits.
pub fn allocation_size(rounded_bytes: u64) -> u64 {
    if rounded_bytes <= SMALL_SIZE_BYTES {
        SMALL_BUFFER_BYTES
    } else if rounded_bytes < MIN_LARGE_ALLOC_BYTES {
        LARGE_BUFFER_BYTES
    } else {
        rounded_bytes.div_ceil(ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES
    }
}

/// `AllocatorConfig::roundup_power2_divisions(size)`: which interval a size falls in.
pub fn roundup_interval(bytes: u64) -> usize {
    let log2 = 63 - bytes.max(1).leading_zeros() as usize;
    log2.saturating_sub(20).min(ROUNDUP_INTERVALS - 1)
}

/// `roundup_power2_next_division`: rounds up to the next of `divisions` equal steps between
/// two powers of two (1200 with 4 divisions → 1280). A power of two is kept as it is.
pub fn roundup_power2_next_division(bytes: u64, divisions: u64) -> u64 {
    if bytes.is_power_of_two() {
        return bytes;
    }
    let floor = 1u64 << (63 - bytes.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let down = bytes & !(step - 1);
    if down == bytes { bytes } else { down + step }
}

/// `round_size`: at least 512 B, a multiple of 512 B, or the next power-of-two division when
/// `roundup_power2_divisions` asks for more than one division in this size's interval.
/// `bytes` must be below `ONE_EXA_BYTES` (no overflow then).
pub fn round_size(bytes: u64, divisions: &[u32; ROUNDUP_INTERVALS]) -> u64 {
    if bytes < MIN_BLOCK_BYTES {
        return MIN_BLOCK_BYTES;
    }
    let d = divisions[roundup_interval(bytes)] as u64;
    if d > 1 && bytes > MIN_BLOCK_BYTES * d {
        roundup_power2_next_division(bytes, d)
    } else {
        bytes.div_ceil(MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const NONE: [u32; ROUNDUP_INTERVALS] = [0; ROUNDUP_INTERVALS];

    #[test]
    fn rounding_to_512_bytes() {
        assert_eq!(round_size(1, &NONE), 512);
        assert_eq!(round_size(512, &NONE), 512);
        assert_eq!(round_size(513, &NONE), 1024);
        assert_eq!(round_size(3 * MIB + 1, &NONE), 3 * MIB + 512);
    }

    #[test]
    fn power_of_two_divisions() {
        // The example in PyTorch's comment: 1200 with 4 divisions is 1280.
        assert_eq!(roundup_power2_next_division(1200, 4), 1280);
        assert_eq!(roundup_power2_next_division(1024, 4), 1024);
        let four = [4; ROUNDUP_INTERVALS];
        // 1200 is not above 512 × 4, so the plain 512 B rounding applies.
        assert_eq!(round_size(1200, &four), 1536);
        assert_eq!(round_size(2049, &four), 2560);
        assert_eq!(round_size(5 * MIB + 1, &four), 6 * MIB);
        assert_eq!(round_size(9 * MIB, &four), 10 * MIB);
        let mut only_big = NONE;
        only_big[roundup_interval(64 * MIB)] = 2;
        assert_eq!(round_size(65 * MIB, &only_big), 96 * MIB);
        assert_eq!(round_size(33 * MIB, &only_big), 33 * MIB);
    }

    #[test]
    fn intervals_start_at_one_mib() {
        assert_eq!(roundup_interval(1), 0);
        assert_eq!(roundup_interval(2 * MIB - 1), 0);
        assert_eq!(roundup_interval(2 * MIB), 1);
        assert_eq!(roundup_interval(64 * MIB), 6);
        assert_eq!(roundup_interval(1 << 45), ROUNDUP_INTERVALS - 1);
    }

    #[test]
    fn segment_sizes_and_pools() {
        assert_eq!(allocation_size(512), 2 * MIB);
        assert_eq!(allocation_size(MIB), 2 * MIB);
        assert_eq!(allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB), 12 * MIB);
        assert_eq!(PoolKind::for_rounded(MIB), PoolKind::Small);
        assert_eq!(PoolKind::for_rounded(MIB + 512), PoolKind::Large);
    }
}
