//! The SVG's tooltips: the reading under the pointer. The plot area is cut into columns two
//! pixels wide; each column's tooltip gives the exact time and bytes, in every drawn view, of
//! the reading with the highest device used in it (or, between readings, of the reading that
//! still holds), so hovering anywhere on a line tells what the file has there. Neighbouring
//! columns that show the same reading share one hit area, so a short run adds a few elements
//! and a long one at most one per column.

use crate::record::View;
use crate::report::rundata::RunData;
use crate::units::Bytes;

use super::Frame;
use super::scene::{Group, Shape};
use super::series;

/// Columns this wide share a tooltip.
const COLUMN_PX: f32 = 2.0;

/// The hover areas, one per run of columns showing the same reading.
pub fn readings(run: &RunData, f: &Frame) -> Group {
    let mut g = Group::new("hover-readings", "hover");
    let tl = &run.timeline;
    if tl.is_empty() {
        return g;
    }
    let views: Vec<(View, &[Option<u64>])> = series::SERIES
        .iter()
        .rev()
        .filter(|(v, _, _)| series::drawn(run, *v))
        .filter_map(|(v, _, _)| Some((*v, tl.view(*v)?)))
        .collect();
    let device = tl.view(View::DeviceUsed);
    let columns = ((f.x1 - f.x0) / COLUMN_PX).ceil() as usize;
    let mut i = 0;
    let mut held: Option<usize> = None;
    // (first column, last column, row shown)
    let mut spans: Vec<(usize, usize, usize)> = Vec::new();
    for c in 0..columns {
        let x_end = f.x0 + (c as f32 + 1.0) * COLUMN_PX;
        let mut best: Option<usize> = None;
        while i < tl.len() && f.x(tl.t_ns[i]) < x_end {
            let higher = |a: usize, b: usize| {
                let v = |k: usize| device.and_then(|d| d[k]).unwrap_or(0);
                v(a) > v(b)
            };
            if best.is_none_or(|b| higher(i, b)) {
                best = Some(i);
            }
            held = Some(i);
            i += 1;
        }
        let Some(row) = best.or(held) else {
            continue;
        };
        match spans.last_mut() {
            Some((_, last, r)) if *r == row && *last + 1 == c => *last = c,
            _ => spans.push((c, c, row)),
        }
    }
    for (first, last, row) in spans {
        let mut title = format!(
            "t = {:.6} s (t_ns {}), {} reading",
            f.seconds(tl.t_ns[row]),
            tl.t_ns[row],
            tl.source[row].as_str()
        );
        if let Some(free) = tl.device_free_bytes[row] {
            title.push_str(&format!("\ndevice_free_bytes: {free} B ({})", Bytes(free)));
        }
        for (v, col) in &views {
            if let Some(b) = col[row] {
                title.push_str(&format!("\n{}: {b} B ({})", v.key(), Bytes(b)));
            }
        }
        g.shapes.push(Shape::Hover {
            x: f.x0 + first as f32 * COLUMN_PX,
            y: f.y0,
            w: (last - first + 1) as f32 * COLUMN_PX,
            h: f.y1 - f.y0,
            title,
        });
    }
    g
}
