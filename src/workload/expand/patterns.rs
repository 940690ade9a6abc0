//! The shorthand patterns of a workload — weights, activations, workspace, KV cache — as the
//! plain allocate, touch, sleep and free actions they stand for.

use crate::workload::expand::{Action, Emitter};
use crate::workload::parse::WorkloadError;
use crate::workload::step::{ActivationMode, Step, ViaSpec};

impl Emitter<'_, '_, '_> {
    /// Expands one pattern step.
    pub(super) fn pattern(&mut self, step: &Step) -> Result<(), WorkloadError> {
        match step {
            Step::Weights {
                name,
                total,
                tensors,
                touch,
            } => {
                if *tensors == 0 || self.names.bytes(total) < *tensors as u64 {
                    return Err(self.err(
                        "weights needs tensors ≥ 1 and a total of at least one byte per tensor",
                    ));
                }
                self.multi = true;
                let each = self.names.bytes(total) / *tensors as u64;
                let last = self.names.bytes(total) - each * (*tensors as u64 - 1);
                for i in 0..*tensors {
                    let n = crate::workload::member_name(name, i);
                    let bytes = if i + 1 == *tensors { last } else { each };
                    self.push(Action::Allocate {
                        name: n.clone(),
                        bytes,
                        via: ViaSpec::Allocator,
                        stream: "main".into(),
                    })?;
                    if *touch {
                        self.push(Action::Touch {
                            name: n,
                            stride_bytes: 64 << 10,
                            stream: "main".into(),
                        })?;
                    }
                }
            }
            Step::Activations {
                name,
                layers,
                size,
                scratch,
                mode,
                layer_time,
            } => {
                if *layers == 0 {
                    return Err(self.err("layers must be at least 1"));
                }
                self.multi = true;
                let alloc = |n: String, bytes: u64| Action::Allocate {
                    name: n,
                    bytes,
                    via: ViaSpec::Allocator,
                    stream: "main".into(),
                };
                let layer_n = |i: u32| crate::workload::member_name(name, i);
                let scratch_n = format!("{name}.scratch");
                let layer_body = |e: &mut Self| -> Result<(), WorkloadError> {
                    if let Some(s) = scratch {
                        let bytes = e.names.bytes(s);
                        e.push(alloc(scratch_n.clone(), bytes))?;
                    }
                    if layer_time.0 > 0 {
                        e.push(Action::Sleep {
                            duration_ns: layer_time.0,
                        })?;
                    }
                    if scratch.is_some() {
                        e.push(Action::Free {
                            name: scratch_n.clone(),
                        })?;
                    }
                    Ok(())
                };
                // Inference holds two layers at most: from the third on, each layer is the
                // one before it with the index moved on by one, so those before the last are
                // counted (`forward`) once one has been walked.
                let shifts = self.names.fast_forward && *mode == ActivationMode::Inference;
                let last_named = super::forward::largest_index(name.chars().count() + 2);
                let mut second = None;
                let mut i = 0;
                while i < *layers {
                    if shifts && i == 1 {
                        second = Some(self.counters());
                    }
                    if let (Some(from), 2) = (second, i)
                        && self.namespace_free(&format!("{name}["), 1)
                    {
                        let now = self.counters();
                        let most = u64::from(*layers - 3).min(last_named.saturating_sub(1));
                        let k = self.periods_within_bounds(&from, &now, most);
                        self.count_periods(&from, &now, k);
                        if let Some(l) = self.names.live.remove(&layer_n(1)) {
                            self.names.live.insert(layer_n(1 + k as u32), l);
                        }
                        i += k as u32;
                    }
                    let bytes = self.names.bytes(size);
                    self.push(alloc(layer_n(i), bytes))?;
                    layer_body(self)?;
                    if *mode == ActivationMode::Inference && i > 0 {
                        self.push(Action::Free {
                            name: layer_n(i - 1),
                        })?;
                    }
                    i += 1;
                }
                match mode {
                    ActivationMode::Train => {
                        for i in (0..*layers).rev() {
                            layer_body(self)?;
                            self.push(Action::Free { name: layer_n(i) })?;
                        }
                    }
                    ActivationMode::Inference => self.push(Action::Free {
                        name: layer_n(*layers - 1),
                    })?,
                }
            }
            Step::Workspace {
                name,
                size,
                repeats,
                hold,
                gap,
                via,
            } => {
                if *repeats == 0 {
                    return Err(self.err("repeats must be at least 1"));
                }
                self.multi = true;
                // Each repeat leaves the walk as it found it: past the second, those before
                // the last are counted (`forward`), the first two walked.
                let mut second = None;
                let mut r = 0;
                while r < *repeats {
                    if self.names.fast_forward && r == 1 {
                        second = Some(self.counters());
                    }
                    if let (Some(from), 2) = (second, r) {
                        let now = self.counters();
                        let k = self.periods_within_bounds(&from, &now, u64::from(*repeats - 3));
                        self.count_periods(&from, &now, k);
                        r += k as u32;
                    }
                    self.push(Action::Allocate {
                        name: name.clone(),
                        bytes: self.names.bytes(size),
                        via: *via,
                        stream: "main".into(),
                    })?;
                    self.push(Action::Touch {
                        name: name.clone(),
                        stride_bytes: 64 << 10,
                        stream: "main".into(),
                    })?;
                    if hold.0 > 0 {
                        self.push(Action::Sleep {
                            duration_ns: hold.0,
                        })?;
                    }
                    self.push(Action::Free { name: name.clone() })?;
                    if gap.0 > 0 && r + 1 < *repeats {
                        self.push(Action::Sleep { duration_ns: gap.0 })?;
                    }
                    r += 1;
                }
            }
            Step::Kv {
                name,
                requests,
                block,
                blocks_per_request,
                prefill_blocks,
                arrive_every,
                tick,
            } => {
                if *requests == 0 || *blocks_per_request == 0 || *arrive_every == 0 {
                    return Err(self
                        .err("requests, blocks_per_request and arrive_every must be at least 1"));
                }
                if *prefill_blocks == 0 || prefill_blocks > blocks_per_request {
                    return Err(self.err("prefill_blocks must be between 1 and blocks_per_request"));
                }
                self.multi = true;
                self.kv(
                    name,
                    *requests,
                    block.0,
                    *blocks_per_request,
                    *prefill_blocks,
                    *arrive_every,
                    tick.0,
                )?;
            }
            other => unreachable!("{} is not a pattern", other.op()),
        }
        Ok(())
    }

    /// Requests arrive every `arrive_every` ticks, take `prefill` blocks, grow one block a tick
    /// to `per_request`, then free all their blocks.
    ///
    /// Only the requests holding blocks are walked each tick (every one of them emits an
    /// action), and ticks that would emit nothing (no request live, no tick time) are skipped
    /// to the next arrival: the work is bounded by the actions emitted, which `MAX_ACTIONS`
    /// bounds, whatever the counts say.
    #[allow(clippy::too_many_arguments)]
    fn kv(
        &mut self,
        name: &str,
        requests: u32,
        block: u64,
        per_request: u32,
        prefill: u32,
        arrive_every: u32,
        tick_ns: u64,
    ) -> Result<(), WorkloadError> {
        // (request, blocks it holds) for the requests arrived and not finished, by arrival.
        let mut live: Vec<(u32, u32)> = Vec::new();
        let mut arrived = 0u32;
        let mut finished = 0u32;
        let mut tick = 0u64;
        let block_name = |r: u32, b: u32| format!("{name}.r{r}[{b}]");
        // Fast-forward (`forward`): at each arrival, the requests live by how long ago they
        // arrived and the blocks they hold, with the counters; the same two arrivals running
        // is a steady period, each later one the same walk with every request moved on by one.
        let prefix = format!("{name}.r");
        let mut steady = (self.names.fast_forward && self.namespace_free(&prefix, 0))
            .then_some(None::<(Vec<(u32, u32)>, super::forward::Counters)>);
        // Requests past this index have a block name longer than a name may be.
        let fixed = name.chars().count() + 4 + per_request.saturating_sub(1).to_string().len();
        let last_named = super::forward::largest_index(fixed);
        while finished < requests {
            if let Some(seen) = steady.as_mut()
                && arrived < requests
                && tick % u64::from(arrive_every) == 0
            {
                let now_live: Vec<(u32, u32)> =
                    live.iter().map(|&(r, h)| (arrived - r, h)).collect();
                let now = self.counters();
                match seen.take() {
                    Some((before, from)) if before == now_live => {
                        // Arrivals stay ahead (the last is walked) and names stay in length.
                        let most = u64::from(requests - arrived - 1).min(
                            last_named
                                .saturating_add(1)
                                .saturating_sub(u64::from(arrived)),
                        );
                        let k = self.periods_within_bounds(&from, &now, most);
                        self.count_periods(&from, &now, k);
                        let k32 = k as u32;
                        for (r, h) in &mut live {
                            for b in 0..*h {
                                if let Some(l) = self.names.live.remove(&block_name(*r, b)) {
                                    self.names.live.insert(block_name(*r + k32, b), l);
                                }
                            }
                            *r += k32;
                        }
                        arrived += k32;
                        finished += k32;
                        tick += k * u64::from(arrive_every);
                        steady = None;
                    }
                    _ => *seen = Some((now_live, now)),
                }
            }
            let mut still = Vec::with_capacity(live.len() + 1);
            for (r, h) in std::mem::take(&mut live) {
                if h >= per_request {
                    for b in 0..h {
                        self.push(Action::Free {
                            name: block_name(r, b),
                        })?;
                    }
                    finished += 1;
                } else {
                    self.push(Action::Allocate {
                        name: block_name(r, h),
                        bytes: block,
                        via: ViaSpec::Allocator,
                        stream: "main".into(),
                    })?;
                    still.push((r, h + 1));
                }
            }
            live = still;
            if arrived < requests && tick % u64::from(arrive_every) == 0 {
                let r = arrived;
                for b in 0..prefill {
                    self.push(Action::Allocate {
                        name: block_name(r, b),
                        bytes: block,
                        via: ViaSpec::Allocator,
                        stream: "main".into(),
                    })?;
                }
                live.push((r, prefill));
                arrived += 1;
            }
            if finished < requests && tick_ns > 0 {
                self.push(Action::Sleep {
                    duration_ns: tick_ns,
                })?;
            }
            tick += 1;
            if live.is_empty() && tick_ns == 0 {
                tick = tick.next_multiple_of(u64::from(arrive_every));
            }
        }
        Ok(())
    }
}
