//! One instant, one clock: a snapshot's trace (PyTorch's `time_us`, microseconds since the
//! Unix epoch) and the watch's readings (`timeline.csv`'s `t_ns` since the watch began, whose
//! wall time is `summary.json`'s `started_utc`, to the millisecond) put on the watch's time
//! base, and every view at one trace entry read apart: the device (NVML), the job's processes
//! (NVML's process list, read less often: its age is given), PyTorch's reserved and allocated
//! memory (the snapshot), and the live allocations by the line that made them.

use std::path::Path;

use anyhow::Context;

use crate::import::torch::live::{by_origin, live_at};
use crate::import::torch::model::{Action, DeviceTrace, Snapshot};
use crate::import::torch::requests::TorchRequests;
use crate::report::summary::Summary;

/// One row of `timeline.csv`: `t_ns`, device used, job used (`None` where not read).
type Row = (u64, Option<u64>, Option<u64>);

/// The watch's readings of the device and of the job, by time.
pub struct Timeline {
    rows: Vec<Row>,
    /// The wall time of `t_ns` 0, in microseconds since the Unix epoch.
    origin_unix_us: i64,
}

/// A reading and how long before the instant it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub bytes: u64,
    pub age_ns: u64,
}

impl Timeline {
    /// Reads `timeline.csv` of a watch's folder.
    pub fn read(dir: &Path, summary: &Summary) -> anyhow::Result<Timeline> {
        let origin_unix_us = unix_us_of_utc(summary.started_utc()).with_context(|| {
            format!(
                "summary.json: started_utc {:?} is not YYYY-MM-DDTHH:MM:SS[.mmm]Z",
                summary.started_utc()
            )
        })?;
        let path = dir.join("timeline.csv");
        let mut r = csv::Reader::from_path(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let header = r.headers()?.clone();
        let col = |name: &str| header.iter().position(|h| h == name);
        let (t, dev, job) = (col("t_ns"), col("device_used_bytes"), col("job_used_bytes"));
        let t = t.with_context(|| format!("{}: no t_ns column", path.display()))?;
        let mut rows = Vec::new();
        for rec in r.records() {
            let rec = rec.with_context(|| format!("{}", path.display()))?;
            let num = |c: Option<usize>| c.and_then(|c| rec.get(c)).and_then(|v| v.parse().ok());
            if let Some(t_ns) = num(Some(t)) {
                rows.push((t_ns, num(dev), num(job)));
            }
        }
        rows.sort_by_key(|r| r.0);
        Ok(Timeline {
            rows,
            origin_unix_us,
        })
    }

    /// The watch's `t_ns` of a wall time (microseconds since the epoch); `None` before it began.
    pub fn t_ns_of(&self, unix_us: i64) -> Option<u64> {
        u64::try_from(unix_us - self.origin_unix_us)
            .ok()
            .map(|us| us * 1000)
    }

    /// The wall time of a `t_ns`.
    pub fn unix_us_of(&self, t_ns: u64) -> i64 {
        self.origin_unix_us + (t_ns / 1000) as i64
    }

    /// The latest row at or before `t_ns` that read both the device and the job: (its age,
    /// device, job).
    pub fn both_at(&self, t_ns: u64) -> Option<(u64, u64, u64)> {
        let n = self.rows.partition_point(|r| r.0 <= t_ns);
        self.rows[..n]
            .iter()
            .rev()
            .find_map(|r| Some((t_ns - r.0, r.1?, r.2?)))
    }

    /// The latest device and job readings at or before `t_ns`.
    pub fn at(&self, t_ns: u64) -> (Option<Reading>, Option<Reading>) {
        let n = self.rows.partition_point(|r| r.0 <= t_ns);
        let last = |pick: fn(&Row) -> Option<u64>| {
            self.rows[..n].iter().rev().find_map(|r| {
                pick(r).map(|bytes| Reading {
                    bytes,
                    age_ns: t_ns - r.0,
                })
            })
        };
        (last(|r| r.1), last(|r| r.2))
    }
}

/// Microseconds since the Unix epoch of `YYYY-MM-DDTHH:MM:SS[.fff]Z` (how `started_utc` is
/// written).
fn unix_us_of_utc(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let frac_us = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain("000000".chars()).take(6).collect();
        digits.parse::<i64>().ok()?
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000) + frac_us)
}

/// Every view at one trace entry.
#[derive(Debug, Clone)]
pub struct Instant {
    /// On the watch's time base, where the entry has a time within the watch.
    pub t_ns: Option<u64>,
    pub device_used: Option<Reading>,
    pub job_used: Option<Reading>,
    pub pytorch_reserved_bytes: u64,
    /// The latest row that read the device and the job together, with PyTorch's reserved
    /// memory at that row's time: what the differences are taken from.
    pub paired: Option<Paired>,
    /// Live allocations (what the program asked for), summed.
    pub pytorch_allocated_bytes: u64,
    /// Live bytes by the line that made them, largest first: (line, bytes, allocations).
    pub top_lines: Vec<(String, u64, u64)>,
}

/// One row of readings of the device and the job together, and PyTorch's reserved memory at
/// that row's time.
#[derive(Debug, Clone, Copy)]
pub struct Paired {
    pub age_ns: u64,
    pub device_used_bytes: u64,
    pub job_used_bytes: u64,
    pub pytorch_reserved_bytes: u64,
}

impl Instant {
    /// The job's memory outside PyTorch's allocator (context, NCCL, cuBLAS): the job's
    /// processes less PyTorch's reserved memory, both at the paired row's time.
    pub fn outside_pytorch_bytes(&self) -> Option<u64> {
        self.paired
            .and_then(|p| p.job_used_bytes.checked_sub(p.pytorch_reserved_bytes))
    }

    /// Other processes: the device less the job's processes, from one row.
    pub fn other_processes_bytes(&self) -> Option<u64> {
        self.paired
            .and_then(|p| p.device_used_bytes.checked_sub(p.job_used_bytes))
    }
}

/// The views at trace entry `entry` of `trace`, at the watch's `t_ns` (the entry's own time
/// unless given: the device's peak is an instant of the readings, the state PyTorch was in
/// then is its last entry before it).
pub fn at_entry(
    snap: &Snapshot,
    trace: DeviceTrace,
    entry: u64,
    at_t_ns: Option<u64>,
    timeline: &Timeline,
) -> Instant {
    let i = trace.start + entry as usize;
    let t_ns = at_t_ns.or_else(|| snap.entries.time_us(i).and_then(|us| timeline.t_ns_of(us)));
    let (device_used, job_used) = t_ns.map_or((None, None), |t| timeline.at(t));
    let pre = TorchRequests::new(snap, trace).pre_trace_segment_bytes;
    let both = t_ns.and_then(|t| timeline.both_at(t));
    // PyTorch's state when the paired row was read: its last entry then (none: before the
    // trace, the segments held when it began).
    let paired_entry = both.map(|(age, ..)| {
        let t = t_ns.unwrap_or(0) - age;
        entry_at(snap, trace, timeline.unix_us_of(t)).map(|e| trace.start + e as usize)
    });
    let (mut reserved, mut reserved_paired) = (0, pre);
    crate::import::torch::device::pytorch_reserved(snap, trace, pre, |k, r| {
        if k == i {
            reserved = r;
        }
        if paired_entry == Some(Some(k)) {
            reserved_paired = r;
        }
    });
    let paired = both.map(|(age_ns, d, j)| Paired {
        age_ns,
        device_used_bytes: d,
        job_used_bytes: j,
        pytorch_reserved_bytes: reserved_paired,
    });
    let live = live_at(snap, trace, entry);
    Instant {
        t_ns,
        device_used,
        job_used,
        pytorch_reserved_bytes: reserved,
        paired,
        pytorch_allocated_bytes: live.iter().map(|l| l.bytes).sum(),
        top_lines: by_origin(snap, &live),
    }
}

/// The trace entries where PyTorch's allocator ran out of memory.
pub fn oom_entries(snap: &Snapshot, trace: DeviceTrace) -> Vec<u64> {
    (trace.start..trace.end)
        .filter(|&i| snap.entries.action(i) == Action::Oom)
        .map(|i| (i - trace.start) as u64)
        .collect()
}

/// The last entry at or before wall time `unix_us`, if the trace covers it.
pub fn entry_at(snap: &Snapshot, trace: DeviceTrace, unix_us: i64) -> Option<u64> {
    let first = (trace.start..trace.end).find_map(|i| snap.entries.time_us(i))?;
    if unix_us < first {
        return None;
    }
    (trace.start..trace.end)
        .rev()
        .find(|&i| snap.entries.time_us(i).is_some_and(|t| t <= unix_us))
        .map(|i| (i - trace.start) as u64)
}

#[cfg(test)]
mod tests {
    use super::unix_us_of_utc;

    #[test]
    fn started_utc_reads_as_unix_microseconds() {
        assert_eq!(unix_us_of_utc("1970-01-01T00:00:00Z"), Some(0));
        // 2026-12-06T05:00:00.123Z: 20,793 days after the epoch.
        assert_eq!(
            unix_us_of_utc("2026-12-06T05:00:00.123Z"),
            Some((20_793 * 86_400 + 5 * 3600) * 1_000_000 + 123_000)
        );
        assert_eq!(unix_us_of_utc("2026-12-06 05:00:00"), None);
    }
}
