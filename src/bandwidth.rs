//! `headroom bandwidth`: the harness's own kernels against the driver's copy and memset, on one
//! size, in one run, as ratios.
//!
//! Bytes are counted the way the targets are stated: fill and memset write each byte once,
//! verify reads it once, a copy reads and writes (2×), triad reads two and writes one (3×).

use serde::Serialize;

use crate::device::prelude::*;

use crate::device::{DevPtr, DeviceInfo, Kernel, StreamId};
use crate::text_table::{Align, TextTable};
use crate::units::Bytes;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Row {
    pub name: &'static str,
    /// How the bytes are counted.
    pub counted_as: &'static str,
    pub bytes_per_launch: u64,
    pub launches: u32,
    pub gpu_ns: u64,
    pub bytes_per_s: f64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Ratio {
    pub name: &'static str,
    pub value: f64,
    pub target: f64,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct BandwidthReport {
    pub device: DeviceInfo,
    pub size_bytes: u64,
    pub repeats: u32,
    /// True on the simulator: the figures come from the profile, not a measurement.
    pub modeled: bool,
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
    /// Mismatches `verify` found after `fill` (must be 0).
    pub verify_mismatches: u64,
}

impl BandwidthReport {
    fn rate(&self, name: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .map_or(0.0, |r| r.bytes_per_s)
    }
}

/// Measures on three buffers of `size_bytes`; frees them whatever happens.
pub fn measure(
    dev: &mut dyn Device,
    size_bytes: u64,
    repeats: u32,
    keep_free_bytes: u64,
) -> anyhow::Result<BandwidthReport> {
    check_room(dev, size_bytes, repeats, keep_free_bytes)?;
    let mut bufs: Vec<DevPtr> = Vec::new();
    let result = (|| -> anyhow::Result<BandwidthReport> {
        for _ in 0..3 {
            bufs.push(dev.malloc(size_bytes)?);
        }
        let verify_mismatches = fill_then_verify(dev, bufs[1], size_bytes)?;
        let mut rows = Vec::new();
        for case in cases([bufs[0], bufs[1], bufs[2]], size_bytes) {
            rows.push(time_case(dev, case, bufs[0], size_bytes, repeats)?);
        }
        let mut report = BandwidthReport {
            device: dev.info().clone(),
            size_bytes,
            repeats,
            modeled: dev.info().is_sim(),
            rows,
            ratios: Vec::new(),
            verify_mismatches,
        };
        report.ratios = ratios(&report);
        Ok(report)
    })();
    for p in bufs {
        if let Err(e) = dev.free(p) {
            crate::errln!("warning: freeing a bandwidth buffer: {e}");
        }
    }
    result
}

/// Refuses a size that is not a multiple of 4 bytes, or three buffers of it that would not
/// fit on the device or would pass the free-memory floor.
fn check_room(
    dev: &mut dyn Device,
    size_bytes: u64,
    repeats: u32,
    keep_free_bytes: u64,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        size_bytes >= 4 && size_bytes % 4 == 0,
        "--size must be a positive multiple of 4 bytes, not {size_bytes}"
    );
    anyhow::ensure!(repeats > 0, "--repeats must be at least 1");
    let total = dev.info().total_bytes;
    // A size whose page multiple passes 2^64 saturates, and three of it overflow: refused.
    let need = dev
        .alloc_rounding()
        .at_most_bytes(size_bytes)
        .checked_mul(3);
    let Some(need) = need.filter(|&n| n <= total) else {
        anyhow::bail!(
            "--size {size_bytes}B ({}): three buffers of it need more than the device's {} in total; choose a smaller --size",
            Bytes(size_bytes),
            Bytes(total)
        );
    };
    let free = dev.mem_info()?.free_bytes;
    anyhow::ensure!(
        free >= need.saturating_add(keep_free_bytes),
        "three buffers of {} need {} with {} free and a floor of {}; choose a smaller --size",
        Bytes(size_bytes),
        Bytes(need),
        Bytes(free),
        Bytes(keep_free_bytes)
    );
    Ok(())
}

/// Correctness first: what is timed must also be right. Returns the mismatches `verify`
/// finds after `fill` (0).
fn fill_then_verify(dev: &mut dyn Device, ptr: DevPtr, bytes: u64) -> anyhow::Result<u64> {
    let s = StreamId::MAIN;
    dev.launch(
        Kernel::Fill {
            ptr,
            bytes,
            seed: 11,
        },
        s,
    )?;
    let outcome = dev.launch(
        Kernel::Verify {
            ptr,
            bytes,
            seed: 11,
        },
        s,
    )?;
    Ok(outcome.mismatch.map_or(0, |m| m.count))
}

/// One timed operation: its name, how its bytes are counted, bytes per launch, the kernel.
struct Case {
    name: &'static str,
    counted_as: &'static str,
    bytes_per_launch: u64,
    kernel: Kernel,
}

/// headroom's four kernels and the driver's two operations over buffers `a`, `b`, `c` of `n`
/// bytes each.
fn cases([a, b, c]: [DevPtr; 3], n: u64) -> [Case; 6] {
    let case = |name, counted_as, bytes_per_launch, kernel| Case {
        name,
        counted_as,
        bytes_per_launch,
        kernel,
    };
    let (read, written, both) = ("bytes read", "bytes written", "bytes read + written");
    [
        case(
            "fill",
            written,
            n,
            Kernel::Fill {
                ptr: a,
                bytes: n,
                seed: 5,
            },
        ),
        case(
            "verify",
            read,
            n,
            Kernel::Verify {
                ptr: a,
                bytes: n,
                seed: 5,
            },
        ),
        case(
            "copy",
            both,
            2 * n,
            Kernel::Copy {
                dst: c,
                src: b,
                bytes: n,
            },
        ),
        case(
            "triad",
            both,
            3 * n,
            Kernel::Triad {
                a: c,
                b,
                c: a,
                bytes: n,
                scalar: 3.0,
            },
        ),
        case(
            "cuMemsetD32",
            written,
            n,
            Kernel::Memset {
                ptr: a,
                bytes: n,
                value: 0,
            },
        ),
        case(
            "cuMemcpyDtoD",
            both,
            2 * n,
            Kernel::DriverCopy {
                dst: c,
                src: b,
                bytes: n,
            },
        ),
    ]
}

/// A warm-up launch, then `repeats` timed launches of the case.
fn time_case(
    dev: &mut dyn Device,
    case: Case,
    a: DevPtr,
    n: u64,
    repeats: u32,
) -> anyhow::Result<Row> {
    let s = StreamId::MAIN;
    if case.name == "verify" {
        // The timed fill before it left `a` holding seed 5.
        dev.launch(
            Kernel::Fill {
                ptr: a,
                bytes: n,
                seed: 5,
            },
            s,
        )?;
    }
    dev.timed_launch(case.kernel, s, 1)?; // warm-up
    let gpu_ns = dev.timed_launch(case.kernel, s, repeats)?.max(1);
    Ok(Row {
        name: case.name,
        counted_as: case.counted_as,
        bytes_per_launch: case.bytes_per_launch,
        launches: repeats,
        gpu_ns,
        bytes_per_s: case.bytes_per_launch as f64 * repeats as f64 / (gpu_ns as f64 / 1e9),
    })
}

/// The targets: headroom's kernels next to the driver's operations.
fn ratios(report: &BandwidthReport) -> Vec<Ratio> {
    let copy = report.rate("cuMemcpyDtoD");
    let memset = report.rate("cuMemsetD32");
    vec![
        ratio(
            "fill / device-to-device copy",
            report.rate("fill"),
            copy,
            0.90,
        ),
        ratio(
            "verify / device-to-device copy",
            report.rate("verify"),
            copy,
            0.85,
        ),
        ratio("fill / cuMemsetD32", report.rate("fill"), memset, 1.0),
        ratio(
            "copy kernel / device-to-device copy",
            report.rate("copy"),
            copy,
            0.90,
        ),
    ]
}

fn ratio(name: &'static str, x: f64, y: f64, target: f64) -> Ratio {
    let value = if y > 0.0 { x / y } else { 0.0 };
    Ratio {
        name,
        value,
        target,
        met: value >= target,
    }
}

/// The report as a table for people.
pub fn render(r: &BandwidthReport) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "bandwidth on {} [{}] · {} per buffer · {} launches each{}",
        r.device.name,
        r.device
            .profile
            .as_deref()
            .map_or(r.device.backend.to_string(), |p| format!(
                "sim, profile {p}"
            )),
        Bytes(r.size_bytes),
        r.repeats,
        if r.modeled {
            " · MODELED from the profile, not measured"
        } else {
            ""
        }
    );
    let mut t = TextTable::new(&[
        ("operation", Align::Left),
        ("GB/s", Align::Right),
        ("time", Align::Right),
        ("bytes counted", Align::Left),
    ]);
    for row in &r.rows {
        t.row([
            row.name.to_string(),
            format!("{:.1}", row.bytes_per_s / 1e9),
            crate::units::Nanos(row.gpu_ns).to_string(),
            row.counted_as.to_string(),
        ]);
    }
    o.push_str(&t.render());
    for q in &r.ratios {
        let _ = writeln!(
            o,
            "{:<38} {:>6.3}  (target ≥ {:.2}: {})",
            q.name,
            q.value,
            q.target,
            if q.met { "met" } else { "NOT met" }
        );
    }
    let _ = writeln!(o, "verify after fill: {} mismatches", r.verify_mismatches);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::profile::SimProfile;
    use crate::device::sim::SimDevice;

    #[test]
    fn modeled_rates_follow_the_profile() {
        let mut dev = SimDevice::open(SimProfile::resolve("h200").unwrap(), 0);
        let r = measure(&mut dev, 1 << 30, 4, 1 << 30).unwrap();
        assert!(r.modeled);
        assert_eq!(r.verify_mismatches, 0);
        let rate = |n: &str| r.rows.iter().find(|x| x.name == n).unwrap().bytes_per_s;
        // The profile says 4.0e12 for fill and 4.3e12 for a copy counted read + written.
        assert!(
            (rate("fill") / 4.0e12 - 1.0).abs() < 1e-5,
            "{}",
            rate("fill")
        );
        assert!((rate("cuMemcpyDtoD") / 4.3e12 - 1.0).abs() < 1e-5);
        assert!((r.ratios[0].value - 4.0 / 4.3).abs() < 1e-5);
        // Everything was given back.
        assert_eq!(dev.mem_info().unwrap().used_bytes(), 512 << 20);
    }

    #[test]
    fn too_large_a_size_is_refused_before_allocating() {
        let mut dev = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let e = measure(&mut dev, 2 << 30, 4, 256 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("choose a smaller --size"), "{e}");
        assert_eq!(dev.mem_info().unwrap().used_bytes(), 256 << 20);
    }
}
