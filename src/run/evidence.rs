//! The evidence of an out-of-memory at its instant: every view, the allocator's free blocks
//! and retries, the processes the driver lists, graph memory, and what no view explains; then
//! the diagnosis in the vocabulary of the seed article's observation table.

use crate::alloc::OomRequest;
use crate::device::process_list_doubt;
use crate::oom::{OomPlace, OomRecord, RefusedBy};
use crate::record::{Reading, View};
use crate::run::Runner;
use crate::run::recording::RowKey;
use crate::units::utc_timestamp;
use crate::workload::{Action, Planned, Via};

impl Runner<'_, '_> {
    /// Collects the evidence at the instant of an OOM.
    pub(super) fn oom_record(
        &mut self,
        key: &RowKey,
        p: &Planned,
        req: &OomRequest,
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
        let graph_usage = if self.held.graphs.enabled() {
            self.dev.graph_mem_usage().ok()
        } else {
            None
        };
        let graph_exec = self
            .held
            .graphs
            .enabled()
            .then(|| self.held.graphs.live_exec_bytes());
        let graph_bytes =
            graph_usage.map_or(0, |u| u.reserved_current_bytes) + graph_exec.unwrap_or(0);
        let place = OomPlace {
            utc: utc_timestamp(std::time::SystemTime::now()),
            t_ns: at.t_ns,
            phase: key.phase.to_string(),
            step: p.label.clone(),
            op: p.action.op().to_string(),
            name: key.name.to_string(),
            stream: key.stream.to_string(),
            via,
        };
        let largest = self.alloc.largest_free_for(req.requested_bytes);
        let mut rec = OomRecord {
            device_total_bytes: Some(total),
            idle_device_free_bytes: Some(self.baseline.free_bytes),
            own_bytes: own,
            outside_allocator_bytes: Some(self.held.driver_bytes),
            unexplained_used_bytes: Some(
                used as i64
                    - (self.baseline.used_bytes - self.baseline.others_bytes) as i64
                    - own as i64
                    - others as i64
                    - graph_bytes as i64,
            ),
            graph_used_bytes: graph_usage.map(|u| u.used_current_bytes),
            graph_reserved_bytes: graph_usage.map(|u| u.reserved_current_bytes),
            graph_exec_bytes: graph_exec,
            nvml,
            processes,
            processes_doubt,
            ..OomRecord::refused(place, req, &stats, largest, at.device_free_bytes, used)
        };
        rec.diagnose();
        Ok(rec)
    }
}
