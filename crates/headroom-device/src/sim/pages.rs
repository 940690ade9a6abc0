//! How the simulated driver backs plain allocations with physical pages.
//!
//! Allocations above the small limit (1 MiB) take whole pages (2 MiB): a 1.5 MiB allocation
//! lowers free memory by 2 MiB. Smaller ones are packed at a fixed spacing (512 B) into shared
//! pages; a shared page goes back to the device when its last allocation is freed.

use std::collections::HashMap;

use crate::DevPtr;

/// One shared page, carved into slots of `spacing` bytes.
#[derive(Debug, Clone)]
struct SharedPage {
    base: DevPtr,
    /// One bit per slot, set when in use.
    bits: Vec<u64>,
    used_slots: u32,
}

impl SharedPage {
    /// First run of `n` free slots, first fit.
    fn find_run(&self, n: u32, slots: u32) -> Option<u32> {
        let mut run_start = 0u32;
        let mut run_len = 0u32;
        let mut i = 0u32;
        while i < slots {
            let word = self.bits[(i / 64) as usize];
            if i % 64 == 0 && word == 0 && i + 64 <= slots {
                // A whole empty word.
                if run_len == 0 {
                    run_start = i;
                }
                run_len += 64;
                if run_len >= n {
                    return Some(run_start);
                }
                i += 64;
                continue;
            }
            if i % 64 == 0 && word == u64::MAX {
                run_len = 0;
                i += 64;
                continue;
            }
            if word & (1 << (i % 64)) == 0 {
                if run_len == 0 {
                    run_start = i;
                }
                run_len += 1;
                if run_len >= n {
                    return Some(run_start);
                }
            } else {
                run_len = 0;
            }
            i += 1;
        }
        None
    }

    fn mark(&mut self, start: u32, n: u32, used: bool) {
        for i in start..start + n {
            let (w, b) = ((i / 64) as usize, i % 64);
            if used {
                self.bits[w] |= 1 << b;
            } else {
                self.bits[w] &= !(1 << b);
            }
        }
        if used {
            self.used_slots += n;
        } else {
            self.used_slots -= n;
        }
    }
}

/// Where a small allocation lives.
#[derive(Debug, Clone, Copy)]
struct SmallSlot {
    page: usize,
    start: u32,
    n: u32,
}

/// Shared pages for small allocations.
#[derive(Debug, Clone)]
pub struct SmallHeap {
    page_bytes: u64,
    spacing: u64,
    slots_per_page: u32,
    pages: Vec<Option<SharedPage>>,
    live: HashMap<DevPtr, SmallSlot>,
}

/// The result of a small allocation: where it is and whether a new page was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmallAlloc {
    pub ptr: DevPtr,
    pub new_page: bool,
}

impl SmallHeap {
    pub fn new(page_bytes: u64, spacing: u64) -> Self {
        SmallHeap {
            page_bytes,
            spacing,
            slots_per_page: (page_bytes / spacing) as u32,
            pages: Vec::new(),
            live: HashMap::new(),
        }
    }

    /// Pages currently held.
    pub fn pages_held(&self) -> u64 {
        self.pages.iter().filter(|p| p.is_some()).count() as u64
    }

    pub fn bytes_held(&self) -> u64 {
        self.pages_held() * self.page_bytes
    }

    /// Places `bytes` in an existing page, or in a new page at `new_page_base()` when
    /// `may_add_page` allows it. `None` means a new page was needed and not allowed.
    pub fn alloc(
        &mut self,
        bytes: u64,
        may_add_page: bool,
        new_page_base: impl FnOnce() -> DevPtr,
    ) -> Option<SmallAlloc> {
        let n = bytes.div_ceil(self.spacing).max(1) as u32;
        for (idx, page) in self.pages.iter_mut().enumerate() {
            let Some(page) = page else { continue };
            if self.slots_per_page - page.used_slots < n {
                continue;
            }
            if let Some(start) = page.find_run(n, self.slots_per_page) {
                page.mark(start, n, true);
                let ptr = page.base + start as u64 * self.spacing;
                self.live.insert(
                    ptr,
                    SmallSlot {
                        page: idx,
                        start,
                        n,
                    },
                );
                return Some(SmallAlloc {
                    ptr,
                    new_page: false,
                });
            }
        }
        if !may_add_page {
            return None;
        }
        let mut page = SharedPage {
            base: new_page_base(),
            bits: vec![0; self.slots_per_page.div_ceil(64) as usize],
            used_slots: 0,
        };
        page.mark(0, n, true);
        let ptr = page.base;
        let idx = match self.pages.iter().position(|p| p.is_none()) {
            Some(i) => {
                self.pages[i] = Some(page);
                i
            }
            None => {
                self.pages.push(Some(page));
                self.pages.len() - 1
            }
        };
        self.live.insert(
            ptr,
            SmallSlot {
                page: idx,
                start: 0,
                n,
            },
        );
        Some(SmallAlloc {
            ptr,
            new_page: true,
        })
    }

    /// Frees a small allocation; returns `Some(page_released)` or `None` if `ptr` is not ours.
    pub fn free(&mut self, ptr: DevPtr) -> Option<bool> {
        let slot = self.live.remove(&ptr)?;
        let page = self.pages[slot.page]
            .as_mut()
            .expect("live slot has a page");
        page.mark(slot.start, slot.n, false);
        if page.used_slots == 0 {
            self.pages[slot.page] = None;
            return Some(true);
        }
        Some(false)
    }

    pub fn clear(&mut self) {
        self.pages.clear();
        self.live.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn small_allocations_share_a_page_at_512_byte_spacing() {
        let mut h = SmallHeap::new(2 * MIB, 512);
        let mut next = 0x1000_0000u64;
        let mut base = || {
            let b = next;
            next += 2 * MIB;
            b
        };
        let a = h.alloc(100, true, &mut base).unwrap();
        let b = h.alloc(1000, true, &mut base).unwrap();
        let c = h.alloc(512, true, &mut base).unwrap();
        assert!(a.new_page && !b.new_page && !c.new_page);
        assert_eq!(b.ptr - a.ptr, 512);
        assert_eq!(c.ptr - b.ptr, 1024);
        assert_eq!(h.pages_held(), 1);
        // A 1 MiB allocation still fits next to them; a second does not.
        let d = h.alloc(MIB, true, &mut base).unwrap();
        assert!(!d.new_page);
        let e = h.alloc(MIB, true, &mut base).unwrap();
        assert!(e.new_page);
        assert_eq!(h.pages_held(), 2);
        assert_eq!(h.free(e.ptr), Some(true));
        assert_eq!(h.free(a.ptr), Some(false));
        assert_eq!(h.free(a.ptr), None);
        // The freed first slot is reused first.
        let f = h.alloc(200, false, || unreachable!()).unwrap();
        assert_eq!(f.ptr, a.ptr);
    }

    #[test]
    fn a_full_page_refuses_without_a_new_page() {
        let mut h = SmallHeap::new(2 * MIB, 512);
        h.alloc(MIB, true, || 0).unwrap();
        h.alloc(MIB, true, || unreachable!()).unwrap();
        assert!(h.alloc(512, false, || unreachable!()).is_none());
    }
}
