//! `headroom replay SNAPSHOT`: a PyTorch memory snapshot's trace against an allocator on a
//! device, how many of PyTorch's segment decisions the caching model made again, and what
//! would have fit (`--find-capacity`, `--try-settings`).

use serde::Serialize;

use crate::alloc::AllocatorSpec;
use crate::alloc::caching::CachingConfig;
use crate::alloc::replay::recorded::Unobserved;
use crate::alloc::replay::whatif::{self, CapacitySearch, SettingsTrial};
use crate::alloc::replay::{RecordedOptions, ReplayReport, RequestSource, replay_recorded};
use crate::cli::{DeviceArgs, ReplayArgs};
use crate::device::PoolConfig;
use crate::device::select;
use crate::device::sim::SimDevice;
use crate::import::torch::requests::TorchRequests;
use crate::import::torch::{self, DeviceTrace, Snapshot, device, settings};

/// One device's answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct DeviceAnswer {
    device: u32,
    replay: ReplayReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    find_capacity: Option<CapacitySearch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    try_settings: Option<Vec<SettingsTrial>>,
}

pub fn replay(dev: &DeviceArgs, args: &ReplayArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(
        !args.keep_going && !args.pace,
        "--keep-going and --pace apply to CSV logs, not to a PyTorch snapshot"
    );
    let snap = torch::read(&args.log)?;
    let traced = snap.traced_devices();
    let traces: Vec<DeviceTrace> = match args.snapshot_device {
        Some(_) if traced.is_empty() => Vec::new(),
        Some(d) => vec![
            traced
                .iter()
                .copied()
                .find(|t| t.device == d)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: device {d} has no trace; devices with one: {}",
                        snap.source,
                        traced
                            .iter()
                            .map(|t| t.device.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?,
        ],
        None => traced,
    };
    // A snapshot without history (`torch.cuda.memory._snapshot()` with recording off): its
    // final segments, recreated on the card, answer whether that state fits.
    let traces = if traces.is_empty() && snap.traces.iter().all(|t| t.is_empty()) {
        let mut devices: Vec<u32> = snap
            .segments
            .iter()
            .filter_map(|s| u32::try_from(s.device).ok())
            .filter(|d| args.snapshot_device.is_none_or(|want| want == *d))
            .collect();
        devices.sort_unstable();
        devices.dedup();
        anyhow::ensure!(
            !devices.is_empty(),
            "{}: the snapshot has no trace and no segments{}: nothing to replay",
            snap.source,
            args.snapshot_device
                .map(|d| format!(" on device {d}"))
                .unwrap_or_default()
        );
        devices
            .into_iter()
            .map(|device| DeviceTrace {
                device,
                start: 0,
                end: 0,
            })
            .collect()
    } else {
        traces
    };
    anyhow::ensure!(
        !traces.is_empty(),
        "{}: the snapshot's traces are empty: nothing to replay",
        snap.source
    );
    let recorded = settings::recorded(&snap);
    let (spec, overridden) = match (args.allocator.as_str(), &args.settings) {
        ("caching", Some(s)) => (AllocatorSpec::Caching(CachingConfig::parse(s)?), true),
        ("caching", None) => (AllocatorSpec::Caching(recorded.config.clone()), false),
        (kind, Some(_)) => anyhow::bail!("--settings applies to the caching allocator, not {kind}"),
        ("pool", None) => (AllocatorSpec::Pool(PoolConfig::default()), true),
        _ => (AllocatorSpec::Direct, true),
    };
    let caching = matches!(spec, AllocatorSpec::Caching(_));
    if args.try_settings && !caching {
        anyhow::bail!("--try-settings varies the caching allocator's settings; drop --allocator");
    }
    let mut answers = Vec::new();
    for t in traces {
        answers.push(one(&snap, t, dev, args, &spec, overridden, &recorded)?);
    }
    // `--find-capacity` asks for a size, not whether this card holds it: answered (a capacity
    // found for every device) is 0, even where the card given is too small.
    let fits = if args.find_capacity {
        answers.iter().all(|a| {
            a.find_capacity
                .as_ref()
                .is_some_and(|c| c.fits_at_bytes.is_some())
        })
    } else {
        answers.iter().all(|a| a.replay.fits)
    };
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&answers)?)?;
    } else {
        for a in &answers {
            crate::out!("{}", a.replay)?;
            if let Some(c) = &a.find_capacity {
                crate::out!("{c}")?;
            }
            if let Some(rows) = &a.try_settings {
                crate::out!("{}", whatif::settings_table(rows, &a.replay.device))?;
            }
        }
    }
    Ok(if fits { 0 } else { 1 })
}

fn one(
    snap: &Snapshot,
    t: DeviceTrace,
    dev: &DeviceArgs,
    args: &ReplayArgs,
    spec: &AllocatorSpec,
    overridden: bool,
    recorded: &settings::Settings,
) -> anyhow::Result<DeviceAnswer> {
    let mut source = TorchRequests::new(snap, t);
    let rdev = device::choose(
        snap,
        t,
        source.pre_trace_segment_bytes,
        dev.profile.as_deref(),
    )?;
    let on_gpu = select::replays_on_gpu(dev.request());
    let mut opened: Box<dyn crate::device::Device> = if on_gpu {
        select::open(
            select::Request {
                profile: None,
                ..dev.request()
            },
            dev.one_gpu("replay")?,
        )?
        .device
    } else {
        Box::new(SimDevice::open(rdev.profile.clone(), t.device))
    };
    let mut alloc = spec.build(opened.as_mut())?;
    let caching = matches!(spec, AllocatorSpec::Caching(_));
    let result = replay_recorded(
        &mut source,
        alloc.as_mut(),
        &spec.to_string(),
        opened.as_mut(),
        RecordedOptions {
            keep_going: false,
            compare: caching,
        },
        &mut Unobserved,
    );
    let released = alloc.release_all(opened.as_mut());
    let mut report = result?;
    released?;
    if !on_gpu {
        report.notes.push(rdev.note.clone());
    }
    if overridden && caching {
        report.notes.push(
            "replayed with settings other than the recording's: PyTorch's decisions are not expected to be made again".into(),
        );
    } else if caching {
        report.notes.extend(recorded.notes.iter().cloned());
    }
    report.notes.extend(source.notes.iter().cloned());
    report.notes.extend(source.anomaly_note());
    if t.is_empty() {
        report.notes.push(format!(
            "the snapshot has no trace: its {} final segments ({} bytes) and their live blocks were placed on the device, with the recorded allocator settings",
            source.pre_trace_segments, source.pre_trace_segment_bytes
        ));
    } else if source.pre_trace_segments > 0 {
        report.notes.push(format!(
            "the trace began with {} segments ({} bytes) already held: recreated before replaying",
            source.pre_trace_segments, source.pre_trace_segment_bytes
        ));
    }
    if source.skipped.releases_before_alloc > 0 {
        report.notes.push(format!(
            "{} releases of cached segments right before an allocation were replayed as empty_cache()",
            source.skipped.releases_before_alloc
        ));
    }
    let needs_sim = args.find_capacity || args.try_settings;
    anyhow::ensure!(
        !needs_sim || !on_gpu,
        "--find-capacity and --try-settings replay on simulated devices; drop --backend cuda"
    );
    let mut make = || Box::new(TorchRequests::new(snap, t)) as Box<dyn RequestSource + '_>;
    let find_capacity = if args.find_capacity {
        Some(whatif::find_capacity(&mut make, spec, &rdev.profile)?)
    } else {
        None
    };
    let try_settings = if args.try_settings {
        let AllocatorSpec::Caching(base) = spec else {
            unreachable!("checked above")
        };
        let label = if overridden {
            "as given"
        } else {
            "as recorded"
        };
        let grid = whatif::settings_grid(base, label);
        Some(whatif::try_settings(&mut make, &grid, &rdev.profile)?)
    } else {
        None
    };
    Ok(DeviceAnswer {
        device: t.device,
        replay: report,
        find_capacity,
        try_settings,
    })
}
