//! The device's rounding of memory: what an allocation of a given size takes from the driver.
//! Every layer that predicts or checks a size (a `via = "driver"` step, the free-memory floor,
//! an OOM record, a graph's capture, a capacity plan's probe) asks this one rule, the device's.

use crate::units::round_up;

/// How a device rounds its allocations: plain ones (`cuMemAlloc`) and a graph's allocation
/// nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRounding {
    /// Allocations above `small_limit_bytes` take whole pages of this size.
    pub page_bytes: u64,
    /// Allocations up to this size share pages (each is charged as asked).
    pub small_limit_bytes: u64,
    /// A graph allocation node takes whole multiples of this.
    pub graph_granularity_bytes: u64,
}

impl AllocRounding {
    /// The driver's rounding where the device says nothing finer: allocations above 1 MiB take
    /// whole 2 MiB pages (FACTS, `cuMemAlloc` [obs]), and a graph's nodes 2 MiB multiples.
    pub const DRIVER: AllocRounding = AllocRounding {
        page_bytes: 2 << 20,
        small_limit_bytes: 1 << 20,
        graph_granularity_bytes: 2 << 20,
    };

    /// A simulated device's rounding, as its profile gives it.
    pub fn of_profile(p: &crate::profile::SimProfile) -> AllocRounding {
        AllocRounding {
            page_bytes: p.memory.page_bytes.0,
            small_limit_bytes: p.memory.small_alloc_limit_bytes.0,
            graph_granularity_bytes: p.graphs.alloc_granularity_bytes.0,
        }
    }

    /// What a plain allocation of `bytes` is charged: whole pages above the small limit, the
    /// size asked for at or below it (it shares a page with other small ones).
    pub fn charged_bytes(&self, bytes: u64) -> u64 {
        if self.shares_a_page(bytes) {
            bytes
        } else {
            round_up(bytes, self.page_bytes)
        }
    }

    /// Whether a plain allocation of `bytes` is small enough to share a page with others.
    pub fn shares_a_page(&self, bytes: u64) -> bool {
        bytes <= self.small_limit_bytes
    }

    /// The most a plain allocation of `bytes` can newly take: whole pages, since even a small
    /// one may need a fresh page (the free-memory floor checks against this).
    pub fn at_most_bytes(&self, bytes: u64) -> u64 {
        round_up(bytes, self.page_bytes)
    }

    /// The whole pages that fit in `bytes`.
    pub fn whole_pages_in(&self, bytes: u64) -> u64 {
        bytes / self.page_bytes * self.page_bytes
    }

    /// What a graph's allocation node of `bytes` takes.
    pub fn graph_bytes(&self, bytes: u64) -> u64 {
        round_up(bytes, self.graph_granularity_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn pages_above_the_small_limit_and_the_size_asked_below() {
        let r = AllocRounding::DRIVER;
        assert_eq!(r.charged_bytes(MIB), MIB);
        assert_eq!(r.charged_bytes(MIB + 1), 2 * MIB);
        assert_eq!(r.charged_bytes(4 * MIB + 1), 6 * MIB);
        assert_eq!(r.at_most_bytes(4096), 2 * MIB);
        assert_eq!(r.at_most_bytes(4 * MIB), 4 * MIB);
        assert_eq!(r.whole_pages_in(5 * MIB), 4 * MIB);
        assert_eq!(r.graph_bytes(1), 2 * MIB);
        // A size whose page multiple passes 2^64 saturates rather than wraps.
        assert_eq!(r.charged_bytes(u64::MAX), u64::MAX);
    }
}
