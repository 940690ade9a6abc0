//! `headroom replay LOG.csv` (or a PyTorch snapshot: `replay_torch`).

use crate::alloc::caching::CachingConfig;
use crate::alloc::replay::{BadRowPolicy, ReplayOptions, replay_file};
use crate::alloc::{AllocatorKind, AllocatorSpec};
use crate::cli::{DeviceArgs, ReplayArgs};
use crate::device::PoolConfig;
use crate::device::select;

pub fn replay(dev: &DeviceArgs, args: &ReplayArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(
        args.log.is_file(),
        "{}: no such log file",
        args.log.display()
    );
    if crate::import::torch::sniff(&args.log)? != crate::import::torch::Kind::Other {
        return super::replay_torch::replay(dev, args);
    }
    anyhow::ensure!(
        !args.find_capacity && !args.try_settings && args.snapshot_device.is_none(),
        "{}: --find-capacity, --try-settings and --snapshot-device apply to PyTorch snapshots; this is a CSV log",
        args.log.display()
    );
    let spec = match (args.allocator, &args.settings) {
        (AllocatorKind::Caching, s) => {
            AllocatorSpec::Caching(CachingConfig::parse(s.as_deref().unwrap_or(""))?)
        }
        (kind, Some(_)) => anyhow::bail!("--settings applies to the caching allocator, not {kind}"),
        (AllocatorKind::Pool, None) => AllocatorSpec::Pool(PoolConfig::default()),
        (AllocatorKind::Direct, None) => AllocatorSpec::Direct,
    };
    let mut opened = select::open_noted(dev.request(), dev.one_gpu("replay")?)?;
    let opts = ReplayOptions {
        on_bad_row: if args.keep_going {
            BadRowPolicy::Collect
        } else {
            BadRowPolicy::Stop
        },
        pace: args.pace,
    };
    let report = replay_file(&args.log, &spec, opened.device.as_mut(), &opts)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        crate::out!("{report}")?;
    }
    Ok(if report.fits { 0 } else { 1 })
}
