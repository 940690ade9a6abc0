//! Choosing a backend: the real GPU when a driver and a device are there, else the simulator.

use anyhow::{Context, bail};

use crate::device::NvmlMemory;
use crate::device::cuda::{self, CudaDevice};
use crate::device::node_profile::NodeProfile;
use crate::device::prelude::*;
use crate::device::profile::DEFAULT_PROFILE;
use crate::device::sim::SimDevice;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// cuda when a driver and a GPU are present, otherwise sim.
    Auto,
    /// The real GPU through the NVIDIA driver.
    Cuda,
    /// The simulated device.
    Sim,
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
pub fn open_noted(backend: Backend, index: u32, profile: Option<&str>) -> anyhow::Result<Opened> {
    let mut opened = open(backend, index, profile)?;
    if let Some(n) = opened.notice.take() {
        eprintln!("note: {n}");
    }
    Ok(opened)
}

/// Opens device `index` on the chosen backend. `profile` (a built-in name or a file, of one
/// device or of a node) selects the simulated device and implies `sim` under `auto`.
pub fn open(backend: Backend, index: u32, profile: Option<&str>) -> anyhow::Result<Opened> {
    let use_sim = match backend {
        Backend::Sim => true,
        Backend::Cuda => {
            if profile.is_some() {
                bail!(
                    "--profile selects a simulated device; it cannot be used with --backend cuda"
                );
            }
            false
        }
        Backend::Auto => profile.is_some() || cuda::probe().is_err(),
    };
    if use_sim {
        let name = profile.unwrap_or(DEFAULT_PROFILE);
        let p = NodeProfile::resolve(name)?.card(index)?;
        let notice = match (backend, profile) {
            (Backend::Auto, None) => Some(format!(
                "{}; using the simulated device (profile {})",
                cuda::probe().err().unwrap_or_default(),
                p.name
            )),
            _ => None,
        };
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
    let count = cuda::probe().map_err(anyhow::Error::msg)?;
    if index >= count {
        bail!("there is no CUDA device {index}: the driver sees {count}");
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
