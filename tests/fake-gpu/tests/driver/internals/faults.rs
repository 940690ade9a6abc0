//! `faults`'s own rules, checked from outside the library.

use headroom_fake_gpu::faults::*;
use std::time::Duration;

#[test]
fn parses_the_documented_forms() {
    let r = parse(
        "cuMemAlloc_v2@3=CUDA_ERROR_OUT_OF_MEMORY, nvmlInit_v2@1=NVML_ERROR_LIBRARY_NOT_FOUND,\
         cuStreamSynchronize@1=hang:30s,cuLaunchKernel@*=CUDA_ERROR_LAUNCH_FAILED,\
         cuInit@1=hang:forever",
    )
    .unwrap();
    assert_eq!(r.len(), 5);
    assert_eq!(r[4].action, Action::HangForever);
    assert_eq!(r[0].when, When::Nth(3));
    assert_eq!(r[0].action, Action::Fail(2));
    assert_eq!(r[1].action, Action::Fail(12));
    assert_eq!(r[2].action, Action::Hang(Duration::from_secs(30)));
    assert_eq!(r[3].when, When::Every);
}

#[test]
fn refuses_what_it_cannot_do_and_names_the_entry() {
    for (spec, needle) in [
        ("cuMemAlloc@1=CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc@1"),
        ("cuMemAlloc_v2@0=CUDA_ERROR_OUT_OF_MEMORY", "call number"),
        ("cuMemAlloc_v2@1=NVML_ERROR_UNKNOWN", "CUresult"),
        ("nvmlInit_v2@1=CUDA_ERROR_UNKNOWN", "nvmlReturn_t"),
        ("cuInit@1=hang:soon", "duration"),
        ("cuInit", "expected"),
    ] {
        let e = parse(spec).unwrap_err();
        assert!(e.contains(needle), "{spec}: {e}");
    }
}

#[test]
fn counts_per_api() {
    let rules = parse("cuMemAlloc_v2@2=CUDA_ERROR_OUT_OF_MEMORY").unwrap();
    let c = Counters::default();
    assert_eq!(on_call(&rules, &c, "cuMemAlloc_v2"), None);
    assert_eq!(on_call(&rules, &c, "cuMemFree_v2"), None);
    assert_eq!(on_call(&rules, &c, "cuMemAlloc_v2"), Some(2));
    assert_eq!(on_call(&rules, &c, "cuMemAlloc_v2"), None);
}
