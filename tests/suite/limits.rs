//! Sizes near 2^64 and durations near `u64::MAX` nanoseconds: a request that cannot fit never
//! fits (no rounding wraps to a small number), and an impossible duration is refused where it is
//! written, with the file, the place and the value (exit 2).

use crate::common::*;

use headroom::alloc::AllocatorSpec;
use headroom::alloc::replay::{BadRowPolicy, ReplayOptions, replay_reader};
use headroom::device::prelude::*;
use headroom::device::profile::SimProfile;
use headroom::device::sim::SimDevice;
use headroom::device::{DeviceError, PoolConfig, StreamId};

/// 16 EiB minus 4 bytes: its 2 MiB page multiple does not fit in 64 bits.
const HUGE: u64 = 18_446_744_073_709_551_612;

fn tiny() -> SimDevice {
    SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0)
}

#[test]
fn a_16_eib_request_does_not_fit_with_any_allocator() {
    let log = format!("t_ns,action,ptr,bytes,stream,detail\n0,allocate,0x1000,{HUGE},0,\n");
    for spec in [
        AllocatorSpec::Direct,
        AllocatorSpec::Pool(PoolConfig::default()),
        AllocatorSpec::Caching(Default::default()),
    ] {
        let mut d = tiny();
        let opts = ReplayOptions {
            on_bad_row: BadRowPolicy::Stop,
            pace: false,
        };
        let r = replay_reader("LOG.csv", log.as_bytes(), &spec, &mut d, &opts).unwrap();
        assert!(!r.fits, "{spec}: a 16 EiB request on a 4 GiB device");
        let f = r.first_failure.as_ref().unwrap();
        assert_eq!((f.line, f.requested_bytes), (2, HUGE), "{spec}");
        // Nothing was taken on the way.
        assert_eq!(r.peaks.alloc_reserved.bytes, 0, "{spec}");
    }
}

#[test]
fn the_simulated_driver_refuses_sizes_whose_rounding_would_wrap() {
    let mut d = tiny();
    let free = d.mem_info().unwrap().free_bytes;
    for bytes in [HUGE, u64::MAX, u64::MAX - (1 << 20)] {
        assert!(
            matches!(d.malloc(bytes), Err(DeviceError::OutOfMemory { .. })),
            "cuMemAlloc({bytes})"
        );
        assert!(
            matches!(
                d.malloc_async(bytes, StreamId::MAIN),
                Err(DeviceError::OutOfMemory { .. })
            ),
            "cuMemAllocAsync({bytes})"
        );
    }
    assert_eq!(d.mem_info().unwrap().free_bytes, free);
    assert_eq!(d.pool_usage().unwrap().reserved_current_bytes, 0);
    // A reservation of address space that large has nowhere to go either.
    assert!(d.vmm_reserve(u64::MAX - (2 << 20) + 1).is_err());
}

#[test]
fn bandwidth_beyond_the_device_exits_2_naming_the_size() {
    let tmp = tempfile::tempdir().unwrap();
    for size in ["18446744073709551612B", "2GiB"] {
        let r = headroom(
            tmp.path(),
            &["bandwidth", "--size", size, "--profile", "tiny-4g"],
        );
        assert_eq!(r.code, 2, "--size {size}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("--size"), "{}", r.stderr);
        assert!(r.stdout.is_empty(), "nothing measured: {}", r.stdout);
    }
    let r = headroom(
        tmp.path(),
        &[
            "bandwidth",
            "--size",
            "18446744073709551612B",
            "--profile",
            "tiny-4g",
        ],
    );
    assert!(
        r.stderr.contains("three buffers") && r.stderr.contains("4.00 GiB"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_impossible_sleep_is_refused_with_its_file_phase_step_and_value() {
    let tmp = tempfile::tempdir().unwrap();
    let wl = workload(
        tmp.path(),
        "forever",
        "[[phase]]\nname = \"wait\"\nsteps = [\n  { op = \"sleep\", for = \"1ms\" },\n  { op = \"sleep\", for = \"18446744073709551615ns\" },\n]\n",
    );
    let (out, _, dir) = run_tiny(tmp.path(), &wl, &[]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    for part in [
        "forever.toml",
        "phase 1 (\"wait\")",
        "step 2",
        "18446744073709551615ns",
        "30 days",
    ] {
        assert!(out.stderr.contains(part), "{part}: {}", out.stderr);
    }
    assert!(!dir.join("summary.json").exists(), "refused before the run");
}

#[test]
fn a_workload_stating_more_than_30_days_in_all_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let wl = workload(
        tmp.path(),
        "month",
        "[[phase]]\nname = \"wait\"\nsteps = [\n  { op = \"repeat\", times = 31, steps = [{ op = \"sleep\", for = \"24h\" }] },\n]\n",
    );
    let (out, _, _) = run_tiny(tmp.path(), &wl, &[]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("30 days") && out.stderr.contains("round 31"),
        "{}",
        out.stderr
    );
}

#[test]
fn the_simulated_clock_saturates_instead_of_wrapping() {
    let mut d = tiny();
    d.sleep(u64::MAX - 5);
    d.sleep(u64::MAX);
    assert_eq!(d.now_ns(), u64::MAX);
    d.launch(
        headroom::device::Kernel::Spin {
            duration_ns: u64::MAX,
        },
        StreamId::MAIN,
    )
    .unwrap();
    d.synchronize().unwrap();
    assert_eq!(d.now_ns(), u64::MAX);
}
