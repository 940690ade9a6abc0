//! A simulated GPU's UUID: derived from its profile's name and its index, so the same card of
//! the same (node) profile has the same UUID in every run, and the cards of a node differ.

use crate::mig::MigIdentity;
use crate::profile::SimProfile;

/// `GPU-xxxxxxxx-xxxx-4xxx-8xxx-xxxxxxxxxxxx`, as NVML writes a UUID (version 4, RFC 4122
/// variant bits), from two FNV-1a hashes of `profile` and `index`.
pub fn sim_uuid(profile: &str, index: u32) -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&fnv1a(0xcbf2_9ce4_8422_2325, profile, index).to_be_bytes());
    b[8..].copy_from_slice(&fnv1a(0x8422_2325_cbf2_9ce4, profile, index).to_be_bytes());
    b[6] = 0x40 | (b[6] & 0x0f);
    b[8] = 0x80 | (b[8] & 0x3f);
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// The UUID of a simulated card and, for a MIG instance card, its MIG identity: `MIG-…`
/// (the instance) with the parent's `GPU-…` as the parent UUID, as NVML writes them.
/// Inside a fleet (a scheduler's rank is set) the node's identity is part of the hash, so
/// simulated nodes never share UUIDs (`node_profile::fleet_identity`).
pub fn sim_card_identity(card: &SimProfile, index: u32) -> (String, Option<MigIdentity>) {
    let seeded = |name: &str| match crate::node_profile::fleet_identity() {
        Some(id) => format!("{name}\u{0}{id}"),
        None => name.to_string(),
    };
    let uuid = sim_uuid(&seeded(&card.name), index);
    let Some(of) = &card.mig_of else {
        return (uuid, None);
    };
    let identity = MigIdentity {
        profile: Some(of.profile.clone()),
        parent_index: Some(index),
        parent_uuid: sim_uuid(&seeded(&of.parent), index),
        parent_name: Some(of.parent_gpu_name.clone()),
        gpu_instance_id: None,
        compute_instance_id: None,
    };
    (format!("MIG-{}", &uuid["GPU-".len()..]), Some(identity))
}

fn fnv1a(seed: u64, profile: &str, index: u32) -> u64 {
    let mut h = seed;
    for byte in profile.bytes().chain([0xff]).chain(index.to_le_bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct_per_card() {
        let a = sim_uuid("8xh100-80g", 0);
        assert_eq!(a, sim_uuid("8xh100-80g", 0));
        assert_eq!(a.len(), 40);
        assert!(a.starts_with("GPU-") && a.as_bytes()[18] == b'4', "{a}");
        let prefixes: std::collections::BTreeSet<String> = (0..8)
            .map(|i| sim_uuid("8xh100-80g", i)[4..12].to_string())
            .collect();
        assert_eq!(prefixes.len(), 8, "the folder-name prefixes differ");
        assert_ne!(a, sim_uuid("h100-80g", 0));
    }

    #[test]
    fn an_instance_card_is_a_mig_uuid_under_its_parent() {
        let card = SimProfile::resolve("h200-1g.18gb").unwrap();
        let (uuid, mig) = sim_card_identity(&card, 0);
        let mig = mig.unwrap();
        assert!(uuid.starts_with("MIG-") && uuid.len() == 40, "{uuid}");
        assert_eq!(mig.parent_uuid, sim_uuid("h200", 0));
        assert_eq!(mig.profile.as_deref(), Some("1g.18gb"));
        let whole = SimProfile::resolve("h200").unwrap();
        assert_eq!(sim_card_identity(&whole, 0), (sim_uuid("h200", 0), None));
    }
}
