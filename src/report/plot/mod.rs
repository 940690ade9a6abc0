//! `timeline.svg` and `timeline.png`: device used, the allocator's reserved and allocated and
//! the run's own bytes over time, on phase bands, with the idle line, the true peak, the peak a
//! 1 Hz poller would have reported, every OOM and (for a plan validation) the plan's lines.
//!
//! The plot is laid out once as a `Scene` in pixel coordinates; `svg` and `png` only draw it.
//! Long timelines are reduced to the first, lowest, highest and last reading per pixel column,
//! so no peak is lost however many rows there are.

pub mod axis;
pub mod downsample;
pub mod font;
mod job;
pub mod png;
pub mod scene;
pub mod svg;

use crate::record::{Source, View};
use crate::report::rundata::RunData;
use crate::report::summary::{PhaseStatus, Summary};
use crate::units::Bytes;
use scene::{Anchor, Color, Group, Scene, Shape, Stroke};

pub const WIDTH: f32 = 1280.0;
pub const HEIGHT: f32 = 720.0;

const TEXT: Color = Color(0x22, 0x22, 0x22);
const MUTED: Color = Color(0x55, 0x55, 0x55);
const GRID: Color = Color(0xdd, 0xdd, 0xdd);
const AXIS: Color = Color(0x44, 0x44, 0x44);
const WHITE: Color = Color(0xff, 0xff, 0xff);
const OOM: Color = Color(0xd5, 0x5e, 0x00);
const IDLE: Color = Color(0x66, 0x66, 0x66);
const POLL: Color = Color(0x56, 0xb4, 0xe9);
const TOTAL: Color = Color(0x33, 0x33, 0x33);
const PLAN: Color = Color(0xb2, 0x18, 0x2b);
const KV: Color = Color(0x00, 0x9e, 0x73);

/// The views drawn, in drawing order (the widest line first), with their style and legend.
const SERIES: [(View, Stroke, &str); 5] = [
    (
        View::AllocReserved,
        Stroke {
            color: Color(0xe6, 0x9f, 0x00),
            width: 4.0,
            dash: None,
        },
        "allocator reserved",
    ),
    (
        View::AllocAllocated,
        Stroke {
            color: Color(0x00, 0x9e, 0x73),
            width: 2.0,
            dash: Some([7.0, 4.0]),
        },
        "allocator allocated",
    ),
    (
        View::OwnBytes,
        Stroke {
            color: Color(0xcc, 0x79, 0xa7),
            width: 2.0,
            dash: Some([2.0, 3.0]),
        },
        "own bytes (this run, from the driver)",
    ),
    (
        View::DeviceUsed,
        Stroke {
            color: Color(0x00, 0x72, 0xb2),
            width: 2.2,
            dash: None,
        },
        "device used (whole device, all processes)",
    ),
    (
        View::JobUsed,
        Stroke {
            color: Color(0x6a, 0x3d, 0x9a),
            width: 2.0,
            dash: Some([5.0, 3.0]),
        },
        "job used (the watched job's processes, NVML)",
    ),
];

/// The plot area and the mapping from (time, bytes) to pixels.
struct Frame {
    x0: f32,
    x1: f32,
    y0: f32,
    y1: f32,
    t0_ns: u64,
    t1_ns: u64,
    top_bytes: u64,
}

impl Frame {
    fn x(&self, t_ns: u64) -> f32 {
        let span = (self.t1_ns - self.t0_ns).max(1) as f64;
        let f = (t_ns.saturating_sub(self.t0_ns)) as f64 / span;
        self.x0 + (f.min(1.0) as f32) * (self.x1 - self.x0)
    }

    fn y(&self, bytes: u64) -> f32 {
        let f = bytes as f64 / self.top_bytes.max(1) as f64;
        self.y1 - (f.min(1.0) as f32) * (self.y1 - self.y0)
    }

    fn seconds(&self, t_ns: u64) -> f64 {
        t_ns.saturating_sub(self.t0_ns) as f64 / 1e9
    }
}

/// Lays out the timeline plot of a run.
pub fn scene(run: &RunData) -> Scene {
    let s = &run.summary;
    let tl = &run.timeline;
    let t0_ns = run.t0_ns();
    let t1_ns = run.t1_ns().max(t0_ns + 1_000_000);
    // A little room on the right, so a mark at the very end (an OOM) stays visible.
    let t1_ns = t1_ns + (t1_ns - t0_ns) / 50;
    let idle_used = s.idle.after_context.device_used_bytes;
    let total = s.device.total_bytes;
    let poll = poll_peak(run, View::DeviceUsed, "1hz");

    // The y axis covers every series, mark and line that is drawn.
    let mut data_max = idle_used;
    for (view, _, _) in SERIES {
        data_max = data_max.max(tl.points(view).map(|p| p.1).max().unwrap_or(0));
    }
    data_max = data_max.max(
        s.ooms
            .iter()
            .map(|o| o.device_used_bytes)
            .max()
            .unwrap_or(0),
    );
    let show_total = !s.ooms.is_empty() || total <= data_max + data_max / 4;
    // A little room above the highest line, unless the device total closes the plot.
    let mut y_max = if show_total {
        total.max(data_max)
    } else {
        data_max + data_max / 50
    };
    if let Some(p) = &s.plan {
        y_max = y_max.max(p.capacity_bytes).max(p.margin_line_bytes);
    }
    let (top_bytes, mut y_ticks) = axis::byte_ticks(y_max);
    // A line exactly at the top of the frame would have no room for its label: one more tick.
    let top_bytes = match y_ticks.as_slice() {
        [.., a, b] if top_bytes <= y_max => {
            let next = top_bytes + (b - a);
            y_ticks.push(next);
            next
        }
        _ => top_bytes,
    };

    let f = Frame {
        x0: 96.0,
        x1: WIDTH - 36.0,
        y0: 76.0,
        y1: HEIGHT - 132.0,
        t0_ns,
        t1_ns,
        top_bytes,
    };
    let mut groups = Vec::new();
    let mut bg = Group::new("background", "background");
    bg.rect(0.0, 0.0, WIDTH, HEIGHT, WHITE, 1.0);
    groups.push(bg);
    groups.push(title(s, &f, poll));
    groups.push(phase_bands(s, &f));
    groups.push(axes(&f, &y_ticks));
    if let Some(g) = plan_lines(s, &f) {
        groups.push(g);
    }
    for (view, stroke, label) in SERIES {
        if tl.view(view).is_none() {
            continue;
        }
        let pts = tl.points(view).map(|(t, v)| (f64::from(f.x(t)), v));
        let reduced = downsample::min_max_columns(pts, 1.0);
        let line: Vec<(f32, f32)> = downsample::steps(&reduced)
            .into_iter()
            .map(|(x, v)| (x as f32, f.y(v)))
            .collect();
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
        g.line(line, stroke);
        groups.push(g);
    }

    if show_total {
        let mut g = Group::new("line-device-total", "line").titled(format!(
            "device total (CUDA-visible): {total} B ({})",
            Bytes(total)
        ));
        let y = f.y(total);
        g.line(vec![(f.x0, y), (f.x1, y)], Stroke::solid(TOTAL, 1.2));
        label(
            &mut g,
            f.x1 - 4.0,
            y - 5.0,
            format!("device total {}", Bytes(total)),
            11.0,
            Anchor::End,
            TOTAL,
        );
        groups.push(g);
    }
    let mut idle = Group::new("mark-idle", "mark").titled(format!(
        "idle reading: device used {idle_used} B ({}) before the workload",
        Bytes(idle_used)
    ));
    let y = f.y(idle_used);
    idle.line(
        vec![(f.x0, y), (f.x1, y)],
        Stroke::dashed(IDLE, 1.2, 6.0, 4.0),
    );
    label(
        &mut idle,
        f.x0 + 12.0,
        y - 5.0,
        format!("idle: {} used", Bytes(idle_used)),
        11.0,
        Anchor::Start,
        IDLE,
    );
    groups.push(idle);
    if let Some((_, bytes)) = poll {
        let mut g = Group::new("line-poll-1hz", "line").titled(format!(
            "the highest device used a 1 Hz poller would have reported: {bytes} B ({})",
            Bytes(bytes)
        ));
        let y = f.y(bytes);
        g.line(
            vec![(f.x0, y), (f.x1, y)],
            Stroke::dashed(POLL, 1.4, 2.0, 3.0),
        );
        label(
            &mut g,
            f.x1 - 4.0,
            y - 5.0,
            format!("1 Hz poll peak {}", Bytes(bytes)),
            11.0,
            Anchor::End,
            POLL,
        );
        groups.push(g);
    }

    if let Some(p) = s.peaks.run.get(View::DeviceUsed.key()) {
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
            fill: Some(SERIES[3].1.color),
            stroke: Some(Stroke::solid(WHITE, 1.5)),
        });
        let text = format!("true peak {}", Bytes(p.bytes));
        let right = x + 10.0 + font::text_width(&text, 12.0) < f.x1;
        label(
            &mut g,
            if right { x + 9.0 } else { x - 9.0 },
            y - 8.0,
            text,
            12.0,
            if right { Anchor::Start } else { Anchor::End },
            TEXT,
        );
        groups.push(g);
    }
    if let Some((t, bytes)) = poll {
        let (x, y) = (f.x(t), f.y(bytes));
        let mut g = Group::new("mark-poll-1hz", "mark").titled(format!(
            "a 1 Hz poller's highest reading of device_used_bytes: {bytes} B ({}) at its tick at {:.3} s",
            Bytes(bytes),
            f.seconds(t)
        ));
        g.shapes.push(diamond(x, y, 6.0, POLL));
        groups.push(g);
    }
    for (i, oom) in s.ooms.iter().enumerate() {
        groups.push(oom_mark(i, oom, &f));
    }
    for (i, oom) in run.watch.iter().flat_map(|w| &w.ooms).enumerate() {
        groups.push(job::oom_mark(s.ooms.len() + i, oom, &f));
    }
    groups.push(legend(run, &f, show_total));

    Scene {
        width: WIDTH,
        height: HEIGHT,
        description: format!(
            "headroom {} timeline of {} on {}, format_version {}",
            s.headroom_version, s.workload.name, s.device.name, s.format_version
        ),
        groups,
    }
}

/// Text on a white backdrop, so a label stays readable where it crosses a line.
fn label(g: &mut Group, x: f32, y: f32, text: String, size: f32, anchor: Anchor, color: Color) {
    let w = font::text_width(&text, size);
    let left = match anchor {
        Anchor::Start => x,
        Anchor::Middle => x - w / 2.0,
        Anchor::End => x - w,
    };
    g.rect(left - 2.0, y - size, w + 4.0, size * 1.3, WHITE, 0.8);
    g.text(x, y, text, size, anchor, color);
}

fn diamond(x: f32, y: f32, r: f32, color: Color) -> Shape {
    Shape::Path {
        points: vec![(x, y - r), (x + r, y), (x, y + r), (x - r, y)],
        closed: true,
        fill: Some(WHITE),
        stroke: Some(Stroke::solid(color, 2.0)),
    }
}

fn cross(x: f32, y: f32, r: f32, color: Color) -> [Shape; 2] {
    let s = Some(Stroke::solid(color, 2.5));
    [
        Shape::Path {
            points: vec![(x - r, y - r), (x + r, y + r)],
            closed: false,
            fill: None,
            stroke: s,
        },
        Shape::Path {
            points: vec![(x - r, y + r), (x + r, y - r)],
            closed: false,
            fill: None,
            stroke: s,
        },
    ]
}

/// `text` cut (with an ellipsis) to fit `width` pixels, or `None` when not even that fits.
fn fit(text: &str, size: f32, width: f32) -> Option<String> {
    if font::text_width(text, size) <= width {
        return Some(text.to_string());
    }
    let chars: Vec<char> = text.chars().collect();
    (1..chars.len()).rev().find_map(|n| {
        let t: String = chars[..n].iter().collect::<String>() + "…";
        (n >= 3 && font::text_width(&t, size) <= width).then_some(t)
    })
}

fn title(s: &Summary, f: &Frame, poll: Option<(u64, u64)>) -> Group {
    let mut g = Group::new("title", "title");
    let status = serde_json::to_value(s.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
        .replace('_', " ");
    let head = format!(
        "headroom · {} on {} · {status}",
        s.workload.name, s.device.name
    );
    if let Some(t) = fit(&head, 17.0, f.x1 - f.x0) {
        g.text(f.x0, 30.0, t, 17.0, Anchor::Start, TEXT);
    }
    let d = &s.device;
    let mut parts = vec![match &d.profile {
        Some(p) => format!("{}, profile {p}", d.backend),
        None => format!("driver {}", d.driver_version),
    }];
    parts.push(format!("started {}", s.started_utc));
    parts.push(format!(
        "idle {} used of {}",
        Bytes(s.idle.after_context.device_used_bytes),
        Bytes(d.total_bytes)
    ));
    if let Some(p) = s.peaks.run.get(View::DeviceUsed.key()) {
        parts.push(format!("true peak {}", Bytes(p.bytes)));
    }
    if let Some((_, b)) = poll {
        parts.push(format!("a 1 Hz poll would show {}", Bytes(b)));
    }
    if !s.ooms.is_empty() {
        parts.push(format!("{} OOM", s.ooms.len()));
    }
    // Drop trailing parts until the line fits.
    while parts.len() > 1 && font::text_width(&parts.join(" · "), 12.0) > f.x1 - f.x0 {
        parts.pop();
    }
    g.text(f.x0, 50.0, parts.join(" · "), 12.0, Anchor::Start, MUTED);
    g
}

fn phase_bands(s: &Summary, f: &Frame) -> Group {
    let mut g = Group::new("phases", "phase");
    let mut k = 0;
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
        if let Some(t) = fit(&p.name, 11.0, xb - xa - 6.0) {
            g.text((xa + xb) / 2.0, f.y0 + 14.0, t, 11.0, Anchor::Middle, MUTED);
        }
    }
    g
}

fn axes(f: &Frame, y_ticks: &[u64]) -> Group {
    let mut g = Group::new("axes", "axis");
    for &b in y_ticks {
        let y = f.y(b);
        g.line(vec![(f.x0, y), (f.x1, y)], Stroke::solid(GRID, 0.8));
        g.text(
            f.x0 - 8.0,
            y + 4.0,
            axis::byte_label(b, f.top_bytes),
            11.0,
            Anchor::End,
            AXIS,
        );
    }
    let span_s = (f.t1_ns - f.t0_ns) as f64 / 1e9;
    let (step, x_ticks) = axis::time_ticks(span_s);
    for t in x_ticks {
        let x = f.x(f.t0_ns + (t * 1e9).round() as u64);
        g.line(vec![(x, f.y1), (x, f.y1 + 5.0)], Stroke::solid(AXIS, 1.0));
        g.text(
            x,
            f.y1 + 19.0,
            axis::time_label(t, step),
            11.0,
            Anchor::Middle,
            AXIS,
        );
    }
    g.line(
        vec![(f.x0, f.y0), (f.x0, f.y1), (f.x1, f.y1)],
        Stroke::solid(AXIS, 1.2),
    );
    g.text(
        f.x0,
        f.y0 - 8.0,
        "device memory (binary units)",
        11.0,
        Anchor::Start,
        AXIS,
    );
    g.text(
        (f.x0 + f.x1) / 2.0,
        f.y1 + 40.0,
        "time since the run started (seconds)",
        12.0,
        Anchor::Middle,
        AXIS,
    );
    g
}

fn plan_lines(s: &Summary, f: &Frame) -> Option<Group> {
    let p = s.plan.as_ref()?;
    let mut g = Group::new("plan", "plan").titled(format!(
        "plan {}: capacity {} B, margin line {} B, KV budget {} B",
        p.label, p.capacity_bytes, p.margin_line_bytes, p.kv_budget_bytes
    ));
    let kv_low = p.margin_line_bytes.saturating_sub(p.kv_budget_bytes);
    let (ya, yb) = (f.y(p.margin_line_bytes), f.y(kv_low));
    g.rect(f.x0, ya, f.x1 - f.x0, (yb - ya).max(0.5), KV, 0.12);
    label(
        &mut g,
        f.x0 + 6.0,
        yb - 5.0,
        format!("planned KV budget {}", Bytes(p.kv_budget_bytes)),
        11.0,
        Anchor::Start,
        KV,
    );
    g.line(
        vec![(f.x0, ya), (f.x1, ya)],
        Stroke::dashed(PLAN, 1.6, 8.0, 4.0),
    );
    label(
        &mut g,
        f.x0 + 6.0,
        ya - 5.0,
        format!("margin line {} ({})", Bytes(p.margin_line_bytes), p.label),
        11.0,
        Anchor::Start,
        PLAN,
    );
    if p.capacity_bytes != s.device.total_bytes {
        let y = f.y(p.capacity_bytes);
        g.line(vec![(f.x0, y), (f.x1, y)], Stroke::solid(PLAN, 1.2));
        label(
            &mut g,
            // Mid-width: the device total's label is at the right, the margin line's at the left.
            (f.x0 + f.x1) / 2.0,
            y - 5.0,
            format!("plan capacity {}", Bytes(p.capacity_bytes)),
            11.0,
            Anchor::Middle,
            PLAN,
        );
    }
    Some(g)
}

fn oom_mark(i: usize, oom: &crate::oom::OomRecord, f: &Frame) -> Group {
    let x = f.x(oom.t_ns);
    let mut g = Group::new(format!("mark-oom-{}", i + 1), "mark oom").titled(format!(
        "OOM at {}/{} ({} {}): asked {} B ({}), {} B free of {} B; {}",
        oom.phase,
        oom.step,
        oom.op,
        oom.name,
        oom.requested_bytes,
        Bytes(oom.requested_bytes),
        oom.device_free_bytes,
        oom.device_total_bytes,
        oom.diagnosis.observation
    ));
    g.line(
        vec![(x, f.y0), (x, f.y1)],
        Stroke::dashed(OOM, 1.5, 5.0, 3.0),
    );
    g.shapes
        .extend(cross(x, f.y(oom.device_used_bytes), 6.0, OOM));
    let text = format!("OOM: {} {} asked", oom.name, Bytes(oom.requested_bytes));
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

fn legend(run: &RunData, f: &Frame, show_total: bool) -> Group {
    let s = &run.summary;
    let mut g = Group::new("legend", "legend");
    let mut entries: Vec<(Vec<Shape>, String)> = Vec::new();
    let sample = |stroke: Stroke| {
        vec![Shape::Path {
            points: vec![(0.0, -4.0), (26.0, -4.0)],
            closed: false,
            fill: None,
            stroke: Some(stroke),
        }]
    };
    for (view, stroke, label) in SERIES.iter().rev() {
        if run.timeline.view(*view).is_some() {
            entries.push((sample(*stroke), format!("{} — {label}", view.key())));
        }
    }
    entries.push((
        vec![Shape::Circle {
            cx: 13.0,
            cy: -4.0,
            r: 5.0,
            fill: Some(SERIES[3].1.color),
            stroke: None,
        }],
        "true peak".into(),
    ));
    entries.push((
        vec![
            sample(Stroke::dashed(POLL, 1.4, 2.0, 3.0)).remove(0),
            diamond(13.0, -4.0, 5.0, POLL),
        ],
        "peak a 1 Hz poll would report".into(),
    ));
    entries.push((
        sample(Stroke::dashed(IDLE, 1.2, 6.0, 4.0)),
        "idle reading".into(),
    ));
    if show_total {
        entries.push((sample(Stroke::solid(TOTAL, 1.2)), "device total".into()));
    }
    if !s.ooms.is_empty() || run.watch.as_ref().is_some_and(|w| !w.ooms.is_empty()) {
        let [a, b] = cross(13.0, -4.0, 5.0, OOM);
        entries.push((vec![a, b], "OOM".into()));
    }
    if s.plan.is_some() {
        entries.push((
            sample(Stroke::dashed(PLAN, 1.6, 8.0, 4.0)),
            "plan margin line (device total − safety margin)".into(),
        ));
        entries.push((
            vec![Shape::Rect {
                x: 0.0,
                y: -10.0,
                w: 26.0,
                h: 12.0,
                fill: KV,
                opacity: 0.25,
            }],
            "planned KV budget (below the margin line)".into(),
        ));
    }
    let (mut x, mut y) = (f.x0, f.y1 + 68.0);
    for (shapes, label) in entries {
        let w = 32.0 + font::text_width(&label, 11.0) + 22.0;
        if x + w > f.x1 && x > f.x0 {
            x = f.x0;
            y += 20.0;
        }
        for sh in shapes {
            g.shapes.push(translate(sh, x, y));
        }
        g.text(x + 32.0, y, label, 11.0, Anchor::Start, TEXT);
        x += w;
    }
    g
}

fn translate(shape: Shape, dx: f32, dy: f32) -> Shape {
    match shape {
        Shape::Path {
            points,
            closed,
            fill,
            stroke,
        } => Shape::Path {
            points: points.into_iter().map(|(x, y)| (x + dx, y + dy)).collect(),
            closed,
            fill,
            stroke,
        },
        Shape::Circle {
            cx,
            cy,
            r,
            fill,
            stroke,
        } => Shape::Circle {
            cx: cx + dx,
            cy: cy + dy,
            r,
            fill,
            stroke,
        },
        Shape::Rect {
            x,
            y,
            w,
            h,
            fill,
            opacity,
        } => Shape::Rect {
            x: x + dx,
            y: y + dy,
            w,
            h,
            fill,
            opacity,
        },
        other => other,
    }
}

/// Where the highest reading a poller at `name` (e.g. `1hz`) saw of `view` was taken: the
/// poller's tick and the value it read there. Replays the poller over the timeline (each tick
/// sees the latest sampler or event reading at or before it) and checks the result against
/// the peak in `summary.json`.
pub fn poll_peak(run: &RunData, view: View, name: &str) -> Option<(u64, u64)> {
    let s = &run.summary;
    let polled = s.peaks.polled.get(name)?;
    let want = *polled.peaks.get(view.key())?;
    let col = run.timeline.view(view)?;
    let end = s.end_ns?;
    let period = polled.period_ns.max(1);
    let tl = &run.timeline;
    let mut i = 0;
    let mut last = None;
    let mut tick = s.start_ns;
    while tick <= end {
        while i < tl.len() && tl.t_ns[i] <= tick {
            if matches!(tl.source[i], Source::Sampler | Source::Event) {
                last = Some(col[i]);
            }
            i += 1;
        }
        if let Some(Some(v)) = last
            && v == want
        {
            return Some((tick, v));
        }
        tick += period;
    }
    None
}
