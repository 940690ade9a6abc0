//! PyTorch memory snapshots: `torch.cuda.memory._dump_snapshot()` pickles, or the same dict
//! as JSON, read into a `Snapshot`; its trace turned into allocator requests that headroom's
//! replay engine runs (`requests`); and the run folder `headroom import torch` writes.
//!
//! Checked against PyTorch's source: `torch/cuda/memory.py` (`_snapshot`, `_dump_snapshot`,
//! `_record_memory_history`), `torch/csrc/cuda/Module.cpp` (`THCPModule_memorySnapshot`),
//! `torch/csrc/cuda/memory_snapshot.cpp` and `c10/cuda/CUDACachingAllocator.cpp`
//! (`record_trace` and its callers); the commits read are listed in docs/oom.md.

mod columns;
pub mod device;
mod fast_entry;
pub mod folder;
pub mod frames;
mod from_json;
mod from_pickle;
pub mod live;
pub mod model;
mod prologue;
pub mod requests;
pub mod settings;
mod span;

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};

pub use model::{Action, DeviceTrace, Entry, Snapshot};

/// What a file looks like from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A pickle (protocol 2 or later starts with `PROTO`, 0x80).
    Pickle,
    /// JSON (an object).
    Json,
    /// Something else (a CSV log, say).
    Other,
}

/// Tells a snapshot from other files by content: a pickle starts with 0x80, JSON with `{`.
pub fn sniff(path: &Path) -> anyhow::Result<Kind> {
    let mut head = [0u8; 64];
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut n = 0;
    while n < head.len() {
        let got = f
            .read(&mut head[n..])
            .with_context(|| format!("cannot read {}", path.display()))?;
        if got == 0 {
            break;
        }
        n += got;
    }
    let head = &head[..n];
    let first = head
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace() && *b != 0xef && *b != 0xbb && *b != 0xbf);
    Ok(match (head.first(), first) {
        (Some(0x80), _) => Kind::Pickle,
        (_, Some(b'{')) => Kind::Json,
        _ => Kind::Other,
    })
}

/// The most devices a snapshot may hold traces or segments for (one process sees at most a
/// node's GPUs; each device becomes a run folder).
pub const MAX_DEVICES: usize = 64;

/// The most trace entries a snapshot may hold: 100,000,000 entries take about 1.7 GB in
/// headroom's columns (PyTorch keeps 100,000 by default, `max_entries`).
pub const MAX_ENTRIES: usize = 100_000_000;

/// Reads a snapshot file, pickle or JSON, told apart by content.
pub fn read(path: &Path) -> anyhow::Result<Snapshot> {
    let source = path.display().to_string();
    bounded(match sniff(path)? {
        Kind::Pickle => from_pickle::read(path, &source),
        Kind::Json => from_json::read(path, &source),
        Kind::Other => bail!(
            "{source}: not a PyTorch memory snapshot: it is neither a pickle (first byte 0x80) nor JSON (first character `{{`)"
        ),
    }?)
}

/// Reads a snapshot pickle held in memory (`source` names it in messages).
pub fn read_pickle_bytes(bytes: &[u8], source: &str) -> anyhow::Result<Snapshot> {
    bounded(from_pickle::read_bytes(bytes, source)?)
}

/// Reads a JSON snapshot from memory.
pub fn read_json_bytes(bytes: &[u8], source: &str) -> anyhow::Result<Snapshot> {
    bounded(from_json::read_from(bytes, source)?)
}

/// A snapshot within `MAX_DEVICES` (entries are bounded as they are read).
fn bounded(snap: Snapshot) -> anyhow::Result<Snapshot> {
    let mut devices: Vec<i64> = snap.segments.iter().map(|s| s.device).collect();
    devices.sort_unstable();
    devices.dedup();
    let n = snap.traces.len().max(devices.len());
    if n > MAX_DEVICES {
        bail!(
            "{}: the snapshot holds {} device traces and segments of {} devices; headroom reads at most {MAX_DEVICES} devices",
            snap.source,
            snap.traces.len(),
            devices.len()
        );
    }
    Ok(snap)
}
