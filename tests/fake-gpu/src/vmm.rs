//! Virtual memory management: address reservations, physical handles, mappings and access.
//!
//! Sizes and addresses are multiples of the granularity (the profile's pool granularity, 2 MiB)
//! or `CUDA_ERROR_INVALID_VALUE`. A reservation costs no device memory; `cuMemCreate` takes
//! physical memory (or fails with out of memory); `cuMemMap` puts a handle in a reserved
//! range; kernels may touch it only after `cuMemSetAccess`. Physical memory goes back when
//! its handle is released and no longer mapped.

use std::collections::{BTreeMap, HashMap};

use crate::abi::CUresult;
use crate::errors::*;
use crate::state::Driver;

#[derive(Debug)]
struct Phys {
    device: u32,
    bytes: u64,
    released: bool,
    mappings: u32,
}

#[derive(Debug, Clone, Copy)]
struct Mapping {
    bytes: u64,
    handle: u64,
    /// The region id while kernels may access it.
    access: Option<u64>,
}

#[derive(Debug, Default)]
pub struct Vmm {
    reservations: BTreeMap<u64, u64>,
    phys: HashMap<u64, Phys>,
    mappings: BTreeMap<u64, Mapping>,
    next_handle: u64,
}

impl Driver {
    pub fn granularity(&self) -> u64 {
        self.cfg.profile.memory.pool_granularity_bytes.0
    }

    fn granular(&self, v: u64) -> Result<(), CUresult> {
        if v != 0 && v % self.granularity() == 0 {
            Ok(())
        } else {
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }

    pub fn vmm_reserve(&mut self, bytes: u64, align: u64) -> Result<u64, CUresult> {
        self.granular(bytes)?;
        if align != 0 && !align.is_power_of_two() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let base = self.va.take(bytes, align);
        self.vmm.reservations.insert(base, bytes);
        Ok(base)
    }

    pub fn vmm_address_free(&mut self, base: u64, bytes: u64) -> Result<(), CUresult> {
        if self.vmm.reservations.get(&base) != Some(&bytes) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let inside: Vec<u64> = self
            .vmm
            .mappings
            .range(base..base + bytes)
            .map(|(a, _)| *a)
            .collect();
        for a in inside {
            let m = self.vmm.mappings[&a];
            self.vmm_unmap(a, m.bytes)?;
        }
        self.vmm.reservations.remove(&base);
        Ok(())
    }

    pub fn vmm_create(&mut self, device: u32, bytes: u64) -> Result<u64, CUresult> {
        self.granular(bytes)?;
        self.reserve(device, bytes)?;
        self.vmm.next_handle += 1;
        let h = 0x7600_0000_0000 + self.vmm.next_handle;
        self.vmm.phys.insert(
            h,
            Phys {
                device,
                bytes,
                released: false,
                mappings: 0,
            },
        );
        self.dev(device).vmm_bytes += bytes;
        self.publish(device);
        Ok(h)
    }

    /// Gives a handle's physical memory back once it is released and unmapped.
    fn vmm_settle(&mut self, handle: u64) {
        let done = self
            .vmm
            .phys
            .get(&handle)
            .is_some_and(|p| p.released && p.mappings == 0);
        if done && let Some(p) = self.vmm.phys.remove(&handle) {
            self.dev(p.device).vmm_bytes -= p.bytes;
            self.publish(p.device);
        }
    }

    pub fn vmm_release(&mut self, handle: u64) -> Result<(), CUresult> {
        let p = self
            .vmm
            .phys
            .get_mut(&handle)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if p.released {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        p.released = true;
        self.vmm_settle(handle);
        Ok(())
    }

    pub fn vmm_map(
        &mut self,
        ptr: u64,
        bytes: u64,
        offset: u64,
        handle: u64,
    ) -> Result<(), CUresult> {
        self.granular(bytes)?;
        self.granular(ptr)?;
        let p = self
            .vmm
            .phys
            .get(&handle)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if p.released || offset.checked_add(bytes).is_none_or(|e| e > p.bytes) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let end = ptr.checked_add(bytes).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let reserved = self
            .vmm
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(b, n)| end <= b + n);
        if !reserved {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let overlaps = self
            .vmm
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(a, m)| a + m.bytes > ptr);
        if overlaps {
            return Err(CUDA_ERROR_ALREADY_MAPPED);
        }
        self.vmm.mappings.insert(
            ptr,
            Mapping {
                bytes,
                handle,
                access: None,
            },
        );
        if let Some(p) = self.vmm.phys.get_mut(&handle) {
            p.mappings += 1;
        }
        Ok(())
    }

    /// The mappings inside `[ptr, ptr + bytes)`, which must be covered by whole mappings.
    fn whole_mappings(&self, ptr: u64, bytes: u64) -> Result<Vec<u64>, CUresult> {
        let end = ptr.checked_add(bytes).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let inside: Vec<(u64, u64)> = self
            .vmm
            .mappings
            .range(ptr..end)
            .map(|(a, m)| (*a, m.bytes))
            .collect();
        let mut cur = ptr;
        for (a, n) in &inside {
            if *a != cur {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            cur = a + n;
        }
        if cur != end || inside.is_empty() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(inside.into_iter().map(|(a, _)| a).collect())
    }

    pub fn vmm_unmap(&mut self, ptr: u64, bytes: u64) -> Result<(), CUresult> {
        for a in self.whole_mappings(ptr, bytes)? {
            let Some(m) = self.vmm.mappings.remove(&a) else {
                continue;
            };
            let device = self.vmm.phys.get(&m.handle).map(|p| p.device);
            if let Some(p) = self.vmm.phys.get_mut(&m.handle) {
                p.mappings -= 1;
            }
            if let Some(device) = device {
                let d = self.dev(device);
                if let Some(id) = m.access {
                    d.regions.remove(a, id);
                }
                d.content
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .forget(a, m.bytes);
            }
            self.vmm_settle(m.handle);
        }
        Ok(())
    }

    /// `cuMemSetAccess` for one device: read-write (or read) access makes the mappings usable by
    /// kernels, `PROT_NONE` takes it away.
    pub fn vmm_set_access(&mut self, ptr: u64, bytes: u64, allow: bool) -> Result<(), CUresult> {
        for a in self.whole_mappings(ptr, bytes)? {
            let m = self.vmm.mappings[&a];
            let Some(device) = self.vmm.phys.get(&m.handle).map(|p| p.device) else {
                continue;
            };
            let id = match (allow, m.access) {
                (true, None) => {
                    let id = self.next_id();
                    self.dev(device).regions.add(a, m.bytes, id);
                    Some(id)
                }
                (false, Some(id)) => {
                    self.dev(device).regions.remove(a, id);
                    None
                }
                (_, keep) => keep,
            };
            if let Some(mm) = self.vmm.mappings.get_mut(&a) {
                mm.access = id;
            }
        }
        Ok(())
    }

    /// The context of `device` went away: its physical memory and mappings with it.
    pub fn vmm_forget_device(&mut self, device: u32) {
        let gone: Vec<u64> = self
            .vmm
            .phys
            .iter()
            .filter(|(_, p)| p.device == device)
            .map(|(h, _)| *h)
            .collect();
        self.vmm.mappings.retain(|_, m| !gone.contains(&m.handle));
        for h in gone {
            self.vmm.phys.remove(&h);
        }
    }
}
