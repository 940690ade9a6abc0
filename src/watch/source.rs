//! Where a watch's readings come from: NVML by default (memory info and the process list; no
//! CUDA context, so watching takes no device memory), headroom's own CUDA context for
//! `cuMemGetInfo` when asked (`--cuda-info`, whose cost is measured), or a usage script on the
//! simulated device (`--sim-script`). Device memory is read through the device crate's
//! reading capability (`Reader`), as the run's sampler reads it.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};

use crate::device::driver_detail::with_driver_detail;
use crate::device::nvml::{NvmlDevice, NvmlReader};
use crate::device::profile::{DEFAULT_PROFILE, SimProfile};
use crate::device::reading::{RawReading, Reader};
use crate::device::select::{self, Backend};
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
) -> anyhow::Result<Opened> {
    let index = dev.one_gpu("watch")?;
    if let Some(path) = sim_script {
        if dev.backend == Backend::Cuda {
            bail!(
                "--sim-script replays a usage timeline on the simulated device; it cannot be used with --backend cuda"
            );
        }
        if cuda_info {
            bail!(
                "--cuda-info reads cuMemGetInfo from a real driver; it cannot be used with --sim-script"
            );
        }
        if dev.require_gpu {
            bail!(
                "--require-gpu: --sim-script replays a usage timeline on the simulated device, not a GPU"
            );
        }
        let profile = SimProfile::resolve(dev.profile.as_deref().unwrap_or(DEFAULT_PROFILE))?;
        let script = UsageScript::load(path)?;
        let info = DeviceInfo {
            backend: BackendKind::Sim,
            profile: Some(profile.name.clone()),
            index,
            name: profile.gpu_name.clone(),
            compute_capability: profile.compute_capability.clone(),
            total_bytes: profile.memory.total_bytes.0,
            driver_version: profile.driver_version.clone(),
            multiprocessors: profile.multiprocessors,
            uuid: None,
            capabilities: profile.capabilities,
            mig: None,
        };
        let job =
            SimJob::new(profile, script, origin).with_context(|| format!("{}", path.display()))?;
        return Ok(Opened {
            info,
            origin: Origin::Sim(Box::new(job)),
        });
    }
    if dev.backend == Backend::Sim || dev.profile.is_some() {
        bail!(
            "a simulated device cannot see another process's memory: give --sim-script FILE (what the job holds over time) to watch on the simulator"
        );
    }
    // Watching a process needs the real driver whatever --backend says: it decides as cuda.
    let gpu = select::Request {
        backend: Backend::Cuda,
        profile: None,
        require_gpu: true,
    };
    let select::Choice::Cuda { count } = select::choose(gpu).map_err(|e| {
        anyhow!(
            "{}; headroom watch reads the GPU through NVML, which comes with the driver (without one, --sim-script FILE replays a usage timeline on the simulated device)",
            with_driver_detail(&e.to_string())
        )
    })?
    else {
        bail!("headroom watch needs the real driver")
    };
    if index >= count {
        bail!("there is no CUDA device {}: the driver sees {count}", index);
    }
    // cuInit and the device's facts only: no context, no device memory.
    let facts = select::device_facts(index)
        .with_context(|| format!("cannot read CUDA device {}", index))?;
    let nvml = NvmlDevice::try_open(&facts.uuid).map_err(|e| {
        anyhow!(
            "NVML is not available for GPU {} ({}): {e}; headroom watch reads device memory and the process list through NVML",
            index,
            facts.uuid
        )
    })?;
    let mig = facts.mig(Some(&nvml));
    let mut info = DeviceInfo {
        backend: BackendKind::Cuda,
        profile: None,
        index,
        name: facts.name,
        compute_capability: facts.compute_capability,
        total_bytes: facts.total_bytes,
        driver_version: nvml
            .driver_version()
            .map_or_else(select::cuda_driver_version, |v| {
                format!("{v} (CUDA {})", select::cuda_driver_version())
            }),
        multiprocessors: facts.multiprocessors,
        mig,
        uuid: Some(facts.uuid),
        capabilities: select::device_capabilities(index)
            .with_context(|| format!("cannot read CUDA device {index}'s attributes"))?,
    };
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
