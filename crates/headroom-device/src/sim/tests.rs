//! The simulated device's rules, checked to the byte on tiny-4g.
use super::*;
use crate::PoolConfig;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn tiny() -> SimDevice {
    SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0)
}

#[test]
fn context_overhead_and_page_rounding() {
    let mut d = tiny();
    assert_eq!(d.before_context().used_bytes, 0);
    let idle = d.mem_info().unwrap();
    assert_eq!(idle.used_bytes(), 256 * MIB);
    let p = d.malloc(3 * MIB / 2).unwrap();
    assert_eq!(
        d.mem_info().unwrap().used_bytes(),
        258 * MIB,
        "1.5 MiB takes a 2 MiB page"
    );
    d.free(p).unwrap();
    assert_eq!(d.mem_info().unwrap().used_bytes(), 256 * MIB);
    let a = d.malloc(100).unwrap();
    let b = d.malloc(100).unwrap();
    assert_eq!(b - a, 512);
    assert_eq!(
        d.mem_info().unwrap().used_bytes(),
        258 * MIB,
        "small allocations share a page"
    );
}

#[test]
fn oom_is_an_error_value_and_nothing_changes() {
    let mut d = tiny();
    let before = d.mem_info().unwrap();
    let e = d.malloc(4 * GIB).unwrap_err();
    assert_eq!(
        e,
        DeviceError::OutOfMemory {
            requested_bytes: 4 * GIB
        }
    );
    assert_eq!(d.mem_info().unwrap().free_bytes, before.free_bytes);
}

#[test]
fn pending_free_on_a_busy_stream() {
    let mut d = tiny();
    let a = d.create_stream().unwrap();
    let b = d.create_stream().unwrap();
    d.pool_configure(PoolConfig {
        release_threshold_bytes: u64::MAX,
        reuse_opportunistic: true,
        reuse_internal_dependencies: false,
    })
    .unwrap();
    let big = d.malloc_async(3 * GIB, a).unwrap();
    d.launch(
        Kernel::Spin {
            duration_ns: 100_000_000,
        },
        a,
    )
    .unwrap();
    d.free_async(big, a).unwrap();
    // Stream b cannot reuse the block while stream a is still spinning.
    assert!(d.malloc_async(3 * GIB, b).unwrap_err().is_oom());
    d.synchronize().unwrap();
    assert!(d.now_ns() >= 100_000_000);
    assert_eq!(d.malloc_async(3 * GIB, b).unwrap(), big);
}

#[test]
fn tenants_come_and_go_on_schedule() {
    let mut d = tiny();
    d.add_tenant(99, GIB, Some(50_000_000));
    assert_eq!(d.mem_info().unwrap().used_bytes(), 256 * MIB + GIB);
    d.sleep(60_000_000);
    assert_eq!(d.mem_info().unwrap().used_bytes(), 256 * MIB);
}

#[test]
fn stack_reservation_grows_and_never_shrinks() {
    let mut d = tiny();
    let s = StreamId::MAIN;
    d.launch(
        Kernel::Stack {
            frame_bytes: 16 * 1024,
        },
        s,
    )
    .unwrap();
    // (16 KiB − 1 KiB) × 8 SMs × 2048 threads.
    let extra = 15 * 1024 * 8 * 2048;
    assert_eq!(d.mem_info().unwrap().used_bytes(), 256 * MIB + extra);
    d.launch(
        Kernel::Stack {
            frame_bytes: 4 * 1024,
        },
        s,
    )
    .unwrap();
    assert_eq!(d.mem_info().unwrap().used_bytes(), 256 * MIB + extra);
}
