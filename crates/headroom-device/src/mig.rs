//! MIG (Multi-Instance GPU): NVIDIA's naming of instances and the simulator's instance cards.
//!
//! A GPU in MIG mode is split into instances, each with its own memory and multiprocessors. A
//! CUDA process sees one of them (the MIG user guide: "a single CUDA process can only enumerate
//! a single MIG device"), chosen by `CUDA_VISIBLE_DEVICES=MIG-<uuid>`; NVML sees every instance
//! under a handle of its own. Since R470 an instance's UUID is written `MIG-<uuid>` (NVML,
//! `nvidia-smi -L`) and its NVML name is the parent's with ` MIG <profile>` appended
//! (`NVIDIA H200 MIG 1g.18gb`). `cuDeviceGetUuid_v2` returns the instance's 16 bytes, while
//! `cuDeviceGetUuid` (v1) returns the parent GPU's: the two differ exactly on a MIG instance.
//!
//! On the simulator a profile's `[[mig]]` tables are its instance profiles, and
//! `--profile h200-1g.18gb` (parent, `-`, MIG profile) is a card of one such instance.

use serde::{Deserialize, Serialize};

use crate::profile::SimProfile;
use crate::units::Size;

/// One MIG instance profile of a card (a `[[mig]]` table of a device profile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigProfile {
    /// NVIDIA's profile name, e.g. `1g.18gb`.
    pub profile: String,
    /// CUDA-visible memory of one instance (`cuDeviceTotalMem` inside it).
    pub total_bytes: Size,
    /// Multiprocessors of one instance.
    pub multiprocessors: u32,
}

/// What an instance belongs to, for listings and reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MigIdentity {
    /// The MIG profile, e.g. `1g.18gb` (from the device name; `None` where it has none).
    pub profile: Option<String>,
    /// The parent GPU's NVML index (its position in `nvidia-smi`).
    pub parent_index: Option<u32>,
    /// The parent GPU's UUID (`GPU-…`).
    pub parent_uuid: String,
    /// The parent GPU's model name.
    pub parent_name: Option<String>,
    /// NVML's GPU instance and compute instance ids, where NVML reports them.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

/// Whether a UUID names a MIG instance (`MIG-…`) rather than a whole GPU (`GPU-…`).
pub fn is_mig_uuid(uuid: &str) -> bool {
    uuid.starts_with("MIG-")
}

/// Whether `s` is a MIG profile name as NVIDIA writes them: `1g.18gb`, `7g.141gb`, with an
/// optional compute-instance part (`1c.3g.40gb`) and suffixes (`1g.18gb+me`, `1g.24gb+gfx`).
pub fn is_profile_name(s: &str) -> bool {
    let core_end = s.find(['+', '-']).unwrap_or(s.len());
    let (core, suffix) = s.split_at(core_end);
    let suffix_ok = suffix.is_empty()
        || suffix[1..]
            .split(['+', '-'])
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()));
    let mut parts: Vec<&str> = core.split('.').collect();
    if parts.len() == 3 {
        let ci = parts.remove(0);
        if !number_then(ci, "c") {
            return false;
        }
    }
    suffix_ok && parts.len() == 2 && number_then(parts[0], "g") && number_then(parts[1], "gb")
}

/// `12gb` for `("12gb", "gb")`: digits, then exactly `unit`.
fn number_then(s: &str, unit: &str) -> bool {
    s.strip_suffix(unit)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The MIG profile in an instance's device name: `1g.18gb` from `NVIDIA H200 MIG 1g.18gb`.
pub fn profile_from_device_name(name: &str) -> Option<String> {
    let (_, rest) = name.rsplit_once(" MIG ")?;
    let token = rest.split_whitespace().next()?;
    is_profile_name(token).then(|| token.to_string())
}

/// What NVML says a device's UUID bytes are: a whole GPU (`GPU-…` found), or a MIG instance
/// (`MIG-…` found) with its parent GPU's UUID where NVML gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UuidKind {
    Gpu,
    Mig { parent_uuid: Option<String> },
}

/// A device's UUID string and its parent GPU's, decided by NVML where it knows the device:
/// `cuDeviceGetUuid_v2`'s bytes are looked up as `GPU-…`, then as `MIG-…`. Without an answer
/// from NVML, `cuDeviceGetUuid` (v1, where the library still has it) differing from v2 marks a
/// MIG instance with v1 as its parent (the documented v2 behaviour, v1's assumed), and a
/// device name with a MIG profile marks one whose parent is unknown.
pub fn identify(
    v2: &[u8; 16],
    v1: Option<&[u8; 16]>,
    name: &str,
    nvml: impl FnOnce(&str, &str) -> Option<UuidKind>,
) -> (String, Option<String>) {
    let (gpu, mig) = (format_uuid("GPU", v2), format_uuid("MIG", v2));
    let v1_parent = v1.filter(|v1| *v1 != v2).map(|v1| format_uuid("GPU", v1));
    match nvml(&gpu, &mig) {
        Some(UuidKind::Gpu) => (gpu, None),
        Some(UuidKind::Mig { parent_uuid }) => (mig, parent_uuid.or(v1_parent)),
        None if v1_parent.is_some() => (mig, v1_parent),
        None if profile_from_device_name(name).is_some() => (mig, None),
        None => (gpu, None),
    }
}

/// The UUID string of a device from the 16 bytes `cuDeviceGetUuid_v2` returns, and the parent's
/// from `cuDeviceGetUuid` (v1): `MIG-…` (with the parent's `GPU-…`) when they differ, as
/// they do only on a MIG instance; `GPU-…` (and no parent) otherwise.
pub fn uuid_strings(v2: &[u8; 16], v1: &[u8; 16]) -> (String, Option<String>) {
    if v2 == v1 {
        (format_uuid("GPU", v2), None)
    } else {
        (format_uuid("MIG", v2), Some(format_uuid("GPU", v1)))
    }
}

/// `PREFIX-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML and `nvidia-smi` write UUIDs.
pub fn format_uuid(prefix: &str, b: &[u8; 16]) -> String {
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

/// `("h200", "1g.18gb")` for `h200-1g.18gb`: a card name, `-`, a MIG profile name.
pub fn split_instance_name(name: &str) -> Option<(&str, &str)> {
    // Card names have dashes of their own (`h100-80g`): the profile is the last part.
    let (parent, profile) = name.rsplit_once('-')?;
    if is_profile_name(profile) {
        return Some((parent, profile));
    }
    // A suffix with a dash of its own (`1g.23gb-me`).
    let (parent2, first) = parent.rsplit_once('-')?;
    let joined = &name[parent2.len() + 1..];
    (is_profile_name(joined) && is_profile_name(first)).then_some((parent2, joined))
}

/// The simulated card of one instance of `parent`: its memory and multiprocessors, named
/// `<parent>-<profile>`, every other constant the parent's.
pub fn instance_card(parent: &SimProfile, mig: &MigProfile) -> SimProfile {
    let base_name = parent
        .gpu_name
        .strip_suffix(" (simulated)")
        .unwrap_or(&parent.gpu_name);
    let simulated = parent.gpu_name.ends_with(" (simulated)");
    let mut card = parent.clone();
    card.name = format!("{}-{}", parent.name, mig.profile);
    card.gpu_name = format!(
        "{base_name} MIG {}{}",
        mig.profile,
        if simulated { " (simulated)" } else { "" }
    );
    card.memory.total_bytes = mig.total_bytes;
    // NVML's reading of an instance is the instance's memory alone: the driver's and the
    // firmware's share stays with the parent GPU.
    card.memory.nvml_reserved_bytes = Size(0);
    card.multiprocessors = mig.multiprocessors;
    card.mig = Vec::new();
    card.mig_of = Some(MigOf {
        parent: parent.name.clone(),
        parent_gpu_name: parent.gpu_name.clone(),
        profile: mig.profile.clone(),
    });
    card
}

/// Which card and MIG profile a simulated instance card was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigOf {
    /// The parent card's profile name (`h200`).
    pub parent: String,
    pub parent_gpu_name: String,
    pub profile: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_as_nvidia_writes_them() {
        for ok in [
            "1g.18gb",
            "7g.141gb",
            "1g.10gb+me",
            "1c.3g.40gb",
            "1g.24gb+gfx",
            "1g.23gb-me",
        ] {
            assert!(is_profile_name(ok), "{ok}");
        }
        for bad in [
            "", "1g", "g.18gb", "1g.18", "1g.18gb+", "1x.18gb", "h200", "80g", "1g.18GB",
            "a.1g.2gb",
        ] {
            assert!(!is_profile_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_profile_is_read_from_the_device_name() {
        assert_eq!(
            profile_from_device_name("NVIDIA H200 MIG 1g.18gb").as_deref(),
            Some("1g.18gb")
        );
        assert_eq!(
            profile_from_device_name("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb").as_deref(),
            Some("1c.3g.20gb")
        );
        assert_eq!(
            profile_from_device_name("NVIDIA H100 80GB HBM3 MIG 7g.80gb").as_deref(),
            Some("7g.80gb")
        );
        assert_eq!(profile_from_device_name("NVIDIA H200"), None);
        assert_eq!(profile_from_device_name("NVIDIA H200 MIG device"), None);
    }

    #[test]
    fn uuids_are_mig_exactly_when_v2_differs_from_v1() {
        let gpu: [u8; 16] = *b"\x1a\x2b\x3c\x4d\x00\x01\x40\x02\x80\x03\x04\x05\x06\x07\x08\x09";
        let mut inst = gpu;
        inst[0] = 0xb0;
        let (u, parent) = uuid_strings(&gpu, &gpu);
        assert_eq!(u, "GPU-1a2b3c4d-0001-4002-8003-040506070809");
        assert_eq!(parent, None);
        let (u, parent) = uuid_strings(&inst, &gpu);
        assert_eq!(u, "MIG-b02b3c4d-0001-4002-8003-040506070809");
        assert_eq!(
            parent.as_deref(),
            Some("GPU-1a2b3c4d-0001-4002-8003-040506070809")
        );
        assert!(is_mig_uuid(&u) && !is_mig_uuid(parent.as_deref().unwrap()));
    }

    #[test]
    fn nvml_decides_mig_whatever_v1_returns() {
        let gpu: [u8; 16] = *b"\x1a\x2b\x3c\x4d\x00\x01\x40\x02\x80\x03\x04\x05\x06\x07\x08\x09";
        let mut inst = gpu;
        inst[0] = 0xb0;
        let parent = "GPU-1a2b3c4d-0001-4002-8003-040506070809".to_string();
        let mig = "MIG-b02b3c4d-0001-4002-8003-040506070809";
        let name = "NVIDIA H200 MIG 1g.18gb";
        let nvml_mig = |_: &str, m: &str| {
            (m == mig).then(|| UuidKind::Mig {
                parent_uuid: Some(parent.clone()),
            })
        };
        // v1 equal to v2 (the instance's own bytes), different, or absent: NVML says MIG.
        for v1 in [Some(&inst), Some(&gpu), None] {
            let (u, p) = identify(&inst, v1, name, nvml_mig);
            assert_eq!((u.as_str(), p.as_deref()), (mig, Some(parent.as_str())));
        }
        // NVML knows the bytes as a whole GPU.
        let (u, p) = identify(&gpu, Some(&gpu), "NVIDIA H200", |g: &str, _: &str| {
            (g == parent).then_some(UuidKind::Gpu)
        });
        assert_eq!((u, p), (parent.clone(), None));
        // Without NVML: v1 differing, then the name.
        let none = |_: &str, _: &str| None;
        assert_eq!(
            identify(&inst, Some(&gpu), name, none).1,
            Some(parent.clone())
        );
        assert_eq!(identify(&inst, Some(&inst), name, none).0, mig);
        assert_eq!(
            identify(&inst, None, "NVIDIA H200", none).0,
            parent.replace("1a2b", "b02b")
        );
    }

    #[test]
    fn instance_names_split_at_the_profile() {
        assert_eq!(
            split_instance_name("h200-1g.18gb"),
            Some(("h200", "1g.18gb"))
        );
        assert_eq!(
            split_instance_name("h100-80g-3g.40gb"),
            Some(("h100-80g", "3g.40gb"))
        );
        assert_eq!(
            split_instance_name("b200-1g.23gb-me"),
            Some(("b200", "1g.23gb-me"))
        );
        assert_eq!(split_instance_name("h100-80g"), None);
        assert_eq!(split_instance_name("tiny-4g"), None);
        assert_eq!(split_instance_name("1g.18gb"), None);
    }
}
