//! The table every process using the fake shares (`HEADROOM_FAKE_STATE`): one slot per process
//! and device with its pid, the device memory it holds and whether it has a context.
//!
//! It is a fixed-size file mapped `MAP_SHARED` and read and written only through atomics, so
//! processes need no lock. `cuMemGetInfo` and NVML add up the slots of a device; a slot whose
//! process has died is given back only `HEADROOM_FAKE_RELEASE_DELAY` after its death was first
//! noticed, as a real driver returns a killed process's memory late. Without a state file the
//! table lives in this process's memory and shows this process only.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

const MAGIC: u64 = 0x4845_4144_524f_4f4d; // "HEADROOM"
pub const SLOTS: usize = 512;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    _reserved: [AtomicU64; 7],
}

#[repr(C)]
struct Slot {
    pid: AtomicU32,
    device: AtomicU32,
    used: AtomicU64,
    context: AtomicU32,
    _pad: AtomicU32,
    /// CLOCK_MONOTONIC ns when this slot's process was first seen dead; 0: not seen dead.
    dead_since_ns: AtomicU64,
    _reserved: [AtomicU64; 4],
}

#[repr(C)]
struct Table {
    header: Header,
    slots: [Slot; SLOTS],
}

const SIZE: usize = std::mem::size_of::<Table>();

/// One process's entry, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub pid: u32,
    pub used: u64,
    pub context: bool,
    /// Dead but not yet given back.
    pub dead: bool,
}

pub struct SharedTable {
    table: *mut Table,
    release_delay: Duration,
    me: u32,
}

// SAFETY: the table is only accessed through atomics; the mapping lives as long as the process.
unsafe impl Send for SharedTable {}
// SAFETY: as above.
unsafe impl Sync for SharedTable {}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether `pid` still runs: not gone (`kill(pid, 0)` != ESRCH) and not a zombie.
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => r == 0,
    }
}

impl SharedTable {
    /// Maps the table at `path` (created if missing), or a private one.
    pub fn open(path: Option<&std::path::Path>, release_delay: Duration) -> Result<Self, String> {
        let me = std::process::id();
        let map = |fd: libc::c_int, flags: libc::c_int| {
            // SAFETY: a fresh mapping of SIZE bytes; the result is checked against MAP_FAILED.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    SIZE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                Err(format!("mmap: {}", std::io::Error::last_os_error()))
            } else {
                Ok(p.cast::<Table>())
            }
        };
        let table = match path {
            None => map(-1, libc::MAP_SHARED | libc::MAP_ANONYMOUS)?,
            Some(path) => {
                let name = CString::new(path.as_os_str().as_encoded_bytes())
                    .map_err(|_| format!("HEADROOM_FAKE_STATE {path:?} contains a NUL byte"))?;
                // SAFETY: `name` is a valid C string; the descriptor is closed below.
                let fd = unsafe {
                    libc::open(
                        name.as_ptr(),
                        libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                        0o600,
                    )
                };
                if fd < 0 {
                    return Err(format!(
                        "HEADROOM_FAKE_STATE {path:?}: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                // SAFETY: fstat and ftruncate on the descriptor just opened.
                let grown = unsafe {
                    let mut st: libc::stat = std::mem::zeroed();
                    libc::fstat(fd, &mut st) == 0
                        && (st.st_size as usize >= SIZE
                            || libc::ftruncate(fd, SIZE as libc::off_t) == 0)
                };
                let mapped = if grown {
                    map(fd, libc::MAP_SHARED)
                } else {
                    Err(format!(
                        "cannot size {path:?}: {}",
                        std::io::Error::last_os_error()
                    ))
                };
                // SAFETY: the mapping keeps the file; the descriptor is no longer needed.
                unsafe { libc::close(fd) };
                mapped?
            }
        };
        let t = SharedTable {
            table,
            release_delay,
            me,
        };
        // A zeroed file is a valid empty table; the magic only marks it as ours.
        let _ = t.header().magic.compare_exchange(0, MAGIC, SeqCst, SeqCst);
        if t.header().magic.load(SeqCst) != MAGIC {
            return Err("HEADROOM_FAKE_STATE is not a fake-driver state file".into());
        }
        Ok(t)
    }

    fn header(&self) -> &Header {
        // SAFETY: `table` is a live mapping of a `Table` for the life of the process.
        unsafe { &(*self.table).header }
    }

    fn slots(&self) -> &[Slot; SLOTS] {
        // SAFETY: as in `header`.
        unsafe { &(*self.table).slots }
    }

    /// This process's slot for `device`, taken if needed.
    pub fn claim(&self, device: u32) -> Result<usize, String> {
        if let Some(i) = self.find(self.me, device) {
            return Ok(i);
        }
        for (i, s) in self.slots().iter().enumerate() {
            if s.pid.compare_exchange(0, self.me, SeqCst, SeqCst).is_ok() {
                s.device.store(device, SeqCst);
                s.used.store(0, SeqCst);
                s.context.store(0, SeqCst);
                s.dead_since_ns.store(0, SeqCst);
                return Ok(i);
            }
        }
        self.reap_all();
        Err(format!(
            "the state file has no free slot ({SLOTS} processes)"
        ))
    }

    fn find(&self, pid: u32, device: u32) -> Option<usize> {
        self.slots()
            .iter()
            .position(|s| s.pid.load(SeqCst) == pid && s.device.load(SeqCst) == device)
    }

    pub fn set_used(&self, slot: usize, bytes: u64) {
        self.slots()[slot].used.store(bytes, SeqCst);
    }

    pub fn set_context(&self, slot: usize, present: bool) {
        self.slots()[slot].context.store(present as u32, SeqCst);
    }

    /// Gives a slot of this process back.
    pub fn release(&self, slot: usize) {
        let s = &self.slots()[slot];
        s.used.store(0, SeqCst);
        s.context.store(0, SeqCst);
        let _ = s.pid.compare_exchange(self.me, 0, SeqCst, SeqCst);
    }

    /// Frees the slot of a dead process once its release delay has passed; returns whether
    /// the slot still holds a dead process's memory.
    fn reap(&self, s: &Slot, pid: u32) -> bool {
        let now = now_ns();
        let since = match s.dead_since_ns.compare_exchange(0, now, SeqCst, SeqCst) {
            Ok(_) => now,
            Err(t) => t,
        };
        if now.saturating_sub(since) < self.release_delay.as_nanos() as u64 {
            return true;
        }
        s.used.store(0, SeqCst);
        s.context.store(0, SeqCst);
        s.dead_since_ns.store(0, SeqCst);
        let _ = s.pid.compare_exchange(pid, 0, SeqCst, SeqCst);
        false
    }

    fn reap_all(&self) {
        for s in self.slots() {
            let pid = s.pid.load(SeqCst);
            if pid != 0 && pid != self.me && !alive(pid) {
                self.reap(s, pid);
            }
        }
    }

    /// Every process holding memory or a context on `device` (dead ones inside their release
    /// delay included, marked).
    pub fn entries(&self, device: u32) -> Vec<Entry> {
        let mut out = Vec::new();
        for s in self.slots() {
            let pid = s.pid.load(SeqCst);
            if pid == 0 || s.device.load(SeqCst) != device {
                continue;
            }
            let dead = pid != self.me && !alive(pid);
            if dead && !self.reap(s, pid) {
                continue;
            }
            if !dead {
                s.dead_since_ns.store(0, SeqCst);
            }
            out.push(Entry {
                pid,
                used: s.used.load(SeqCst),
                context: s.context.load(SeqCst) != 0,
                dead,
            });
        }
        out
    }

    /// Device memory in use on `device` by every process.
    pub fn device_used(&self, device: u32) -> u64 {
        self.entries(device).iter().map(|e| e.used).sum()
    }

    /// Whether another live process has a context on `device` (exclusive-process mode).
    pub fn other_context(&self, device: u32) -> Option<u32> {
        self.entries(device)
            .into_iter()
            .find(|e| e.pid != self.me && e.context && !e.dead)
            .map(|e| e.pid)
    }
}
