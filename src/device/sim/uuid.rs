//! A simulated GPU's UUID: derived from its profile's name and its index, so the same card of
//! the same (node) profile has the same UUID in every run, and the cards of a node differ.

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
}
