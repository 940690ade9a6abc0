//! Kernel steps: `touch`, `fill`, `verify`, `corrupt`, `copy`, `triad`, `spin` and `stack`,
//! each one launch of headroom's kernels on the step's stream.

use crate::device::{Kernel, KernelOutcome, StreamId};
use crate::run::actions::{Done, Failure, Target};
use crate::units::Bytes;
use crate::workload::Action;

fn launch(t: &mut Target, kernel: Kernel, stream: StreamId) -> Result<KernelOutcome, Failure> {
    t.dev.launch(kernel, stream).map_err(|e| {
        Failure::from_driver(e, stream, format!("driver ({} launch)", kernel.name()), 0)
    })
}

/// A launch over `bytes` whose host-side time is the step's latency.
fn timed(t: &mut Target, kernel: Kernel, bytes: u64, stream: StreamId) -> Result<Done, Failure> {
    let t0 = t.dev.now_ns();
    launch(t, kernel, stream)?;
    Ok(Done {
        requested_bytes: Some(bytes),
        ..Done::timed(t.dev.now_ns() - t0)
    })
}

pub(super) fn act(t: &mut Target, action: &Action, stream: StreamId) -> Result<Done, Failure> {
    match action {
        Action::Touch {
            name, stride_bytes, ..
        } => {
            let (ptr, bytes) = t.lookup(name)?;
            let stride_bytes = *stride_bytes;
            timed(
                t,
                Kernel::Touch {
                    ptr,
                    bytes,
                    stride_bytes,
                },
                bytes,
                stream,
            )
        }
        Action::Fill { name, seed, .. } => {
            let (ptr, bytes) = t.lookup(name)?;
            let seed = *seed;
            timed(t, Kernel::Fill { ptr, bytes, seed }, bytes, stream)
        }
        Action::Verify { name, seed, .. } => {
            let (ptr, bytes) = t.lookup(name)?;
            let t0 = t.dev.now_ns();
            let out = launch(
                t,
                Kernel::Verify {
                    ptr,
                    bytes,
                    seed: *seed,
                },
                stream,
            )?;
            let detail = match out.mismatch {
                None => "0 mismatches".to_string(),
                Some(m) => crate::report::summary::mismatch_line(&m, Some(ptr)),
            };
            Ok(Done {
                requested_bytes: Some(bytes),
                latency_ns: t.dev.now_ns() - t0,
                detail,
                mismatch: out.mismatch,
                ..Done::default()
            })
        }
        Action::Corrupt {
            name,
            offset_bytes,
            value,
            ..
        } => {
            let (ptr, _) = t.lookup(name)?;
            t.dev.write_word(ptr + offset_bytes, *value, stream)?;
            Ok(Done {
                detail: format!("{:#x} = {value:#010x}", ptr + offset_bytes),
                ..Done::default()
            })
        }
        Action::Copy { src, dst, .. } => {
            let (src, bytes) = t.lookup(src)?;
            let (dst, _) = t.lookup(dst)?;
            timed(t, Kernel::Copy { dst, src, bytes }, bytes, stream)
        }
        Action::Triad {
            a, b, c, scalar, ..
        } => {
            let (a, bytes) = t.lookup(a)?;
            let (b, _) = t.lookup(b)?;
            let (c, _) = t.lookup(c)?;
            let scalar = *scalar;
            timed(
                t,
                Kernel::Triad {
                    a,
                    b,
                    c,
                    bytes,
                    scalar,
                },
                bytes,
                stream,
            )
        }
        Action::Spin { duration_ns, .. } => {
            launch(
                t,
                Kernel::Spin {
                    duration_ns: *duration_ns,
                },
                stream,
            )?;
            Ok(Done::default())
        }
        Action::Stack { frame_bytes } => {
            let frame_bytes = u32::try_from(*frame_bytes)
                .map_err(|_| Failure::Error(format!("stack frame {frame_bytes} is too large")))?;
            let out = launch(t, Kernel::Stack { frame_bytes }, stream)?;
            let detail = out.stack.map_or_else(String::new, |s| {
                format!(
                    "per-thread stack limit {} -> {} (the kernel uses {} of local memory per thread)",
                    Bytes(s.limit_before_bytes),
                    Bytes(s.limit_after_bytes),
                    Bytes(s.local_bytes_per_thread)
                )
            });
            Ok(Done {
                detail,
                stack_raised: true,
                ..Done::default()
            })
        }
        other => Err(Failure::Error(format!(
            "internal: {} is not a kernel step",
            other.op()
        ))),
    }
}
