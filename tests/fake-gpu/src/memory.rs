//! Device memory bookkeeping: the virtual address space, the pages behind `cuMemAlloc`, and
//! which address ranges a kernel may touch.
//!
//! The driver's documented (and observed) rules: allocations above `small_alloc_limit_bytes`
//! take whole pages; smaller ones are packed into shared pages at `small_alloc_spacing_bytes`,
//! first fit, in the order the pages were taken (a new page takes the place of the first one
//! released), and a shared page is given back when its last allocation goes. Addresses are
//! never reused: each allocation gets fresh address space, with an unmapped gap after it, so a
//! use after free or an overrun is an illegal address.

use std::collections::BTreeMap;

use crate::addr_map::AddrMap;

/// Where device addresses start (all devices share one address space, as with UVA).
pub const VA_BASE: u64 = 0x7000_0000_0000;
/// Address alignment and the unmapped gap left after every range.
pub const VA_ALIGN: u64 = 2 << 20;

/// Hands out fresh, never reused, 2 MiB-aligned address ranges.
#[derive(Debug)]
pub struct AddressSpace {
    next: u64,
}

impl Default for AddressSpace {
    fn default() -> Self {
        AddressSpace { next: VA_BASE }
    }
}

impl AddressSpace {
    pub fn take(&mut self, bytes: u64, align: u64) -> u64 {
        let align = align.max(VA_ALIGN);
        let base = self.next.div_ceil(align) * align;
        self.next = base + bytes.div_ceil(VA_ALIGN).max(1) * VA_ALIGN + VA_ALIGN;
        base
    }
}

pub fn round_up(v: u64, unit: u64) -> u64 {
    v.div_ceil(unit) * unit
}

/// One shared page of small allocations.
#[derive(Debug)]
struct SharedPage {
    base: u64,
    used: Vec<bool>,
    used_slots: usize,
}

impl SharedPage {
    /// First run of `n` free slots.
    fn first_fit(&self, n: usize) -> Option<usize> {
        let mut run = 0;
        for (i, used) in self.used.iter().enumerate() {
            run = if *used { 0 } else { run + 1 };
            if run == n {
                return Some(i + 1 - n);
            }
        }
        None
    }
}

/// The pages behind plain `cuMemAlloc` allocations of one device.
#[derive(Debug)]
pub struct PlainHeap {
    page: u64,
    small_limit: u64,
    spacing: u64,
    shared: Vec<Option<SharedPage>>,
    /// Small allocation → (page index, first slot, slots).
    small: AddrMap<(usize, usize, usize)>,
    /// Large allocation → page-rounded bytes.
    large: AddrMap<u64>,
    large_bytes: u64,
}

/// What a plain allocation needs before it can be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Fits in a shared page already held: no new memory.
    Nothing,
    /// Needs this many new bytes from the device.
    Bytes(u64),
}

impl PlainHeap {
    pub fn new(page: u64, small_limit: u64, spacing: u64) -> Self {
        PlainHeap {
            page,
            small_limit,
            spacing,
            shared: Vec::new(),
            small: AddrMap::default(),
            large: AddrMap::default(),
            large_bytes: 0,
        }
    }

    /// Device memory held: whole pages.
    pub fn bytes(&self) -> u64 {
        self.large_bytes + self.shared.iter().flatten().count() as u64 * self.page
    }

    fn slots(&self, bytes: u64) -> usize {
        bytes.div_ceil(self.spacing).max(1) as usize
    }

    fn fit_in_shared(&self, bytes: u64) -> Option<(usize, usize)> {
        let n = self.slots(bytes);
        self.shared.iter().enumerate().find_map(|(i, p)| {
            let p = p.as_ref()?;
            (p.used.len() - p.used_slots >= n)
                .then(|| p.first_fit(n))
                .flatten()
                .map(|s| (i, s))
        })
    }

    /// How much new device memory `bytes` would take.
    pub fn need(&self, bytes: u64) -> Need {
        if bytes > self.small_limit {
            Need::Bytes(round_up(bytes, self.page))
        } else if self.fit_in_shared(bytes).is_some() {
            Need::Nothing
        } else {
            Need::Bytes(self.page)
        }
    }

    /// Places `bytes` (after `need` was found to fit); `fresh(bytes)` gives new address space.
    pub fn alloc(&mut self, bytes: u64, mut fresh: impl FnMut(u64) -> u64) -> u64 {
        if bytes > self.small_limit {
            let rounded = round_up(bytes, self.page);
            let ptr = fresh(rounded);
            self.large.insert(ptr, rounded);
            self.large_bytes += rounded;
            return ptr;
        }
        let n = self.slots(bytes);
        let (index, start) = match self.fit_in_shared(bytes) {
            Some(found) => found,
            None => {
                let page = SharedPage {
                    base: fresh(self.page),
                    used: vec![false; (self.page / self.spacing) as usize],
                    used_slots: 0,
                };
                let index = match self.shared.iter().position(Option::is_none) {
                    Some(i) => {
                        self.shared[i] = Some(page);
                        i
                    }
                    None => {
                        self.shared.push(Some(page));
                        self.shared.len() - 1
                    }
                };
                (index, 0)
            }
        };
        let page = self.shared[index].as_mut().expect("placed in a held page");
        page.used[start..start + n]
            .iter_mut()
            .for_each(|u| *u = true);
        page.used_slots += n;
        let ptr = page.base + start as u64 * self.spacing;
        self.small.insert(ptr, (index, start, n));
        ptr
    }

    /// Frees an allocation; `None` if `ptr` is not one.
    pub fn free(&mut self, ptr: u64) -> Option<()> {
        if let Some(rounded) = self.large.remove(&ptr) {
            self.large_bytes -= rounded;
            return Some(());
        }
        let (index, start, n) = self.small.remove(&ptr)?;
        let page = self.shared[index].as_mut()?;
        page.used[start..start + n]
            .iter_mut()
            .for_each(|u| *u = false);
        page.used_slots -= n;
        if page.used_slots == 0 {
            self.shared[index] = None;
        }
        Some(())
    }

    pub fn is_live(&self, ptr: u64) -> bool {
        self.large.contains_key(&ptr) || self.small.contains_key(&ptr)
    }
}

/// The address ranges kernels may touch now: live allocations, mapped VMM ranges with access,
/// graph allocations between their allocation and free nodes. Ranges may overlap (a pool block
/// reused while its earlier free is still pending on a stream); each has its own id.
#[derive(Debug, Default)]
pub struct Regions {
    map: BTreeMap<(u64, u64), u64>,
    longest: u64,
}

impl Regions {
    pub fn add(&mut self, base: u64, bytes: u64, id: u64) {
        self.map.insert((base, id), bytes);
        self.longest = self.longest.max(bytes);
    }

    pub fn remove(&mut self, base: u64, id: u64) -> Option<u64> {
        self.map.remove(&(base, id))
    }

    /// Whether every byte of `[ptr, ptr + bytes)` lies in some live range.
    pub fn covers(&self, ptr: u64, bytes: u64) -> bool {
        let Some(end) = ptr.checked_add(bytes) else {
            return false;
        };
        let mut cur = ptr;
        while cur < end {
            let lo = cur.saturating_sub(self.longest);
            let reach = self
                .map
                .range((lo, 0)..=(cur, u64::MAX))
                .map(|(&(b, _), &len)| b + len)
                .filter(|e| *e > cur)
                .max();
            match reach {
                Some(e) => cur = e,
                None => return false,
            }
        }
        true
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}
