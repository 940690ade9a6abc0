//! The memory views drawn as lines: which ones, in which style, and how a line is made from a
//! timeline of any length.
//!
//! Lines that often coincide (the allocator's reserved and allocated and the run's own bytes
//! are equal in many runs) are drawn nested: each drawn over a wider one beneath it, so where
//! they coincide every colour still shows as a stripe. Graph memory, which no allocator counts,
//! gets lines of its own. Fast allocate/free churn within one pixel column becomes a shaded band
//! from its lowest to its highest value, not a solid block of vertical strokes.

use crate::record::View;
use crate::report::rundata::RunData;
use crate::units::Bytes;

use super::Frame;
use super::downsample;
use super::scene::{Color, Group, Shape, Stroke};

/// The views drawn, in drawing order, each narrower than the one it may lie on.
pub const SERIES: [(View, Stroke, &str); 8] = [
    (
        View::GraphReserved,
        Stroke {
            color: Color(0x6a, 0x3d, 0x9a),
            width: 3.0,
            dash: Some([10.0, 3.0]),
        },
        "graph memory held (driver, all graphs)",
    ),
    (
        View::GraphUsed,
        Stroke {
            color: Color(0x6a, 0x3d, 0x9a),
            width: 1.4,
            dash: None,
        },
        "graph memory in use (graphs and their live allocations)",
    ),
    (
        View::AllocReserved,
        Stroke {
            color: Color(0xe6, 0x9f, 0x00),
            width: 6.5,
            dash: None,
        },
        "allocator reserved",
    ),
    (
        View::AllocAllocated,
        Stroke {
            color: Color(0x00, 0x9e, 0x73),
            width: 3.6,
            dash: Some([7.0, 4.0]),
        },
        "allocator allocated",
    ),
    (
        View::AllocLargestFree,
        Stroke {
            color: Color(0xd5, 0x00, 0x6a),
            width: 2.0,
            dash: Some([2.0, 2.0]),
        },
        "largest free block (the biggest request the cache can serve)",
    ),
    (
        View::OwnBytes,
        Stroke {
            color: Color(0xcc, 0x79, 0xa7),
            width: 1.5,
            dash: None,
        },
        "own bytes (this run, from the driver)",
    ),
    (
        View::DeviceUsed,
        Stroke {
            color: DEVICE_USED,
            width: 2.2,
            dash: None,
        },
        "device used (whole device, all processes)",
    ),
    (
        View::JobUsed,
        Stroke {
            color: Color(0x99, 0x55, 0x00),
            width: 2.0,
            dash: Some([5.0, 3.0]),
        },
        "job used (the watched job's processes, NVML)",
    ),
];

/// The width, in pixels, within which a value turning back twice counts as churn.
const CHURN_BUCKET_PX: f64 = 3.0;

/// Device used's colour, shared by the true-peak mark.
pub const DEVICE_USED: Color = Color(0x00, 0x72, 0xb2);

/// Whether a view is drawn for this run: recorded, and (for graph and pool memory, which the
/// idle row states as 0 in every run, and the largest free block, 0 without a cache) ever
/// above zero.
pub fn drawn(run: &RunData, view: View) -> bool {
    run.timeline.view(view).is_some()
        && (!matches!(
            view,
            View::GraphReserved
                | View::GraphUsed
                | View::PoolUsed
                | View::PoolReserved
                | View::AllocLargestFree
        ) || run.timeline.points(view).any(|(_, v)| v > 0))
}

/// How far up a line is drawn for each earlier line it coincides with.
pub const OFFSET_PX: f32 = 3.0;

/// A share of the rows at or above which two lines count as coinciding.
const COINCIDES_SHARE: f64 = 0.2;

/// The lines drawn before `view` (beneath it) that it equals on at least a fifth of the rows
/// where it is above zero, with that share: `view` is drawn `OFFSET_PX` higher for each, and
/// the legend says so.
pub fn coincides_with(run: &RunData, view: View) -> Vec<(View, f64)> {
    let tl = &run.timeline;
    let Some(col) = tl.view(view) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (other, _, _) in SERIES {
        if other == view {
            break;
        }
        let Some(o) = tl.view(other).filter(|_| drawn(run, other)) else {
            continue;
        };
        let (mut both, mut equal) = (0u64, 0u64);
        for (a, b) in col.iter().zip(o) {
            if let (Some(a), Some(b)) = (a, b)
                && *a > 0
            {
                both += 1;
                equal += u64::from(a == b);
            }
        }
        let share = equal as f64 / both.max(1) as f64;
        if both > 0 && share >= COINCIDES_SHARE {
            out.push((other, share));
        }
    }
    out
}

/// One line per drawn view, and a shaded band wherever it churns within a pixel column.
/// Returns the groups and whether any band was drawn.
pub fn lines(run: &RunData, f: &Frame) -> (Vec<Group>, bool) {
    let s = &run.summary;
    let tl = &run.timeline;
    let mut groups = Vec::new();
    let mut any_band = false;
    for (view, stroke, label) in SERIES {
        if !drawn(run, view) {
            continue;
        }
        let pts = tl.points(view).map(|(t, v)| (f64::from(f.x(t)), v));
        let (pieces, bands) = downsample::line_and_bands(pts, CHURN_BUCKET_PX);
        // Lifted above the lines it coincides with, so each colour shows.
        let lift = OFFSET_PX * coincides_with(run, view).len() as f32;
        let peak = s.peaks.run.get(view.key());
        let mut g = Group::new(format!("series-{}", view.key()), "series").titled(format!(
            "{} — {}: {}",
            view.key(),
            label,
            peak.map_or("no peak recorded".to_string(), |p| format!(
                "true peak {} B ({}) at {:.3} s",
                p.bytes,
                Bytes(p.bytes),
                f.seconds(p.t_ns)
            ))
        ));
        for b in &bands {
            any_band = true;
            g.shapes.push(band_shape(b, f, stroke.color));
        }
        for piece in pieces {
            let line: Vec<(f32, f32)> = downsample::steps(&piece)
                .into_iter()
                .map(|(x, v)| (x as f32, f.y(v) - lift))
                .collect();
            g.line(line, stroke);
        }
        groups.push(g);
    }
    (groups, any_band)
}

/// A churn band as a closed outline: the highest values left to right, the lowest back.
fn band_shape(b: &downsample::Band, f: &Frame, color: Color) -> Shape {
    let mut top = Vec::with_capacity(b.columns.len() * 2);
    let mut bottom = Vec::with_capacity(b.columns.len() * 2);
    for (i, &(x, lo, hi)) in b.columns.iter().enumerate() {
        let next = b.columns.get(i + 1).map_or(b.end_x, |c| c.0);
        top.push((x as f32, f.y(hi)));
        top.push((next as f32, f.y(hi)));
        bottom.push((x as f32, f.y(lo)));
        bottom.push((next as f32, f.y(lo)));
    }
    bottom.reverse();
    top.extend(bottom);
    Shape::Band {
        points: top,
        fill: color,
        opacity: 0.45,
    }
}
