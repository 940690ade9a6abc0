//! A watched job's marks on the timeline plot: each out-of-memory message in its output.

use super::scene::{Anchor, Group, Stroke};
use super::{Frame, OOM, cross, font, label};
use crate::report::watch::WatchOom;

/// An out-of-memory message in a watched job's output, at the time it arrived.
pub(super) fn oom_mark(i: usize, oom: &WatchOom, f: &Frame) -> Group {
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
    let text = format!("OOM ({})", oom.format);
    let right = x + 8.0 + font::text_width(&text, 12.0) < f.x1;
    label(
        &mut g,
        if right { x + 6.0 } else { x - 6.0 },
        f.y0 + 32.0 + 16.0 * (i % 3) as f32,
        text,
        12.0,
        if right { Anchor::Start } else { Anchor::End },
        OOM,
    );
    g
}
