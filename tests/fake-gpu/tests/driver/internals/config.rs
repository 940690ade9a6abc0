//! `config`'s own rules, checked from outside the library.

use headroom_fake_gpu::config::*;
use std::collections::HashMap;
use std::time::Duration;

fn cfg(vars: &[(&str, &str)]) -> Result<Config, String> {
    let map: HashMap<&str, &str> = vars.iter().copied().collect();
    Config::from_vars(|k| map.get(k).map(|v| v.to_string()))
}

#[test]
fn defaults_and_errors() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.profile.name, "tiny-4g");
    assert_eq!(
        (c.devices, c.release_delay),
        (1, Duration::from_millis(200))
    );
    assert!(!c.exclusive_process && !c.nvml_hide_self && c.faults.is_empty());
    let e = cfg(&[("HEADROOM_FAKE_DEVICES", "zero")]).unwrap_err();
    assert!(e.contains("HEADROOM_FAKE_DEVICES"), "{e}");
    let e = cfg(&[(
        "HEADROOM_FAKE_FAULTS",
        "cuMemAlloc_v2@x=CUDA_ERROR_OUT_OF_MEMORY",
    )])
    .unwrap_err();
    assert!(e.contains("cuMemAlloc_v2@x"), "{e}");
    let node = cfg(&[("HEADROOM_FAKE_PROFILE", "8xh100-80g")]).unwrap();
    assert_eq!(node.devices, 8);
    assert_eq!(node.total_bytes(3), 80961 << 20);
    assert_eq!(node.total_bytes(0), 81089 << 20);
    assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
}
