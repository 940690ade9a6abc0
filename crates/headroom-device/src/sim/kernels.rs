//! The simulated driver's kernel launches: each queues its modeled time on its stream (or
//! becomes a node of the graph its stream captures), and loading headroom's modules takes
//! their memory before the idle reading.

use crate::prelude::*;
use crate::{DevPtr, DevResult, DeviceError, Kernel, KernelOutcome, StreamId};

use super::SimDevice;

impl Kernels for SimDevice {
    fn launch(&mut self, kernel: Kernel, stream: StreamId) -> DevResult<KernelOutcome> {
        let si = self.stream_index(stream)?;
        if self.graphs.is_capturing(stream) {
            self.sim_graph_capture_kernel(kernel, stream)?;
            return Ok(KernelOutcome::default());
        }
        let limit_before_bytes = self.stack_per_thread_bytes;
        let mismatch = self.apply_kernel(&kernel)?;
        let gpu_ns = self.enqueue(si, self.kernel_ns(&kernel));
        if matches!(kernel, Kernel::Verify { .. }) {
            // The mismatch count is read back: the host waits for the kernel.
            self.host_ns = self.host_ns.max(self.streams[si]);
        }
        let stack = match kernel {
            Kernel::Stack { frame_bytes } => Some(crate::StackChange {
                local_bytes_per_thread: crate::kernels::stack_function(frame_bytes)?
                    .frame_bytes()
                    .unwrap_or(frame_bytes) as u64,
                limit_before_bytes,
                limit_after_bytes: self.stack_per_thread_bytes,
            }),
            _ => None,
        };
        Ok(KernelOutcome {
            gpu_ns: Some(gpu_ns),
            mismatch,
            stack,
        })
    }

    fn timed_launch(&mut self, kernel: Kernel, stream: StreamId, repeats: u32) -> DevResult<u64> {
        let si = self.stream_index(stream)?;
        self.refuse_while_capturing("a timed launch", Some(stream))?;
        let mut total = 0;
        for _ in 0..repeats {
            self.apply_kernel(&kernel)?;
            total = self
                .enqueue(si, self.kernel_ns(&kernel))
                .saturating_add(total);
        }
        self.host_ns = self.host_ns.max(self.streams[si]);
        Ok(total)
    }

    fn load_kernels(&mut self, modules: &[crate::kernels::Module]) -> DevResult<u32> {
        use crate::kernels::Module;
        let mut wanted = modules
            .iter()
            .copied()
            .filter(|m| !self.modules_loaded[m.index()])
            .collect::<Vec<_>>();
        wanted.sort_by_key(|m| m.index());
        wanted.dedup();
        // `verify`'s result buffer, a small allocation, opens a shared page.
        let buffer = if wanted.contains(&Module::Verify) {
            self.profile.memory.page_bytes.0
        } else {
            0
        };
        let need = (wanted.len() as u64)
            .saturating_mul(self.profile.kernels.module_bytes.0)
            .saturating_add(buffer);
        if need > self.free_at(self.host_ns) {
            return Err(DeviceError::OutOfMemory {
                requested_bytes: need,
            });
        }
        for m in &wanted {
            self.modules_loaded[m.index()] = true;
        }
        self.kernel_bytes += need;
        Ok(wanted.len() as u32)
    }

    fn write_word(&mut self, addr: DevPtr, value: u32, stream: StreamId) -> DevResult<()> {
        let si = self.stream_index(stream)?;
        self.refuse_while_capturing("a word written from the host", Some(stream))?;
        self.check_range("write_word", addr, 4)?;
        self.advance(self.profile.latency.launch.0);
        // The copy lands when the stream reaches it, and the host waits for that.
        self.host_ns = self.host_ns.max(self.streams[si]);
        self.streams[si] = self.host_ns;
        self.content.write_word(addr, value);
        Ok(())
    }
}
