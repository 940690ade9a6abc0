//! Stream-ordered bookkeeping: `synchronize`, `trim`, `empty_cache` and `record_stream`.

use crate::device::StreamId;
use crate::run::actions::{Done, Failure, Target};
use crate::units::Bytes;
use crate::workload::Action;

pub(super) fn act(t: &mut Target, action: &Action, stream: StreamId) -> Result<Done, Failure> {
    match action {
        Action::Synchronize { stream: which } => {
            let t0 = t.dev.now_ns();
            match which {
                Some(_) => t.dev.stream_synchronize(stream)?,
                None => t.dev.synchronize()?,
            }
            t.alloc.refresh(&mut *t.dev)?;
            Ok(Done::timed(t.dev.now_ns() - t0))
        }
        Action::Trim { keep_bytes } => {
            // A trim cannot release blocks whose frees are still queued: let them land.
            t.dev.synchronize()?;
            t.dev.pool_trim(*keep_bytes)?;
            t.alloc.refresh(&mut *t.dev)?;
            Ok(Done::default())
        }
        Action::EmptyCache => {
            let released = t.alloc.empty_cache(&mut *t.dev)?;
            Ok(Done {
                size_bytes: Some(released),
                detail: format!("released {}", Bytes(released)),
                ..Done::default()
            })
        }
        Action::RecordStream { name, .. } => {
            let (ptr, _) = t.lookup(name)?;
            t.alloc.record_stream(&mut *t.dev, ptr, stream)?;
            Ok(Done::default())
        }
        other => Err(Failure::Error(format!(
            "internal: {} is not a stream step",
            other.op()
        ))),
    }
}
