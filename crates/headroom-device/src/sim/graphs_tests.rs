//! The simulated graph memory model, checked to the byte.
use crate::prelude::*;
use crate::profile::SimProfile;
use crate::{DeviceError, Kernel, StreamId};

use super::super::SimDevice;

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;

fn tiny() -> (SimDevice, StreamId) {
    let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
    let s = d.create_stream().unwrap();
    (d, s)
}

fn free(d: &mut SimDevice) -> u64 {
    d.mem_info().unwrap().free_bytes
}

/// Captures: allocate `ws` (freed inside), touch it, allocate `out` (left live), touch it.
fn capture(d: &mut SimDevice, s: StreamId, ws: u64, out: u64) -> crate::GraphId {
    d.graph_begin_capture(s).unwrap();
    let w = d.graph_malloc(ws, s).unwrap();
    d.launch(
        Kernel::Touch {
            ptr: w,
            bytes: ws,
            stride_bytes: 4096,
        },
        s,
    )
    .unwrap();
    d.graph_free(w, s).unwrap();
    if out > 0 {
        let o = d.graph_malloc(out, s).unwrap();
        d.launch(
            Kernel::Fill {
                ptr: o,
                bytes: out,
                seed: 7,
            },
            s,
        )
        .unwrap();
    }
    d.graph_end_capture(s).unwrap().0
}

#[test]
fn memory_becomes_physical_at_the_first_launch_and_stays_reserved_until_trim() {
    let (mut d, s) = tiny();
    let idle = free(&mut d);
    let g = capture(&mut d, s, 100 * MIB, 0);
    assert_eq!(free(&mut d), idle, "a capture takes no device memory");
    d.graph_instantiate(g, false).unwrap();
    assert_eq!(free(&mut d), idle - 10 * KIB, "one kernel node");
    d.graph_launch(g, s).unwrap();
    assert_eq!(free(&mut d), idle - 10 * KIB - 100 * MIB);
    let u = d.graph_mem_usage().unwrap();
    assert_eq!(
        (u.used_current_bytes, u.reserved_current_bytes),
        (100 * MIB, 100 * MIB)
    );
    // Steady replays take nothing more.
    d.graph_launch(g, s).unwrap();
    d.graph_launch(g, s).unwrap();
    assert_eq!(free(&mut d), idle - 10 * KIB - 100 * MIB);
    d.synchronize().unwrap();
    d.graph_destroy(g).unwrap();
    assert_eq!(
        free(&mut d),
        idle - 100 * MIB,
        "destroy keeps the memory reserved"
    );
    let u = d.graph_mem_usage().unwrap();
    assert_eq!(
        (u.used_current_bytes, u.reserved_current_bytes),
        (0, 100 * MIB)
    );
    d.graph_mem_trim().unwrap();
    assert_eq!(free(&mut d), idle);
    let u = d.graph_mem_usage().unwrap();
    assert_eq!(
        (
            u.used_high_bytes,
            u.reserved_high_bytes,
            u.reserved_current_bytes
        ),
        (100 * MIB, 100 * MIB, 0)
    );
}

#[test]
fn relaunch_without_auto_free_fails_while_the_last_launch_allocation_is_live() {
    let (mut d, s) = tiny();
    let g = capture(&mut d, s, 2 * MIB, 3 * MIB);
    d.graph_instantiate(g, false).unwrap();
    d.graph_launch(g, s).unwrap();
    let before = free(&mut d);
    let e = d.graph_launch(g, s).unwrap_err();
    assert!(
        matches!(&e, DeviceError::Driver { call: "cuGraphLaunch", detail } if detail.contains("CUDA_ERROR_INVALID_VALUE")),
        "{e}"
    );
    assert_eq!(free(&mut d), before, "a refused launch changes nothing");
    // Free the output (cuMemFreeAsync): the relaunch works, and takes no new memory.
    let out = *d.graphs.live.keys().next().unwrap();
    d.graph_free(out, s).unwrap();
    d.graph_launch(g, s).unwrap();
    assert_eq!(free(&mut d), before);
}

#[test]
fn auto_free_relaunches_reuse_the_output_and_destroy_leaves_it_live() {
    let (mut d, s) = tiny();
    let idle = free(&mut d);
    let g = capture(&mut d, s, 2 * MIB, 3 * MIB);
    d.graph_instantiate(g, true).unwrap();
    for _ in 0..3 {
        d.graph_launch(g, s).unwrap();
    }
    // Two kernel nodes; 2 MiB cache + a 4 MiB output (3 MiB rounded to the granularity).
    assert_eq!(free(&mut d), idle - 20 * KIB - 6 * MIB);
    d.graph_destroy(g).unwrap();
    d.graph_mem_trim().unwrap();
    assert_eq!(
        free(&mut d),
        idle - 4 * MIB,
        "the live output is never trimmed"
    );
    let u = d.graph_mem_usage().unwrap();
    assert_eq!(
        (u.used_current_bytes, u.reserved_current_bytes),
        (4 * MIB, 4 * MIB)
    );
    let out = *d.graphs.live.keys().next().unwrap();
    d.launch(
        Kernel::Verify {
            ptr: out,
            bytes: 3 * MIB,
            seed: 7,
        },
        StreamId::MAIN,
    )
    .map(|o| assert_eq!(o.mismatch, None, "the graph's fill is in the output"))
    .unwrap();
    d.graph_free(out, s).unwrap();
    d.graph_mem_trim().unwrap();
    assert_eq!(free(&mut d), idle);
}

#[test]
fn graphs_on_one_stream_share_its_cache() {
    let (mut d, s) = tiny();
    let idle = free(&mut d);
    let big = capture(&mut d, s, 64 * MIB, 0);
    let small = capture(&mut d, s, 8 * MIB, 0);
    d.graph_instantiate(big, false).unwrap();
    d.graph_instantiate(small, false).unwrap();
    d.graph_launch(big, s).unwrap();
    d.graph_launch(small, s).unwrap();
    assert_eq!(free(&mut d), idle - 20 * KIB - 64 * MIB);
    // Another stream has its own cache.
    let t = d.create_stream().unwrap();
    d.graph_launch(small, t).unwrap();
    assert_eq!(free(&mut d), idle - 20 * KIB - 72 * MIB);
}

#[test]
fn a_launch_that_cannot_map_its_memory_is_out_of_memory_and_changes_nothing() {
    let (mut d, s) = tiny();
    let g = capture(&mut d, s, 3 << 30, 0);
    d.graph_instantiate(g, false).unwrap();
    let p = d.malloc(1 << 30).unwrap();
    let before = free(&mut d);
    let e = d.graph_launch(g, s).unwrap_err();
    assert!(e.is_oom(), "{e}");
    assert_eq!(free(&mut d), before);
    d.free(p).unwrap();
    d.graph_launch(g, s).unwrap();
}

#[test]
fn upload_maps_early_trim_unmaps_idle_graphs_and_a_relaunch_remaps() {
    let (mut d, s) = tiny();
    let idle = free(&mut d);
    let g = capture(&mut d, s, 32 * MIB, 0);
    d.graph_instantiate(g, false).unwrap();
    d.graph_upload(g, s).unwrap();
    assert_eq!(
        free(&mut d),
        idle - 10 * KIB - 32 * MIB,
        "mapped without running"
    );
    d.graph_launch(g, s).unwrap();
    assert_eq!(free(&mut d), idle - 10 * KIB - 32 * MIB);
    // Still running: a trim leaves it mapped.
    d.graph_mem_trim().unwrap();
    assert_eq!(free(&mut d), idle - 10 * KIB - 32 * MIB);
    d.synchronize().unwrap();
    d.graph_mem_trim().unwrap();
    assert_eq!(free(&mut d), idle - 10 * KIB, "an idle graph is unmapped");
    d.graph_launch(g, s).unwrap();
    assert_eq!(
        free(&mut d),
        idle - 10 * KIB - 32 * MIB,
        "and remapped at its launch"
    );
}

#[test]
fn release_all_ends_an_open_capture() {
    let (mut d, s) = tiny();
    let idle = free(&mut d);
    let g = capture(&mut d, s, 8 * MIB, 2 * MIB);
    d.graph_instantiate(g, true).unwrap();
    d.graph_launch(g, s).unwrap();
    d.graph_begin_capture(s).unwrap();
    d.graph_malloc(MIB, s).unwrap();
    d.release_all().unwrap();
    d.synchronize().unwrap();
    assert_eq!(free(&mut d), idle);
    assert_eq!(d.graph_mem_usage().unwrap().reserved_current_bytes, 0);
}

#[test]
fn capture_rules() {
    let (mut d, s) = tiny();
    let plain = d.malloc(4 * MIB).unwrap();
    assert!(d.graph_malloc(MIB, s).is_err(), "not capturing");
    d.graph_begin_capture(s).unwrap();
    assert!(d.graph_begin_capture(s).is_err(), "already capturing");
    assert!(d.graph_free(plain, s).is_err(), "not a graph allocation");
    assert!(d.stream_synchronize(s).is_err());
    assert!(d.synchronize().is_err());
    assert!(
        d.launch(
            Kernel::Verify {
                ptr: plain,
                bytes: MIB,
                seed: 1
            },
            s
        )
        .is_err()
    );
    d.launch(
        Kernel::Touch {
            ptr: plain,
            bytes: 4 * MIB,
            stride_bytes: 4096,
        },
        s,
    )
    .expect("memory allocated outside may be used by a captured kernel");
    let (g, shape) = d.graph_end_capture(s).unwrap();
    assert_eq!((shape.kernel_nodes, shape.alloc_nodes), (1, 0));
    assert!(d.graph_launch(g, s).is_err(), "not instantiated");
    d.graph_instantiate(g, false).unwrap();
    assert!(
        d.graph_instantiate(g, false).is_err(),
        "one executable at a time"
    );
    d.graph_destroy(g).unwrap();
    assert!(d.graph_launch(g, s).is_err(), "destroyed");
}

/// The usage kept as graphs change equals the usage recomputed from every graph, after each
/// kind of change: instantiate, upload, launch, relaunch, a move to another stream, a free of a
/// launch's output, destroy (mapped and not), trim, a refused launch, release of everything.
#[test]
fn kept_usage_equals_usage_recomputed_from_every_graph() {
    let (mut d, s) = tiny();
    let s2 = d.create_stream().unwrap();
    let agree = |d: &SimDevice, what: &str| {
        assert_eq!(
            d.graphs.used(),
            d.graphs.used_recomputed(),
            "used after {what}"
        );
        assert_eq!(
            d.graphs.exec_bytes(),
            d.graphs.exec_bytes_recomputed(),
            "executables after {what}"
        );
    };
    let a = capture(&mut d, s, 100 * MIB, 8 * MIB);
    let b = capture(&mut d, s, 300 * MIB, 0);
    let c = capture(&mut d, s2, 50 * MIB, 4 * MIB);
    agree(&d, "captures");
    for g in [a, b, c] {
        d.graph_instantiate(g, true).unwrap();
    }
    agree(&d, "instantiate");
    d.graph_upload(b, s).unwrap();
    agree(&d, "upload");
    d.graph_launch(a, s).unwrap();
    d.graph_launch(c, s2).unwrap();
    agree(&d, "launches");
    d.graph_launch(a, s).unwrap();
    agree(&d, "an auto-free relaunch");
    d.graph_launch(b, s2).unwrap();
    agree(&d, "a launch on another stream");
    assert_eq!(
        d.graphs.used(),
        (100 * MIB).max(50 * MIB) + 300 * MIB + 8 * MIB + 4 * MIB,
        "s keeps a's 100 MiB; s2 holds b's 300 MiB; two outputs live"
    );
    let outputs: Vec<_> = d.graphs.live.keys().copied().collect();
    d.graph_free(outputs[0], s).unwrap();
    agree(&d, "a free of a launch's output");
    d.graph_destroy(b).unwrap();
    agree(&d, "destroy of a mapped graph");
    d.synchronize().unwrap();
    d.graph_mem_trim().unwrap();
    agree(&d, "trim");
    let big = capture(&mut d, s, 8 << 30, 0);
    d.graph_instantiate(big, false).unwrap();
    assert!(matches!(
        d.graph_launch(big, s),
        Err(DeviceError::OutOfMemory { .. })
    ));
    agree(&d, "a refused launch");
    d.graph_destroy(big).unwrap();
    d.graph_launch(c, s).unwrap();
    agree(&d, "a relaunch after trim, on the other stream");
    d.release_all().unwrap();
    agree(&d, "release of everything");
}
