//! `profile`'s own rules, checked from outside the library.

use headroom_fake_gpu::profile::*;

#[test]
fn sizes_parse_like_headroom() {
    assert_eq!(parse_size("512B"), Ok(512));
    assert_eq!(parse_size("81089MiB"), Ok(81089 << 20));
    assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
    assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
    assert!(parse_size("1.3B").is_err());
    assert!(parse_size("12").is_err());
}

#[test]
fn builtin_profiles_load() {
    let tiny = Profile::resolve("tiny-4g").unwrap();
    assert_eq!(tiny.memory.total_bytes.0, 4 << 30);
    assert_eq!(tiny.memory.context_overhead_bytes.0, 256 << 20);
    assert_eq!(tiny.kernels.module_bytes.0, 0);
    assert_eq!(tiny.capability(), (9, 0));
    assert_eq!(
        tiny.latency.mem_get_info.0,
        std::time::Duration::from_micros(8)
    );
    // A name that is no file is looked up under profiles/.
    assert_eq!(
        profile_file("h200"),
        std::path::Path::new(PROFILES_DIR).join("h200.toml")
    );
    assert!(profile_file("h200").is_file());
    let h200 = Profile::resolve("h200").unwrap();
    assert_eq!(h200.memory.nvml_reserved_bytes.0, 615 << 20);
    assert!(Profile::resolve("a100").unwrap_err().contains("tiny-4g"));
}
