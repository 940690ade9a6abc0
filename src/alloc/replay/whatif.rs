//! What would have fit: the same recorded trace replayed again and again on simulated
//! devices — the smallest device memory it runs on without running out (a bisection over
//! capacities), and a small grid of caching-allocator settings side by side.

use serde::Serialize;

use crate::alloc::AllocatorSpec;
use crate::alloc::caching::CachingConfig;
use crate::device::profile::SimProfile;
use crate::device::sim::SimDevice;
use crate::text_table::{Align, TextTable};
use crate::units::{Bytes, MIB};

use super::recorded::{
    AtReservedPeak, RecordedOptions, RequestSource, Unobserved, replay_recorded,
};
use super::{ReplayError, ReplayFailure, ReplayPeaks, ReplayReport};

/// Capacities are tried in whole 2 MiB pages (the driver's allocation granularity).
pub const CAPACITY_STEP_BYTES: u64 = 2 * MIB;
/// The search gives up above this capacity (1 PiB).
const CAPACITY_CEILING_BYTES: u64 = 1 << 50;

/// A fresh source of the same trace, for each replay.
pub type MakeSource<'a> = dyn FnMut() -> Box<dyn RequestSource + 'a> + 'a;

/// One replay of the trace on a fresh simulated device with `total_bytes` of memory.
pub fn replay_on(
    make: &mut MakeSource<'_>,
    spec: &AllocatorSpec,
    profile: &SimProfile,
    total_bytes: u64,
    observer: &mut dyn super::Observer,
) -> Result<ReplayReport, ReplayError> {
    let mut p = profile.clone();
    p.memory.total_bytes.0 = total_bytes;
    let mut dev = SimDevice::open(p, 0);
    let mut alloc = spec.build(&mut dev).map_err(ReplayError::Build)?;
    let mut source = make();
    let report = replay_recorded(
        source.as_mut(),
        alloc.as_mut(),
        &spec.to_string(),
        &mut dev,
        RecordedOptions {
            keep_going: false,
            compare: false,
        },
        observer,
    );
    let released = alloc.release_all(&mut dev);
    let report = report?;
    released.map_err(|error| ReplayError::Allocator {
        source_name: report.source.clone(),
        line: 0,
        error,
    })?;
    Ok(report)
}

/// The result of `find_capacity`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CapacitySearch {
    /// The profile whose other constants the devices share.
    pub profile: String,
    pub context_overhead_bytes: u64,
    /// Smallest CUDA-visible total tried on which every request was served (`None`: not even
    /// at the ceiling).
    pub fits_at_bytes: Option<u64>,
    /// The largest total tried on which a request was refused, one step below `fits_at`.
    pub refused_at_bytes: Option<u64>,
    /// What the allocator itself could use at `fits_at`: total − context overhead.
    pub allocator_capacity_bytes: Option<u64>,
    /// The peaks of the replay that fit.
    pub peaks_at_fit: Option<ReplayPeaks>,
    /// The request refused at `refused_at`.
    pub refusal: Option<ReplayFailure>,
    pub replays: u32,
}

/// The smallest device memory (CUDA-visible total, in 2 MiB steps, other constants from
/// `profile`) on which the trace runs without a refused request, by bisection.
///
/// Bisection assumes that a trace that fits on a device fits on every larger one. The
/// caching allocator can break that (a smaller device releases cached segments earlier), so
/// the result states both neighbours it checked: fits at `fits_at`, refused one step below.
pub fn find_capacity(
    make: &mut MakeSource<'_>,
    spec: &AllocatorSpec,
    profile: &SimProfile,
) -> Result<CapacitySearch, ReplayError> {
    let context = profile.memory.context_overhead_bytes.0;
    let mut out = CapacitySearch {
        profile: profile.name.clone(),
        context_overhead_bytes: context,
        fits_at_bytes: None,
        refused_at_bytes: None,
        allocator_capacity_bytes: None,
        peaks_at_fit: None,
        refusal: None,
        replays: 0,
    };
    let step = CAPACITY_STEP_BYTES;
    let mut try_at = |total: u64, out: &mut CapacitySearch| {
        out.replays += 1;
        replay_on(make, spec, profile, total, &mut Unobserved)
    };
    // Grow until it fits.
    let mut hi = profile.memory.total_bytes.0.div_ceil(step) * step;
    let mut lo = (context / step + 1) * step;
    let mut fit = loop {
        let r = try_at(hi, &mut out)?;
        if r.fits {
            break r;
        }
        out.refused_at_bytes = Some(hi);
        out.refusal = r.first_failure.clone();
        lo = hi;
        if hi >= CAPACITY_CEILING_BYTES {
            return Ok(out);
        }
        hi = (hi * 2).min(CAPACITY_CEILING_BYTES);
    };
    if lo >= hi {
        lo = hi - step;
    }
    // Below `lo` nothing fits (or nothing was tried); `hi` fits.
    let mut refused: Option<ReplayReport> = None;
    if lo > context {
        let r = try_at(lo, &mut out)?;
        if r.fits {
            // Fits at the smallest device that holds the context and one page.
            hi = lo;
            fit = r;
            lo = context;
        } else {
            refused = Some(r);
        }
    }
    while hi - lo > step {
        let mid = (lo + (hi - lo) / 2) / step * step;
        let mid = mid.max(lo + step).min(hi - step);
        let r = try_at(mid, &mut out)?;
        if r.fits {
            hi = mid;
            fit = r;
        } else {
            lo = mid;
            refused = Some(r);
        }
    }
    out.fits_at_bytes = Some(hi);
    out.allocator_capacity_bytes = Some(hi - context);
    out.peaks_at_fit = Some(fit.peaks);
    if let Some(r) = refused {
        out.refused_at_bytes = Some(lo);
        out.refusal = r.first_failure;
    } else {
        out.refused_at_bytes = None;
        out.refusal = None;
    }
    Ok(out)
}

impl std::fmt::Display for CapacitySearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.fits_at_bytes, self.allocator_capacity_bytes) {
            (Some(t), Some(a)) => {
                writeln!(
                    f,
                    "smallest device memory that fits: {} ({t} bytes CUDA-visible, profile {}: {} of it for the allocator after the {} context)",
                    Bytes(t),
                    self.profile,
                    Bytes(a),
                    Bytes(self.context_overhead_bytes)
                )?;
                if let Some(p) = &self.peaks_at_fit {
                    writeln!(
                        f,
                        "  there: alloc_reserved peak {}, alloc_allocated peak {}",
                        Bytes(p.alloc_reserved.bytes),
                        Bytes(p.alloc_allocated.bytes)
                    )?;
                }
            }
            _ => writeln!(
                f,
                "it does not fit on any device up to {} (profile {})",
                Bytes(CAPACITY_CEILING_BYTES),
                self.profile
            )?,
        }
        if let (Some(r), Some(x)) = (self.refused_at_bytes, &self.refusal) {
            writeln!(
                f,
                "  one step smaller, {} ({r} bytes), entry {} is refused: {} requested{}",
                Bytes(r),
                x.line,
                Bytes(x.requested_bytes),
                x.origin
                    .as_ref()
                    .map(|o| format!(" at {o}"))
                    .unwrap_or_default()
            )?;
        }
        writeln!(f, "  ({} replays)", self.replays)
    }
}

/// One row of `try_settings`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SettingsTrial {
    /// What changed from the base settings (`as recorded` for the base itself).
    pub change: String,
    /// The full settings, in `PYTORCH_CUDA_ALLOC_CONF` syntax.
    pub settings: String,
    pub fits: bool,
    /// The first refused request (position in the source), when it does not fit.
    pub refused_at: Option<u64>,
    pub refused_bytes: Option<u64>,
    pub reserved_peak_bytes: u64,
    pub allocated_peak_bytes: u64,
    /// At the reserved peak: allocated bytes, and reserved − allocated (fragmentation: a
    /// clue, not memory a request could be promised).
    pub allocated_at_reserved_peak_bytes: u64,
    pub fragmentation_at_peak_bytes: u64,
    pub inactive_split_at_peak_bytes: u64,
    pub largest_free_at_peak_bytes: u64,
}

/// The settings `try_settings` tries next to `base` (named `base_label`): expandable
/// segments, two `max_split_size_mb` values, garbage collection at 0.8 of the device.
pub fn settings_grid(base: &CachingConfig, base_label: &str) -> Vec<(String, CachingConfig)> {
    let mut out = vec![(base_label.to_string(), base.clone())];
    let variants: &[&[(&str, &str)]] = &[
        &[("expandable_segments", "True")],
        &[("max_split_size_mb", "128")],
        &[("max_split_size_mb", "512")],
        &[
            ("per_process_memory_fraction", "1.0"),
            ("garbage_collection_threshold", "0.8"),
        ],
    ];
    for v in variants {
        let mut c = base.clone();
        let ok = v.iter().all(|(k, val)| c.set(k, val).is_ok()) && c.validate().is_ok();
        if ok && c != *base {
            let words: Vec<String> = v.iter().map(|(k, val)| format!("{k}:{val}")).collect();
            out.push((words.join(","), c));
        }
    }
    out
}

/// Replays the trace under each of `grid`'s settings on a device like `profile`.
pub fn try_settings(
    make: &mut MakeSource<'_>,
    grid: &[(String, CachingConfig)],
    profile: &SimProfile,
) -> Result<Vec<SettingsTrial>, ReplayError> {
    let mut rows = Vec::new();
    for (change, cfg) in grid {
        let spec = AllocatorSpec::Caching(cfg.clone());
        let mut at_peak = AtReservedPeak::default();
        let r = replay_on(
            make,
            &spec,
            profile,
            profile.memory.total_bytes.0,
            &mut at_peak,
        )?;
        let s = at_peak.stats;
        rows.push(SettingsTrial {
            change: change.clone(),
            settings: cfg.to_string(),
            fits: r.fits,
            refused_at: r.first_failure.as_ref().map(|x| x.line),
            refused_bytes: r.first_failure.as_ref().map(|x| x.requested_bytes),
            reserved_peak_bytes: r.peaks.alloc_reserved.bytes,
            allocated_peak_bytes: r.peaks.alloc_allocated.bytes,
            allocated_at_reserved_peak_bytes: s.allocated_bytes,
            fragmentation_at_peak_bytes: s.reserved_bytes.saturating_sub(s.allocated_bytes),
            inactive_split_at_peak_bytes: s.inactive_split_bytes,
            largest_free_at_peak_bytes: s.largest_free_bytes,
        });
    }
    Ok(rows)
}

/// The grid as a table for people.
pub fn settings_table(rows: &[SettingsTrial], device: &str) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "settings tried on {device}:");
    let mut t = TextTable::new(&[
        ("setting", Align::Left),
        ("fits", Align::Left),
        ("reserved peak", Align::Right),
        ("allocated", Align::Right),
        ("reserved − allocated", Align::Right),
    ]);
    for r in rows {
        let fits = match (r.fits, r.refused_at) {
            (true, _) => "yes".to_string(),
            (false, Some(at)) => format!("no (entry {at})"),
            (false, None) => "no".to_string(),
        };
        let frag = if r.reserved_peak_bytes == 0 {
            "-".to_string()
        } else {
            format!(
                "{} ({:.1}%)",
                Bytes(r.fragmentation_at_peak_bytes),
                r.fragmentation_at_peak_bytes as f64 * 100.0 / r.reserved_peak_bytes as f64
            )
        };
        t.row([
            r.change.clone(),
            fits,
            Bytes(r.reserved_peak_bytes).to_string(),
            Bytes(r.allocated_at_reserved_peak_bytes).to_string(),
            frag,
        ]);
    }
    o.push_str(&t.render());
    let _ = writeln!(
        o,
        "(allocated and reserved − allocated at the moment reserved peaked: fragmentation is a clue, not memory a request could be promised)"
    );
    o
}
