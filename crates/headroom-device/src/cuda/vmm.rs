//! Virtual memory management on the real GPU: reserve address ranges, back them with physical
//! pages on demand, give the pages back (what PyTorch's expandable segments are built on).
//!
//! Each `map` creates one physical handle (`cuMemCreate`), maps it (`cuMemMap`) and makes it
//! readable and writable from this device (`cuMemSetAccess`); a failure part way undoes what
//! was done, so an out-of-memory leaves nothing behind. Everything still mapped or reserved is
//! released by `release_all` (the device calls it at the end of every run and on drop).

use std::collections::{BTreeMap, HashMap};

use cudarc::driver::sys;

use super::CudaDevice;
use super::driver_err;
use crate::prelude::*;
use crate::{DevPtr, DevResult, DeviceError};

/// A physical allocation handle mapped at some address.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    bytes: u64,
    handle: sys::CUmemGenericAllocationHandle,
}

#[derive(Debug, Default)]
pub struct CudaVmm {
    /// Reserved ranges: base → bytes.
    reserved: HashMap<DevPtr, u64>,
    mapped: BTreeMap<DevPtr, Mapping>,
    granularity: Option<u64>,
}

/// Pinned device memory on `ordinal`, no shareable handle.
fn allocation_prop(ordinal: i32) -> sys::CUmemAllocationProp {
    // SAFETY: an all-zero CUmemAllocationProp is the documented "no options" value.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    prop
}

fn check(call: &'static str, bytes: u64, r: sys::CUresult) -> DevResult<()> {
    r.result().map_err(|e| driver_err(call, bytes, e))
}

impl CudaVmm {
    /// The minimum granularity for device memory (read once). The context must be current.
    pub fn granularity(&mut self, ordinal: i32) -> DevResult<u64> {
        if let Some(g) = self.granularity {
            return Ok(g);
        }
        let prop = allocation_prop(ordinal);
        let mut g: usize = 0;
        let flag = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
        // SAFETY: `g` and `prop` are valid for the call; `prop` is fully initialized.
        check("cuMemGetAllocationGranularity", 0, unsafe {
            sys::cuMemGetAllocationGranularity(&mut g, &prop, flag)
        })?;
        let g = g as u64;
        if g == 0 {
            return Err(DeviceError::Driver {
                call: "cuMemGetAllocationGranularity",
                detail: "the driver reported a granularity of 0".into(),
            });
        }
        self.granularity = Some(g);
        Ok(g)
    }

    fn check_granular(&mut self, ordinal: i32, call: &str, what: &str, v: u64) -> DevResult<()> {
        let g = self.granularity(ordinal)?;
        if v == 0 || v % g != 0 {
            return Err(DeviceError::Invalid(format!(
                "{call}: {what} {v:#x} is not a non-zero multiple of the granularity ({g} bytes)"
            )));
        }
        Ok(())
    }

    pub fn reserve(&mut self, ordinal: i32, bytes: u64) -> DevResult<DevPtr> {
        self.check_granular(ordinal, "cuMemAddressReserve", "size", bytes)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; no fixed address or alignment is requested.
        check("cuMemAddressReserve", 0, unsafe {
            sys::cuMemAddressReserve(&mut ptr, bytes as usize, 0, 0, 0)
        })?;
        self.reserved.insert(ptr, bytes);
        Ok(ptr)
    }

    fn inside_reservation(&self, ptr: DevPtr, bytes: u64) -> bool {
        self.reserved
            .iter()
            .any(|(base, size)| *base <= ptr && ptr.saturating_add(bytes) <= base + size)
    }

    pub fn map(&mut self, ordinal: i32, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.check_granular(ordinal, "cuMemMap", "size", bytes)?;
        self.check_granular(ordinal, "cuMemMap", "address", ptr)?;
        if !self.inside_reservation(ptr, bytes) {
            return Err(DeviceError::Invalid(format!(
                "cuMemMap: range {ptr:#x}+{bytes} is not inside a reserved address range"
            )));
        }
        let end = ptr + bytes;
        if self
            .mapped
            .range(..end)
            .next_back()
            .is_some_and(|(m, x)| m + x.bytes > ptr)
        {
            return Err(DeviceError::Invalid(format!(
                "cuMemMap: range {ptr:#x}+{bytes} is already mapped"
            )));
        }
        let prop = allocation_prop(ordinal);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `handle` is a valid out-pointer and `prop` a fully initialized property set.
        check("cuMemCreate", bytes, unsafe {
            sys::cuMemCreate(&mut handle, bytes as usize, &prop, 0)
        })?;
        // SAFETY: the range lies inside our reservation and is unmapped (checked above).
        let mapped = check("cuMemMap", bytes, unsafe {
            sys::cuMemMap(ptr, bytes as usize, 0, handle, 0)
        });
        if let Err(e) = mapped {
            // SAFETY: `handle` was created above and is not mapped anywhere.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(e);
        }
        // SAFETY: an all-zero CUmemAccessDesc is a valid value; fields set below.
        let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
        desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        desc.location.id = ordinal;
        desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        // SAFETY: the range was just mapped; `desc` points to one valid descriptor.
        let access = check("cuMemSetAccess", bytes, unsafe {
            sys::cuMemSetAccess(ptr, bytes as usize, &desc, 1)
        });
        if let Err(e) = access {
            // SAFETY: the range is mapped to `handle` (above) and nothing else uses it yet.
            let _ = unsafe { sys::cuMemUnmap(ptr, bytes as usize) };
            // SAFETY: `handle` is no longer mapped.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(e);
        }
        self.mapped.insert(ptr, Mapping { bytes, handle });
        Ok(())
    }

    /// Unmaps and releases one mapping. It is forgotten even if the driver complains, so it
    /// is never released twice.
    fn release_mapping(ptr: DevPtr, m: Mapping) -> DevResult<()> {
        // SAFETY: `ptr` is mapped to `m.handle` by this device; the caller removed it from the table.
        let unmapped = check("cuMemUnmap", 0, unsafe {
            sys::cuMemUnmap(ptr, m.bytes as usize)
        });
        // SAFETY: the handle was created by cuMemCreate here and is released exactly once.
        let released = check("cuMemRelease", 0, unsafe { sys::cuMemRelease(m.handle) });
        unmapped.and(released)
    }

    pub fn unmap(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        let end = ptr.saturating_add(bytes);
        let cut_front = self
            .mapped
            .range(..ptr)
            .next_back()
            .is_some_and(|(m, x)| m + x.bytes > ptr);
        let inside: Vec<(DevPtr, u64)> = self
            .mapped
            .range(ptr..end)
            .map(|(a, m)| (*a, m.bytes))
            .collect();
        let cut_back = inside.last().is_some_and(|(a, b)| a + b > end);
        if cut_front || cut_back || inside.is_empty() {
            return Err(DeviceError::Invalid(format!(
                "cuMemUnmap: range {ptr:#x}+{bytes} does not cover whole mappings"
            )));
        }
        let mut first = None;
        for (a, _) in inside {
            if let Some(m) = self.mapped.remove(&a)
                && let Err(e) = Self::release_mapping(a, m)
            {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    pub fn free(&mut self, base: DevPtr) -> DevResult<()> {
        let size = self.reserved.remove(&base).ok_or_else(|| {
            DeviceError::Invalid(format!(
                "cuMemAddressFree of {base:#x}, which is not a reserved range"
            ))
        })?;
        let mut first = None;
        let inside: Vec<DevPtr> = self
            .mapped
            .range(base..base + size)
            .map(|(a, _)| *a)
            .collect();
        for a in inside {
            if let Some(m) = self.mapped.remove(&a)
                && let Err(e) = Self::release_mapping(a, m)
            {
                first.get_or_insert(e);
            }
        }
        // SAFETY: the range came from cuMemAddressReserve and nothing is mapped in it any more.
        if let Err(e) = check("cuMemAddressFree", 0, unsafe {
            sys::cuMemAddressFree(base, size as usize)
        }) {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }

    /// Unmaps and frees everything; returns the first error.
    pub fn release_all(&mut self) -> DevResult<()> {
        let mut first = None;
        let bases: Vec<DevPtr> = self.reserved.keys().copied().collect();
        for b in bases {
            if let Err(e) = self.free(b) {
                first.get_or_insert(e);
            }
        }
        // Mappings outside any reservation cannot exist (map checks), but never leak one.
        for (a, m) in std::mem::take(&mut self.mapped) {
            if let Err(e) = Self::release_mapping(a, m) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl VirtualMemory for CudaDevice {
    fn vmm_granularity(&mut self) -> DevResult<u64> {
        self.bind()?;
        self.vmm.granularity(self.info.index as i32)
    }

    fn vmm_reserve(&mut self, bytes: u64) -> DevResult<DevPtr> {
        self.bind()?;
        self.vmm.reserve(self.info.index as i32, bytes)
    }

    fn vmm_map(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.bind()?;
        self.vmm.map(self.info.index as i32, ptr, bytes)
    }

    fn vmm_unmap(&mut self, ptr: DevPtr, bytes: u64) -> DevResult<()> {
        self.bind()?;
        self.vmm.unmap(ptr, bytes)
    }

    fn vmm_free(&mut self, ptr: DevPtr) -> DevResult<()> {
        self.bind()?;
        self.vmm.free(ptr)
    }
}
