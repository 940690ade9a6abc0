//! `headroom import torch SNAPSHOT`.

use crate::alloc::caching::CachingConfig;
use crate::cli::{DeviceArgs, ImportArgs};
use crate::device::select;
use crate::import::torch::{self, folder};
use crate::units::Bytes;

/// One device's import, as `--json` prints it (all devices in one array).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct ImportedDevice<'a> {
    device: u32,
    /// The run folder written for the device.
    folder: String,
    /// Its summary.json.
    summary: &'a crate::report::summary::Summary,
}

pub fn import(dev: &DeviceArgs, args: &ImportArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(
        !select::replays_on_gpu(dev.request()),
        "import replays the snapshot on the simulated device; --backend cuda does not apply (use --profile to choose the card)"
    );
    anyhow::ensure!(
        args.snapshot.is_file(),
        "{}: no such file",
        args.snapshot.display()
    );
    let settings = args
        .settings
        .as_deref()
        .map(CachingConfig::parse)
        .transpose()?;
    let snap = torch::read(&args.snapshot)?;
    let opts = folder::ImportOptions {
        out: args.out.clone(),
        results_root: args.results.clone(),
        profile: dev.profile.clone(),
        settings,
        device_total: args.device_total,
    };
    let imported = folder::import(&snap, &opts)?;
    if args.json {
        let all: Vec<ImportedDevice> = imported
            .iter()
            .map(|i| ImportedDevice {
                device: i.device,
                folder: i.dir.display().to_string(),
                summary: &i.summary,
            })
            .collect();
        crate::outln!("{}", serde_json::to_string_pretty(&all)?)?;
        return Ok(0);
    }
    for i in &imported {
        let s = &i.summary;
        let peak = |v: crate::record::View| {
            s.peaks()
                .run
                .get(v.key())
                .map_or("-".to_string(), |p| Bytes(p.bytes).to_string())
        };
        let fidelity = s
            .import()
            .as_ref()
            .and_then(|x| x.fidelity.as_ref())
            .map_or("no trace".to_string(), |f| {
                format!("segments reproduced {}", f.summary())
            });
        crate::outln!(
            "device {}: {} — {} trace entries, {fidelity}; alloc_allocated peak {}, alloc_reserved peak {}; {} OOMs",
            i.device,
            i.dir.display(),
            s.import().as_ref().map_or(0, |x| x.trace_entries),
            peak(crate::record::View::AllocAllocated),
            peak(crate::record::View::AllocReserved),
            s.ooms().len()
        )?;
    }
    Ok(0)
}
