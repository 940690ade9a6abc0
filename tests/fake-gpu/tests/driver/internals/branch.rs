//! `branch`'s own rules, checked from outside the library.

use headroom_fake_gpu::branch::*;

#[test]
fn branches_versions_and_isa() {
    let r = Release::parse("470").unwrap();
    assert_eq!(
        (r.cuda_version, r.nvml_version.as_str(), r.max_ptx),
        (11040, "470.256.02", (7, 4))
    );
    let r = Release::parse("535.104.05").unwrap();
    assert_eq!((r.branch, r.nvml_version.as_str()), (535, "535.104.05"));
    assert_eq!(r.cuda_text(), "12.2");
    assert_eq!(Release::parse("560").unwrap().max_ptx, (8, 5));
    assert_eq!(Release::parse("580").unwrap().max_ptx, (9, 0));
    assert!(Release::parse("455").unwrap_err().contains("470"));
    assert!(Release::parse("535.x").is_err());
    assert!(Release::parse("").is_err());
    let d = Release::default();
    assert!(d.has("cuEventElapsedTime_v2") && !d.chosen);
    assert!(!Release::parse("550").unwrap().has("cuEventElapsedTime_v2"));
    assert_eq!(max_ptx_isa(12040), d.max_ptx);
}
