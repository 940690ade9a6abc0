//! Everything on the plot besides the lines: phase bands and their names, the horizontal lines
//! (device total, idle, the 1 Hz poll's peak, a plan's lines), the true peak and every OOM,
//! each label placed where it covers no other label and no mark.

use crate::oom::OomRecord;
use crate::report::summary::{PhaseStatus, Summary};
use crate::units::Bytes;

use super::labels::{Placer, Spot, backdrop_text, fit};
use super::scene::{Anchor, Color, Group, Shape, Stroke};
use super::series::DEVICE_USED;
use super::{
    FLOOR, Frame, IDLE, KV, MUTED, OOM, PLAN, POLL, POLL10, TEXT, TOTAL, WHITE, cross, diamond,
};

/// Rows for names that do not fit inside their band, below the first.
const PHASE_ROWS: usize = 4;

/// Phase bands, each named inside its band, or (a short phase) in a free row below the first
/// with a thin leader to its band.
pub fn phase_bands(s: &Summary, f: &Frame, placer: &mut Placer) -> Group {
    let mut g = Group::new("phases", "phase");
    let mut k = 0;
    let mut short = Vec::new();
    for p in &s.phases {
        let (Some(a), Some(b)) = (p.start_ns, p.end_ns) else {
            continue;
        };
        let (xa, xb) = (f.x(a), f.x(b));
        let fill = match p.status {
            PhaseStatus::Oom => Color(0xfd, 0xe7, 0xe0),
            PhaseStatus::Stopped => Color(0xff, 0xf3, 0xcd),
            _ if k % 2 == 0 => Color(0xf1, 0xf3, 0xf6),
            _ => Color(0xe6, 0xea, 0xf0),
        };
        k += 1;
        g.rect(xa, f.y0, (xb - xa).max(0.5), f.y1 - f.y0, fill, 1.0);
        match fit(&p.name, 11.0, xb - xa - 6.0) {
            Some(t) => {
                let spot = placer.choose(
                    &[Spot::new((xa + xb) / 2.0, f.y0 + 14.0, Anchor::Middle)],
                    &t,
                    11.0,
                );
                g.text(spot.x, spot.y, t, 11.0, spot.anchor, MUTED);
            }
            None => short.push(((xa + xb) / 2.0, p.name.clone())),
        }
    }
    for (x, name) in short {
        let name = fit(&name, 11.0, 160.0).unwrap_or(name);
        let mut spots = Vec::new();
        for row in 1..=PHASE_ROWS {
            let y = f.y0 + 14.0 + 14.0 * row as f32;
            spots.push(Spot::new(x + 3.0, y, Anchor::Start));
            spots.push(Spot::new(x - 3.0, y, Anchor::End));
        }
        let spot = placer.choose(&spots, &name, 11.0);
        g.line(
            vec![(x, f.y0), (x, spot.y - 11.0)],
            Stroke::solid(MUTED, 0.6),
        );
        g.text(spot.x, spot.y, name, 11.0, spot.anchor, MUTED);
    }
    g
}

/// Places above, then below, a horizontal line at `y`, at the right end, the left end and the
/// middle, in the order `ends` gives.
fn along(f: &Frame, y: f32, ends: &[Anchor]) -> Vec<Spot> {
    let mut v = Vec::new();
    for dy in [-5.0, 14.0] {
        for a in ends {
            v.push(match a {
                Anchor::End => Spot::new(f.x1 - 4.0, y + dy, Anchor::End),
                Anchor::Start => Spot::new(f.x0 + 12.0, y + dy, Anchor::Start),
                Anchor::Middle => Spot::new((f.x0 + f.x1) / 2.0, y + dy, Anchor::Middle),
            });
        }
    }
    v
}

pub fn device_total(total: u64, f: &Frame, placer: &mut Placer) -> Group {
    let mut g = Group::new("line-device-total", "line").titled(format!(
        "device total (CUDA-visible): {total} B ({})",
        Bytes(total)
    ));
    let y = f.y(total);
    g.line(vec![(f.x0, y), (f.x1, y)], Stroke::solid(TOTAL, 1.2));
    let spots = along(f, y, &[Anchor::End, Anchor::Middle, Anchor::Start]);
    placer.label(
        &mut g,
        &spots,
        format!("device total {}", Bytes(total)),
        11.0,
        TOTAL,
    );
    g
}

/// The idle line, and the 1 Hz and 10 Hz polls' peak lines; a poll line within a few pixels
/// of the idle line (or of the other poll's) is said on that line instead of drawn. No idle
/// line where there is no idle reading (an imported snapshot records none).
pub fn idle_and_poll(
    idle_used: Option<u64>,
    poll: Option<(u64, u64)>,
    poll10: Option<(u64, u64)>,
    f: &Frame,
    placer: &mut Placer,
) -> Vec<Group> {
    let near = |a: u64, b: u64| (f.y(a) - f.y(b)).abs() < 4.0;
    let same1 = poll.zip(idle_used).is_some_and(|((_, b), i)| near(b, i));
    let same10 = poll10.zip(idle_used).is_some_and(|((_, b), i)| near(b, i));
    let mut out = Vec::new();
    if let Some(idle_used) = idle_used {
        out.push(idle_mark(idle_used, (same1, same10), f, placer));
    }
    let p1 = poll.filter(|_| !same1).map(|(_, b)| b);
    let p10 = poll10.filter(|_| !same10).map(|(_, b)| b);
    let both = p1.zip(p10).is_some_and(|(a, b)| near(a, b));
    for (name, id, bytes, color, dash) in [
        ("1 Hz", "1hz", p1, POLL, (2.0, 3.0)),
        ("10 Hz", "10hz", p10.filter(|_| !both), POLL10, (4.0, 2.0)),
    ] {
        let Some(bytes) = bytes else { continue };
        let mut g = Group::new(format!("line-poll-{id}"), "line").titled(format!(
            "the highest device used a {name} poller would have reported: {bytes} B ({})",
            Bytes(bytes)
        ));
        let y = f.y(bytes);
        g.line(
            vec![(f.x0, y), (f.x1, y)],
            Stroke::dashed(color, 1.4, dash.0, dash.1),
        );
        let spots = along(f, y, &[Anchor::End, Anchor::Middle, Anchor::Start]);
        let label = if name == "1 Hz" && both {
            format!("1 Hz poll peak {} (a 10 Hz poll too)", Bytes(bytes))
        } else {
            format!("{name} poll peak {}", Bytes(bytes))
        };
        placer.label(&mut g, &spots, label, 11.0, color);
        out.push(g);
    }
    out
}

/// The dashed idle line, with the polls said on it when they saw no more.
fn idle_mark(
    idle_used: u64,
    (same1, same10): (bool, bool),
    f: &Frame,
    placer: &mut Placer,
) -> Group {
    let mut idle = Group::new("mark-idle", "mark").titled(format!(
        "idle reading: device used {idle_used} B ({}) before the workload",
        Bytes(idle_used)
    ));
    let y = f.y(idle_used);
    idle.line(
        vec![(f.x0, y), (f.x1, y)],
        Stroke::dashed(IDLE, 1.2, 6.0, 4.0),
    );
    let text = match (same1, same10) {
        (true, true) => format!(
            "idle: {} used — a 1 Hz and a 10 Hz poll saw no more",
            Bytes(idle_used)
        ),
        (true, false) => format!("idle: {} used — a 1 Hz poll saw no more", Bytes(idle_used)),
        (false, true) => format!("idle: {} used — a 10 Hz poll saw no more", Bytes(idle_used)),
        (false, false) => format!("idle: {} used", Bytes(idle_used)),
    };
    let spots = along(f, y, &[Anchor::Start, Anchor::Middle, Anchor::End]);
    placer.label(&mut idle, &spots, text, 11.0, IDLE);
    idle
}

/// The floor a run keeps free, as device used: total − `keep_free_bytes`, when the run
/// enforces it (not with `--allow-oom`, not for a watch).
pub fn floor_line(s: &Summary) -> Option<u64> {
    let w = &s.workload;
    let total = s.device_total()?;
    (!w.allow_oom && w.keep_free_bytes > 0 && s.watch.is_none())
        .then(|| total.saturating_sub(w.keep_free_bytes))
}

/// The floor as a line where it is on the scale; when the device total (and the floor) are
/// above it, a note at the top edge saying where they are, so every scale shows them.
pub fn floor_and_capacity(
    s: &Summary,
    show_total: bool,
    f: &Frame,
    placer: &mut Placer,
) -> Vec<Group> {
    let floor = floor_line(s);
    let mut out = Vec::new();
    let on_scale = |b: u64| b <= f.top_bytes;
    if let Some(fl) = floor.filter(|b| on_scale(*b)) {
        let mut g = Group::new("line-floor", "line").titled(format!(
            "the floor: a step may not take device used past {fl} B ({}), keeping {} B free",
            Bytes(fl),
            s.workload.keep_free_bytes
        ));
        let y = f.y(fl);
        g.line(
            vec![(f.x0, y), (f.x1, y)],
            Stroke::dashed(FLOOR, 1.3, 3.0, 3.0),
        );
        let spots = along(f, y, &[Anchor::Middle, Anchor::Start, Anchor::End]);
        placer.label(
            &mut g,
            &spots,
            format!(
                "floor {} used ({} kept free)",
                Bytes(fl),
                Bytes(s.workload.keep_free_bytes)
            ),
            11.0,
            FLOOR,
        );
        out.push(g);
    }
    // An unknown total (an import that does not record it) is not drawn at all.
    if let Some(total) = s.device_total().filter(|_| !show_total) {
        let mut text = format!("↑ device total {} above this scale", Bytes(total));
        if let Some(fl) = floor.filter(|b| !on_scale(*b)) {
            text.push_str(&format!(", floor at {} used", Bytes(fl)));
        }
        let mut g = Group::new("mark-off-scale", "mark").titled(format!(
            "device total {total} B ({}){}",
            Bytes(total),
            floor.map_or(String::new(), |fl| format!("; floor {fl} B used"))
        ));
        let spots = [
            Spot::new(f.x1 - 4.0, f.y0 + 28.0, Anchor::End),
            Spot::new(f.x1 - 4.0, f.y0 + 44.0, Anchor::End),
            Spot::new(f.x0 + 12.0, f.y0 + 28.0, Anchor::Start),
        ];
        placer.label(&mut g, &spots, text, 11.0, TOTAL);
        out.push(g);
    }
    out
}

/// The largest free block (where the allocator's cache knows it) named where it matters: at
/// the first OOM, next to what was asked, else at its last reading.
pub fn largest_free(
    run: &crate::report::rundata::RunData,
    f: &Frame,
    placer: &mut Placer,
) -> Option<Group> {
    let view = crate::record::View::AllocLargestFree;
    if !super::series::drawn(run, view) {
        return None;
    }
    let s = &run.summary;
    let at = s.ooms.first().map(|o| o.t_ns);
    let (t, b) = run
        .timeline
        .points(view)
        .take_while(|(t, _)| at.is_none_or(|a| *t <= a))
        .last()?;
    let lift = super::series::OFFSET_PX * super::series::coincides_with(run, view).len() as f32;
    let (x, y) = (f.x(t), f.y(b) - lift);
    let text = match s.ooms.first() {
        Some(o) => format!(
            "largest free block {} < {} asked",
            Bytes(b),
            Bytes(o.requested_bytes)
        ),
        None => format!("largest free block {}", Bytes(b)),
    };
    let mut g = Group::new("mark-largest-free", "mark").titled(format!(
        "alloc_largest_free_bytes: {b} B ({}) at {:.6} s",
        Bytes(b),
        f.seconds(t)
    ));
    let mut spots = Vec::new();
    for dy in [-8.0, -22.0, 16.0, -36.0] {
        spots.push(Spot::new(x - 8.0, y + dy, Anchor::End));
        spots.push(Spot::new(x + 8.0, y + dy, Anchor::Start));
    }
    placer.label(&mut g, &spots, text, 12.0, Color(0xd5, 0x00, 0x6a));
    Some(g)
}

/// The true peak of device used: a dot, and its value beside it.
pub fn true_peak(s: &Summary, f: &Frame, placer: &mut Placer) -> Option<Group> {
    let p = s.peaks.run.get(crate::record::View::DeviceUsed.key())?;
    let (x, y) = (f.x(p.t_ns), f.y(p.bytes));
    let mut g = Group::new("mark-true-peak", "mark").titled(format!(
        "true peak of device_used_bytes: {} B ({}) at {:.3} s, from a {} reading",
        p.bytes,
        Bytes(p.bytes),
        f.seconds(p.t_ns),
        p.source.as_str()
    ));
    g.shapes.push(Shape::Circle {
        cx: x,
        cy: y,
        r: 5.0,
        fill: Some(DEVICE_USED),
        stroke: Some(Stroke::solid(WHITE, 1.5)),
    });
    let mut spots = Vec::new();
    for dy in [-8.0, 20.0, -24.0, 36.0] {
        spots.push(Spot::new(x + 9.0, y + dy, Anchor::Start));
        spots.push(Spot::new(x - 9.0, y + dy, Anchor::End));
    }
    placer.label(
        &mut g,
        &spots,
        format!("true peak {}", Bytes(p.bytes)),
        12.0,
        TEXT,
    );
    Some(g)
}

/// An OOM: a dashed line at its instant, a cross at device used, and what was asked.
pub fn oom(i: usize, oom: &OomRecord, f: &Frame, placer: &mut Placer) -> Group {
    let x = f.x(oom.t_ns);
    let mut g = Group::new(format!("mark-oom-{}", i + 1), "mark oom").titled(format!(
        "OOM at {}/{} ({} {}): asked {} B ({}), {} B free of {}; {}",
        oom.phase,
        oom.step,
        oom.op,
        oom.name,
        oom.requested_bytes,
        Bytes(oom.requested_bytes),
        oom.device_free_bytes,
        oom.device_total_bytes
            .map_or(crate::oom::NOT_RECORDED.to_string(), |t| format!("{t} B")),
        oom.diagnosis.observation
    ));
    g.line(
        vec![(x, f.y0), (x, f.y1)],
        Stroke::dashed(OOM, 1.5, 5.0, 3.0),
    );
    g.shapes
        .extend(cross(x, f.y(oom.plotted_bytes()), 6.0, OOM));
    let mut spots = Vec::new();
    for row in 0..8 {
        let y = f.y0 + 32.0 + 16.0 * row as f32;
        spots.push(Spot::new(x + 6.0, y, Anchor::Start));
        spots.push(Spot::new(x - 6.0, y, Anchor::End));
    }
    placer.label(
        &mut g,
        &spots,
        format!("OOM: {} {} asked", oom.name, Bytes(oom.requested_bytes)),
        12.0,
        OOM,
    );
    g
}

/// A plan validation's lines: the margin line, the KV budget below it, and the plan's capacity
/// when it is not the device's.
pub fn plan_lines(s: &Summary, f: &Frame, placer: &mut Placer) -> Option<Group> {
    let p = s.plan.as_ref()?;
    let mut g = Group::new("plan", "plan").titled(format!(
        "plan {}: capacity {} B, margin line {} B, KV budget {} B",
        p.label, p.capacity_bytes, p.margin_line_bytes, p.kv_budget_bytes
    ));
    let kv_low = p.margin_line_bytes.saturating_sub(p.kv_budget_bytes);
    let (ya, yb) = (f.y(p.margin_line_bytes), f.y(kv_low));
    g.rect(f.x0, ya, f.x1 - f.x0, (yb - ya).max(0.5), KV, 0.12);
    let kv = format!("planned KV budget {}", Bytes(p.kv_budget_bytes));
    let spot = placer.choose(&[Spot::new(f.x0 + 6.0, yb - 5.0, Anchor::Start)], &kv, 11.0);
    backdrop_text(&mut g, spot, kv, 11.0, KV);
    g.line(
        vec![(f.x0, ya), (f.x1, ya)],
        Stroke::dashed(PLAN, 1.6, 8.0, 4.0),
    );
    let margin = format!("margin line {} ({})", Bytes(p.margin_line_bytes), p.label);
    let spot = placer.choose(
        &[Spot::new(f.x0 + 6.0, ya - 5.0, Anchor::Start)],
        &margin,
        11.0,
    );
    backdrop_text(&mut g, spot, margin, 11.0, PLAN);
    if Some(p.capacity_bytes) != s.device_total() {
        let y = f.y(p.capacity_bytes);
        g.line(vec![(f.x0, y), (f.x1, y)], Stroke::solid(PLAN, 1.2));
        // Mid-width first: the device total's label is at the right, the margin line's at the left.
        let spots = along(f, y, &[Anchor::Middle, Anchor::Start, Anchor::End]);
        placer.label(
            &mut g,
            &spots,
            format!("plan capacity {}", Bytes(p.capacity_bytes)),
            11.0,
            PLAN,
        );
    }
    Some(g)
}

/// The marks labels must not cover: the true peak's dot, the poll's diamond, each OOM's cross.
pub fn reserve_marks(s: &Summary, f: &Frame, poll: Option<(u64, u64)>, placer: &mut Placer) {
    if let Some(p) = s.peaks.run.get(crate::record::View::DeviceUsed.key()) {
        placer.reserve_mark(f.x(p.t_ns), f.y(p.bytes), 7.0);
    }
    if let Some((t, b)) = poll {
        placer.reserve_mark(f.x(t), f.y(b), 8.0);
    }
    for o in &s.ooms {
        placer.reserve_mark(f.x(o.t_ns), f.y(o.plotted_bytes()), 8.0);
    }
}

/// A poller's highest reading (`name`: `1 Hz`, `10 Hz`), as a diamond at its tick.
pub fn poll_mark(t: u64, bytes: u64, name: &str, color: Color, f: &Frame) -> Group {
    let (x, y) = (f.x(t), f.y(bytes));
    let id = name.replace(' ', "").to_lowercase();
    let mut g = Group::new(format!("mark-poll-{id}"), "mark").titled(format!(
        "a {name} poller's highest reading of device_used_bytes: {bytes} B ({}) at its tick at {:.3} s",
        Bytes(bytes),
        f.seconds(t)
    ));
    g.shapes.push(diamond(x, y, 6.0, color));
    g
}
