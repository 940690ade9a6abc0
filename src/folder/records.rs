//! What a folder's record needs beside `Record`'s two CSVs: `alloc-log.csv` (the allocator's
//! calls, or its header alone), and at the end the pollers' peaks as `summary.json` has them.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use crate::alloc::Allocator;
use crate::alloc::adaptors::logging::LoggingAdaptor;
use crate::folder::ALLOC_LOG;
use crate::record::View;
use crate::record::peaks::{PeakSet, Poller};
use crate::record::timeline::POLLERS;
use crate::report::summary::PolledPeaks;

/// `alloc`, every call logged to `alloc-log.csv` in `dir` (so `headroom replay` can try the
/// allocations against another allocator or other settings).
pub fn alloc_log(alloc: Box<dyn Allocator>, dir: &Path) -> anyhow::Result<LoggingAdaptor> {
    let path = dir.join(ALLOC_LOG);
    LoggingAdaptor::create(alloc, &path)
        .with_context(|| format!("cannot create {}", path.display()))
}

/// `alloc-log.csv` in `dir` with its header and no call: the log of a run that allocated
/// nothing (one recorded as skipped).
pub fn empty_alloc_log(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(ALLOC_LOG);
    std::fs::write(
        &path,
        format!("{}\n", crate::alloc::adaptors::LOG_HEADER.join(",")),
    )
    .with_context(|| format!("cannot write {}", path.display()))
}

/// A poller's peaks by view key, in bytes.
pub fn peak_bytes(peaks: &PeakSet) -> BTreeMap<String, u64> {
    View::ALL
        .iter()
        .filter_map(|v| peaks.get(*v).map(|p| (v.key().to_string(), p.bytes)))
        .collect()
}

/// What each of `POLLERS` would have reported up to `end_ns`, by poller name.
pub fn polled_peaks(pollers: &mut [Poller], end_ns: u64) -> BTreeMap<String, PolledPeaks> {
    let mut out = BTreeMap::new();
    for (poller, (name, period)) in pollers.iter_mut().zip(POLLERS) {
        let (peaks, ticks) = poller.finish(end_ns);
        out.insert(
            name.to_string(),
            PolledPeaks {
                period_ns: *period,
                ticks,
                peaks: peak_bytes(peaks),
            },
        );
    }
    out
}
