//! `errors`'s own rules, checked from outside the library.

use headroom_fake_gpu::errors::*;

#[test]
fn names_and_texts_round_trip() {
    assert_eq!(by_name(CUDA_ERRORS, "CUDA_ERROR_OUT_OF_MEMORY"), Some(2));
    assert_eq!(
        cuda(700).unwrap().2.to_str().unwrap(),
        "an illegal memory access was encountered"
    );
    assert_eq!(
        by_name(NVML_ERRORS, "NVML_ERROR_LIBRARY_NOT_FOUND"),
        Some(12)
    );
    assert_eq!(
        nvml(7).unwrap().1.to_str().unwrap(),
        "NVML_ERROR_INSUFFICIENT_SIZE"
    );
    assert!(cuda(3000).is_none());
}
