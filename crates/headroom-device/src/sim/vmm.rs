//! Simulated virtual memory management (`cuMemAddressReserve`, `cuMemCreate` + `cuMemMap`,
//! `cuMemUnmap` + `cuMemRelease`, `cuMemAddressFree`).
//!
//! A reserved range costs no device memory; every mapped byte does, exactly, from the moment
//! it is mapped until it is unmapped. The driver's rules are checked: sizes and addresses are
//! multiples of the granularity, mappings live inside a reservation and never overlap, and an
//! unmap covers whole mappings (one physical handle cannot be split after it is mapped).

use std::collections::BTreeMap;

use crate::{Capability, DevPtr, DevResult, DeviceError};

use super::{SimDevice, per_gib_ns};

#[derive(Debug, Clone)]
pub struct SimVmm {
    granularity: u64,
    /// Reserved ranges: base → bytes.
    reserved: BTreeMap<DevPtr, u64>,
    /// Mapped physical memory: address → bytes (one handle each).
    mapped: BTreeMap<DevPtr, u64>,
    mapped_bytes: u64,
}

fn invalid(msg: String) -> DeviceError {
    DeviceError::Invalid(msg)
}

impl SimVmm {
    pub fn new(granularity: u64) -> Self {
        SimVmm {
            granularity,
            reserved: BTreeMap::new(),
            mapped: BTreeMap::new(),
            mapped_bytes: 0,
        }
    }

    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Physical bytes mapped now (what counts against device memory).
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped_bytes
    }

    fn check_granular(&self, call: &str, what: &str, v: u64) -> DevResult<()> {
        if v == 0 && what == "size" {
            return Err(invalid(format!("{call} of 0 bytes")));
        }
        if v % self.granularity != 0 {
            return Err(invalid(format!(
                "{call}: {what} {v:#x} is not a multiple of the granularity ({} bytes)",
                self.granularity
            )));
        }
        Ok(())
    }

    /// Checks a reservation of `bytes` before the caller picks its address.
    pub fn check_reserve(&self, bytes: u64) -> DevResult<()> {
        self.check_granular("cuMemAddressReserve", "size", bytes)
    }

    pub fn reserve(&mut self, base: DevPtr, bytes: u64) {
        self.reserved.insert(base, bytes);
    }

    /// Checks that `[ptr, ptr + bytes)` may be mapped: aligned, inside one reservation,
    /// overlapping no mapping.
    pub fn check_map(&self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.check_granular("cuMemMap", "size", bytes)?;
        self.check_granular("cuMemMap", "address", ptr)?;
        let end = ptr
            .checked_add(bytes)
            .ok_or_else(|| invalid(format!("cuMemMap: range {ptr:#x}+{bytes} overflows")))?;
        let inside = self
            .reserved
            .range(..=ptr)
            .next_back()
            .is_some_and(|(base, size)| end <= base + size);
        if !inside {
            return Err(invalid(format!(
                "cuMemMap: range {ptr:#x}+{bytes} is not inside a reserved address range"
            )));
        }
        let overlaps = self
            .mapped
            .range(..end)
            .next_back()
            .is_some_and(|(m, size)| m + size > ptr);
        if overlaps {
            return Err(invalid(format!(
                "cuMemMap: range {ptr:#x}+{bytes} is already mapped"
            )));
        }
        Ok(())
    }

    /// Maps after `check_map` (and the caller's free-memory check) succeeded.
    pub fn map(&mut self, ptr: DevPtr, bytes: u64) {
        self.mapped.insert(ptr, bytes);
        self.mapped_bytes += bytes;
    }

    /// Unmaps every mapping inside `[ptr, ptr + bytes)`; returns the ranges released.
    /// Nothing changes on error.
    pub fn unmap(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<Vec<(DevPtr, u64)>> {
        let end = ptr.saturating_add(bytes);
        let cut_front = self
            .mapped
            .range(..ptr)
            .next_back()
            .is_some_and(|(m, size)| m + size > ptr);
        let inside: Vec<(DevPtr, u64)> =
            self.mapped.range(ptr..end).map(|(a, b)| (*a, *b)).collect();
        let cut_back = inside.last().is_some_and(|(m, size)| m + size > end);
        if cut_front || cut_back {
            return Err(invalid(format!(
                "cuMemUnmap: range {ptr:#x}+{bytes} cuts through a mapping (unmap whole mappings)"
            )));
        }
        if inside.is_empty() {
            return Err(invalid(format!(
                "cuMemUnmap: nothing is mapped in {ptr:#x}+{bytes}"
            )));
        }
        for (a, b) in &inside {
            self.mapped.remove(a);
            self.mapped_bytes -= b;
        }
        Ok(inside)
    }

    /// Frees a reservation, unmapping what is still mapped in it; returns what was unmapped.
    pub fn free(&mut self, base: DevPtr) -> DevResult<Vec<(DevPtr, u64)>> {
        let size = *self.reserved.get(&base).ok_or_else(|| {
            invalid(format!(
                "cuMemAddressFree of {base:#x}, which is not a reserved range"
            ))
        })?;
        let inside: Vec<(DevPtr, u64)> = self
            .mapped
            .range(base..base + size)
            .map(|(a, b)| (*a, *b))
            .collect();
        for (a, b) in &inside {
            self.mapped.remove(a);
            self.mapped_bytes -= b;
        }
        self.reserved.remove(&base);
        Ok(inside)
    }

    /// Whether every byte of `[ptr, ptr + bytes)` is mapped (possibly by several mappings).
    pub fn covers(&self, ptr: DevPtr, bytes: u64) -> bool {
        let end = ptr.saturating_add(bytes);
        let Some((&start, &size)) = self.mapped.range(..=ptr).next_back() else {
            return false;
        };
        let mut reached = start + size;
        if reached <= ptr {
            return false;
        }
        for (&a, &b) in self.mapped.range(reached..) {
            if reached >= end || a != reached {
                break;
            }
            reached = a + b;
        }
        reached >= end
    }

    pub fn clear(&mut self) {
        self.reserved.clear();
        self.mapped.clear();
        self.mapped_bytes = 0;
    }
}

/// The device calls, kept here so the simulator's `mod.rs` only forwards to them. Latencies:
/// a reservation costs a `cuMemAlloc` base, a mapping what `cuMemAlloc` of that size costs,
/// an unmap what `cuMemFree` costs without its device-wide synchronize (callers that need the
/// memory idle synchronize the stream first, as PyTorch does).
impl SimDevice {
    pub(super) fn sim_vmm_reserve(&mut self, bytes: u64) -> DevResult<DevPtr> {
        self.require(Capability::VirtualMemoryManagement, "cuMemAddressReserve")?;
        self.vmm.check_reserve(bytes)?;
        self.advance(self.profile.latency.malloc_base.0);
        let base = self.take_va(bytes)?;
        self.vmm.reserve(base, bytes);
        Ok(base)
    }

    pub(super) fn sim_vmm_map(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.require(Capability::VirtualMemoryManagement, "cuMemCreate")?;
        self.vmm.check_map(ptr, bytes)?;
        let lat = &self.profile.latency;
        self.advance(
            lat.malloc_base
                .0
                .saturating_add(per_gib_ns(lat.malloc_per_gib.0, bytes)),
        );
        if bytes > self.free_at(self.host_ns) {
            return Err(DeviceError::OutOfMemory {
                requested_bytes: bytes,
            });
        }
        self.vmm.map(ptr, bytes);
        Ok(())
    }

    pub(super) fn sim_vmm_unmap(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.require(Capability::VirtualMemoryManagement, "cuMemUnmap")?;
        let gone = self.vmm.unmap(ptr, bytes)?;
        self.advance(self.profile.latency.free.0);
        for (a, b) in gone {
            self.content.forget(a, b);
        }
        Ok(())
    }

    pub(super) fn sim_vmm_free(&mut self, ptr: DevPtr) -> DevResult<()> {
        self.require(Capability::VirtualMemoryManagement, "cuMemAddressFree")?;
        let gone = self.vmm.free(ptr)?;
        self.advance(self.profile.latency.free.0);
        for (a, b) in gone {
            self.content.forget(a, b);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const BASE: DevPtr = 0x7f00_0000_0000;

    fn vmm() -> SimVmm {
        let mut v = SimVmm::new(2 * MIB);
        v.reserve(BASE, 64 * MIB);
        v
    }

    #[test]
    fn map_checks_alignment_reservation_and_overlap() {
        let mut v = vmm();
        assert!(
            v.check_map(BASE, MIB).is_err(),
            "not a granularity multiple"
        );
        assert!(v.check_map(BASE + MIB, 2 * MIB).is_err(), "misaligned");
        assert!(
            v.check_map(BASE + 62 * MIB, 4 * MIB).is_err(),
            "past the reservation"
        );
        v.check_map(BASE, 4 * MIB).unwrap();
        v.map(BASE, 4 * MIB);
        assert!(v.check_map(BASE + 2 * MIB, 2 * MIB).is_err(), "overlap");
        v.check_map(BASE + 4 * MIB, 2 * MIB).unwrap();
        assert_eq!(v.mapped_bytes(), 4 * MIB);
    }

    #[test]
    fn unmap_takes_whole_mappings_only() {
        let mut v = vmm();
        v.map(BASE, 2 * MIB);
        v.map(BASE + 2 * MIB, 2 * MIB);
        v.map(BASE + 4 * MIB, 4 * MIB);
        assert!(v.covers(BASE + MIB, 6 * MIB));
        assert!(!v.covers(BASE + MIB, 8 * MIB));
        assert!(
            v.unmap(BASE + 4 * MIB, 2 * MIB).is_err(),
            "cuts a 4 MiB mapping"
        );
        assert!(v.unmap(BASE + 8 * MIB, 2 * MIB).is_err(), "nothing mapped");
        let gone = v.unmap(BASE, 4 * MIB).unwrap();
        assert_eq!(gone, vec![(BASE, 2 * MIB), (BASE + 2 * MIB, 2 * MIB)]);
        assert_eq!(v.mapped_bytes(), 4 * MIB);
        assert_eq!(v.free(BASE).unwrap(), vec![(BASE + 4 * MIB, 4 * MIB)]);
        assert_eq!(v.mapped_bytes(), 0);
        assert!(v.free(BASE).is_err());
    }

    #[test]
    fn mapped_pages_count_against_device_memory_exactly() {
        use crate::prelude::*;
        use crate::profile::SimProfile;
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let idle = d.mem_info().unwrap().free_bytes;
        assert_eq!(d.vmm_granularity().unwrap(), 2 * MIB);
        let base = d.vmm_reserve(1 << 32).unwrap();
        assert_eq!(
            d.mem_info().unwrap().free_bytes,
            idle,
            "a reservation costs nothing"
        );
        d.vmm_map(base, 20 * MIB).unwrap();
        d.vmm_map(base + 20 * MIB, 20 * MIB).unwrap();
        assert_eq!(d.mem_info().unwrap().free_bytes, idle - 40 * MIB);
        d.launch(
            crate::Kernel::Memset {
                ptr: base + MIB,
                bytes: 30 * MIB,
                value: 0,
            },
            crate::StreamId::MAIN,
        )
        .expect("a kernel may span two mappings");
        let e = d.vmm_map(base + 40 * MIB, idle).unwrap_err();
        assert!(e.is_oom(), "{e}");
        assert_eq!(
            d.mem_info().unwrap().free_bytes,
            idle - 40 * MIB,
            "a refused map takes nothing"
        );
        d.vmm_unmap(base, 20 * MIB).unwrap();
        assert_eq!(d.mem_info().unwrap().free_bytes, idle - 20 * MIB);
        d.vmm_free(base).unwrap();
        assert_eq!(d.mem_info().unwrap().free_bytes, idle);
        assert!(d.vmm_map(base, 2 * MIB).is_err(), "the range is gone");
    }
}
