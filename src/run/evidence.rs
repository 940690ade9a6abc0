//! What the runner gathers when memory is refused or another tenant is started: the evidence
//! of an OOM at its instant, and the tenant processes a workload asks for.

use std::time::Duration;

use crate::device::{DeviceError, process_list_doubt};
use crate::oom::{Diagnosis, OomRecord, RefusedBy};
use crate::record::{Reading, View};
use crate::run::Runner;
use crate::run::exec::{Done, Failure};
use crate::tenant::TenantProcess;
use crate::units::{Bytes, utc_timestamp};
use crate::workload::{Action, Planned, Via};

impl Runner<'_, '_> {
    /// simulator's accounting of it on sim.
    pub(super) fn tenant(&mut self, bytes: u64, duration_ns: u64) -> Result<Done, Failure> {
        let mut detail = String::new();
        let mut pid = 4_000_000 + self.tenants.len() as u32;
        if let Some(launch) = &self.tenant_launch {
            let t = TenantProcess::spawn(
                &launch.exe,
                &launch.device_args,
                bytes,
                duration_ns,
                Duration::from_secs(60),
            )
            .map_err(|e| Failure::Error(format!("{e:#}")))?;
            pid = t.pid;
            detail = t.ready_line.clone();
            self.tenants.push(t);
        }
        if self.dev.info().is_sim() {
            match self.dev.add_simulated_tenant(pid, bytes, duration_ns) {
                Ok(()) => {}
                Err(DeviceError::OutOfMemory { .. }) => {
                    let free = self.dev.mem_info()?.free_bytes;
                    return Err(Failure::Error(format!(
                        "the tenant could not take {}: only {} is free",
                        Bytes(bytes),
                        Bytes(free)
                    )));
                }
                Err(e) => return Err(e.into()),
            }
            if detail.is_empty() {
                detail =
                    format!("simulated tenant pid {pid} holds {bytes} bytes for {duration_ns} ns");
            }
        }
        Ok(Done {
            requested_bytes: Some(bytes),
            detail,
            ..Done::timed(0)
        })
    }

    /// Collects the evidence at the instant of an OOM.
    pub(super) fn oom_record(
        &mut self,
        phase: &str,
        p: &Planned,
        name: &str,
        stream: &str,
        req: &crate::alloc::OomRequest,
        at: Reading,
    ) -> anyhow::Result<OomRecord> {
        let stats = self.alloc.stats();
        let total = self.dev.info().total_bytes;
        let used = total.saturating_sub(at.device_free_bytes);
        let processes = self.dev.processes();
        let nvml = self.dev.nvml_memory();
        let processes_doubt = processes
            .as_deref()
            .and_then(|ps| process_list_doubt(ps, nvml.map(|n| n.used_bytes)));
        let own = at.views.get(View::OwnBytes).unwrap_or(0);
        // A doubted list may name this very process as another: nothing is subtracted for it.
        let others: u64 = processes
            .iter()
            .flatten()
            .filter(|p| !p.is_self && processes_doubt.is_none())
            .filter_map(|p| p.used_bytes)
            .sum();
        let via = match &p.action {
            Action::Allocate {
                via: Via::Driver, ..
            } => RefusedBy::Driver,
            Action::Allocate { .. } => self.alloc.kind().into(),
            a if a.is_graph() => RefusedBy::Graph,
            _ => RefusedBy::Driver,
        };
        let graph_usage = if self.graphs.enabled() {
            self.dev.graph_mem_usage().ok()
        } else {
            None
        };
        let graph_exec = self.graphs.enabled().then(|| self.graphs.live_exec_bytes());
        let graph_bytes =
            graph_usage.map_or(0, |u| u.reserved_current_bytes) + graph_exec.unwrap_or(0);
        let mut rec = OomRecord {
            utc: utc_timestamp(std::time::SystemTime::now()),
            t_ns: at.t_ns,
            phase: phase.to_string(),
            step: p.label.clone(),
            op: p.action.op().to_string(),
            name: name.to_string(),
            via,
            requested_bytes: req.requested_bytes,
            rounded_bytes: req.rounded_bytes,
            driver_request_bytes: req.driver_request_bytes,
            pool: req.pool.clone(),
            stream: stream.to_string(),
            retries: req.retries.clone(),
            device_total_bytes: total,
            device_free_bytes: at.device_free_bytes,
            device_used_bytes: used,
            idle_device_free_bytes: self.idle_free_bytes,
            own_bytes: own,
            outside_allocator_bytes: self.driver_bytes,
            alloc_allocated_bytes: stats.allocated_bytes,
            alloc_reserved_bytes: stats.reserved_bytes,
            reserved_but_unallocated_bytes: stats
                .reserved_bytes
                .saturating_sub(stats.allocated_bytes),
            largest_free_block_bytes: self.alloc.largest_free_for(req.requested_bytes),
            inactive_split_count: stats.inactive_split_count,
            inactive_split_bytes: stats.inactive_split_bytes,
            unexplained_used_bytes: used as i64
                - (self.idle_used_bytes - self.idle_others_bytes) as i64
                - own as i64
                - others as i64
                - graph_bytes as i64,
            graph_used_bytes: graph_usage.map(|u| u.used_current_bytes),
            graph_reserved_bytes: graph_usage.map(|u| u.reserved_current_bytes),
            graph_exec_bytes: graph_exec,
            nvml,
            processes,
            processes_doubt,
            diagnosis: Diagnosis {
                observation: String::new(),
                causes: vec![],
                findings: vec![],
                check_next: vec![],
            },
        };
        rec.diagnose();
        Ok(rec)
    }
}
