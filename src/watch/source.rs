//! Where a watch's readings come from: NVML by default (memory info and the process list; no
//! CUDA context, so watching takes no device memory), headroom's own CUDA context for
//! `cuMemGetInfo` when asked (`--cuda-info`, whose cost is measured), or a usage script on the
//! simulated device (`--sim-script`). Device memory is read through the device crate's
//! reading capability (`Reader`), as the run's sampler reads it.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};

use crate::device::nvml::{NvmlDevice, NvmlReader};
use crate::device::reading::{RawReading, Reader};
use crate::device::select;
use crate::device::{BackendKind, DeviceInfo, ProcessUsage};
use crate::device_args::DeviceArgs;
use crate::report::watch::ContextCost;
use crate::watch::script::{SimJob, UsageScript};

/// The processes on the device with their memory: slow, read at its own rate.
pub trait ProcessProbe: Sync {
    fn processes(&self) -> Result<Vec<ProcessUsage>, String>;
}

/// NVML through one device handle, looked up once.
pub struct NvmlProbe<'a> {
    device: NvmlReader<'a>,
}

impl<'a> NvmlProbe<'a> {
    pub fn new(nvml: &'a NvmlDevice) -> anyhow::Result<NvmlProbe<'a>> {
        let device = nvml
            .reader(Instant::now())
            .map_err(|e| anyhow!("NVML lost the device: {e}"))?;
        Ok(NvmlProbe { device })
    }
}

impl Reader for NvmlProbe<'_> {
    fn read(&self) -> Result<RawReading, String> {
        self.device.reading()
    }

    fn now_ns(&self) -> u64 {
        self.device.now_ns()
    }
}

impl ProcessProbe for NvmlProbe<'_> {
    fn processes(&self) -> Result<Vec<ProcessUsage>, String> {
        self.device.processes()
    }
}

/// What a watch reads from.
pub enum Origin {
    /// The driver's NVML (and, with `--cuda-info`, headroom's own context beside it).
    Nvml {
        nvml: Box<NvmlDevice>,
        cuda: Option<CudaInfo>,
    },
    /// The simulated device with a scripted job.
    Sim(Box<SimJob>),
}

/// headroom's own CUDA context, opened for `cuMemGetInfo` (`--cuda-info`).
pub struct CudaInfo {
    pub device: Box<dyn crate::device::Device>,
    pub cost: ContextCost,
    /// NVML's reading before the context existed.
    pub before: crate::device::NvmlMemory,
}

pub struct Opened {
    pub info: DeviceInfo,
    pub origin: Origin,
}

/// Opens what `watch` reads from, before any job starts. Every refusal is an error (exit 2).
pub fn open(
    dev: &DeviceArgs,
    sim_script: Option<&Path>,
    cuda_info: bool,
    origin: Instant,
    arm: &dyn Fn(&DeviceInfo),
) -> anyhow::Result<Opened> {
    let index = dev.one_gpu("watch")?;
    let mode = select::WatchMode {
        scripted: sim_script.is_some(),
        cuda_info,
    };
    let gpu = select::WATCH_GPU;
    match select::choose_watch(dev.request(), index, mode)? {
        select::WatchChoice::Sim { profile, info } => {
            let path = sim_script.expect("a scripted watch has its script");
            let script = UsageScript::load(path)?;
            let job = SimJob::new(*profile, script, origin)
                .with_context(|| format!("{}", path.display()))?;
            return Ok(Opened {
                info: *info,
                origin: Origin::Sim(Box::new(job)),
            });
        }
        select::WatchChoice::Cuda { .. } => {}
    }
    // Before the device's facts (whose UUID NVML is asked about): the device by its index alone.
    arm(&DeviceInfo {
        backend: BackendKind::Cuda,
        profile: None,
        index,
        name: "not read: the driver did not answer".into(),
        compute_capability: String::new(),
        total_bytes: 0,
        driver_version: String::new(),
        multiprocessors: 0,
        mig: None,
        uuid: None,
        capabilities: Default::default(),
    });
    // cuInit and the device's facts only: no context, no device memory.
    let facts = select::device_facts(index)
        .with_context(|| format!("cannot read CUDA device {}", index))?;
    // What is known before NVML's first call: the record a hung call leaves.
    let mut info = DeviceInfo {
        backend: BackendKind::Cuda,
        profile: None,
        index,
        name: facts.name.clone(),
        compute_capability: facts.compute_capability.clone(),
        total_bytes: facts.total_bytes,
        driver_version: select::cuda_driver_version(),
        multiprocessors: facts.multiprocessors,
        mig: facts.mig(None),
        uuid: Some(facts.uuid.clone()),
        capabilities: select::device_capabilities(index)
            .with_context(|| format!("cannot read CUDA device {index}'s attributes"))?,
    };
    arm(&info);
    let nvml = NvmlDevice::try_open(&facts.uuid).map_err(|e| {
        anyhow!(
            "NVML is not available for GPU {} ({}): {e}; headroom watch reads device memory and the process list through NVML",
            index,
            facts.uuid
        )
    })?;
    info.mig = facts.mig(Some(&nvml));
    if let Some(v) = nvml.driver_version() {
        info.driver_version = format!("{v} (CUDA {})", info.driver_version);
    }
    // On an exclusive-process GPU (usual on Slurm and HPC nodes) the driver allows one process
    // a context at a time: headroom's would be first and the job's own would fail.
    if cuda_info && facts.compute_mode == "exclusive_process" {
        bail!(
            "--cuda-info opens a CUDA context of headroom's own, but GPU {index} is in \
             exclusive-process compute mode: the job could then not create its own context. \
             Watch without --cuda-info (NVML needs no context)"
        );
    }
    let cuda = if cuda_info {
        let before = nvml
            .memory()
            .context("NVML's memory info failed before the context")?;
        let opened = select::open(gpu, index)?;
        let after = nvml
            .memory()
            .context("NVML's memory info failed after the context")?;
        info.total_bytes = opened.device.info().total_bytes;
        Some(CudaInfo {
            device: opened.device,
            cost: ContextCost {
                nvml_used_before_bytes: before.used_bytes,
                nvml_used_after_bytes: after.used_bytes,
                cost_bytes: after.used_bytes as i64 - before.used_bytes as i64,
                create_ns: opened.context_create_ns,
            },
            before,
        })
    } else {
        None
    };
    Ok(Opened {
        info,
        origin: Origin::Nvml {
            nvml: Box::new(nvml),
            cuda,
        },
    })
}
