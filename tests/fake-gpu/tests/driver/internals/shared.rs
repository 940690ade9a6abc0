//! `shared`'s own rules, checked from outside the library.

use headroom_fake_gpu::shared::*;
use std::time::Duration;

#[test]
fn slots_add_up_per_device() {
    let t = SharedTable::open(None, Duration::from_millis(1)).unwrap();
    let a = t.claim(0).unwrap();
    let b = t.claim(1).unwrap();
    assert_eq!(t.claim(0).unwrap(), a);
    t.set_used(a, 100);
    t.set_used(b, 7);
    t.set_context(a, true);
    assert_eq!(t.device_used(0), 100);
    assert_eq!(t.device_used(1), 7);
    assert_eq!(t.other_context(0), None, "this process is not another one");
    t.release(a);
    assert_eq!(t.device_used(0), 0);
    assert!(t.entries(0).is_empty());
}

#[test]
fn file_backed_tables_are_shared() {
    let path = std::env::temp_dir().join(format!("fake-gpu-shared-{}", std::process::id()));
    let t1 = SharedTable::open(Some(&path), Duration::ZERO).unwrap();
    let t2 = SharedTable::open(Some(&path), Duration::ZERO).unwrap();
    let s = t1.claim(0).unwrap();
    t1.set_used(s, 42);
    assert_eq!(t2.device_used(0), 42);
    t1.release(s);
    std::fs::remove_file(&path).unwrap();
}
