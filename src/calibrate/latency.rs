//! Latencies of the driver calls the simulator charges: memory queries, NVML, allocation
//! (a line through sizes), frees, stream-ordered allocation, synchronize, stream creation and
//! kernel launches, each a median of repeated calls.

use crate::calibrate::{Notes, fit, median, time_calls};
use crate::device::profile::{LatencyModel, SimProfile};
use crate::device::{Device, Kernel, PoolConfig, StreamId};
use crate::units::{DurationNs, GIB, MIB};

/// Every latency but the context's creation (which the caller measured).
pub(super) fn measure(
    dev: &mut dyn Device,
    fallback: &SimProfile,
    notes: &mut Notes,
) -> anyhow::Result<LatencyModel> {
    let mem_get_info_ns = time_calls(dev, 2000, |d| Ok(d.mem_info().map(|_| ())?))?;
    notes.insert(
        "latency.mem_get_info",
        "median of 2000 cuMemGetInfo calls".into(),
    );
    let nvml_ns = if dev.nvml_memory().is_some() {
        notes.insert(
            "latency.nvml_memory",
            "median of 200 NVML memory-info calls".into(),
        );
        time_calls(dev, 200, |d| {
            d.nvml_memory();
            Ok(())
        })?
    } else {
        notes.insert(
            "latency.nvml_memory",
            "NOT MEASURED (no NVML): the h200 profile's figure".into(),
        );
        fallback.latency.nvml_memory.0
    };
    let free_now = dev.mem_info()?.free_bytes;
    let mut points = Vec::new();
    let mut free_times = Vec::new();
    for size in [
        2 * MIB,
        64 * MIB,
        GIB,
        (8 * GIB).min(free_now / 4 / GIB * GIB).max(2 * GIB),
    ] {
        if size > free_now / 2 {
            continue;
        }
        for _ in 0..5 {
            let t0 = dev.now_ns();
            let p = dev.malloc(size)?;
            let t1 = dev.now_ns();
            dev.free(p)?;
            free_times.push(dev.now_ns() - t1);
            points.push((size as f64 / GIB as f64, (t1 - t0) as f64));
        }
    }
    let (base, per_gib) = fit(&points);
    notes.insert(
        "latency.malloc_base",
        format!(
            "least-squares line through {} cuMemAlloc timings, 2 MiB to several GiB",
            points.len()
        ),
    );
    notes.insert("latency.malloc_per_gib", "slope of the same line".into());
    notes.insert(
        "latency.free",
        "median cuMemFree time of the same allocations".into(),
    );

    let (malloc_async, free_async) = if dev.info().capabilities.memory_pools_supported {
        stream_ordered(dev, notes)?
    } else {
        notes.insert("latency.malloc_async", super::NO_POOLS.into());
        notes.insert("latency.free_async", super::NO_POOLS.into());
        (fallback.latency.malloc_async, fallback.latency.free_async)
    };
    let sync_ns = time_calls(dev, 100, |d| Ok(d.synchronize()?))?;
    notes.insert(
        "latency.synchronize",
        "median of 100 idle cuCtxSynchronize".into(),
    );
    let t0 = dev.now_ns();
    let mut streams = 0u64;
    for _ in 0..4 {
        dev.create_stream()?;
        streams += 1;
    }
    let stream_ns = (dev.now_ns() - t0) / streams;
    notes.insert("latency.stream_create", "mean of 4 cuStreamCreate".into());
    let launch_ns = time_calls(dev, 200, |d| {
        Ok(d.launch(Kernel::Spin { duration_ns: 1 }, StreamId::MAIN)
            .map(|_| ())?)
    })?;
    dev.synchronize()?;
    notes.insert(
        "latency.launch",
        "median host time of 200 launches of a 1 ns spin kernel".into(),
    );

    Ok(LatencyModel {
        mem_get_info: DurationNs(mem_get_info_ns),
        nvml_memory: DurationNs(nvml_ns),
        malloc_base: DurationNs(base.max(0.0).round() as u64),
        malloc_per_gib: DurationNs(per_gib.max(0.0).round() as u64),
        free: DurationNs(median(free_times)),
        malloc_async,
        free_async,
        launch: DurationNs(launch_ns),
        stream_create: DurationNs(stream_ns),
        synchronize: DurationNs(sync_ns),
        context_create: DurationNs(0),
    })
}

/// Medians of 20 stream-ordered allocations of 64 MiB and their frees.
fn stream_ordered(
    dev: &mut dyn Device,
    notes: &mut Notes,
) -> anyhow::Result<(DurationNs, DurationNs)> {
    dev.pool_configure(PoolConfig::default())?;
    let mut async_alloc = Vec::new();
    let mut async_free = Vec::new();
    for _ in 0..20 {
        let t0 = dev.now_ns();
        let p = dev.malloc_async(64 * MIB, StreamId::MAIN)?;
        let t1 = dev.now_ns();
        dev.free_async(p, StreamId::MAIN)?;
        async_free.push(dev.now_ns() - t1);
        async_alloc.push(t1 - t0);
    }
    dev.synchronize()?;
    notes.insert(
        "latency.malloc_async",
        "median of 20 cuMemAllocFromPoolAsync of 64 MiB".into(),
    );
    notes.insert(
        "latency.free_async",
        "median of the matching cuMemFreeAsync".into(),
    );
    Ok((
        DurationNs(median(async_alloc)),
        DurationNs(median(async_free)),
    ))
}
