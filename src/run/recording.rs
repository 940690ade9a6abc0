//! A run's record as it goes: the timeline (readings, peaks and polled replays), the event
//! log, the background sampler and the views it tags its readings with, and the latency
//! histograms of the run's own calls. Nothing here calls the device except to read it.

use std::sync::Arc;

use anyhow::Context;

use crate::device::Device;
use crate::folder::RunFolder;
use crate::record::timeline::{EventResult, EventRow};
use crate::record::{Reading, Source, ViewSet};
use crate::run::actions::Done;
use crate::run::progress::Progress;
use crate::sampler::{LatencyHistogram, LiveViews, Sampler, SamplerError};

/// The most sampler readings taken from the sampler at once.
const PUMP_CHUNK: usize = 4096;

pub(crate) struct Recording {
    /// The result folder every reading and row goes into.
    pub folder: RunFolder,
    /// The harness's own views and phase, published for the sampler's readings.
    pub live: Arc<LiveViews>,
    sampler: Option<Box<dyn Sampler>>,
    /// Late sampler readings are held this long before they are written (real GPU only).
    watermark_slack_ns: u64,
    pub alloc_latency: LatencyHistogram,
    pub free_latency: LatencyHistogram,
    pub query_latency: LatencyHistogram,
    pub progress: Progress,
}

/// An event row's identity: which step, what op, on which name and stream.
pub(crate) struct RowKey<'a> {
    pub phase: &'a str,
    pub step: &'a str,
    pub op: &'a str,
    pub name: &'a str,
    pub stream: &'a str,
}

impl Recording {
    pub fn new(
        folder: RunFolder,
        live: Arc<LiveViews>,
        sampler: Box<dyn Sampler>,
        watermark_slack_ns: u64,
        progress: Progress,
    ) -> Recording {
        Recording {
            folder,
            live,
            sampler: Some(sampler),
            watermark_slack_ns,
            alloc_latency: LatencyHistogram::default(),
            free_latency: LatencyHistogram::default(),
            query_latency: LatencyHistogram::default(),
            progress,
        }
    }

    /// Drains the sampler into the timeline and writes readings past the watermark, a bounded
    /// chunk at a time: however long the step before, no more than `PUMP_CHUNK` readings are
    /// held at once.
    pub fn pump(&mut self, dev: &dyn Device) {
        // A simulated device's memory as it stands, for the readings modeled up to now.
        dev.publish_memory();
        let now_ns = dev.now_ns();
        let wm = now_ns.saturating_sub(self.watermark_slack_ns);
        let mut buf = Vec::with_capacity(PUMP_CHUNK);
        loop {
            buf.clear();
            let more = match &mut self.sampler {
                Some(s) => s.drain_some(now_ns, &mut buf, PUMP_CHUNK),
                None => false,
            };
            let record = self.folder.record_mut();
            for r in buf.drain(..) {
                record.reading(r);
            }
            if let Err(e) = record.release_until(wm) {
                crate::errln!("warning: writing timeline.csv: {e}");
            }
            if !more {
                return;
            }
        }
    }

    /// A device error the sampler saw between the run's own calls, if any.
    pub fn sampler_error(&self) -> Option<SamplerError> {
        self.sampler.as_ref()?.first_error()
    }

    /// Stops the sampler (its last readings go into the timeline); returns its statistics.
    pub fn stop_sampler(&mut self, dev: &dyn Device) -> crate::sampler::SamplerStats {
        self.pump(dev);
        let Some(s) = self.sampler.take() else {
            return Default::default();
        };
        let mut buf = Vec::new();
        let stats = s.stop(dev.now_ns(), &mut buf);
        for r in buf {
            self.folder.record_mut().reading(r);
        }
        stats
    }

    /// Publishes `views` and takes an event-synchronous reading of device free memory.
    pub fn reading(
        &mut self,
        dev: &mut dyn Device,
        phase: u32,
        views: ViewSet,
    ) -> anyhow::Result<Reading> {
        self.pump(dev);
        self.live.publish(views);
        let t0 = dev.now_ns();
        // The error names the call already ("cuMemGetInfo failed: …").
        let mem = dev.mem_info().context("reading device memory")?;
        let t1 = dev.now_ns();
        self.query_latency.record(t1 - t0);
        self.progress.device_used(mem.used_bytes());
        let r = Reading {
            t_ns: t1,
            phase,
            source: Source::Event,
            device_free_bytes: mem.free_bytes,
            views,
        };
        self.folder.record_mut().reading(r);
        Ok(r)
    }

    /// Writes the row of `events.csv` for what a step did.
    pub fn row(
        &mut self,
        t_ns: u64,
        key: &RowKey,
        done: &Done,
        result: EventResult,
        device_free_bytes: Option<u64>,
    ) -> anyhow::Result<()> {
        self.folder
            .record_mut()
            .event(&EventRow {
                t_ns,
                phase: key.phase,
                step: key.step,
                op: key.op,
                name: key.name,
                stream: key.stream,
                requested_bytes: done.requested_bytes,
                size_bytes: done.size_bytes,
                latency_ns: done.latency_ns,
                result,
                device_free_bytes,
                detail: &done.detail,
            })
            .context("writing events.csv")
    }

    /// Flushes both CSVs and rewrites `summary.json`, so that what ran so far is on disk.
    pub fn checkpoint(&mut self, dev: &dyn Device) {
        self.pump(dev);
        self.folder.checkpoint();
    }

    /// The peaks, latencies and row counts recorded so far, into the summary.
    pub fn fill_summary(&mut self) {
        self.folder.fill_peaks();
        self.folder.set_latency(std::collections::BTreeMap::from([
            ("allocate".to_string(), self.alloc_latency.percentiles()),
            ("free".to_string(), self.free_latency.percentiles()),
            ("mem_get_info".to_string(), self.query_latency.percentiles()),
        ]));
    }
}
