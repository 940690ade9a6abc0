//! `headroom calibrate`: measure what the simulator needs from a device and write it as a
//! profile that `--profile FILE` loads.
//!
//! Every figure comes from the device's own answers, one measurement per module: memory
//! (context, NVML's reserved share, page granularity, small-allocation packing, the pool's
//! granule, kernel modules) from the drop in free memory that allocations cause, latencies
//! from repeated calls, bandwidth from the harness's kernels, the stack reservation from two
//! deep-stack kernels and the driver's stack limit. Run on the simulator it measures the
//! simulator, which must give its own profile back (a self-check of both).

mod latency;
mod memory;
mod stack;
mod throughput;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::device::profile::{GraphModel, KernelModel, SimProfile};
use crate::device::{Device, NvmlMemory};

/// Key (e.g. `memory.page_bytes`) → one line saying how it was measured.
pub(crate) type Notes = BTreeMap<&'static str, String>;

/// The note of a figure a device without memory pools cannot give.
pub(crate) const NO_POOLS: &str = "NOT MEASURED: the device has no memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0); the built-in figure";

/// A measured profile and, per key, how it was obtained.
pub struct Calibration {
    pub profile: SimProfile,
    /// Key (e.g. `memory.page_bytes`) → one line saying how it was measured.
    pub notes: Notes,
}

pub(crate) fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Free-memory drop caused by `f` (positive when memory was taken).
pub(crate) fn drop_of<T>(
    dev: &mut dyn Device,
    f: impl FnOnce(&mut dyn Device) -> anyhow::Result<T>,
) -> anyhow::Result<(i64, T)> {
    let before = dev.mem_info()?.free_bytes;
    let out = f(dev)?;
    let after = dev.mem_info()?.free_bytes;
    Ok((before as i64 - after as i64, out))
}

/// Times `n` calls of `f` with the device's clock; returns the median in ns.
pub(crate) fn time_calls(
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
pub(crate) fn fit(points: &[(f64, f64)]) -> (f64, f64) {
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
    let mut notes = Notes::new();
    let info = dev.info().clone();
    let fallback = SimProfile::resolve("h200")?;
    let memory = memory::measure(dev, before_context, &fallback, &mut notes)?;
    let module_bytes = memory::kernel_modules(dev, memory.page_bytes.0, &mut notes)?;
    let mut latency = latency::measure(dev, &fallback, &mut notes)?;
    latency.context_create = crate::units::DurationNs(context_create_ns);
    notes.insert(
        "latency.context_create",
        "time to create the primary context".into(),
    );
    let bandwidth = throughput::measure(dev, &mut notes)?;
    let stack = stack::measure(dev, &mut notes)?;
    let profile = SimProfile {
        name: name.to_string(),
        gpu_name: format!(
            "{} (calibrated)",
            info.name.trim_end_matches(" (simulated)")
        ),
        compute_capability: info.compute_capability.clone(),
        multiprocessors: info.multiprocessors,
        driver_version: info.driver_version.clone(),
        memory,
        latency,
        bandwidth,
        stack,
        graphs: GraphModel::default(),
        kernels: KernelModel {
            module_bytes: crate::units::Size(module_bytes),
        },
        other_processes: Vec::new(),
        capabilities: info.capabilities,
        mig: Vec::new(),
        mig_of: None,
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
    let c = &p.capabilities;
    let _ = writeln!(o, "\n[capabilities]");
    let _ = writeln!(
        o,
        "memory_pools_supported = {}  # CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED",
        c.memory_pools_supported
    );
    let _ = writeln!(
        o,
        "virtual_memory_management_supported = {}  # CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
        c.virtual_memory_management_supported
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::SimDevice;
    use crate::units::{MIB, Size};

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
