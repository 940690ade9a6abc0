//! `headroom calibrate`: measure what the simulator needs from a device and write it as a
//! profile that `--profile FILE` loads.
//!
//! Every figure comes from the device's own answers: granularity and packing from the drop in
//! free memory that allocations cause, latencies from repeated calls, bandwidth from the
//! harness's kernels, the stack reservation from two deep-stack kernels. Run on the simulator it
//! measures the simulator, which must give its own profile back (a self-check of both).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context;

use crate::bandwidth;
use crate::device::prelude::*;
use crate::device::profile::{
    BandwidthModel, GraphModel, KernelModel, LatencyModel, MemoryModel, SimProfile, StackModel,
};
use crate::device::{Kernel, NvmlMemory, PoolConfig, StreamId};
use crate::kernels;
use crate::units::{Bytes, DurationNs, GIB, MIB, Size};

/// A measured profile and, per key, how it was obtained.
pub struct Calibration {
    pub profile: SimProfile,
    /// Key (e.g. `memory.page_bytes`) → one line saying how it was measured.
    pub notes: BTreeMap<&'static str, String>,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Free-memory drop caused by `f` (positive when memory was taken).
fn drop_of<T>(
    dev: &mut dyn Device,
    f: impl FnOnce(&mut dyn Device) -> anyhow::Result<T>,
) -> anyhow::Result<(i64, T)> {
    let before = dev.mem_info()?.free_bytes;
    let out = f(dev)?;
    let after = dev.mem_info()?.free_bytes;
    Ok((before as i64 - after as i64, out))
}

/// Times `n` calls of `f` with the device's clock; returns the median in ns.
fn time_calls(
    dev: &mut dyn Device,
    n: usize,
    mut f: impl FnMut(&mut dyn Device) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = dev.now_ns();
        f(dev)?;
        v.push(dev.now_ns() - t0);
    }
    Ok(median(v))
}

/// Least-squares line through (x, y): (intercept, slope).
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - slope * mx, slope)
}

/// Measures `dev`. `before_context` is NVML's reading before the context existed (for the
/// context's overhead); `context_create_ns` how long creating it took; `name` the new
/// profile's name.
pub fn calibrate(
    dev: &mut dyn Device,
    before_context: Option<NvmlMemory>,
    context_create_ns: u64,
    name: &str,
) -> anyhow::Result<Calibration> {
    let mut notes: BTreeMap<&'static str, String> = BTreeMap::new();
    let info = dev.info().clone();
    let mem0 = dev.mem_info()?;
    let nvml = dev.nvml_memory();
    let fallback = SimProfile::resolve("h200")?;

    // Context overhead: NVML used after the context minus before it.
    let context_overhead = match (before_context, nvml) {
        (Some(b), Some(a)) => {
            notes.insert(
                "memory.context_overhead_bytes",
                "NVML used after the context was created minus before".into(),
            );
            a.used_bytes.saturating_sub(b.used_bytes)
        }
        _ => {
            notes.insert(
                "memory.context_overhead_bytes",
                "NOT MEASURED (no NVML): the h200 profile's figure".into(),
            );
            fallback.memory.context_overhead_bytes.0
        }
    };
    let nvml_reserved = match nvml {
        Some(n) => {
            notes.insert(
                "memory.nvml_reserved_bytes",
                "NVML memory info v2 `reserved`".into(),
            );
            n.reserved_bytes
        }
        None => {
            notes.insert(
                "memory.nvml_reserved_bytes",
                "NOT MEASURED (no NVML): the h200 profile's figure".into(),
            );
            fallback.memory.nvml_reserved_bytes.0
        }
    };
    notes.insert("memory.total_bytes", "cuMemGetInfo total".into());

    // Page granularity: the drop a 1 MiB + 4 KiB allocation causes.
    let (page_drop, p) = drop_of(dev, |d| Ok(d.malloc(MIB + 4096)?))?;
    dev.free(p)?;
    let page_bytes = (page_drop.max(1) as u64).next_power_of_two();
    notes.insert(
        "memory.page_bytes",
        format!("free memory dropped {page_drop} bytes for a 1 MiB + 4 KiB cuMemAlloc"),
    );

    // Small-allocation packing: the distance between two small allocations in one page.
    let (first_drop, a) = drop_of(dev, |d| Ok(d.malloc(100)?))?;
    let (second_drop, b) = drop_of(dev, |d| Ok(d.malloc(100)?))?;
    let spacing = if second_drop == 0 && b > a {
        (b - a).next_power_of_two()
    } else {
        512
    };
    notes.insert(
        "memory.small_alloc_spacing_bytes",
        format!("two 100-byte cuMemAllocs: the first took {first_drop} bytes, the second {second_drop}, {} bytes apart", b.abs_diff(a)),
    );
    dev.free(a)?;
    dev.free(b)?;

    // The largest size whose second allocation shares the first one's page.
    let mut small_limit = 0;
    for size in [64 << 10, 256 << 10, 512 << 10, MIB, MIB + 512, 2 * MIB] {
        let x = dev.malloc(size)?;
        let (d2, y) = drop_of(dev, |d| Ok(d.malloc(size)?))?;
        dev.free(y)?;
        dev.free(x)?;
        if d2 == 0 {
            small_limit = size;
        }
    }
    notes.insert(
        "memory.small_alloc_limit_bytes",
        "largest of 64 KiB…2 MiB whose second allocation took no new page".into(),
    );

    // Kernel modules: what loading headroom's kernels (all but the stack kernels) took, less
    // the page verify's 16-byte result buffer opens.
    let all_but_stack: Vec<_> = kernels::Module::ALL
        .into_iter()
        .filter(|m| *m != kernels::Module::Stack)
        .collect();
    let (kernels_drop, modules) = drop_of(dev, |d| Ok(d.load_kernels(&all_but_stack)?))?;
    let module_bytes =
        (kernels_drop.max(0) as u64).saturating_sub(page_bytes) / modules.max(1) as u64;
    notes.insert(
        "kernels.module_bytes",
        format!(
            "free memory dropped {kernels_drop} bytes when {modules} modules and verify's result \
             buffer (one page) were loaded"
        ),
    );

    // Latencies.
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
    let p = dev.malloc_async(1, StreamId::MAIN)?;
    let pool_granule = dev.pool_usage()?.reserved_current_bytes;
    dev.free_async(p, StreamId::MAIN)?;
    dev.synchronize()?;
    let released = dev.pool_usage()?.reserved_current_bytes == 0;
    notes.insert(
        "memory.pool_granularity_bytes",
        format!("pool reserved after a 1-byte stream-ordered allocation; released at synchronize with threshold 0: {released}"),
    );
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
    notes.insert(
        "latency.context_create",
        "time to create the primary context".into(),
    );

    // Bandwidth, with the harness's kernels and the driver's copy and memset.
    let size = (GIB)
        .min(dev.mem_info()?.free_bytes / 8 / (2 * MIB) * (2 * MIB))
        .max(2 * MIB);
    let bw = bandwidth::measure(dev, size, 5, 0).context("measuring bandwidth")?;
    let rate = |n: &str| {
        bw.rows
            .iter()
            .find(|r| r.name == n)
            .map_or(0.0, |r| r.bytes_per_s)
    };
    let t = dev.malloc(size)?;
    let pages = kernels::touch_count(size, 64 << 10);
    let touch_ns = dev.timed_launch(
        Kernel::Touch {
            ptr: t,
            bytes: size,
            stride_bytes: 64 << 10,
        },
        StreamId::MAIN,
        5,
    )?;
    dev.free(t)?;
    let touch_rate = pages as f64 * 5.0 / (touch_ns.max(1) as f64 / 1e9);
    for k in [
        "bandwidth.copy_bytes_per_s",
        "bandwidth.fill_bytes_per_s",
        "bandwidth.verify_bytes_per_s",
        "bandwidth.memset_bytes_per_s",
    ] {
        notes.insert(
            k,
            format!(
                "headroom bandwidth on {} buffers, 5 launches each",
                Bytes(size)
            ),
        );
    }
    notes.insert(
        "bandwidth.touch_pages_per_s",
        format!(
            "5 touch launches over {}, one write per 64 KiB",
            Bytes(size)
        ),
    );

    // Stack reservation: two deep-stack kernels, 4 KiB then 16 KiB frames (their module loaded
    // first, so that its memory is not counted as stack).
    dev.load_kernels(&[kernels::Module::Stack])?;
    // The driver reports the stack limit before and after each launch (`cuCtxGetLimit`), so
    // nothing about the kernels' frames is assumed: the second launch's drop divided by how
    // far it raised the limit, per SM, is the resident threads the reservation covers.
    let (d4, o4) = drop_of(dev, |d| {
        Ok(d.launch(Kernel::Stack { frame_bytes: 4096 }, StreamId::MAIN)?)
    })?;
    let (d16, o16) = drop_of(dev, |d| {
        Ok(d.launch(Kernel::Stack { frame_bytes: 16384 }, StreamId::MAIN)?)
    })?;
    let (Some(s4), Some(s16)) = (o4.stack, o16.stack) else {
        anyhow::bail!("the device did not report the stack limit around a stack_* launch");
    };
    let sms = info.multiprocessors.max(1) as u64;
    let raised_bytes = s16.limit_after_bytes.saturating_sub(s4.limit_after_bytes);
    let threads = (d16.max(0) as u64) / (raised_bytes.max(1) * sms);
    let default_stack = s4.limit_before_bytes;
    notes.insert(
        "stack.threads_per_multiprocessor",
        format!(
            "a kernel raising the stack limit from {} to {} bytes per thread took {d16} bytes \
             ({d4} for the one raising it to {}): bytes ÷ (raise × SMs)",
            s4.limit_after_bytes, s16.limit_after_bytes, s4.limit_after_bytes
        ),
    );
    notes.insert(
        "stack.default_per_thread_bytes",
        "cuCtxGetLimit(CU_LIMIT_STACK_SIZE) before the first deep-stack kernel".into(),
    );

    let profile = SimProfile {
        name: name.to_string(),
        gpu_name: format!(
            "{} (calibrated)",
            info.name.trim_end_matches(" (simulated)")
        ),
        compute_capability: info.compute_capability.clone(),
        multiprocessors: info.multiprocessors,
        driver_version: info.driver_version.clone(),
        memory: MemoryModel {
            total_bytes: Size(mem0.total_bytes),
            nvml_reserved_bytes: Size(nvml_reserved),
            context_overhead_bytes: Size(context_overhead),
            page_bytes: Size(page_bytes),
            small_alloc_limit_bytes: Size(small_limit.min(page_bytes)),
            small_alloc_spacing_bytes: Size(spacing),
            pool_granularity_bytes: Size(pool_granule.max(1).next_power_of_two()),
        },
        latency: LatencyModel {
            mem_get_info: DurationNs(mem_get_info_ns),
            nvml_memory: DurationNs(nvml_ns),
            malloc_base: DurationNs(base.max(0.0).round() as u64),
            malloc_per_gib: DurationNs(per_gib.max(0.0).round() as u64),
            free: DurationNs(median(free_times)),
            malloc_async: DurationNs(median(async_alloc)),
            free_async: DurationNs(median(async_free)),
            launch: DurationNs(launch_ns),
            stream_create: DurationNs(stream_ns),
            synchronize: DurationNs(sync_ns),
            context_create: DurationNs(context_create_ns),
        },
        bandwidth: BandwidthModel {
            copy_bytes_per_s: rate("cuMemcpyDtoD"),
            fill_bytes_per_s: rate("fill"),
            verify_bytes_per_s: rate("verify"),
            memset_bytes_per_s: rate("cuMemsetD32"),
            touch_pages_per_s: touch_rate,
        },
        stack: StackModel {
            threads_per_multiprocessor: threads.max(1) as u32,
            default_per_thread_bytes: Size(default_stack),
        },
        graphs: GraphModel::default(),
        kernels: KernelModel {
            module_bytes: Size(module_bytes),
        },
        other_processes: Vec::new(),
    };
    notes.insert(
        "graphs.exec_bytes_per_node",
        "NOT MEASURED: the built-in figure".into(),
    );
    notes.insert(
        "graphs.alloc_granularity_bytes",
        "NOT MEASURED: the built-in figure".into(),
    );
    Ok(Calibration { profile, notes })
}

/// The profile as TOML in the shipped profiles' layout, each key commented with its method.
pub fn to_toml(c: &Calibration, header: &str) -> String {
    let p = &c.profile;
    let mut o = String::new();
    for line in header.lines() {
        let _ = writeln!(o, "# {line}");
    }
    let note = |k: &str| {
        c.notes
            .get(k)
            .map(|n| format!("  # {n}"))
            .unwrap_or_default()
    };
    let _ = writeln!(o, "name = {:?}", p.name);
    let _ = writeln!(o, "gpu_name = {:?}", p.gpu_name);
    let _ = writeln!(o, "compute_capability = {:?}", p.compute_capability);
    let _ = writeln!(o, "multiprocessors = {}", p.multiprocessors);
    let _ = writeln!(o, "driver_version = {:?}", p.driver_version);
    let m = &p.memory;
    let _ = writeln!(o, "\n[memory]");
    for (k, v) in [
        ("total_bytes", m.total_bytes.0),
        ("nvml_reserved_bytes", m.nvml_reserved_bytes.0),
        ("context_overhead_bytes", m.context_overhead_bytes.0),
        ("page_bytes", m.page_bytes.0),
        ("small_alloc_limit_bytes", m.small_alloc_limit_bytes.0),
        ("small_alloc_spacing_bytes", m.small_alloc_spacing_bytes.0),
        ("pool_granularity_bytes", m.pool_granularity_bytes.0),
    ] {
        let _ = writeln!(o, "{k} = {v}{}", note(&format!("memory.{k}")));
    }
    let l = &p.latency;
    let _ = writeln!(o, "\n[latency]");
    for (k, v) in [
        ("mem_get_info", l.mem_get_info.0),
        ("nvml_memory", l.nvml_memory.0),
        ("malloc_base", l.malloc_base.0),
        ("malloc_per_gib", l.malloc_per_gib.0),
        ("free", l.free.0),
        ("malloc_async", l.malloc_async.0),
        ("free_async", l.free_async.0),
        ("launch", l.launch.0),
        ("stream_create", l.stream_create.0),
        ("synchronize", l.synchronize.0),
        ("context_create", l.context_create.0),
    ] {
        let _ = writeln!(o, "{k} = \"{v}ns\"{}", note(&format!("latency.{k}")));
    }
    let b = &p.bandwidth;
    let _ = writeln!(o, "\n[bandwidth]");
    for (k, v) in [
        ("copy_bytes_per_s", b.copy_bytes_per_s),
        ("fill_bytes_per_s", b.fill_bytes_per_s),
        ("verify_bytes_per_s", b.verify_bytes_per_s),
        ("memset_bytes_per_s", b.memset_bytes_per_s),
        ("touch_pages_per_s", b.touch_pages_per_s),
    ] {
        let _ = writeln!(o, "{k} = {v:e}{}", note(&format!("bandwidth.{k}")));
    }
    let s = &p.stack;
    let _ = writeln!(o, "\n[stack]");
    let _ = writeln!(
        o,
        "threads_per_multiprocessor = {}{}",
        s.threads_per_multiprocessor,
        note("stack.threads_per_multiprocessor")
    );
    let _ = writeln!(
        o,
        "default_per_thread_bytes = {}{}",
        s.default_per_thread_bytes.0,
        note("stack.default_per_thread_bytes")
    );
    let g = &p.graphs;
    let _ = writeln!(o, "\n[graphs]");
    let _ = writeln!(
        o,
        "exec_bytes_per_node = {}{}",
        g.exec_bytes_per_node.0,
        note("graphs.exec_bytes_per_node")
    );
    let _ = writeln!(
        o,
        "alloc_granularity_bytes = {}{}",
        g.alloc_granularity_bytes.0,
        note("graphs.alloc_granularity_bytes")
    );
    let _ = writeln!(o, "\n[kernels]");
    let _ = writeln!(
        o,
        "module_bytes = {}{}",
        p.kernels.module_bytes.0,
        note("kernels.module_bytes")
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::SimDevice;

    /// Calibrating the simulator measures the simulator: its own profile must come back.
    #[test]
    fn calibrating_the_simulator_gives_its_profile_back() {
        let with_modules = {
            let mut p = SimProfile::resolve("tiny-4g").unwrap();
            p.kernels.module_bytes = Size(3 * MIB);
            p.name = "tiny-4g with 3 MiB modules".into();
            p
        };
        for p in [
            SimProfile::resolve("tiny-4g").unwrap(),
            SimProfile::resolve("h200").unwrap(),
            with_modules,
        ] {
            let name = p.name.clone();
            let mut dev = SimDevice::open(p.clone(), 0);
            let before = Some(dev.before_context());
            let c = calibrate(&mut dev, before, p.latency.context_create.0, "measured").unwrap();
            let q = &c.profile;
            assert_eq!(q.memory, p.memory, "{name}");
            assert_eq!(q.stack, p.stack, "{name}");
            assert_eq!(q.kernels, p.kernels, "{name}");
            assert_eq!(q.multiprocessors, p.multiprocessors);
            let (pl, ql) = (&p.latency, &q.latency);
            assert_eq!(ql.mem_get_info, pl.mem_get_info);
            assert_eq!(ql.nvml_memory, pl.nvml_memory);
            assert_eq!(ql.malloc_async, pl.malloc_async);
            assert_eq!(ql.free_async, pl.free_async);
            assert_eq!(ql.launch, pl.launch);
            assert_eq!(ql.stream_create, pl.stream_create);
            assert_eq!(ql.synchronize, pl.synchronize);
            assert_eq!(ql.context_create, pl.context_create);
            assert!(
                ql.malloc_base.0.abs_diff(pl.malloc_base.0) <= 200,
                "{name}: {:?} vs {:?}",
                ql.malloc_base,
                pl.malloc_base
            );
            assert!(
                ql.malloc_per_gib.0.abs_diff(pl.malloc_per_gib.0) <= 200,
                "{name}: {:?} vs {:?}",
                ql.malloc_per_gib,
                pl.malloc_per_gib
            );
            let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-3;
            let (pb, qb) = (&p.bandwidth, &q.bandwidth);
            assert!(close(qb.copy_bytes_per_s, pb.copy_bytes_per_s), "{name}");
            assert!(close(qb.fill_bytes_per_s, pb.fill_bytes_per_s), "{name}");
            assert!(
                close(qb.verify_bytes_per_s, pb.verify_bytes_per_s),
                "{name}"
            );
            assert!(
                close(qb.memset_bytes_per_s, pb.memset_bytes_per_s),
                "{name}"
            );
            assert!(close(qb.touch_pages_per_s, pb.touch_pages_per_s), "{name}");
            // The written file loads as a profile and says how each figure was measured.
            let text = to_toml(&c, "test");
            let back = SimProfile::from_toml(&text, "calibrated.toml").unwrap();
            assert_eq!(back.memory, q.memory);
            assert!(
                text.contains("# free memory dropped 2097152 bytes"),
                "{text}"
            );
        }
    }
}
