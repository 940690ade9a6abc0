//! A watched job's marks on the timeline plot: each out-of-memory message in its output.

use super::labels::{Placer, Spot};
use super::scene::{Anchor, Group, Stroke};
use super::{Frame, OOM, cross};
use crate::report::watch::WatchOom;

/// An out-of-memory message in a watched job's output, at the time it arrived, its label
/// placed where it covers no other label or mark.
pub(super) fn oom_mark(i: usize, oom: &WatchOom, f: &Frame, placer: &mut Placer) -> Group {
    let x = f.x(oom.t_ns);
    let mut g = Group::new(format!("mark-oom-{}", i + 1), "mark oom").titled(format!(
        "{} message on the job's stderr line {}: {}",
        oom.format, oom.stderr_line, oom.summary
    ));
    g.line(
        vec![(x, f.y0), (x, f.y1)],
        Stroke::dashed(OOM, 1.5, 5.0, 3.0),
    );
    if let Some(used) = oom.at.device_used_bytes {
        g.shapes.extend(cross(x, f.y(used), 6.0, OOM));
    }
    let mut spots = Vec::new();
    for row in 0..8 {
        let y = f.y0 + 32.0 + 16.0 * row as f32;
        spots.push(Spot::new(x + 6.0, y, Anchor::Start));
        spots.push(Spot::new(x - 6.0, y, Anchor::End));
    }
    placer.label(&mut g, &spots, format!("OOM ({})", oom.format), 12.0, OOM);
    g
}
