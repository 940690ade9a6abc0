//! The GPUs of a node with a GPU in MIG mode: every MIG instance NVML lists, and every whole GPU
//! beside them, each known by its UUID and opened through `CUDA_VISIBLE_DEVICES=<UUID>`.
//!
//! A CUDA process sees one MIG instance (the one `CUDA_VISIBLE_DEVICES` names, else the first
//! one), so CUDA ordinals say nothing here and NVML's order is the node's: an instance's place in
//! that list is its `index`. NVML gives each instance's memory and process list (refused to
//! an unprivileged user: recorded as unavailable). Its CUDA facts — the visible total, SMs,
//! compute capability — come from the driver inside it: the device this process sees is read
//! here, every other one by a short `headroom devices --json --backend cuda` child started with
//! that UUID in `CUDA_VISIBLE_DEVICES`, all at once. When `CUDA_VISIBLE_DEVICES` is set, the
//! driver has already chosen: the node is the devices CUDA reports to this process, matched by
//! UUID.

use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};

use crate::device::mig::MigIdentity;
use crate::device::nvml::{self, NvmlGpu};
use crate::device::select::{self, DeviceFacts};
use crate::device::{NvmlMemory, ProcessUsage};
use crate::node::inventory::{GpuIdentity, split};

/// Set in a probe child's environment: it lists the one device it sees and starts no probes.
pub const PROBE_ENV: &str = "HEADROOM_MIG_PROBE";

/// Whether this process is a probe child (`PROBE_ENV`).
pub fn is_probe() -> bool {
    std::env::var_os(PROBE_ENV).is_some()
}

/// One device of the node before its CUDA facts are known.
struct Candidate {
    uuid: String,
    name: String,
    driver_version: Option<String>,
    memory: Option<NvmlMemory>,
    processes: Result<Vec<ProcessUsage>, String>,
    mig: Option<MigIdentity>,
}

/// The node's devices when a GPU is in MIG mode (`None` when none is, or NVML is missing, or
/// this is a probe child: the caller lists CUDA ordinals then). `count`: the CUDA devices this
/// process sees.
pub fn mig_node(count: u32) -> anyhow::Result<Option<Vec<GpuIdentity>>> {
    if is_probe() {
        return Ok(None);
    }
    let Some(gpus) = nvml::gpus() else {
        return Ok(None);
    };
    if !gpus.iter().any(|g| g.mig_enabled) {
        return Ok(None);
    }
    let seen: Vec<DeviceFacts> = (0..count)
        .map(select::device_facts)
        .collect::<Result<_, _>>()?;
    let mut candidates = candidates(&gpus);
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
        candidates.retain(|c| seen.iter().any(|f| f.uuid == c.uuid));
    }
    // Every probe starts before the first is waited for: each one initializes the driver.
    let sources: Vec<Source<'_>> = candidates
        .iter()
        .map(|c| match seen.iter().find(|f| f.uuid == c.uuid) {
            Some(f) => Source::Here(f),
            None => Source::Probe(spawn_probe(&c.uuid)),
        })
        .collect();
    let mut rows = Vec::new();
    for (i, (c, source)) in candidates.into_iter().zip(sources).enumerate() {
        let facts = match source {
            Source::Here(f) => Facts::of(f),
            Source::Probe(child) => read_probe(&c.uuid, child)?,
        };
        rows.push(row(i as u32, c, facts));
    }
    Ok(Some(rows))
}

/// Where a device's CUDA facts come from.
enum Source<'a> {
    /// This process sees it.
    Here(&'a DeviceFacts),
    /// A probe child, started.
    Probe(Result<Child, String>),
}

/// NVML's GPUs as the node's devices: each instance of a GPU in MIG mode, else the GPU.
fn candidates(gpus: &[NvmlGpu]) -> Vec<Candidate> {
    let mut out = Vec::new();
    for g in gpus {
        if !g.mig_enabled {
            out.push(Candidate {
                uuid: g.uuid.clone(),
                name: g.name.clone(),
                driver_version: g.driver_version.clone(),
                memory: g.memory,
                processes: g.processes.clone(),
                mig: None,
            });
            continue;
        }
        for inst in &g.instances {
            out.push(Candidate {
                uuid: inst.uuid.clone(),
                name: inst.name.clone(),
                driver_version: g.driver_version.clone(),
                memory: inst.memory,
                processes: inst.processes.clone(),
                mig: Some(inst.identity.clone()),
            });
        }
    }
    out
}

/// What the driver inside a device says about it.
struct Facts {
    total_bytes: u64,
    compute_capability: String,
    multiprocessors: u32,
    compute_mode: String,
}

impl Facts {
    fn of(f: &DeviceFacts) -> Facts {
        Facts {
            total_bytes: f.total_bytes,
            compute_capability: f.compute_capability.clone(),
            multiprocessors: f.multiprocessors,
            compute_mode: f.compute_mode.clone(),
        }
    }
}

fn row(index: u32, c: Candidate, f: Facts) -> GpuIdentity {
    let (processes, processes_unavailable) = split(c.processes);
    GpuIdentity {
        index,
        name: c.name,
        compute_capability: f.compute_capability,
        multiprocessors: f.multiprocessors,
        compute_mode: f.compute_mode,
        total_bytes: f.total_bytes,
        free_bytes: c.memory.map(|m| f.total_bytes.saturating_sub(m.used_bytes)),
        driver_version: c.driver_version,
        nvml: c.memory,
        processes,
        processes_unavailable,
        mig: c.mig,
        cuda_visible_devices: Some(c.uuid.clone()),
        uuid: c.uuid,
    }
}

/// `headroom devices --json --backend cuda` with only `uuid` visible to CUDA.
fn spawn_probe(uuid: &str) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find headroom itself: {e}"))?;
    Command::new(exe)
        .args(["devices", "--json", "--backend", "cuda"])
        .env("CUDA_VISIBLE_DEVICES", uuid)
        .env(PROBE_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start headroom devices: {e}"))
}

/// The probe's one device, which must be `uuid`: the driver did the selection.
fn read_probe(uuid: &str, child: Result<Child, String>) -> anyhow::Result<Facts> {
    let place = format!("reading {uuid} through CUDA (CUDA_VISIBLE_DEVICES={uuid})");
    let out = child
        .map_err(anyhow::Error::msg)
        .and_then(|c| c.wait_with_output().map_err(anyhow::Error::from))
        .with_context(|| place.clone())?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!(
            "{place}: headroom devices exited with {}: {last}",
            out.status
        );
    }
    let listing: serde_json::Value =
        serde_json::from_slice(&out.stdout).with_context(|| format!("{place}: its output"))?;
    let gpus: Vec<GpuIdentity> = serde_json::from_value(listing["gpus"].clone())
        .with_context(|| format!("{place}: its list of GPUs"))?;
    let Some(g) = gpus.into_iter().find(|g| g.uuid == uuid) else {
        bail!("{place}: the driver did not show that device to CUDA");
    };
    Ok(Facts {
        total_bytes: g.total_bytes,
        compute_capability: g.compute_capability,
        multiprocessors: g.multiprocessors,
        compute_mode: g.compute_mode,
    })
}
