//! The end of every run, whatever stopped it: the sampler stopped, everything the run took
//! released (tenant processes too), device free checked against the idle reading, the polled
//! replays closed, the expectations evaluated and the record written.

use anyhow::Context;

use crate::alloc::AllocatorKind;
use crate::record::timeline::EventResult;
use crate::record::{NO_PHASE, Reading, Source, View, ViewSet};
use crate::report::summary::{Release, RunStatus};
use crate::run::actions::Done;
use crate::run::recording::RowKey;
use crate::run::{RunOptions, Runner, watchdog};
use crate::units::Nanos;

/// How long the release check waits for a stopped tenant's memory to come back.
const TENANT_SETTLE_NS: u64 = 2_000_000_000;

/// What releasing the run's memory left to report.
struct Released {
    /// What could not be given back.
    errors: Vec<String>,
    /// How long a stopped tenant's memory took to come back, when tenants were stopped.
    tenant_settle_ns: Option<u64>,
}

impl Runner<'_, '_> {
    /// Ends the run: sampler off, everything released, baseline checked, results written.
    pub(super) fn finish(&mut self, opts: &RunOptions) -> anyhow::Result<()> {
        self.rec.progress.finish();
        let scope = watchdog::Scope {
            phase: "release",
            step: "",
            op: "release",
            name: "",
            stream: "",
        };
        // Tenants may take a while to stop and their memory to come back.
        let now = self.dev.now_ns();
        self.limits
            .watchdog
            .arm(scope, now, 10_000_000_000 + self.limits.longest_spin_ns);
        self.rec.pump(&*self.dev);
        let end_ns = self.dev.now_ns();
        self.rec.folder.set_end_ns(end_ns);
        let sampler = self.rec.stop_sampler(&*self.dev);
        self.rec.folder.set_sampler(sampler);
        self.rec.pump(&*self.dev);
        if self.alloc.kind() == AllocatorKind::Pool {
            self.rec
                .folder
                .set_pool_high_water(self.dev.pool_usage().ok());
        }
        self.rec.folder.set_allocator_stats(self.alloc.stats());
        if self.held.graphs.enabled() {
            let graphs = self.held.graphs.summary(self.dev.graph_mem_usage().ok());
            self.rec.folder.set_graphs(graphs);
        }
        let released = self.release();
        self.rec.live.set_phase(NO_PHASE);
        self.check_release(&released);
        self.rec.folder.close_pollers(end_ns);
        self.fail_on_late_fault(&released.errors);
        // A signal while the run released was announced as an interrupt: it is one (exit
        // 130), though every step ran.
        let status = self.rec.folder.summary().status();
        if matches!(status, RunStatus::Completed | RunStatus::Oom)
            && self
                .limits
                .interrupted
                .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.rec.folder.set_status(
                RunStatus::Interrupted,
                Some("interrupted by a signal after the last step had run".into()),
            );
        }
        let interrupted = self.rec.folder.summary().status() == RunStatus::Interrupted;
        if interrupted {
            crate::errln!("interrupted: writing summary.json, timeline.csv, events.csv");
        }
        // A record that cannot be written (a full disk) fails the run, naming the file; the
        // summary still says so, if it can be written.
        let dir = self.rec.folder.dir().to_path_buf();
        let csv_path = |name: &str| dir.join(name).display().to_string();
        let record = self.rec.folder.record_mut();
        let flushed = record
            .flush_timeline()
            .with_context(|| format!("cannot write {}", csv_path("timeline.csv")))
            .and_then(|_| {
                record
                    .flush_events()
                    .with_context(|| format!("cannot write {}", csv_path("events.csv")))
            });
        if let Err(e) = &flushed {
            self.rec
                .folder
                .set_status(RunStatus::Failed, Some(format!("{e:#}")));
        }
        self.fill_summary();
        self.rec.folder.stamp_finished();
        let expectations = crate::expect::evaluate(
            &self.wl.expect,
            opts.expect_oom,
            opts.fail_on_mismatch,
            self.rec.folder.summary(),
        );
        self.rec.folder.set_expectations(expectations);
        let exit_code = super::exit_code(self.rec.folder.summary());
        self.rec.folder.set_exit_code(exit_code);
        let written = self
            .rec
            .folder
            .write_summary()
            .with_context(|| format!("cannot write {}", csv_path("summary.json")));
        flushed?;
        written?;
        // The run's record is complete on disk; a report that cannot be written is a warning
        // (`headroom report DIR` can write it again), not a different outcome of the run.
        if let Err(e) = self.rec.folder.write_reports(interrupted) {
            // The record is on disk, but what a reader looks at first is not: never exit 0.
            let what = format!(
                "the run's reports could not be written ({e:#}); `headroom report {}` writes \
                 them again",
                dir.display()
            );
            crate::errln!("error: {what}");
            self.rec.folder.add_detail(what);
            if exit_code == 0 {
                self.rec.folder.set_exit_code(2);
            }
            if let Err(e) = self.rec.folder.write_summary() {
                crate::errln!("warning: writing summary.json again: {e}");
            }
        }
        if !released.errors.is_empty() {
            crate::errln!(
                "warning: could not release everything: {}",
                released.errors.join("; ")
            );
        }
        Ok(())
    }

    /// Gives back everything the run took.
    fn release(&mut self) -> Released {
        let mut errors = Vec::new();
        if let Err(e) = self.held.graphs.abort_capture(&mut *self.dev) {
            errors.push(format!("ending an open capture: {e}"));
        }
        for (name, ptr) in self.held.driver_allocations() {
            if let Err(e) = self.dev.free(ptr) {
                errors.push(format!("{name}: {e}"));
            }
        }
        self.held.clear_allocations();
        let stopped_tenants = !self.held.tenants.is_empty();
        for t in self.held.tenants.drain(..) {
            let pid = t.pid;
            if let Err(e) = t.stop() {
                errors.push(format!("tenant pid {pid}: {e:#}"));
            }
        }
        if let Err(e) = self.alloc.release_all(&mut *self.dev) {
            errors.push(format!("allocator: {e}"));
        }
        if let Err(e) = self.dev.release_all().and_then(|_| self.dev.synchronize()) {
            errors.push(format!("device: {e}"));
        }
        Released {
            errors,
            tenant_settle_ns: stopped_tenants.then(|| self.settle_after_tenants()),
        }
    }

    /// After tenant processes were stopped, waits (at most `TENANT_SETTLE_NS`) until device
    /// free is back within a page of the idle reading: the driver gives a killed process's
    /// memory back some time after it exits. Returns how long that took.
    fn settle_after_tenants(&mut self) -> u64 {
        const POLL_NS: u64 = 20_000_000;
        let start = self.dev.now_ns();
        let page = self.dev.alloc_rounding().page_bytes;
        loop {
            let back = self
                .dev
                .mem_info()
                .is_ok_and(|m| m.free_bytes + page >= self.baseline.free_bytes);
            let waited = self.dev.now_ns() - start;
            if back || waited >= TENANT_SETTLE_NS {
                return waited;
            }
            self.dev.sleep(POLL_NS);
        }
    }

    /// The final reading and the release check against the idle reading.
    fn check_release(&mut self, released: &Released) {
        let Ok(mem) = self.dev.mem_info() else {
            return;
        };
        let t_ns = self.dev.now_ns();
        self.rec.folder.record_mut().reading(Reading {
            t_ns,
            phase: NO_PHASE,
            source: Source::Final,
            device_free_bytes: mem.free_bytes,
            views: ViewSet::default().with(View::OwnBytes, 0),
        });
        let raw_diff = mem.free_bytes as i64 - self.baseline.free_bytes as i64;
        // Other processes (a shared GPU, --shared-ok) may have taken or given back memory
        // meanwhile: that change is theirs, not this run's.
        let others = self.others_change_bytes();
        let diff = raw_diff + others.unwrap_or(0);
        let others_note = others.filter(|d| *d != 0).map(|d| {
            format!(
                "other processes' memory changed by {} during the run (the driver's process \
                 list); device free changed by {raw_diff} bytes, {diff} bytes of it this run's",
                crate::units::SignedBytes(d as i128)
            )
        });
        self.rec.folder.set_release(Release {
            idle_device_free_bytes: self.baseline.free_bytes,
            final_device_free_bytes: mem.free_bytes,
            difference_bytes: diff,
            within_one_page: diff.unsigned_abs() <= self.dev.alloc_rounding().page_bytes,
            note: if let Some(n) = others_note {
                Some(n)
            } else if !released.errors.is_empty() {
                Some(format!(
                    "errors while releasing: {}",
                    released.errors.join("; ")
                ))
            } else if self.context_grew {
                Some("kernels were loaded or the stack reservation was raised: the context keeps that memory until it is destroyed".into())
            } else {
                None
            },
            tenant_settle_ns: released.tenant_settle_ns,
        });
    }

    /// How much more memory other processes hold now than at the idle reading, from the
    /// driver's process list; `None` when there is no list to believe.
    fn others_change_bytes(&mut self) -> Option<i64> {
        let ps = self.dev.processes()?;
        let nvml_used = self.dev.nvml_memory().map(|m| m.used_bytes);
        if crate::device::process_list_doubt(&ps, nvml_used).is_some() {
            return None;
        }
        let now: u64 = ps
            .iter()
            .filter(|p| !p.is_self)
            .filter_map(|p| p.used_bytes)
            .sum();
        Some(now as i64 - self.baseline.others_bytes as i64)
    }

    /// A device error that surfaced only now (a kernel that faulted after the last step's
    /// reading) fails a run that looked complete: it is never exit 0.
    fn fail_on_late_fault(&mut self, release_errors: &[String]) {
        let late_fault = self
            .rec
            .folder
            .summary()
            .sampler()
            .first_error
            .as_ref()
            .map(|e| {
                format!(
                    "{} (first seen by the sampler at {})",
                    e.error,
                    Nanos(e.t_ns)
                )
            })
            .or_else(|| (!release_errors.is_empty()).then(|| release_errors.join("; ")));
        let Some(fault) = late_fault else {
            return;
        };
        if !matches!(
            self.rec.folder.summary().status(),
            RunStatus::Completed | RunStatus::Oom
        ) {
            return;
        }
        let done = Done {
            detail: format!(
                "the device reported an error after the last step had run: {fault}; work the \
                 steps queued failed on the device"
            ),
            ..Done::default()
        };
        let key = RowKey {
            phase: "",
            step: "",
            op: "release",
            name: "",
            stream: "",
        };
        if let Err(e) = self
            .rec
            .row(self.dev.now_ns(), &key, &done, EventResult::Error, None)
        {
            crate::errln!("warning: {e:#}");
        }
        self.rec
            .folder
            .set_status(RunStatus::Failed, Some(done.detail));
    }
}
