//! Background sampling of device memory between the harness's own events.
//!
//! On a real GPU a thread calls `cuMemGetInfo` at a fixed interval (or back to back) and tags
//! each reading with the phase and the harness's own views published by the runner. On the
//! simulator the same readings are produced in virtual time, deterministically, by
//! `VirtualSampler`. Either way the sampler sees what others do between our events. The raw
//! readings come from the device's reading capability (`Observe::readings`); the views and
//! the phase they are tagged with are the run's, published here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::device::reading::{ModeledMemory, Reader, Readings};
use crate::device::{DevResult, Device, DeviceError};
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};

mod backlog;
mod paced;
use backlog::Backlog;
pub use paced::{Failures, Tick, paced};

/// The harness's own views and current phase, published by the runner after every event and
/// read by the sampler with every reading.
#[derive(Debug)]
pub struct LiveViews {
    inner: Mutex<(u32, ViewSet)>,
    /// Counts what was published: a reader whose copy is of the latest needs no lock.
    published: AtomicU64,
}

impl Default for LiveViews {
    fn default() -> Self {
        LiveViews {
            inner: Mutex::new((NO_PHASE, ViewSet::default())),
            published: AtomicU64::new(0),
        }
    }
}

impl LiveViews {
    pub fn set_phase(&self, phase: u32) {
        let mut g = self.lock();
        g.0 = phase;
        self.published.fetch_add(1, Ordering::Release);
    }

    /// Publishes the harness-side views (the device views come from the reading itself).
    pub fn publish(&self, views: ViewSet) {
        let mut g = self.lock();
        g.1 = views;
        g.1.clear(View::DeviceUsed);
        self.published.fetch_add(1, Ordering::Release);
    }

    pub fn snapshot(&self) -> (u32, ViewSet) {
        *self.lock()
    }

    /// The latest views into `copy`, taking the lock only when something was published since
    /// `copy` was taken: a sampler reading hundreds of thousands of times a second between
    /// two steps reads one atomic.
    pub fn refresh(&self, copy: &mut LiveCopy) -> (u32, ViewSet) {
        let now = self.published.load(Ordering::Acquire);
        if copy.published != Some(now) {
            // Taken after the count: at least as new as what it counts.
            copy.views = self.snapshot();
            copy.published = Some(now);
        }
        copy.views
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u32, ViewSet)> {
        // A poisoned lock only means another thread panicked mid-update of plain numbers.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A reader's copy of the published views (`LiveViews::refresh`).
#[derive(Debug, Default)]
pub struct LiveCopy {
    published: Option<u64>,
    views: (u32, ViewSet),
}

/// Background readings of device free memory between the harness's own events.
pub trait Sampler: Send {
    /// Moves readings taken up to the device's time `now_ns` into `out`, in time order. A
    /// sampler never calls the device: a measured one reads the driver on its own thread, a
    /// modeled one what the simulated device published.
    fn drain(&mut self, now_ns: u64, out: &mut Vec<Reading>);
    /// As `drain`, but moves at most `max` readings; returns whether more are waiting (a long
    /// wait's readings are then taken in bounded chunks).
    fn drain_some(&mut self, now_ns: u64, out: &mut Vec<Reading>, _max: usize) -> bool {
        self.drain(now_ns, out);
        false
    }
    /// Stops sampling at the device's time `now_ns`: the readings not drained yet go into
    /// `out`; returns what it achieved.
    fn stop(self: Box<Self>, now_ns: u64, out: &mut Vec<Reading>) -> SamplerStats;
    /// The first reading that failed so far (a device error between the run's own calls).
    fn first_error(&self) -> Option<SamplerError> {
        None
    }
}

/// Starts background readings of a device's free memory every `interval_ns` (0: as fast as
/// they go), tagged with what `live` publishes. The caller owns the sampler: it drains and
/// stops it.
pub trait StartSampler {
    fn start_sampler(
        &mut self,
        interval_ns: u64,
        live: Arc<LiveViews>,
    ) -> DevResult<Box<dyn Sampler>>;
}

impl<D: Device + ?Sized> StartSampler for D {
    fn start_sampler(
        &mut self,
        interval_ns: u64,
        live: Arc<LiveViews>,
    ) -> DevResult<Box<dyn Sampler>> {
        Ok(match self.readings()? {
            Readings::Measured(reader) => Box::new(
                ThreadSampler::spawn(interval_ns, live, reader).map_err(|e| {
                    DeviceError::Invalid(format!("cannot start the sampler thread: {e}"))
                })?,
            ),
            Readings::Modeled {
                query_ns,
                now_ns,
                memory,
            } => Box::new(VirtualSampler::new(interval_ns, query_ns, now_ns, live).reading(memory)),
        })
    }
}

/// Percentiles of a latency or interval distribution, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

/// A latency histogram (1 ns to 1 hour, 3 significant digits).
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Histogram<u64>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram(
            Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds"),
        )
    }
}

impl LatencyHistogram {
    pub fn record(&mut self, ns: u64) {
        self.0.saturating_record(ns.max(1));
    }

    pub fn percentiles(&self) -> Percentiles {
        let h = &self.0;
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
            mean_ns: h.mean(),
        }
    }
}

/// The first reading the sampler could not take: a device error seen between the run's own
/// calls (a kernel that faulted asynchronously shows here first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SamplerError {
    /// Device time of the failed reading.
    pub t_ns: u64,
    /// The phase running then (its index; `u32::MAX` outside any phase).
    pub phase: u32,
    pub error: String,
}

/// What the sampler achieved over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SamplerStats {
    /// The interval asked for (0: back to back).
    pub interval_ns: u64,
    pub readings: u64,
    /// Readings per second of run time.
    pub achieved_rate_hz: f64,
    /// Time between consecutive readings.
    pub interval: Percentiles,
    /// Time one `cuMemGetInfo` took.
    pub query_latency: Percentiles,
    /// True when the figures are modeled in virtual time (sim), not measured.
    pub modeled: bool,
    /// The first reading that failed, if one did.
    #[serde(default)]
    pub first_error: Option<SamplerError>,
}

/// Readings the thread keeps for the run's thread to take. While that thread is inside a long
/// driver call (a synchronize after a ten-hour spin) it takes none; the readings beyond this are
/// folded on the sampler's side into the lowest free memory and the latest reading of the span
/// (the views and the phase cannot change while the run's thread waits).
pub const SAMPLER_BACKLOG_READINGS: usize = 65_536;

/// A thread that reads device free memory at a fixed interval (used by the cuda backend).
pub struct ThreadSampler {
    /// The first failed reading, as soon as it happens (also in the final statistics).
    first_error: Arc<Mutex<Option<SamplerError>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<SamplerStats>>,
    rx: Receiver<Reading>,
}

impl ThreadSampler {
    /// Starts the thread; `reader` binds itself there first (the CUDA context), then reads.
    pub fn spawn(
        interval_ns: u64,
        live: Arc<LiveViews>,
        mut reader: Box<dyn Reader>,
    ) -> std::io::Result<ThreadSampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = sync_channel(SAMPLER_BACKLOG_READINGS);
        let stop2 = stop.clone();
        let first_error = Arc::new(Mutex::new(None));
        let first_error2 = first_error.clone();
        let handle = std::thread::Builder::new()
            .name("headroom-sampler".into())
            .spawn(move || {
                if let Err(e) = reader.bind() {
                    crate::errln!("warning: sampler could not start: {e}");
                    return SamplerStats {
                        interval_ns,
                        ..Default::default()
                    };
                }
                let mut stats = sample_loop(interval_ns, &live, &stop2, &tx, &mut *reader, |e| {
                    *first_error2.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                });
                stats.first_error = first_error2
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                stats
            })?;
        Ok(ThreadSampler {
            first_error,
            stop,
            handle: Some(handle),
            rx,
        })
    }

    pub fn drain(&mut self, out: &mut Vec<Reading>) {
        out.extend(self.rx.try_iter());
    }

    /// Moves at most `max` readings into `out`; returns whether it took `max`.
    pub fn drain_some(&mut self, out: &mut Vec<Reading>, max: usize) -> bool {
        let before = out.len();
        out.extend(self.rx.try_iter().take(max));
        out.len() - before == max
    }

    /// The first reading that failed so far.
    pub fn first_error(&self) -> Option<SamplerError> {
        self.first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops the thread and returns its statistics; readings not yet drained go to `out`.
    pub fn stop(mut self, out: &mut Vec<Reading>) -> SamplerStats {
        self.stop.store(true, Ordering::Relaxed);
        // Drained while the thread ends: its last folded readings wait for room.
        while self.handle.as_ref().is_some_and(|h| !h.is_finished()) {
            self.drain(out);
            std::thread::sleep(Duration::from_millis(1));
        }
        let stats = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        self.drain(out);
        stats
    }
}

impl Drop for ThreadSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            // The thread may be waiting for room for its last readings: make some.
            while !h.is_finished() {
                self.rx.try_iter().for_each(drop);
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = h.join();
        }
    }
}

fn sample_loop(
    interval_ns: u64,
    live: &LiveViews,
    stop: &AtomicBool,
    tx: &SyncSender<Reading>,
    reader: &mut dyn Reader,
    mut on_first_error: impl FnMut(SamplerError),
) -> SamplerStats {
    let mut backlog = Backlog::default();
    let mut copy = LiveCopy::default();
    let mut on_first = |e: &SamplerError| on_first_error(e.clone());
    let failures = Failures {
        what: "sampler reading",
        on_first: Some(&mut on_first),
    };
    let stats = paced(interval_ns, stop, false, failures, || {
        // On the reader's clock, as the reading's own time: one clock read per reading less.
        let asked_ns = reader.now_ns();
        let read = reader.read();
        match read {
            Ok(raw) => {
                let (phase, views) = live.refresh(&mut copy);
                let reading = Reading {
                    t_ns: raw.t_ns,
                    phase,
                    source: Source::Sampler,
                    device_free_bytes: raw.free_bytes,
                    views,
                };
                match backlog.offer(tx, reading) {
                    Ok(()) => Tick::Read {
                        t_ns: raw.t_ns,
                        latency_ns: raw.t_ns.saturating_sub(asked_ns),
                    },
                    Err(_) => Tick::Closed,
                }
            }
            Err(error) => Tick::Failed {
                t_ns: reader.now_ns(),
                phase: live.snapshot().0,
                error,
            },
        }
    });
    backlog.finish(tx);
    stats
}

/// The simulator's sampler: readings at exact virtual ticks, produced on demand.
///
/// A long wait (a ten-hour spin, a million graph launches) is millions of ticks; they are
/// produced in bounded chunks, and a run of ticks whose reading cannot differ (the device's
/// free memory steady, the views and phase those of the poll) is counted without being built:
/// only its first and last reading are handed on, which is all the timeline writes and all
/// the peaks and pollers need.
#[derive(Debug, Clone)]
pub struct VirtualSampler {
    /// The interval asked for (the period is at least the query's modeled cost).
    interval_ns: u64,
    period_ns: u64,
    query_ns: u64,
    next_tick_ns: u64,
    readings: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    live: Arc<LiveViews>,
    /// What the simulated device published, read at each tick.
    memory: Arc<ModeledMemory>,
}

/// How the simulated device's free memory reads over time, for the virtual sampler.
pub trait FreeOverTime {
    /// Device free bytes at time `t_ns`.
    fn free_at(&self, t_ns: u64) -> u64;
    /// A time until which (exclusive) free memory stays what it is at `t_ns`; `t_ns + 1` when
    /// nothing is known.
    fn steady_until(&self, t_ns: u64) -> u64 {
        t_ns.saturating_add(1)
    }
}

impl<F: Fn(u64) -> u64> FreeOverTime for F {
    fn free_at(&self, t_ns: u64) -> u64 {
        self(t_ns)
    }
}

impl VirtualSampler {
    /// `query_ns` is the modeled cost of one query: the sampler cannot go faster than that.
    pub fn new(interval_ns: u64, query_ns: u64, now_ns: u64, live: Arc<LiveViews>) -> Self {
        VirtualSampler {
            interval_ns,
            period_ns: interval_ns.max(query_ns).max(1),
            query_ns,
            next_tick_ns: now_ns,
            readings: 0,
            first_ns: None,
            last_ns: now_ns,
            live,
            memory: Arc::default(),
        }
    }

    /// Reads the memory a simulated device publishes (`Readings::Modeled`).
    pub fn reading(mut self, memory: Arc<ModeledMemory>) -> Self {
        self.memory = memory;
        self
    }

    /// Produces every tick up to `now_ns` (at most `max` readings into `out`; returns whether
    /// ticks remain). Ticks inside a steady span are counted, and only the span's first and
    /// last reading are pushed.
    pub fn poll_some(
        &mut self,
        now_ns: u64,
        free: &dyn FreeOverTime,
        out: &mut Vec<Reading>,
        max: usize,
    ) -> bool {
        let (phase, views) = self.live.snapshot();
        let max = max.max(2);
        while self.next_tick_ns <= now_ns {
            if out.len() + 2 > max {
                return true;
            }
            let t = self.next_tick_ns;
            let device_free_bytes = free.free_at(t);
            let reading = |t_ns| Reading {
                t_ns,
                phase,
                source: Source::Sampler,
                device_free_bytes,
                views,
            };
            // The ticks from `t` to the end of the steady span (or to now): all equal.
            let until = free
                .steady_until(t)
                .min(now_ns.saturating_add(1))
                .max(t + 1);
            let n = (until - t).div_ceil(self.period_ns);
            let last = t + (n - 1) * self.period_ns;
            out.push(reading(t));
            if n > 1 {
                out.push(reading(last));
            }
            self.readings += n;
            self.first_ns.get_or_insert(t);
            self.last_ns = last;
            self.next_tick_ns = last.saturating_add(self.period_ns);
            if self.next_tick_ns == u64::MAX {
                break;
            }
        }
        false
    }

    /// Produces every tick up to `now_ns`; `free_at(t)` is the device's free memory at time t.
    pub fn poll(&mut self, now_ns: u64, free_at: impl Fn(u64) -> u64, out: &mut Vec<Reading>) {
        while self.poll_some(now_ns, &free_at, out, usize::MAX) {}
    }

    pub fn stats(&self) -> SamplerStats {
        let interval_ns = self.interval_ns;
        let span = self
            .last_ns
            .saturating_sub(self.first_ns.unwrap_or(self.last_ns));
        let fixed = |ns: u64, count: u64| Percentiles {
            count,
            p50_ns: ns,
            p90_ns: ns,
            p99_ns: ns,
            max_ns: ns,
            mean_ns: ns as f64,
        };
        SamplerStats {
            interval_ns,
            readings: self.readings,
            achieved_rate_hz: if span > 0 {
                (self.readings.saturating_sub(1)) as f64 * 1e9 / span as f64
            } else {
                0.0
            },
            interval: fixed(self.period_ns, self.readings.saturating_sub(1)),
            query_latency: fixed(self.query_ns, self.readings),
            modeled: true,
            first_error: None,
        }
    }
}

impl Sampler for ThreadSampler {
    fn drain(&mut self, _now_ns: u64, out: &mut Vec<Reading>) {
        ThreadSampler::drain(self, out);
    }

    fn drain_some(&mut self, _now_ns: u64, out: &mut Vec<Reading>, max: usize) -> bool {
        ThreadSampler::drain_some(self, out, max)
    }

    fn first_error(&self) -> Option<SamplerError> {
        ThreadSampler::first_error(self)
    }

    fn stop(self: Box<Self>, _now_ns: u64, out: &mut Vec<Reading>) -> SamplerStats {
        ThreadSampler::stop(*self, out)
    }
}

impl Sampler for VirtualSampler {
    fn drain(&mut self, now_ns: u64, out: &mut Vec<Reading>) {
        while Sampler::drain_some(self, now_ns, out, usize::MAX) {}
    }

    fn drain_some(&mut self, now_ns: u64, out: &mut Vec<Reading>, max: usize) -> bool {
        let memory = self.memory.clone();
        self.poll_some(now_ns, &*memory, out, max)
    }

    fn stop(self: Box<Self>, now_ns: u64, out: &mut Vec<Reading>) -> SamplerStats {
        let mut s = *self;
        Sampler::drain(&mut s, now_ns, out);
        s.stats()
    }
}

/// A simulated device's free memory over time, as it published it.
impl FreeOverTime for ModeledMemory {
    fn free_at(&self, t_ns: u64) -> u64 {
        self.free_at_ns(t_ns)
    }
    fn steady_until(&self, t_ns: u64) -> u64 {
        self.free_steady_until_ns(t_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn virtual_ticks_are_exact_and_capped_by_query_cost() {
        let live = Arc::new(LiveViews::default());
        live.set_phase(3);
        live.publish(ViewSet::default().with(View::OwnBytes, 42));
        let mut s = VirtualSampler::new(1_000_000, 8_000, 0, live.clone());
        let mut out = Vec::new();
        s.poll(5_500_000, |t| 100 + t, &mut out);
        assert_eq!(out.len(), 6);
        assert_eq!(out[5].t_ns, 5_000_000);
        assert_eq!(out[5].device_free_bytes, 5_000_100);
        assert_eq!(out[0].phase, 3);
        assert_eq!(out[0].views.get(View::OwnBytes), Some(42));
        let fast = VirtualSampler::new(0, 8_000, 0, live);
        assert_eq!(fast.period_ns, 8_000);
        let st = s.stats();
        assert_eq!(st.readings, 6);
        assert!((st.achieved_rate_hz - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn a_copy_of_the_views_follows_every_publication() {
        let live = LiveViews::default();
        let mut copy = LiveCopy::default();
        assert_eq!(live.refresh(&mut copy).0, NO_PHASE);
        live.set_phase(2);
        let mut views = ViewSet::default();
        views.set(View::OwnBytes, 7);
        live.publish(views);
        let (phase, got) = live.refresh(&mut copy);
        assert_eq!((phase, got.get(View::OwnBytes)), (2, Some(7)));
        // Nothing published since: the copy, unchanged.
        assert_eq!(live.refresh(&mut copy).1.get(View::OwnBytes), Some(7));
        views.set(View::OwnBytes, 9);
        live.publish(views);
        assert_eq!(live.refresh(&mut copy).1.get(View::OwnBytes), Some(9));
    }

    #[test]
    fn thread_sampler_reads_and_stops() {
        let live = Arc::new(LiveViews::default());
        struct Seven(Instant, Arc<std::sync::atomic::AtomicU64>);
        impl Reader for Seven {
            fn read(&self) -> Result<crate::device::reading::RawReading, String> {
                self.1.fetch_add(1, Ordering::Relaxed);
                Ok(crate::device::reading::RawReading {
                    t_ns: self.now_ns(),
                    free_bytes: 7,
                    total_bytes: 9,
                    nvml: None,
                })
            }
            fn now_ns(&self) -> u64 {
                self.0.elapsed().as_nanos() as u64
            }
        }
        let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reader = Box::new(Seven(Instant::now(), reads.clone()));
        let s = ThreadSampler::spawn(100_000, live, reader).unwrap();
        // Readings before the stop, however long a busy machine takes to run the thread.
        let deadline = Instant::now() + Duration::from_secs(30);
        while reads.load(Ordering::Relaxed) < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut out = Vec::new();
        let stats = s.stop(&mut out);
        assert!(stats.readings >= 2, "{stats:?}");
        assert_eq!(out.len() as u64, stats.readings);
        assert!(out.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        assert!(out.iter().all(|r| r.device_free_bytes == 7));
    }

    #[test]
    fn a_steady_span_is_counted_with_its_first_and_last_reading() {
        struct Steps;
        impl FreeOverTime for Steps {
            fn free_at(&self, t: u64) -> u64 {
                if t < 10_000 { 100 } else { 50 }
            }
            fn steady_until(&self, t: u64) -> u64 {
                if t < 10_000 { 10_000 } else { u64::MAX }
            }
        }
        let mut s = VirtualSampler::new(1_000, 1, 0, Arc::new(LiveViews::default()));
        let mut out = Vec::new();
        assert!(!s.poll_some(25_000, &Steps, &mut out, 64));
        let got: Vec<(u64, u64)> = out.iter().map(|r| (r.t_ns, r.device_free_bytes)).collect();
        assert_eq!(
            got,
            vec![(0, 100), (9_000, 100), (10_000, 50), (25_000, 50)]
        );
        assert_eq!(s.stats().readings, 26);
    }
}
