//! Importing and replaying a PyTorch memory snapshot of 10,000,000 trace entries.
//!
//! Target: reading the pickle and replaying its trace through the caching model on the
//! simulated device in under 10 s, under 1 GB of memory (`torch/10000000 entries`, time per
//! import + replay; the peak resident memory is printed at the end). Measured on the 2-core
//! development machine, shared with other builds: 8.66 s (7.51–9.93 s), 529 MiB.
//!
//! The snapshot (about 2 GB: 16 frames per entry, keys and frames shared through the memo as
//! PyTorch's pickles share them) is written once to `target/bench-torch-10M.pickle` and
//! reused. `HEADROOM_BENCH_ENTRIES` sets another size.

use std::hint::black_box;
use std::io::BufWriter;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use headroom::alloc::AllocatorSpec;
use headroom::alloc::caching::CachingConfig;
use headroom::alloc::replay::recorded::Unobserved;
use headroom::alloc::replay::{RecordedOptions, replay_recorded};
use headroom::device::profile::SimProfile;
use headroom::device::sim::SimDevice;
use headroom::import::torch::{self, requests::TorchRequests};

#[path = "../tests/common/snapshot_writer.rs"]
mod snapshot_writer;

fn entries() -> usize {
    // `cargo test --all-targets` runs benches once, without `--bench`: keep that quick.
    let default = if std::env::args().any(|a| a == "--bench") {
        10_000_000
    } else {
        10_000
    };
    std::env::var("HEADROOM_BENCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn snapshot_file(n: usize) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let path = dir.join(format!("bench-torch-{n}.pickle"));
    if !path.exists() {
        let tmp = path.with_extension("tmp");
        let f = std::fs::File::create(&tmp).expect("create the bench snapshot");
        let w = snapshot_writer::write_snapshot(
            BufWriter::with_capacity(1 << 20, f),
            snapshot_writer::synth_trace(n),
            16,
        )
        .expect("write the bench snapshot");
        drop(w);
        std::fs::rename(&tmp, &path).expect("rename the bench snapshot");
    }
    path
}

/// Reads the snapshot and replays device 0; returns the requests replayed.
fn import_and_replay(path: &std::path::Path) -> u64 {
    let snap = torch::read(path).expect("read");
    let trace = snap.traced_devices()[0];
    let mut dev = SimDevice::open(SimProfile::resolve("h200").unwrap(), 0);
    let spec = AllocatorSpec::Caching(CachingConfig::default());
    let mut alloc = spec.build(&mut dev).unwrap();
    let mut source = TorchRequests::new(&snap, trace);
    let r = replay_recorded(
        &mut source,
        alloc.as_mut(),
        "caching",
        &mut dev,
        RecordedOptions {
            keep_going: false,
            compare: true,
        },
        &mut Unobserved,
    )
    .expect("replay");
    r.events
}

/// Peak resident memory of this process (Linux), in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn bench(c: &mut Criterion) {
    let n = entries();
    let path = snapshot_file(n);
    let mut g = c.benchmark_group("torch");
    g.sample_size(10);
    g.measurement_time(std::time::Duration::from_secs(60));
    g.bench_function(format!("{n} entries"), |b| {
        b.iter(|| black_box(import_and_replay(&path)))
    });
    g.finish();
    if let Some(rss) = peak_rss_bytes() {
        eprintln!(
            "torch import + replay of {n} entries ({} bytes of pickle): peak resident memory {:.0} MiB",
            std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
            rss as f64 / (1 << 20) as f64
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
