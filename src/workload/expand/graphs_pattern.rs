//! The `graphs` pattern: one CUDA graph captured per batch size, as serving engines do, with
//! two sample sizes captured alone first so the report can set the measured total against a
//! linear extrapolation from them.

use std::collections::BTreeSet;

use super::{Action, Emitter};
use crate::units::{Size, SizeSpec};
use crate::workload::action::{GraphTag, GraphsSpec};
use crate::workload::parse::WorkloadError;
use crate::workload::step::{Count, GraphOrder, OnOom, Step, ViaSpec};

impl Emitter<'_, '_, '_> {
    /// The `graphs` pattern: samples captured alone (then destroyed and trimmed), then one
    /// graph per batch size in capture order, then the report.
    pub(super) fn graphs_pattern(&mut self, step: &Step) -> Result<(), WorkloadError> {
        let Step::Graphs {
            name,
            stream,
            batch_sizes,
            layers,
            workspace_per_batch,
            output_per_batch,
            order,
            samples,
            replays,
            auto_free,
        } = step
        else {
            return Err(self.err("not a graphs step"));
        };
        if batch_sizes.is_empty() {
            return Err(self.err("batch_sizes is empty"));
        }
        let mut seen = BTreeSet::new();
        for b in batch_sizes {
            if *b == 0 {
                return Err(self.err("batch sizes must be at least 1"));
            }
            if !seen.insert(*b) {
                return Err(self.err(format!("batch size {b} appears twice in batch_sizes")));
            }
        }
        if *layers == 0 || *replays == 0 {
            return Err(self.err("layers and replays must be at least 1"));
        }
        if workspace_per_batch.0 == 0 {
            return Err(self.err("workspace_per_batch must be above zero"));
        }
        if output_per_batch.0 > 0 && *replays > 1 && !auto_free {
            return Err(self.err(
                "each graph leaves its output live after a launch: replays > 1 needs auto_free = true (a relaunch without it fails while the output is live)",
            ));
        }
        let smallest = *seen.first().expect("not empty");
        let largest = *seen.last().expect("not empty");
        let samples: [u32; 2] = match samples.as_deref() {
            None => [smallest, largest],
            Some([a, b]) => [*a, *b],
            Some(_) => return Err(self.err("samples needs exactly two batch sizes, e.g. [1, 512]")),
        };
        if samples[0] == samples[1] || samples.contains(&0) {
            return Err(self.err(format!(
                "a linear extrapolation needs two distinct sample batch sizes above zero, not {samples:?}; set samples = [a, b]"
            )));
        }
        let mut sizes = batch_sizes.clone();
        match order {
            GraphOrder::Descending => sizes.sort_by(|a, b| b.cmp(a)),
            GraphOrder::Ascending => sizes.sort(),
        }
        self.multi = true;
        let outer = self.place.clone();
        let spec = GraphsSpec {
            name: name.clone(),
            stream: stream.clone(),
            batch_sizes: sizes.clone(),
            samples,
            order: *order,
            layers: *layers,
            workspace_per_batch_bytes: workspace_per_batch.0,
            output_per_batch_bytes: output_per_batch.0,
            replays: *replays,
            auto_free: *auto_free,
        };
        for b in samples {
            self.place = format!("{outer}, sample batch size {b}");
            let prefix = format!("{name}.sample");
            let (graph, out) = self.pattern_graph(&spec, &prefix, b, true)?;
            if let Some(out) = out {
                self.free(&out, None)?;
            }
            self.destroy_graph(&graph)?;
            self.push(Action::TrimGraphMemory)?;
        }
        for b in sizes {
            self.place = format!("{outer}, batch size {b}");
            self.pattern_graph(&spec, name, b, false)?;
        }
        self.place = outer;
        self.push(Action::GraphsReport(Box::new(spec)))
    }

    /// Captures, instantiates, replays and synchronizes the graph `PREFIX[b]`; returns its
    /// name and its output's name.
    fn pattern_graph(
        &mut self,
        spec: &GraphsSpec,
        prefix: &str,
        b: u32,
        sample: bool,
    ) -> Result<(String, Option<String>), WorkloadError> {
        let s = spec.stream.clone();
        let graph = crate::workload::member_name(prefix, b);
        let ws = crate::workload::member_name(&format!("{prefix}.ws"), b);
        let out = (spec.output_per_batch_bytes > 0)
            .then(|| crate::workload::member_name(&format!("{prefix}.out"), b));
        // Each layer is four steps, each at least one action: refused before it is built.
        self.bound(u64::from(spec.layers).saturating_mul(4))?;
        let batch_bytes = |what: &str, per_batch: u64| {
            per_batch.checked_mul(u64::from(b)).ok_or_else(|| {
                self.err(format!(
                    "{what} × batch size {b} is more than 2^64 bytes; no device holds it"
                ))
            })
        };
        let ws_bytes = batch_bytes("workspace_per_batch", spec.workspace_per_batch_bytes)?;
        let out_bytes = batch_bytes("output_per_batch", spec.output_per_batch_bytes)?;
        let alloc = |n: &str, bytes: u64| Step::Allocate {
            name: n.into(),
            size: SizeSpec::Bytes(bytes),
            count: Count::N(1),
            via: ViaSpec::Allocator,
            stream: s.clone(),
            on_oom: OnOom::Stop,
        };
        let touch = |n: &str| Step::Touch {
            name: n.into(),
            stride: Size(64 << 10),
            stream: s.clone(),
        };
        let mut body = Vec::new();
        if let Some(o) = &out {
            body.push(alloc(o, out_bytes));
        }
        for _ in 0..spec.layers {
            body.push(alloc(&ws, ws_bytes));
            body.push(touch(&ws));
            body.push(Step::Fill {
                name: ws.clone(),
                seed: 1,
                stream: s.clone(),
            });
            body.push(Step::Free {
                name: ws.clone(),
                keep_every: None,
            });
        }
        if let Some(o) = &out {
            body.push(touch(o));
        }
        let place = self.place.clone();
        let tag = GraphTag {
            pattern: spec.name.clone(),
            batch_size: b,
            sample,
        };
        self.capture(&graph, &s, Some(tag), body, &|_, _| place.clone())?;
        self.instantiate(&graph, spec.auto_free)?;
        self.replay(&graph, spec.replays, None)?;
        self.push(Action::Synchronize {
            stream: Some(s.clone()),
        })?;
        Ok((graph, out))
    }
}
