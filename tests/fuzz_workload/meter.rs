//! A counting global allocator: live heap bytes and their peak, with a hard cap past which an
//! allocation fails (the process stops) after the case that asked for it is printed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::Relaxed};

/// The most heap the test process may hold at once. An accepted workload may expand to
/// `MAX_ACTIONS` (10,000,000) actions, but the check holds only the names live at once (at
/// most 1,000,000) and what one step states; the largest such case measured holds about a
/// quarter of this. A bug that builds without bound (gigabytes) stops here instead of taking
/// the host.
pub const HEAP_CAP_BYTES: usize = 1 << 30;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// The text of the case running now (for the message when the cap is hit).
static CASE_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static CASE_LEN: AtomicUsize = AtomicUsize::new(0);

pub struct Meter;

fn reserve(n: usize) -> bool {
    let now = LIVE.fetch_add(n, Relaxed) + n;
    if now > HEAP_CAP_BYTES {
        LIVE.fetch_sub(n, Relaxed);
        over_cap(n);
        return false;
    }
    // A read first: most allocations leave the peak as it is, and a read costs less than
    // the read-modify-write.
    if now > PEAK.load(Relaxed) {
        PEAK.fetch_max(now, Relaxed);
    }
    true
}

/// Writes, without allocating, what went over the cap and the case that did it.
fn over_cap(asked: usize) {
    let mut line =
        *b"fuzz_workload: heap cap exceeded: an allocation of 0000000000000000000 bytes \
                      would pass it; the case:\n";
    let digits = digits(asked);
    let at = line.iter().position(|&b| b == b'0').expect("a digit field");
    line[at..at + 19].copy_from_slice(&digits);
    let (ptr, len) = (CASE_PTR.load(Relaxed), CASE_LEN.load(Relaxed));
    // SAFETY: plain writes to stderr of buffers that live for the call; the case text is
    // held by `Case::enter`'s caller until it clears the pointer.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        if !ptr.is_null() {
            libc::write(2, ptr.cast(), len);
            libc::write(2, b"\n".as_ptr().cast(), 1);
        }
    }
}

/// Nineteen zero-padded decimal digits, without the heap.
fn digits(v: usize) -> [u8; 19] {
    let mut out = [b'0'; 19];
    let mut v = v as u64;
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out
}

// SAFETY: every call goes to the system allocator with the same layout; only counters are
// added around it.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && !reserve(new_size - old) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            if new_size > old {
                LIVE.fetch_sub(new_size - old, Relaxed);
            }
        } else if new_size < old {
            LIVE.fetch_sub(old - new_size, Relaxed);
        }
        p
    }
}

/// Heap bytes live now.
pub fn live() -> usize {
    LIVE.load(Relaxed)
}

/// Starts a new peak at the bytes live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

/// The most heap bytes live at once since the last `reset_peak`.
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}

/// Names `text` as the case running now, for the over-cap message (`None`: none).
pub fn set_case(text: Option<&str>) {
    let (ptr, len) = text.map_or((std::ptr::null_mut(), 0), |t| {
        (t.as_ptr() as *mut u8, t.len())
    });
    CASE_LEN.store(len, Relaxed);
    CASE_PTR.store(ptr, Relaxed);
}

/// Peak resident set size of the process so far (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// Resident set size now (`VmRSS`), in bytes.
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
