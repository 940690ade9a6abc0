//! Streams that really run asynchronously: one worker thread per stream executes its queue in
//! order, after the host call that queued the work has returned.
//!
//! Every operation carries its modeled GPU time; the worker sleeps it out before applying the
//! operation's effect, so two unordered streams race as they would on a GPU. Time is kept as a
//! virtual clock per stream (an operation starts when the previous one ended, or when it was
//! queued, or when what it waits for ended), so event timings are exact even when the host
//! oversleeps. Workers are detached: a process exits whatever they are doing, and a closed
//! stream's worker finishes its queue and ends. Once the context has a sticky error, queued
//! work is skipped (and counted complete) as on a faulted GPU.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::abi::CUresult;
use crate::kernels::Launch;

/// A host address the device writes later (`cuMemcpyDtoHAsync`): the caller keeps it valid
/// until the copy has run, as the driver documents.
#[derive(Debug, Clone, Copy)]
pub struct HostPtr(pub *mut u8);
// SAFETY: the pointer is only written by the worker, while the caller keeps it alive.
unsafe impl Send for HostPtr {}
// SAFETY: as above.
unsafe impl Sync for HostPtr {}

/// When an event's latest record ran: (record number, GPU time).
#[derive(Debug, Default)]
pub struct EventTimes(pub Mutex<(u64, Option<Instant>)>);

/// What one queued operation does when the stream reaches it.
#[derive(Debug, Clone)]
pub enum Work {
    /// Only ordering (a wait, an event record inside a capture).
    Nothing,
    Kernel(Launch),
    Memset {
        ptr: u64,
        bytes: u64,
        word: u32,
    },
    CopyDtoD {
        dst: u64,
        src: u64,
        bytes: u64,
    },
    CopyHtoD {
        dst: u64,
        data: Arc<Vec<u8>>,
    },
    CopyDtoH {
        dst: HostPtr,
        src: u64,
        bytes: u64,
    },
    Record {
        event: Arc<EventTimes>,
        number: u64,
    },
    /// A graph allocation node: the range becomes usable.
    MapRange {
        ptr: u64,
        bytes: u64,
        id: u64,
    },
    /// A stream-ordered free: the range becomes unusable and its contents are forgotten.
    UnmapRange {
        ptr: u64,
        bytes: u64,
        id: u64,
    },
}

/// Wait until `stream` has completed operation `seq`.
#[derive(Debug, Clone)]
pub struct Dep {
    pub stream: Arc<StreamShared>,
    pub seq: u64,
}

struct Op {
    seq: u64,
    queued: Instant,
    deps: Vec<Dep>,
    duration: Duration,
    work: Work,
}

struct Queue {
    ops: VecDeque<Op>,
    enqueued: u64,
    completed: u64,
    /// GPU time at which the last completed operation ended.
    clock: Option<Instant>,
    closed: bool,
}

/// The part of a stream its worker shares with the host side.
pub struct StreamShared {
    pub id: u64,
    pub device: u32,
    /// The context's sticky error (0: none).
    pub sticky: Arc<AtomicU32>,
    q: Mutex<Queue>,
    cv: Condvar,
}

impl std::fmt::Debug for StreamShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream {} on device {}", self.id, self.device)
    }
}

impl StreamShared {
    /// A stream and its worker thread.
    pub fn spawn(
        id: u64,
        device: u32,
        sticky: Arc<AtomicU32>,
    ) -> Result<Arc<StreamShared>, String> {
        let s = Arc::new(StreamShared {
            id,
            device,
            sticky,
            q: Mutex::new(Queue {
                ops: VecDeque::new(),
                enqueued: 0,
                completed: 0,
                clock: None,
                closed: false,
            }),
            cv: Condvar::new(),
        });
        let worker = s.clone();
        std::thread::Builder::new()
            .name(format!("fake-gpu-stream-{id}"))
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start a stream worker: {e}"))?;
        Ok(s)
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues an operation; returns its sequence number.
    pub fn push(&self, deps: Vec<Dep>, duration: Duration, work: Work) -> u64 {
        let mut q = self.lock();
        q.enqueued += 1;
        let seq = q.enqueued;
        q.ops.push_back(Op {
            seq,
            queued: Instant::now(),
            deps,
            duration,
            work,
        });
        self.cv.notify_all();
        seq
    }

    pub fn enqueued(&self) -> u64 {
        self.lock().enqueued
    }

    pub fn completed(&self) -> u64 {
        self.lock().completed
    }

    /// Whether everything queued so far has run.
    pub fn idle(&self) -> bool {
        let q = self.lock();
        q.completed == q.enqueued
    }

    /// A dependency on everything queued so far, if any of it is still pending.
    pub fn pending_dep(self: &Arc<Self>) -> Option<Dep> {
        let q = self.lock();
        (q.completed < q.enqueued).then(|| Dep {
            stream: self.clone(),
            seq: q.enqueued,
        })
    }

    /// Blocks until operation `seq` has run; returns the GPU time the stream had then.
    pub fn wait(&self, seq: u64) -> Option<Instant> {
        let mut q = self.lock();
        while q.completed < seq {
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        q.clock
    }

    /// Blocks until everything queued so far has run.
    pub fn drain(&self) {
        let target = self.enqueued();
        self.wait(target);
    }

    /// No more work will come: the worker ends after the queue.
    pub fn close(&self) {
        self.lock().closed = true;
        self.cv.notify_all();
    }

    fn next(&self) -> Option<(Op, Option<Instant>)> {
        let mut q = self.lock();
        loop {
            if let Some(op) = q.ops.pop_front() {
                return Some((op, q.clock));
            }
            if q.closed {
                return None;
            }
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn run(self: Arc<Self>) {
        while let Some((op, clock)) = self.next() {
            let mut start = clock.map_or(op.queued, |c| c.max(op.queued));
            for d in &op.deps {
                if let Some(t) = d.stream.wait(d.seq) {
                    start = start.max(t);
                }
            }
            let faulted = self.sticky.load(SeqCst) != 0;
            let end = if faulted { start } else { start + op.duration };
            if !faulted {
                let now = Instant::now();
                if end > now {
                    std::thread::sleep(end - now);
                }
                let device = self.device;
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    crate::ops::run(device, &op.work, start)
                }));
                let err: CUresult = match outcome {
                    Ok(Ok(())) => 0,
                    Ok(Err(e)) => e,
                    Err(_) => crate::errors::CUDA_ERROR_LAUNCH_FAILED,
                };
                if err != 0 {
                    let _ = self.sticky.compare_exchange(0, err, SeqCst, SeqCst);
                }
            }
            let mut q = self.lock();
            q.completed = op.seq;
            q.clock = Some(end);
            self.cv.notify_all();
        }
    }
}
