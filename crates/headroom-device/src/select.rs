//! Choosing a backend: the real GPU when a driver and a device are there, the simulator when
//! asked for or when the machine has no GPU, and never the simulator in place of a driver that
//! is there but broken. Every command that opens or lists devices decides here, and reads
//! a GPU's facts without a context through here: the cuda backend itself stays inside the
//! crate.

use anyhow::{Context, bail};

use crate::cuda::{self, CudaDevice, NoGpu};
use crate::{Capabilities, DevResult, NvmlMemory};

pub use crate::cuda::DeviceFacts;
use crate::node_profile::NodeProfile;
use crate::prelude::*;
use crate::profile::DEFAULT_PROFILE;
use crate::sim::SimDevice;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// cuda when a driver and a GPU are present, sim on a machine without either; a driver
    /// that is present but fails is an error, not a reason to simulate.
    Auto,
    /// The real GPU through the NVIDIA driver.
    Cuda,
    /// The simulated device.
    Sim,
}

/// What the user asked for: the backend, a simulated profile, and whether only a real GPU will
/// do (`--require-gpu`).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub backend: Backend,
    pub profile: Option<&'a str>,
    pub require_gpu: bool,
}

impl<'a> Request<'a> {
    pub fn new(backend: Backend, profile: Option<&'a str>) -> Request<'a> {
        Request {
            backend,
            profile,
            require_gpu: false,
        }
    }
}

/// The backend a request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The simulator; `notice` says why when `--backend auto` found no GPU.
    Sim { notice: Option<String> },
    /// The real GPU: the driver sees `count` devices.
    Cuda { count: u32 },
}

/// Decides the backend of `req`, probing the driver when the request leaves it open. Errors
/// name the cause: `--require-gpu` or `--backend cuda` without a usable GPU, `--profile` with
/// `--backend cuda`, and (under auto) a driver that is present but fails.
pub fn choose(req: Request<'_>) -> anyhow::Result<Choice> {
    choose_with(req, cuda::probe)
}

fn choose_with(
    req: Request<'_>,
    probe: impl FnOnce() -> Result<u32, NoGpu>,
) -> anyhow::Result<Choice> {
    let simulated = match (req.backend, req.profile) {
        (Backend::Sim, _) => Some("--backend sim"),
        (Backend::Auto, Some(_)) => Some("--profile"),
        (Backend::Cuda, Some(_)) => {
            bail!("--profile selects a simulated device; it cannot be used with --backend cuda")
        }
        (_, None) => None,
    };
    if let Some(flag) = simulated {
        if req.require_gpu {
            bail!("--require-gpu: {flag} asks for the simulated device, not a GPU");
        }
        return Ok(Choice::Sim { notice: None });
    }
    match (probe(), req.backend) {
        (Ok(count), _) => Ok(Choice::Cuda { count }),
        (Err(e), Backend::Cuda) => bail!("{e}"),
        (Err(NoGpu::Absent(why)), _) if req.require_gpu => {
            bail!("{why}; --require-gpu: refusing to run on the simulated device")
        }
        (Err(NoGpu::Absent(why)), _) => Ok(Choice::Sim { notice: Some(why) }),
        (Err(NoGpu::Broken(why)), _) => bail!(
            "{why}; the driver is present, so headroom does not fall back to the simulator \
             (--backend sim runs there on purpose)"
        ),
    }
}

/// How `watch` reads a GPU another process uses: the simulated device with a scripted job
/// (`--sim-script`), or the real driver, whatever `--backend auto` would pick (a simulated
/// device cannot see another process's memory).
#[derive(Debug, Clone)]
pub enum WatchChoice {
    /// The simulated device of `profile`, described as `info`: a scripted job's card, without
    /// an identity of its own.
    Sim {
        profile: Box<crate::profile::SimProfile>,
        info: Box<crate::DeviceInfo>,
    },
    /// The real GPU: the driver sees `count` devices.
    Cuda { count: u32 },
}

/// What a watch asks of the device beside the request: a usage script to replay on the
/// simulator, `--cuda-info`'s own context.
#[derive(Debug, Clone, Copy)]
pub struct WatchMode {
    pub scripted: bool,
    pub cuda_info: bool,
}

/// Decides how `watch` reads device `index` for `req` and `mode`: every refusal an error
/// naming the flags, the driver's absence with what `watch` reads through it.
pub fn choose_watch(req: Request<'_>, index: u32, mode: WatchMode) -> anyhow::Result<WatchChoice> {
    if mode.scripted {
        if req.backend == Backend::Cuda {
            bail!(
                "--sim-script replays a usage timeline on the simulated device; it cannot be used with --backend cuda"
            );
        }
        if mode.cuda_info {
            bail!(
                "--cuda-info reads cuMemGetInfo from a real driver; it cannot be used with --sim-script"
            );
        }
        if req.require_gpu {
            bail!(
                "--require-gpu: --sim-script replays a usage timeline on the simulated device, not a GPU"
            );
        }
        let profile = crate::profile::SimProfile::resolve(req.profile.unwrap_or(DEFAULT_PROFILE))?;
        let info = Box::new(crate::DeviceInfo {
            backend: crate::BackendKind::Sim,
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
        });
        return Ok(WatchChoice::Sim {
            profile: Box::new(profile),
            info,
        });
    }
    if req.backend == Backend::Sim || req.profile.is_some() {
        bail!(
            "a simulated device cannot see another process's memory: give --sim-script FILE (what the job holds over time) to watch on the simulator"
        );
    }
    // Watching a process needs the real driver whatever --backend says: it decides as cuda.
    let Choice::Cuda { count } = choose(WATCH_GPU).map_err(|e| {
        anyhow::anyhow!(
            "{}; headroom watch reads the GPU through NVML, which comes with the driver (without one, --sim-script FILE replays a usage timeline on the simulated device)",
            crate::driver_detail::with_driver_detail(&e.to_string())
        )
    })?
    else {
        bail!("headroom watch needs the real driver")
    };
    if index >= count {
        bail!("there is no CUDA device {}: the driver sees {count}", index);
    }
    Ok(WatchChoice::Cuda { count })
}

/// The request a watch of the real driver makes (and opens `--cuda-info`'s context with).
pub const WATCH_GPU: Request<'static> = Request {
    backend: Backend::Cuda,
    profile: None,
    require_gpu: true,
};

/// Whether a recording is replayed on the real GPU: only when `--backend cuda` asks for it;
/// otherwise on the simulated device the recording describes.
pub fn replays_on_gpu(req: Request<'_>) -> bool {
    req.backend == Backend::Cuda
}

/// What the driver says of CUDA device `index` without a context (`cuInit` and the
/// device's attributes): no device memory is taken.
pub fn device_facts(index: u32) -> DevResult<DeviceFacts> {
    cuda::device_facts(index)
}

/// The driver features CUDA device `index` has, read from its attributes (no context).
pub fn device_capabilities(index: u32) -> DevResult<Capabilities> {
    cuda::device_capabilities(index)
}

/// The CUDA version the driver implements, as `12.4` (`unknown` when it cannot say).
pub fn cuda_driver_version() -> String {
    cuda::cuda_driver_version()
}

/// An opened device and what was learned on the way.
pub struct Opened {
    pub device: Box<dyn Device>,
    /// NVML's reading before the context was created (None without NVML).
    pub before_context: Option<NvmlMemory>,
    /// A line for the user, e.g. why the simulator was chosen.
    pub notice: Option<String>,
    /// How long creating the context took (modeled on sim).
    pub context_create_ns: u64,
}

/// `open`, with its notice (why the simulator was chosen) printed on stderr once.
pub fn open_noted(req: Request<'_>, index: u32) -> anyhow::Result<Opened> {
    let mut opened = open(req, index)?;
    if let Some(n) = opened.notice.take() {
        crate::notice::say(crate::notice::Notice::Note(&n));
    }
    Ok(opened)
}

/// Opens device `index` on the backend `choose` gives `req`. A profile (a built-in name or a
/// file, of one device or of a node) selects the simulated device.
pub fn open(req: Request<'_>, index: u32) -> anyhow::Result<Opened> {
    let count = match choose(req)? {
        Choice::Sim { notice } => {
            let name = req.profile.unwrap_or(DEFAULT_PROFILE);
            let p = NodeProfile::resolve(name)?.card(index)?;
            let notice =
                notice.map(|why| format!("{why}; using the simulated device (profile {})", p.name));
            let context_create_ns = p.latency.context_create.0;
            let dev = SimDevice::open(p, index);
            let before = dev.before_context();
            return Ok(Opened {
                device: Box::new(dev),
                before_context: Some(before),
                notice,
                context_create_ns,
            });
        }
        Choice::Cuda { count } => count,
    };
    if index >= count {
        let limited = std::env::var("CUDA_VISIBLE_DEVICES")
            .map(|v| format!(" (CUDA_VISIBLE_DEVICES={v} limits what it shows)"))
            .unwrap_or_default();
        // One device seen: on a GPU in MIG mode that is all a CUDA process ever sees.
        let mig = if count == 1 {
            "; on a GPU in MIG mode a CUDA process sees one instance: choose it with \
             CUDA_VISIBLE_DEVICES=MIG-…, or give --device all for one worker per instance"
        } else {
            ""
        };
        bail!("there is no CUDA device {index}: the driver sees {count}{limited}{mig}");
    }
    let (dev, before, context_create_ns) =
        CudaDevice::open(index).with_context(|| format!("cannot open CUDA device {index}"))?;
    Ok(Opened {
        device: Box::new(dev),
        before_context: before,
        notice: None,
        context_create_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(
        backend: Backend,
        profile: Option<&str>,
        require_gpu: bool,
        probed: Result<u32, NoGpu>,
    ) -> Result<Choice, String> {
        let req = Request {
            backend,
            profile,
            require_gpu,
        };
        choose_with(req, || probed).map_err(|e| e.to_string())
    }

    fn absent() -> Result<u32, NoGpu> {
        Err(NoGpu::Absent("no NVIDIA driver found".into()))
    }

    fn broken() -> Result<u32, NoGpu> {
        Err(NoGpu::Broken(
            "the NVIDIA driver did not initialize: cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"
                .into(),
        ))
    }

    #[test]
    fn auto_simulates_only_where_there_is_no_gpu() {
        assert_eq!(
            choice(Backend::Auto, None, false, absent()),
            Ok(Choice::Sim {
                notice: Some("no NVIDIA driver found".into())
            })
        );
        assert_eq!(
            choice(Backend::Auto, None, false, Ok(2)),
            Ok(Choice::Cuda { count: 2 })
        );
        let e = choice(Backend::Auto, None, false, broken()).unwrap_err();
        assert!(e.contains("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"), "{e}");
        assert!(e.contains("does not fall back to the simulator"), "{e}");
    }

    #[test]
    fn require_gpu_refuses_every_way_to_the_simulator() {
        let e = choice(Backend::Auto, None, true, absent()).unwrap_err();
        assert!(e.contains("no NVIDIA driver found; --require-gpu"), "{e}");
        let e = choice(Backend::Sim, None, true, Ok(1)).unwrap_err();
        assert!(e.contains("--require-gpu: --backend sim"), "{e}");
        let e = choice(Backend::Auto, Some("h200"), true, Ok(1)).unwrap_err();
        assert!(e.contains("--require-gpu: --profile"), "{e}");
        assert_eq!(
            choice(Backend::Auto, None, true, Ok(1)),
            Ok(Choice::Cuda { count: 1 })
        );
    }

    #[test]
    fn explicit_backends_never_probe_their_way_elsewhere() {
        assert_eq!(
            choice(Backend::Sim, None, false, broken()),
            Ok(Choice::Sim { notice: None })
        );
        assert_eq!(
            choice(Backend::Auto, Some("tiny-4g"), false, broken()),
            Ok(Choice::Sim { notice: None })
        );
        let e = choice(Backend::Cuda, None, false, absent()).unwrap_err();
        assert_eq!(e, "no NVIDIA driver found");
        let e = choice(Backend::Cuda, Some("h200"), false, Ok(1)).unwrap_err();
        assert!(e.contains("cannot be used with --backend cuda"), "{e}");
    }
}
