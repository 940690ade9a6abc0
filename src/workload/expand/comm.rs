//! The `comm` pattern: a communicator's buffers held outside any allocator, sized for this
//! rank, so "the allocator's views look fine, the device is full" shows on every GPU of a node.

use crate::workload::expand::{Action, Emitter};
use crate::workload::parse::WorkloadError;
use crate::workload::step::{CommTopology, Step, ViaSpec};

impl Emitter<'_, '_, '_> {
    /// Expands a `comm` step: `NAME[0]` = base (if any), then per channel, per peer: a send
    /// buffer and a receive buffer, all `cuMemAlloc`.
    pub(super) fn comm(&mut self, step: &Step) -> Result<(), WorkloadError> {
        let Step::Comm {
            name,
            topology,
            buffer,
            channels,
            rank_count,
            base,
        } = step
        else {
            unreachable!("{} is not comm", step.op());
        };
        let ranks = rank_count.unwrap_or(self.names.rank.count);
        if ranks == 0 || *channels == 0 || buffer.0 == 0 {
            return Err(self.err("comm needs rank_count, channels and buffer above zero"));
        }
        if self.names.rank.index >= ranks {
            return Err(self.err(format!(
                "this run is rank {} but the communicator has rank_count = {ranks}",
                self.names.rank.index
            )));
        }
        // Buffers per channel: one send and one receive per peer.
        let peers: u64 = match (topology, ranks) {
            (_, 1) => 0,
            (CommTopology::Ring, _) => 1,
            (CommTopology::AllToAll, n) => u64::from(n - 1),
        };
        self.multi = true;
        let mut k = 0u64;
        let mut alloc = |e: &mut Self, bytes: u64| {
            let a = Action::Allocate {
                name: format!("{name}[{k}]"),
                bytes,
                via: ViaSpec::Driver,
                stream: "main".into(),
            };
            k += 1;
            e.push(a)
        };
        if let Some(b) = base {
            let bytes = self.names.bytes(b);
            if bytes > 0 {
                alloc(self, bytes)?;
            }
        }
        // (Channels hold nothing without peers: not walked then, however many.)
        for _channel in 0..if peers == 0 { 0 } else { *channels } {
            for _peer in 0..peers {
                alloc(self, buffer.0)?; // send
                alloc(self, buffer.0)?; // receive
            }
        }
        if k == 0 {
            return Err(self.err(
                "comm on one rank with no base holds nothing; give rank_count ≥ 2 or a base",
            ));
        }
        Ok(())
    }
}
