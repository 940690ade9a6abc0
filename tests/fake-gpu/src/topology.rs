//! What the fake's GPUs are split into and what CUDA sees of them: the physical GPUs, each
//! one's MIG instances (`HEADROOM_FAKE_MIG`), their UUIDs, the devices CUDA enumerates under
//! `CUDA_VISIBLE_DEVICES`, and the key under which each device's memory is shared between
//! processes.
//!
//! As the real driver: without MIG, `CUDA_VISIBLE_DEVICES` is a comma list of indices and
//! `GPU-` UUIDs (a unique prefix is enough), taken in order up to the first entry that names no
//! device (a device named twice ends it too, the fake's choice). In MIG mode a CUDA process enumerates
//! exactly one instance: the one a `MIG-` UUID names, else the first instance of the GPU an
//! index or `GPU-` UUID names, else the first instance of GPU 0.

use serde::Deserialize;

use crate::profile::Size;

/// One MIG instance kind of a profile's `[[mig]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MigProfile {
    /// NVIDIA's profile name (`1g.18gb`).
    pub profile: String,
    /// The instance's CUDA-visible memory (`cuDeviceTotalMem`).
    pub total_bytes: Size,
    /// SMs of one instance.
    pub multiprocessors: u32,
}

/// A device CUDA enumerates: a physical GPU, or one MIG instance of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaDevice {
    pub physical: u32,
    pub instance: Option<u32>,
}

/// `nvmlDeviceGetMaxMigDeviceCount` of a MIG-capable GPU, and the most instances one takes.
pub const MAX_MIG_INSTANCES: u32 = 7;

/// Shared-table keys of MIG instances have this bit set: `MIG_KEY | physical << 8 | instance`.
const MIG_KEY: u32 = 1 << 31;

/// The key a device's memory is counted under in the shared table: processes on different
/// MIG instances of one GPU do not see each other's memory.
pub fn memory_key(physical: u32, instance: Option<u32>) -> u32 {
    match instance {
        None => physical,
        Some(k) => MIG_KEY | physical << 8 | k,
    }
}

/// The 16 bytes of GPU `physical`'s UUID (the same in CUDA and NVML).
pub fn gpu_uuid_bytes(physical: u32) -> [u8; 16] {
    let i = physical.to_be_bytes();
    [
        0xfa, 0x4e, 0x67, 0x70, 0, 0, 0x40, 0, 0x80, 0, 0, 0, i[0], i[1], i[2], i[3],
    ]
}

/// The 16 bytes of MIG instance `instance` of GPU `physical`.
pub fn mig_uuid_bytes(physical: u32, instance: u32) -> [u8; 16] {
    let g = (physical as u16).to_be_bytes();
    let k = (instance as u16).to_be_bytes();
    [
        0xfa, 0x4e, 0x6d, 0x16, 0, 0, 0x40, 0, 0x80, 0, 0, 0, g[0], g[1], k[0], k[1],
    ]
}

/// `PREFIX-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML and `nvidia-smi` write UUIDs.
pub fn uuid_text(prefix: &str, b: [u8; 16]) -> String {
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "{prefix}-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

pub fn gpu_uuid(physical: u32) -> String {
    uuid_text("GPU", gpu_uuid_bytes(physical))
}

pub fn mig_uuid(physical: u32, instance: u32) -> String {
    uuid_text("MIG", mig_uuid_bytes(physical, instance))
}

/// The GPU an index or `GPU-` UUID (or unique prefix of one) entry names.
fn gpu_named(entry: &str, gpus: u32) -> Option<u32> {
    if entry.starts_with("GPU-") {
        let hits: Vec<u32> = (0..gpus)
            .filter(|g| gpu_uuid(*g).starts_with(entry))
            .collect();
        return (hits.len() == 1).then(|| hits[0]);
    }
    entry.parse::<u32>().ok().filter(|g| *g < gpus)
}

/// The devices CUDA enumerates, in order: `gpus` GPUs, each split into `instances` MIG
/// instances when that is `Some`, filtered by `CUDA_VISIBLE_DEVICES` (`visible`; `None`: unset).
pub fn cuda_devices(gpus: u32, instances: Option<usize>, visible: Option<&str>) -> Vec<CudaDevice> {
    let entries: Option<Vec<&str>> = visible.map(|v| v.split(',').map(str::trim).collect());
    let Some(n) = instances else {
        let Some(entries) = entries else {
            return (0..gpus)
                .map(|physical| CudaDevice {
                    physical,
                    instance: None,
                })
                .collect();
        };
        let mut out: Vec<CudaDevice> = Vec::new();
        for e in entries {
            match gpu_named(e, gpus) {
                Some(physical) if !out.iter().any(|d| d.physical == physical) => {
                    out.push(CudaDevice {
                        physical,
                        instance: None,
                    });
                }
                _ => break,
            }
        }
        return out;
    };
    if n == 0 || gpus == 0 {
        return Vec::new();
    }
    let first = |physical| CudaDevice {
        physical,
        instance: Some(0),
    };
    let Some(entries) = entries else {
        return vec![first(0)];
    };
    let e = entries.first().copied().unwrap_or("");
    if e.starts_with("MIG-") {
        let hit = (0..gpus)
            .flat_map(|g| (0..n as u32).map(move |k| (g, k)))
            .find(|(g, k)| mig_uuid(*g, *k) == e);
        return hit
            .map(|(physical, k)| CudaDevice {
                physical,
                instance: Some(k),
            })
            .into_iter()
            .collect();
    }
    gpu_named(e, gpus).map(first).into_iter().collect()
}
