//! The thread sampler's side of a full channel: the readings it has no room for, folded.

use std::sync::mpsc::{SyncSender, TrySendError};

use crate::record::Reading;

/// Readings the channel had no room for, folded: the one with the least free memory and the
/// latest one. They go out, in time order, as soon as there is room.
#[derive(Default)]
pub(super) struct Backlog {
    lowest: Option<Reading>,
    latest: Option<Reading>,
}

/// The run's thread is gone.
pub(super) struct Disconnected;

impl Backlog {
    pub(super) fn offer(
        &mut self,
        tx: &SyncSender<Reading>,
        r: Reading,
    ) -> Result<(), Disconnected> {
        self.flush(tx)?;
        if self.lowest.is_none() {
            self.lowest = self.latest.take();
        }
        match self.lowest {
            None => match tx.try_send(r) {
                Ok(()) => {}
                Err(TrySendError::Full(r)) => self.lowest = Some(r),
                Err(TrySendError::Disconnected(_)) => return Err(Disconnected),
            },
            // A new lowest: the latest before it falls between two kept readings.
            Some(low) if r.device_free_bytes < low.device_free_bytes => {
                self.lowest = Some(r);
                self.latest = None;
            }
            Some(_) => self.latest = Some(r),
        }
        Ok(())
    }

    /// Sends what it can without blocking.
    fn flush(&mut self, tx: &SyncSender<Reading>) -> Result<(), Disconnected> {
        for slot in [&mut self.lowest, &mut self.latest] {
            let Some(r) = slot.take() else { continue };
            match tx.try_send(r) {
                Ok(()) => {}
                Err(TrySendError::Full(r)) => {
                    *slot = Some(r);
                    return Ok(());
                }
                Err(TrySendError::Disconnected(_)) => return Err(Disconnected),
            }
        }
        Ok(())
    }

    /// Sends everything, waiting for room (the run's thread drains while it stops us).
    pub(super) fn finish(self, tx: &SyncSender<Reading>) {
        for r in [self.lowest, self.latest].into_iter().flatten() {
            if tx.send(r).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;

    use super::*;
    use crate::record::{Source, ViewSet};

    fn free_reading(t_ns: u64, free: u64) -> Reading {
        Reading {
            t_ns,
            phase: 0,
            source: Source::Sampler,
            device_free_bytes: free,
            views: ViewSet::default(),
        }
    }

    #[test]
    fn a_full_backlog_keeps_the_lowest_and_the_latest_reading() {
        let (tx, rx) = sync_channel(2);
        let mut b = Backlog::default();
        for (t, free) in [(1, 9), (2, 8), (3, 5), (4, 2), (5, 7), (6, 6)] {
            assert!(b.offer(&tx, free_reading(t, free)).is_ok());
        }
        // The channel took the first two; of the rest, the lowest (t=4) and the latest (t=6).
        let got: Vec<(u64, u64)> = rx
            .try_iter()
            .map(|r| (r.t_ns, r.device_free_bytes))
            .collect();
        assert_eq!(got, vec![(1, 9), (2, 8)]);
        b.finish(&tx);
        let got: Vec<(u64, u64)> = rx
            .try_iter()
            .map(|r| (r.t_ns, r.device_free_bytes))
            .collect();
        assert_eq!(got, vec![(4, 2), (6, 6)]);
    }
}
