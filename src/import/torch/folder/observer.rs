//! The timeline of an imported trace: a reading of every view after each replayed request,
//! at the trace's own time, and an OOM record with its evidence for each refused request.
//!
//! Past `READINGS_MAX` readings the timeline is thinned per bucket of consecutive readings,
//! keeping the first, the last and each view's highest and lowest reading, so every true
//! peak stays exact.

use std::time::{Duration, SystemTime};

use crate::alloc::replay::{Observer, Outcome, Recorded, ReplayError};
use crate::alloc::{AllocStats, Allocator};
use crate::device::DeviceCore;
use crate::folder::Record;
use crate::oom::{OomPlace, OomRecord};
use crate::record::{Reading, Source, View};
use crate::units::{Bytes, utc_timestamp};

use super::super::frames::{short, user_frame};
use super::super::model::{DeviceTrace, Snapshot};

/// Most readings a timeline.csv of an import holds before thinning.
pub const READINGS_MAX: usize = 100_000;
/// The idle reading sits at 0; trace times start here.
pub const TRACE_T0_NS: u64 = 1_000;

pub(super) struct Timeline<'a> {
    pub snap: &'a Snapshot,
    pub trace: DeviceTrace,
    pub record: Record,
    bucket: Vec<Reading>,
    bucket_size: usize,
    pub ooms: Vec<OomRecord>,
    pub idle_free_bytes: u64,
    pub last_t_ns: u64,
    pub requests: u64,
    /// The model's allocated peak and the entry where it was first reached.
    pub peak_allocated: (u64, u64),
    pub first_oom_entry: Option<u64>,
    /// The user gave the device (`--device-total`, `--profile`): its figures are theirs.
    pub device_given: bool,
    /// The device total given (`--device-total`, or the profile's under `--profile`), whether
    /// the simulated idle reading stands for the run's (`--profile`), and why the figures
    /// not given are null (or what those given are derived from).
    pub given_total: Option<u64>,
    pub given_idle: bool,
    pub unknown_basis: String,
}

impl<'a> Timeline<'a> {
    pub fn new(
        snap: &'a Snapshot,
        trace: DeviceTrace,
        record: Record,
        idle_free_bytes: u64,
    ) -> Timeline<'a> {
        let per_bucket = READINGS_MAX / 12;
        Timeline {
            snap,
            trace,
            record,
            bucket: Vec::new(),
            bucket_size: trace.len().div_ceil(per_bucket).max(1),
            ooms: Vec::new(),
            idle_free_bytes,
            last_t_ns: TRACE_T0_NS,
            requests: 0,
            peak_allocated: (0, 0),
            first_oom_entry: None,
            device_given: false,
            given_total: None,
            given_idle: false,
            unknown_basis: String::new(),
        }
    }

    fn push(&mut self, r: Reading) -> Result<(), ReplayError> {
        if self.bucket_size == 1 {
            self.record.reading(r);
        } else {
            self.bucket.push(r);
            if self.bucket.len() >= self.bucket_size {
                self.flush_bucket();
            }
        }
        self.record
            .release_until(self.last_t_ns)
            .map_err(|error| ReplayError::Io {
                source_name: "timeline.csv".into(),
                error,
            })
    }

    /// Writes the kept readings of the current bucket.
    pub fn flush_bucket(&mut self) {
        let mut b = std::mem::take(&mut self.bucket);
        if b.is_empty() {
            return;
        }
        let mut keep = vec![false; b.len()];
        keep[0] = true;
        keep[b.len() - 1] = true;
        // One pass: per view, the first reading of its highest and of its lowest value (a
        // view a reading lacks counts as 0), and the first of the lowest device free.
        let value = |r: &Reading, v: View| r.views.get(v).unwrap_or(0);
        let first: [u64; View::COUNT] = View::ALL.map(|v| value(&b[0], v));
        let (mut hi, mut lo) = (first, first);
        let (mut hi_at, mut lo_at) = ([0usize; View::COUNT], [0usize; View::COUNT]);
        let (mut free_lo, mut free_at) = (b[0].device_free_bytes, 0usize);
        for (i, r) in b.iter().enumerate().skip(1) {
            for (k, v) in View::ALL.into_iter().enumerate() {
                let x = value(r, v);
                if x > hi[k] {
                    (hi[k], hi_at[k]) = (x, i);
                }
                if x < lo[k] {
                    (lo[k], lo_at[k]) = (x, i);
                }
            }
            if r.device_free_bytes < free_lo {
                (free_lo, free_at) = (r.device_free_bytes, i);
            }
        }
        for i in hi_at.into_iter().chain(lo_at) {
            keep[i] = true;
        }
        keep[free_at] = true;
        for (r, k) in b.drain(..).zip(keep) {
            if k {
                self.record.reading(r);
            }
        }
        // Its room is kept for the next bucket.
        self.bucket = b;
    }

    fn oom(
        &mut self,
        r: &Recorded,
        o: &crate::alloc::OomRequest,
        s: &AllocStats,
        alloc: &dyn Allocator,
        dev: &mut dyn DeviceCore,
        reading: &Reading,
    ) -> Result<(), ReplayError> {
        let i = self.trace.start + r.at as usize;
        let entry = self.snap.entries.get(i);
        let total = dev.info().total_bytes;
        let used = total.saturating_sub(reading.device_free_bytes);
        let utc = entry
            .time_us
            .filter(|t| *t > 946_684_800_000_000)
            .map(|t| utc_timestamp(SystemTime::UNIX_EPOCH + Duration::from_micros(t as u64)))
            .unwrap_or_else(|| "unknown (no time recorded)".into());
        let place = OomPlace {
            utc,
            t_ns: reading.t_ns,
            phase: "trace".into(),
            step: format!("entry {}", r.at),
            op: "allocate".into(),
            name: short(user_frame(self.snap, entry.stack)),
            stream: stream_name(self.snap, entry.stream),
            via: crate::oom::RefusedBy::Caching,
        };
        let largest = alloc.largest_free_for(o.requested_bytes);
        let mut rec = OomRecord {
            device_total_bytes: self.given_total,
            idle_device_free_bytes: self.given_idle.then_some(self.idle_free_bytes),
            own_bytes: s.reserved_bytes,
            outside_allocator_bytes: self.given_total.map(|_| 0),
            device_evidence_basis: Some(self.unknown_basis.clone()),
            ..OomRecord::refused(place, o, s, largest, reading.device_free_bytes, used)
        };
        let recorded = entry.action == super::super::model::Action::Oom;
        if recorded {
            // PyTorch's own figures stay as recorded; memory outside PyTorch is derived from
            // a given total only.
            rec.device_free_bytes = entry.addr;
            rec.requested_bytes = entry.size;
            // Device used from the total given and the free memory recorded.
            rec.device_used_bytes = self.given_total.map(|t| t.saturating_sub(entry.addr));
            rec.outside_allocator_bytes = self.given_total.map(|t| {
                t.saturating_sub(entry.addr)
                    .saturating_sub(s.reserved_bytes)
            });
        }
        if !self.device_given {
            // Total − free on a device the snapshot does not record.
            rec.device_used_bytes = None;
        }
        // Beside PyTorch's reserved memory, from the device's use where it is known (given,
        // with an idle reading of the whole total): nothing else is in a snapshot.
        rec.unexplained_used_bytes = rec
            .device_used_bytes
            .map(|u| u as i64 - s.reserved_bytes as i64);
        rec.diagnose();
        if recorded {
            if !self.device_given {
                rec.diagnosis.findings.push(
                    "The snapshot does not record the device's total, its idle reading, other processes or memory outside PyTorch: they are null here (\"not in the snapshot\"), and this diagnosis rests only on what was recorded. Give --device-total or --profile to compare with a real card.".to_string(),
                );
            }
            rec.diagnosis.findings.insert(
                1,
                format!(
                    "PyTorch itself refused this request when recording (trace entry {}), with {} free on its device (`device_free`).",
                    r.at,
                    Bytes(entry.addr)
                ),
            );
        }
        self.ooms.push(rec);
        Ok(())
    }
}

/// A stream as the files write it: the `cudaStream_t` PyTorch recorded, in hex (`0x0` is the
/// default stream). It is a stream's name, as a run's workload names its streams (`main`) and
/// a watch names its job's (`job`): `events.csv`'s `stream` column holds text whoever wrote it.
pub fn stream_name(snap: &Snapshot, stream: u16) -> String {
    let handle = snap
        .streams
        .values
        .get(stream as usize)
        .copied()
        .unwrap_or(0);
    format!("{handle:#x}")
}

impl Observer for Timeline<'_> {
    fn seen(
        &mut self,
        r: &Recorded,
        outcome: &Outcome,
        alloc: &dyn Allocator,
        dev: &mut dyn DeviceCore,
    ) -> Result<(), ReplayError> {
        if r.setup {
            return Ok(());
        }
        self.requests += 1;
        let s = alloc.stats();
        let mem = dev.mem_info().map_err(ReplayError::Device)?;
        let mut views = s.views();
        views.set(View::OwnBytes, s.reserved_bytes);
        self.last_t_ns = self.last_t_ns.max(TRACE_T0_NS + r.t_ns);
        let reading = Reading {
            t_ns: self.last_t_ns,
            phase: 0,
            source: Source::Event,
            device_free_bytes: mem.free_bytes,
            views,
        };
        if s.allocated_bytes > self.peak_allocated.0 {
            self.peak_allocated = (s.allocated_bytes, r.at);
        }
        if let Outcome::Refused(o) = outcome {
            self.first_oom_entry.get_or_insert(r.at);
            self.oom(r, o, &s, alloc, dev, &reading)?;
        }
        self.push(reading)
    }
}
