//! The watch's two samplers, each on its own thread and each measuring what it achieved: the
//! device view at `--interval`, and the process list — slow, and holding a global driver lock
//! while it runs — at its own, longer interval, summed over the job's process tree.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use crate::device::ProcessUsage;
use crate::record::{Reading, Source, ViewSet};
use crate::sampler::{LatencyHistogram, LiveViews, SamplerError, SamplerStats};
use crate::watch::Msg;
use crate::watch::proctree::descends_from;
use crate::watch::source::{DeviceProbe, ProcessProbe};

/// One reading of the process list, with the job's part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReading {
    pub t_ns: u64,
    pub phase: u32,
    /// Device free, read right before the list (the row's `device_free_bytes`).
    pub device_free_bytes: u64,
    pub processes: Vec<ProcessUsage>,
    /// The job's processes in the list: pid and bytes (`None`: the driver does not say).
    pub members: Vec<(u32, Option<u64>)>,
    /// Listed PIDs this machine's /proc does not show (another PID namespace).
    pub unseen: Vec<u32>,
}

impl JobReading {
    /// The job's memory: the sum over its processes, unknown if one of them is.
    pub fn job_used_bytes(&self) -> Option<u64> {
        self.members.iter().map(|m| m.1).sum()
    }
}

/// Which listed processes belong to the job: `root` and its descendants, except `exclude`
/// (headroom itself, which holds a context of its own with `--cuda-info`).
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    pub root: u32,
    pub exclude: u32,
}

impl Tree {
    /// Splits a process list into the job's processes and the PIDs not visible from here.
    pub fn split(&self, list: &[ProcessUsage]) -> (Vec<(u32, Option<u64>)>, Vec<u32>) {
        let (mut members, mut unseen) = (Vec::new(), Vec::new());
        for p in list.iter().filter(|p| p.pid != self.exclude) {
            match descends_from(p.pid, self.root) {
                Some(true) => members.push((p.pid, p.used_bytes)),
                Some(false) => {}
                None => unseen.push(p.pid),
            }
        }
        (members, unseen)
    }
}

/// What one tick of a loop did.
enum Tick {
    Read {
        t_ns: u64,
        latency_ns: u64,
    },
    Failed {
        t_ns: u64,
        phase: u32,
        error: String,
    },
    /// The receiver is gone: stop.
    Closed,
}

/// Runs `tick` every `interval_ns` (0: back to back) until `stop`, and returns what it achieved.
fn paced(
    interval_ns: u64,
    stop: &AtomicBool,
    modeled: bool,
    mut tick: impl FnMut() -> Tick,
) -> SamplerStats {
    let (mut intervals, mut latency) = (LatencyHistogram::default(), LatencyHistogram::default());
    let (mut readings, mut last_t, mut first_error) = (0u64, None::<u64>, None);
    let started = Instant::now();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match tick() {
            Tick::Read { t_ns, latency_ns } => {
                latency.record(latency_ns);
                if let Some(prev) = last_t {
                    intervals.record(t_ns.saturating_sub(prev));
                }
                last_t = Some(t_ns);
                readings += 1;
            }
            Tick::Failed { t_ns, phase, error } => {
                if first_error.is_none() {
                    crate::errln!("warning: a watch reading failed: {error}");
                    first_error = Some(SamplerError { t_ns, phase, error });
                }
            }
            Tick::Closed => break,
        }
        if interval_ns == 0 {
            continue;
        }
        next += Duration::from_nanos(interval_ns);
        let now = Instant::now();
        if next <= now {
            // Fell behind: no burst to catch up, as a poller would not either.
            next = now;
            continue;
        }
        // Sleep in short slices so a stop is seen soon even at a long interval.
        while !stop.load(Ordering::Relaxed) {
            let left = next.saturating_duration_since(Instant::now());
            if left <= Duration::from_micros(200) {
                break;
            }
            std::thread::sleep((left - Duration::from_micros(100)).min(Duration::from_millis(20)));
        }
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    }
    let secs = started.elapsed().as_secs_f64();
    SamplerStats {
        interval_ns,
        readings,
        achieved_rate_hz: if secs > 0.0 {
            readings as f64 / secs
        } else {
            0.0
        },
        interval: intervals.percentiles(),
        query_latency: latency.percentiles(),
        modeled,
        first_error,
    }
}

fn since(origin: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(origin).as_nanos() as u64
}

/// Shared by both loops: where they send, the clock, the phase, and when to stop.
pub struct LoopContext<'a> {
    pub tx: Sender<Msg>,
    pub origin: Instant,
    pub live: &'a LiveViews,
    pub stop: &'a AtomicBool,
    pub modeled: bool,
}

/// Reads the device every `interval_ns` into sampler rows.
pub fn device_loop(probe: &dyn DeviceProbe, interval_ns: u64, cx: LoopContext<'_>) -> SamplerStats {
    paced(interval_ns, cx.stop, cx.modeled, || {
        let q0 = Instant::now();
        let r = probe.read();
        let q1 = Instant::now();
        let t_ns = since(cx.origin, q1);
        let phase = cx.live.snapshot().0;
        match r {
            Ok(r) => {
                let reading = Reading {
                    t_ns,
                    phase,
                    source: Source::Sampler,
                    device_free_bytes: r.free_bytes,
                    views: ViewSet::default(),
                };
                match cx.tx.send(Msg::Reading(reading)) {
                    Ok(()) => Tick::Read {
                        t_ns,
                        latency_ns: since(q0, q1),
                    },
                    Err(_) => Tick::Closed,
                }
            }
            Err(error) => Tick::Failed { t_ns, phase, error },
        }
    })
}

/// Reads the process list every `interval_ns`, with the device right before it; the latency
/// recorded is the process list's alone.
pub fn process_loop(
    list: &dyn ProcessProbe,
    device: &dyn DeviceProbe,
    tree: Tree,
    interval_ns: u64,
    cx: LoopContext<'_>,
) -> SamplerStats {
    paced(interval_ns, cx.stop, cx.modeled, || {
        let free = device.read().map(|r| r.free_bytes);
        let q0 = Instant::now();
        let processes = list.processes();
        let q1 = Instant::now();
        let t_ns = since(cx.origin, q1);
        let phase = cx.live.snapshot().0;
        match (free, processes) {
            (Ok(device_free_bytes), Ok(processes)) => {
                let (members, unseen) = tree.split(&processes);
                let job = JobReading {
                    t_ns,
                    phase,
                    device_free_bytes,
                    processes,
                    members,
                    unseen,
                };
                match cx.tx.send(Msg::Job(job)) {
                    Ok(()) => Tick::Read {
                        t_ns,
                        latency_ns: since(q0, q1),
                    },
                    Err(_) => Tick::Closed,
                }
            }
            (Err(error), _) | (_, Err(error)) => Tick::Failed { t_ns, phase, error },
        }
    })
}

/// The process list's cost, measured before the job starts: `calls` calls back to back.
pub fn measure_process_list(
    list: &dyn ProcessProbe,
    calls: u32,
) -> anyhow::Result<LatencyHistogram> {
    let mut h = LatencyHistogram::default();
    for _ in 0..calls {
        let t0 = Instant::now();
        list.processes().map_err(anyhow::Error::msg)?;
        h.record(t0.elapsed().as_nanos() as u64);
    }
    Ok(h)
}

/// The process list's interval: as asked, else at least the device's, at least 10 ms, and at
/// least 20 calls' worth of time, so NVML's global lock is held at most 5% of the time.
pub fn process_interval(asked: Option<u64>, device_ns: u64, call_p50_ns: u64) -> (u64, String) {
    const FLOOR_NS: u64 = 10_000_000;
    const COST_FACTOR: u64 = 20;
    if let Some(ns) = asked {
        return (ns, "as asked (--process-interval)".into());
    }
    let by_cost = call_p50_ns.saturating_mul(COST_FACTOR);
    let ns = device_ns.max(FLOOR_NS).max(by_cost);
    let why = if ns == by_cost && by_cost > FLOOR_NS.max(device_ns) {
        format!(
            "{COST_FACTOR}× the list's measured cost ({} per call): NVML's driver lock is held at most 5% of the time",
            crate::units::Nanos(call_p50_ns)
        )
    } else if ns == device_ns && device_ns > FLOOR_NS {
        "the device interval (--interval): the list is cheap enough here".into()
    } else {
        format!(
            "the 10 ms floor: the list costs {} per call here, and is never polled faster",
            crate::units::Nanos(call_p50_ns)
        )
    };
    (ns, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_interval_follows_its_cost() {
        // 4.5 ms per call on a busy GPU: 90 ms.
        let (ns, why) = process_interval(None, 1_000_000, 4_500_000);
        assert_eq!(ns, 90_000_000);
        assert!(why.contains("5%"), "{why}");
        // A cheap list: the floor.
        assert_eq!(process_interval(None, 1_000_000, 50_000).0, 10_000_000);
        // A slow device interval wins.
        assert_eq!(
            process_interval(None, 500_000_000, 4_500_000).0,
            500_000_000
        );
        assert_eq!(process_interval(Some(3_000_000), 1, 9_000_000).0, 3_000_000);
    }

    #[test]
    fn the_tree_takes_this_process_and_leaves_out_the_excluded() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        let list = vec![
            ProcessUsage {
                pid: me,
                used_bytes: Some(5),
                is_self: true,
            },
            ProcessUsage {
                pid: u32::MAX - 3,
                used_bytes: Some(7),
                is_self: false,
            },
        ];
        let (members, unseen) = Tree {
            root: parent,
            exclude: 0,
        }
        .split(&list);
        assert_eq!(members, vec![(me, Some(5))]);
        assert_eq!(unseen, vec![u32::MAX - 3]);
        let (members, _) = Tree {
            root: parent,
            exclude: me,
        }
        .split(&list);
        assert!(members.is_empty());
    }

    #[test]
    fn a_paced_loop_counts_readings_and_stops() {
        let stop = AtomicBool::new(false);
        let mut n = 0u64;
        let stats = paced(1_000_000, &stop, false, || {
            n += 1;
            if n == 5 {
                stop.store(true, Ordering::Relaxed);
            }
            Tick::Read {
                t_ns: n * 1_000_000,
                latency_ns: 10,
            }
        });
        assert_eq!(stats.readings, 5);
        assert_eq!(stats.interval.count, 4);
        assert_eq!(stats.query_latency.p50_ns, 10);
    }
}
