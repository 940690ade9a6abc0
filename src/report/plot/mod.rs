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
mod hover;
mod job;
pub mod labels;
mod marks;
pub mod png;
pub mod scene;
mod series;
pub mod svg;

use crate::record::{Source, View};
use crate::report::rundata::RunData;
use crate::report::summary::Summary;
use crate::units::Bytes;
use labels::{Box2, Placer, fit};
use scene::{Anchor, Color, Group, Scene, Shape, Stroke};
use series::{DEVICE_USED, SERIES};

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
const POLL10: Color = Color(0x8c, 0x8c, 0x00);
const FLOOR: Color = Color(0x99, 0x33, 0x00);
const TOTAL: Color = Color(0x33, 0x33, 0x33);
const PLAN: Color = Color(0xb2, 0x18, 0x2b);
const KV: Color = Color(0x00, 0x9e, 0x73);

/// The plot area and the mapping from (time, bytes) to pixels.
struct Frame {
    x0: f32,
    x1: f32,
    y0: f32,
    y1: f32,
    t0_ns: u64,
    t1_ns: u64,
    top_bytes: u64,
    y_ticks: Vec<u64>,
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
    let f = frame(run);
    let idle_used = s.idle_after().map(|i| i.device_used_bytes);
    let total = s.device_total();
    let poll = poll_peak(run, View::DeviceUsed, "1hz");
    let poll10 = poll_peak(run, View::DeviceUsed, "10hz");
    let show_total = shows_total(run, &f);
    let mut placer = Placer::new(Box2 {
        x0: f.x0,
        y0: f.y0,
        x1: f.x1,
        y1: f.y1,
    });
    let mut groups = Vec::new();
    let mut bg = Group::new("background", "background");
    bg.rect(0.0, 0.0, WIDTH, HEIGHT, WHITE, 1.0);
    groups.push(bg);
    groups.push(title(s, &f, poll));
    // Labels are placed in order of importance: phase names, then marks are kept clear, then
    // the lines' names, the true peak and the OOMs.
    groups.push(marks::phase_bands(s, &f, &mut placer));
    groups.push(axes(&f, &f.y_ticks));
    marks::reserve_marks(s, &f, poll, &mut placer);
    if let Some(g) = marks::plan_lines(s, &f, &mut placer) {
        groups.push(g);
    }
    let (lines, bands) = series::lines(run, &f);
    groups.extend(lines);
    if let Some(total) = total.filter(|_| show_total) {
        groups.push(marks::device_total(total, &f, &mut placer));
    }
    // The floor and, when the device total is above this scale, both said at the top.
    groups.extend(marks::floor_and_capacity(s, show_total, &f, &mut placer));
    if let Some(g) = marks::largest_free(run, &f, &mut placer) {
        groups.push(g);
    }
    groups.extend(marks::idle_and_poll(
        idle_used,
        poll,
        poll10,
        &f,
        &mut placer,
    ));
    groups.extend(marks::true_peak(s, &f, &mut placer));
    if let Some((t, bytes)) = poll {
        groups.push(marks::poll_mark(t, bytes, "1 Hz", POLL, &f));
    }
    if let Some((t, bytes)) = poll10.filter(|p| Some(*p) != poll) {
        groups.push(marks::poll_mark(t, bytes, "10 Hz", POLL10, &f));
    }
    for (i, oom) in s.ooms.iter().enumerate() {
        groups.push(marks::oom(i, oom, &f, &mut placer));
    }
    for (i, oom) in run.watch.iter().flat_map(|w| &w.ooms).enumerate() {
        groups.push(job::oom_mark(s.ooms.len() + i, oom, &f, &mut placer));
    }
    groups.push(legend(run, &f, show_total, bands, poll10.is_some()));
    // Last, so the hover areas lie over everything.
    groups.push(hover::readings(run, &f));
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

/// The highest value anything drawn reaches: every drawn series, the idle line, the OOMs.
fn data_max(run: &RunData) -> u64 {
    let s = &run.summary;
    let mut m = s.idle_after().map_or(0, |i| i.device_used_bytes);
    for (view, _, _) in SERIES {
        if series::drawn(run, view) {
            m = m.max(run.timeline.points(view).map(|p| p.1).max().unwrap_or(0));
        }
    }
    m.max(s.ooms.iter().map(|o| o.plotted_bytes()).max().unwrap_or(0))
}

/// Whether the device total is drawn: after an OOM, or when the data come within a quarter of
/// it; never where it is unknown (an import whose evidence does not record it).
fn shows_total(run: &RunData, _f: &Frame) -> bool {
    let d = data_max(run);
    run.summary
        .device_total()
        .is_some_and(|t| !run.summary.ooms.is_empty() || t <= d + d / 4)
}

/// The plot area, its time span and its byte axis.
fn frame(run: &RunData) -> Frame {
    let s = &run.summary;
    let t0_ns = run.t0_ns();
    let t1_ns = run.t1_ns().max(t0_ns + 1_000_000);
    // A little room on the right, so a mark at the very end (an OOM) stays visible.
    let t1_ns = t1_ns + (t1_ns - t0_ns) / 50;
    let d = data_max(run);
    // A little room above the highest line, unless the device total closes the plot.
    let mut y_max = match s.device_total() {
        Some(total) if !s.ooms.is_empty() || total <= d + d / 4 => total.max(d),
        _ => d + d / 50,
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
    Frame {
        x0: 96.0,
        x1: WIDTH - 36.0,
        y0: 76.0,
        y1: HEIGHT - 132.0,
        t0_ns,
        t1_ns,
        top_bytes,
        y_ticks,
    }
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

fn title(s: &Summary, f: &Frame, poll: Option<(u64, u64)>) -> Group {
    let mut g = Group::new("title", "title");
    // One spelling of a status everywhere: summary.json's.
    let status = crate::report::word(&s.status);
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
    parts.push(match s.idle_after() {
        Some(i) => format!(
            "idle {} used of {}",
            Bytes(i.device_used_bytes),
            s.device_total()
                .map_or("an unknown total".to_string(), |t| Bytes(t).to_string())
        ),
        None => format!(
            "idle reading {}",
            s.idle_basis_short().unwrap_or("not taken")
        ),
    });
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

fn legend(run: &RunData, f: &Frame, show_total: bool, bands: bool, poll10: bool) -> Group {
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
        if series::drawn(run, *view) {
            let lifted = series::coincides_with(run, *view);
            let note = if lifted.is_empty() {
                String::new()
            } else {
                let with: Vec<String> = lifted
                    .iter()
                    .map(|(v, share)| format!("{} on {:.0}% of rows", v.key(), share * 100.0))
                    .collect();
                format!(
                    " (drawn {:.0} px higher: equal to {})",
                    series::OFFSET_PX * lifted.len() as f32,
                    with.join(", ")
                )
            };
            entries.push((sample(*stroke), format!("{} — {label}{note}", view.key())));
        }
    }
    entries.push((
        vec![Shape::Circle {
            cx: 13.0,
            cy: -4.0,
            r: 5.0,
            fill: Some(DEVICE_USED),
            stroke: None,
        }],
        "true peak".into(),
    ));
    if bands {
        entries.push((
            vec![Shape::Rect {
                x: 0.0,
                y: -10.0,
                w: 26.0,
                h: 12.0,
                fill: MUTED,
                opacity: 0.3,
            }],
            "shaded: the range of fast allocate/free churn (timeline.csv has each value)".into(),
        ));
    }
    entries.push((
        vec![
            sample(Stroke::dashed(POLL, 1.4, 2.0, 3.0)).remove(0),
            diamond(13.0, -4.0, 5.0, POLL),
        ],
        "peak a 1 Hz poll would report".into(),
    ));
    if poll10 {
        entries.push((
            vec![
                sample(Stroke::dashed(POLL10, 1.4, 4.0, 2.0)).remove(0),
                diamond(13.0, -4.0, 5.0, POLL10),
            ],
            "peak a 10 Hz poll would report".into(),
        ));
    }
    if s.idle.is_some() {
        entries.push((
            sample(Stroke::dashed(IDLE, 1.2, 6.0, 4.0)),
            "idle reading".into(),
        ));
    }
    if show_total {
        entries.push((sample(Stroke::solid(TOTAL, 1.2)), "device total".into()));
    }
    if marks::floor_line(s).is_some_and(|fl| fl <= f.top_bytes) {
        entries.push((
            sample(Stroke::dashed(FLOOR, 1.3, 3.0, 3.0)),
            "floor: device used a step may not pass (total − --keep-free)".into(),
        ));
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
