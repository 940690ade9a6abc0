//! The watch's two samplers, each on its own thread and each measuring what it achieved: the
//! device view at `--interval`, and the process list — slow, and holding a global driver lock
//! while it runs — at its own, longer interval, summed over the job's process tree.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::time::Instant;

use crate::device::ProcessUsage;
use crate::device::reading::Reader;
use crate::record::{Reading, Source, ViewSet};
use crate::sampler::{Failures, LatencyHistogram, LiveViews, SamplerStats, Tick, paced};
use crate::watch::Msg;
use crate::watch::proctree::descends_from;
use crate::watch::source::ProcessProbe;

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

/// A watch loop warns of its first failed reading; nothing else hears of it as it happens.
fn watch_failures() -> Failures<'static> {
    Failures {
        what: "a watch reading",
        on_first: None,
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
pub fn device_loop(probe: &dyn Reader, interval_ns: u64, cx: LoopContext<'_>) -> SamplerStats {
    paced(interval_ns, cx.stop, cx.modeled, watch_failures(), || {
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
    device: &dyn Reader,
    tree: Tree,
    interval_ns: u64,
    cx: LoopContext<'_>,
) -> SamplerStats {
    paced(interval_ns, cx.stop, cx.modeled, watch_failures(), || {
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
}
