//! `topology`'s own rules, checked from outside the library.

use headroom_fake_gpu::topology::*;

fn physical(v: &[CudaDevice]) -> Vec<u32> {
    v.iter().map(|d| d.physical).collect()
}

#[test]
fn visible_devices_as_the_driver_reads_them() {
    assert_eq!(physical(&cuda_devices(4, None, None)), [0, 1, 2, 3]);
    assert_eq!(physical(&cuda_devices(4, None, Some("2,0"))), [2, 0]);
    assert_eq!(physical(&cuda_devices(4, None, Some("1,7,2"))), [1]);
    assert_eq!(physical(&cuda_devices(4, None, Some("1,1,2"))), [1]);
    assert!(cuda_devices(4, None, Some("")).is_empty());
    let uuid = gpu_uuid(3);
    assert_eq!(uuid, "GPU-fa4e6770-0000-4000-8000-000000000003");
    let v = format!("{uuid},0");
    assert_eq!(physical(&cuda_devices(4, None, Some(&v))), [3, 0]);
    // A prefix common to every GPU names none of them.
    assert!(cuda_devices(4, None, Some("GPU-fa4e")).is_empty());
    let mig = mig_uuid(1, 2);
    assert_eq!(mig, "MIG-fa4e6d16-0000-4000-8000-000000010002");
    let one = cuda_devices(2, Some(3), Some(&mig));
    assert_eq!(
        one,
        [CudaDevice {
            physical: 1,
            instance: Some(2)
        }]
    );
    assert_eq!(cuda_devices(2, Some(3), None)[0].instance, Some(0));
    assert_eq!(physical(&cuda_devices(2, Some(3), Some("1"))), [1]);
    assert!(cuda_devices(2, Some(3), Some("MIG-nope")).is_empty());
    assert_ne!(memory_key(0, Some(0)), memory_key(0, None));
    assert_ne!(memory_key(1, Some(0)), memory_key(0, Some(1)));
}
