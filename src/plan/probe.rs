//! The workload a plan describes, written out for one request count (a "probe").
//!
//! A probe holds the weights, then the KV blocks of `n` admitted requests, then, with all of
//! that resident, an activation chunk and a workspace that together equal the plan's other
//! peak; it holds that peak for a moment and lets go. So the run's true peak is weights + KV +
//! other peak + whatever the plan did not name, which is exactly what the plan's margin must
//! absorb. The workload is written as an ordinary workload file (kept in the probe's folder),
//! so any probe can be rerun on its own with `headroom run`.

use std::fmt::Write as _;

use crate::device::rounding::AllocRounding;

/// The part of the other peak that goes straight to the driver, like a cuBLAS or NCCL
/// workspace: a quarter of it, in the driver's whole pages. The rest is activations through
/// the workload's allocator.
pub fn workspace_bytes(other_peak_bytes: u64) -> u64 {
    AllocRounding::DRIVER.whole_pages_in(other_peak_bytes / 4)
}

/// What the driver is expected to charge for one allocation (`AllocRounding::DRIVER`: the
/// plan is written before any device is open). Only used to choose where to probe first;
/// every admission limit reported is measured, never predicted.
pub fn expected_device_bytes(alloc_bytes: u64) -> u64 {
    AllocRounding::DRIVER.charged_bytes(alloc_bytes)
}

/// Everything a probe needs besides its request count.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeShape {
    pub plan_name: String,
    pub plan_file: String,
    pub weights_bytes: u64,
    pub weight_tensors: u32,
    pub other_peak_bytes: u64,
    pub blocks_per_request: u64,
    pub block_bytes: u64,
    /// Device free memory the run's peak must leave: the plan's safety margin.
    pub min_headroom_bytes: u64,
    /// The plan's `[allocator]` table, as written.
    pub allocator: Option<toml::Table>,
}

impl ProbeShape {
    /// The weight tensors' sizes (the last one takes the remainder).
    pub fn weight_tensor_bytes(&self) -> Vec<u64> {
        if self.weights_bytes == 0 {
            return vec![];
        }
        let t = (self.weight_tensors as u64).min(self.weights_bytes).max(1);
        let each = self.weights_bytes / t;
        let mut v = vec![each; t as usize];
        *v.last_mut().unwrap() = self.weights_bytes - each * (t - 1);
        v
    }

    pub fn workspace_bytes(&self) -> u64 {
        workspace_bytes(self.other_peak_bytes)
    }

    pub fn activations_bytes(&self) -> u64 {
        self.other_peak_bytes - self.workspace_bytes()
    }

    /// Bytes the workload itself asks for at its peak with `requests` admitted.
    pub fn planned_total_bytes(&self, requests: u64) -> u64 {
        self.weights_bytes + requests * self.kv_per_request_bytes() + self.other_peak_bytes
    }

    pub fn kv_per_request_bytes(&self) -> u64 {
        self.blocks_per_request * self.block_bytes
    }

    /// Where the first probe after the planned one goes: the count that would just keep the
    /// margin if the driver charged whole 2 MiB pages and nothing else happened.
    pub fn guess(&self, device_total_bytes: u64, idle_used_bytes: u64) -> u64 {
        let base: u64 = idle_used_bytes
            + self
                .weight_tensor_bytes()
                .iter()
                .map(|b| expected_device_bytes(*b))
                .sum::<u64>()
            + expected_device_bytes(self.activations_bytes())
            + expected_device_bytes(self.workspace_bytes());
        let per_request = self.blocks_per_request * expected_device_bytes(self.block_bytes);
        let line = device_total_bytes.saturating_sub(self.min_headroom_bytes);
        line.saturating_sub(base) / per_request.max(1)
    }

    /// A count that cannot fit: its requested bytes alone exceed the device's total.
    pub fn bound(&self, device_total_bytes: u64) -> u64 {
        let fixed = self.weights_bytes + self.other_peak_bytes;
        match device_total_bytes.checked_sub(fixed) {
            None => 0,
            Some(left) => left / self.kv_per_request_bytes().max(1) + 1,
        }
    }

    /// The workload file for `requests` admitted requests.
    pub fn workload_toml(&self, requests: u64) -> String {
        let mut o = String::new();
        let b = |v: u64| crate::plan::budget::Short(v as i128).to_string();
        let _ = writeln!(
            o,
            "# Written by `headroom validate` for the plan {:?} ({}): {requests} admitted request{}.",
            self.plan_name,
            self.plan_file,
            if requests == 1 { "" } else { "s" }
        );
        let _ = writeln!(
            o,
            "# Weights {}; KV {} × {} blocks of {}; other peak {} (activations {} + workspace {}).",
            b(self.weights_bytes),
            requests,
            self.blocks_per_request,
            b(self.block_bytes),
            b(self.other_peak_bytes),
            b(self.activations_bytes()),
            b(self.workspace_bytes())
        );
        let _ = writeln!(
            o,
            "# An OOM is an outcome here, so OOM is allowed; the margin is the headroom expectation.\n"
        );
        let _ = writeln!(o, "[workload]");
        let _ = writeln!(
            o,
            "name = {:?}",
            format!("{}-{requests}-requests", self.plan_name)
        );
        let _ = writeln!(
            o,
            "description = {:?}\n",
            format!(
                "validation probe of plan {}: {requests} requests",
                self.plan_name
            )
        );
        let _ = writeln!(o, "[settings]\nallow_oom = true\n");
        if let Some(a) = &self.allocator {
            let _ = writeln!(o, "[allocator]\n{}", toml::to_string(a).unwrap_or_default());
        }
        let _ = writeln!(
            o,
            "[expect]\noom = false\nmin_headroom = {}  # {}\n",
            self.min_headroom_bytes,
            b(self.min_headroom_bytes)
        );
        if self.weights_bytes > 0 {
            let _ = writeln!(
                o,
                "[[phase]]\nname = \"weights\"\nsteps = [\n  {{ op = \"weights\", total = {}, tensors = {} }},\n]\n",
                self.weights_bytes,
                self.weight_tensor_bytes().len()
            );
        }
        if requests > 0 {
            let _ = writeln!(o, "[[phase]]\nname = \"kv\"\nsteps = [");
            for r in 0..requests {
                let _ = writeln!(
                    o,
                    "  {{ op = \"allocate\", name = \"kv.r{r}\", size = {}, count = {} }},",
                    self.block_bytes, self.blocks_per_request
                );
            }
            let _ = writeln!(o, "]\n");
        }
        let _ = writeln!(o, "[[phase]]\nname = \"other-peak\"\nsteps = [");
        let (act, ws) = (self.activations_bytes(), self.workspace_bytes());
        if act > 0 {
            let _ = writeln!(
                o,
                "  {{ op = \"allocate\", name = \"activations\", size = {act} }},"
            );
        }
        if ws > 0 {
            let _ = writeln!(
                o,
                "  {{ op = \"allocate\", name = \"workspace\", size = {ws}, via = \"driver\" }},"
            );
        }
        let _ = writeln!(o, "  {{ op = \"sleep\", for = \"1ms\" }},");
        if ws > 0 {
            let _ = writeln!(o, "  {{ op = \"free\", name = \"workspace\" }},");
        }
        if act > 0 {
            let _ = writeln!(o, "  {{ op = \"free\", name = \"activations\" }},");
        }
        let _ = writeln!(o, "]");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{GIB, MIB};
    use crate::workload::Workload;
    use std::path::Path;

    fn tiny() -> ProbeShape {
        ProbeShape {
            plan_name: "t".into(),
            plan_file: "t.toml".into(),
            weights_bytes: 2 * GIB,
            weight_tensors: 32,
            other_peak_bytes: 512 * MIB,
            blocks_per_request: 32,
            block_bytes: 2 * MIB,
            min_headroom_bytes: 256 * MIB,
            allocator: None,
        }
    }

    #[test]
    fn the_probe_peaks_at_weights_plus_kv_plus_other_peak() {
        let s = tiny();
        assert_eq!(s.workspace_bytes(), 128 * MIB);
        assert_eq!(s.activations_bytes(), 384 * MIB);
        for n in [0, 1, 20] {
            let text = s.workload_toml(n);
            let w = Workload::from_toml(&text, Path::new("probe.toml"), 4 * GIB)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(w.planned_peak_bytes(), s.planned_total_bytes(n), "{text}");
            assert!(w.settings.allow_oom);
            assert_eq!(w.expect.min_headroom_bytes, Some(256 * MIB));
        }
    }

    #[test]
    fn guess_and_bound_on_tiny() {
        let s = tiny();
        // 4096 − 256 (margin) − 256 (context) − 2048 − 512 = 1024 MiB: 16 requests of 64 MiB.
        assert_eq!(s.guess(4 * GIB, 256 * MIB), 16);
        // 4096 − 2048 − 512 = 1536 MiB: 24 requests fill it, the 25th cannot fit.
        assert_eq!(s.bound(4 * GIB), 25);
        let mut odd = tiny();
        odd.block_bytes = 3 * MIB / 2;
        assert_eq!(odd.guess(4 * GIB, 256 * MIB), 16);
        assert_eq!(odd.bound(4 * GIB), 1536 / 48 + 1);
    }

    #[test]
    fn the_allocator_table_is_passed_through() {
        let mut s = tiny();
        let mut t = toml::Table::new();
        t.insert("kind".into(), toml::Value::String("pool".into()));
        s.allocator = Some(t);
        let w = Workload::from_toml(&s.workload_toml(2), Path::new("p.toml"), 4 * GIB).unwrap();
        assert_eq!(w.allocator.kind(), crate::alloc::AllocatorKind::Pool);
    }
}
