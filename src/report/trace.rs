//! `trace.json` in the Chrome trace-event format (opens in Perfetto UI and chrome://tracing):
//! a counter track per memory view, the phases as duration slices, and every allocate, free,
//! launch and OOM from `events.csv` as an instant event on its stream's track.
//!
//! Timestamps are microseconds since the run's first reading. A counter is written only when
//! its value changes (and at the last reading), which keeps steady sampler rows out without
//! changing the step line a viewer draws. A run long enough to change a view more than
//! `COUNTER_POINTS_MAX` times gets that counter reduced to the first, lowest, highest and last
//! value per time bucket (every peak kept). A run with more than `EVENTS_MAX` events keeps every
//! OOM, error, stop and phase as it is and aggregates the completed events per stream and time
//! bucket into one slice each, counting every allocate, free and launch in it: nothing is
//! dropped, and `otherData` says how it was done. The CSVs keep every event as it was.

use std::collections::BTreeMap;
use std::io::Write as _;

use serde_json::{Value, json};

use crate::record::View;
use crate::report::plot::downsample::min_max_columns;
use crate::report::rundata::{Event, RunData};

const PID: u32 = 1;
const PHASES_TID: u32 = 1;
const MARKS_TID: u32 = 2;
/// Stream tracks are numbered from here, in order of first appearance.
const FIRST_STREAM_TID: u32 = 10;

/// Operations that take time on their stream: drawn as slices ending at their `t_ns`.
const SPAN_OPS: &[&str] = &["sleep", "spin", "synchronize"];

/// The most value changes one counter track carries before it is reduced per time bucket.
pub const COUNTER_POINTS_MAX: usize = 20_000;
/// The most events (allocate, free, launch, …) the trace carries one by one; past it, completed
/// ones are aggregated.
pub const EVENTS_MAX: usize = 50_000;

fn us(t_ns: u64, t0_ns: u64) -> f64 {
    t_ns.saturating_sub(t0_ns) as f64 / 1e3
}

/// A metadata event (`"ph": "M"`), with the category Chrome writes for them.
fn metadata(name: &str, tid: u32, args: Value) -> Value {
    json!({"name": name, "cat": "__metadata", "ph": "M", "pid": PID, "tid": tid, "args": args})
}

/// The trace of a run as JSON text, one event per line.
pub fn render(run: &RunData) -> anyhow::Result<Vec<u8>> {
    render_bounded(run, EVENTS_MAX)
}

/// `render`, aggregating completed events once there are more than `events_max`.
pub fn render_bounded(run: &RunData, events_max: usize) -> anyhow::Result<Vec<u8>> {
    let s = &run.summary;
    let t0 = run.t0_ns();
    let mut ev = Events::default();
    let streams = tracks(run, &mut ev);
    phases_and_marks(run, t0, &mut ev);
    let counts = events(run, t0, &streams, events_max, &mut ev)?;
    let reduced = counters(run, t0, &mut ev);
    let other = json!({
        "format_version": s.format_version,
        "headroom_version": s.headroom_version,
        "workload": s.workload.name,
        "device": s.device.name,
        "driver_version": s.device.driver_version,
        "started_utc": s.started_utc,
        "t0_ns": t0,
        "events_total": run.events.len(),
        "events_in_trace": counts.single,
        "events_aggregated": counts.aggregated,
        "aggregate_bucket_us": counts.bucket_us,
        "aggregation": if counts.aggregated > 0 {
            "completed events (result ok) are counted per stream and time bucket in `aggregate` slices; every OOM, error, stop and phase is kept as it is; events.csv has each event"
        } else {
            "none: every event is in the trace"
        },
        "counters_reduced_per_time_bucket": reduced,
    });
    let mut out = Vec::new();
    writeln!(
        out,
        "{{\"displayTimeUnit\":\"ms\",\"otherData\":{other},\"traceEvents\":["
    )?;
    out.extend_from_slice(&ev.finish()?);
    out.extend_from_slice(b"]}\n");
    Ok(out)
}

/// The trace's events as JSON text, each written as it is made (not held as values): one a
/// line, comma-separated.
#[derive(Default)]
struct Events {
    text: Vec<u8>,
    count: usize,
    error: Option<serde_json::Error>,
}

impl Events {
    fn push(&mut self, e: Value) {
        if self.count > 0 {
            self.text.extend_from_slice(b",\n");
        }
        self.count += 1;
        if let Err(err) = serde_json::to_writer(&mut self.text, &e) {
            self.error.get_or_insert(err);
        }
    }

    fn finish(mut self) -> serde_json::Result<Vec<u8>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.count > 0 {
            self.text.push(b'\n');
        }
        Ok(self.text)
    }
}

/// The process and its tracks: phases, marks, then one per stream in order of appearance.
fn tracks<'r>(run: &'r RunData, ev: &mut Events) -> BTreeMap<&'r str, u32> {
    let s = &run.summary;
    let process = format!("headroom · {} on {}", s.workload.name, s.device.name);
    ev.push(metadata("process_name", 0, json!({"name": process})));
    let mut thread = |tid: u32, name: &str, sort: u32| {
        ev.push(metadata("thread_name", tid, json!({"name": name})));
        ev.push(metadata(
            "thread_sort_index",
            tid,
            json!({"sort_index": sort}),
        ));
    };
    thread(PHASES_TID, "phases", 0);
    thread(MARKS_TID, "readings and OOMs", 1);
    let mut streams: BTreeMap<&str, u32> = BTreeMap::new();
    for name in &run.events.streams {
        let next = FIRST_STREAM_TID + streams.len() as u32;
        streams.entry(name.as_str()).or_insert(next);
    }
    for (name, tid) in &streams {
        thread(*tid, &format!("stream {name}"), *tid);
    }
    streams
}

/// Phase slices, the idle reading, the release check and every OOM with its diagnosis.
fn phases_and_marks(run: &RunData, t0: u64, ev: &mut Events) {
    let s = &run.summary;
    for p in &s.phases {
        let (Some(a), Some(b)) = (p.start_ns, p.end_ns) else {
            continue;
        };
        let peaks: BTreeMap<&str, u64> =
            p.peaks.iter().map(|(k, v)| (k.as_str(), v.bytes)).collect();
        ev.push(json!({
            "name": p.name, "cat": "phase", "ph": "X", "pid": PID, "tid": PHASES_TID,
            "ts": us(a, t0), "dur": us(b, a),
            "args": {"status": p.status, "actions_run": p.actions_run,
                     "actions_planned": p.actions_planned, "peak_bytes": peaks},
        }));
    }
    if let Some(idle) = s.idle_after() {
        let mut args = json!({"device_free_bytes": idle.device_free_bytes, "device_used_bytes": idle.device_used_bytes,
                              "device_total_bytes": idle.device_total_bytes});
        if let Some(b) = &s.idle_basis {
            args["basis"] = json!(b);
        }
        ev.push(json!({
            "name": "idle reading", "cat": "reading", "ph": "i", "s": "t", "pid": PID, "tid": MARKS_TID,
            "ts": us(idle.t_ns, t0), "args": args,
        }));
    }
    if let (Some(r), Some(end)) = (&s.release, s.end_ns) {
        ev.push(json!({
            "name": "release check", "cat": "reading", "ph": "i", "s": "t", "pid": PID, "tid": MARKS_TID,
            "ts": us(run.t1_ns().max(end), t0),
            "args": {"idle_device_free_bytes": r.idle_device_free_bytes,
                     "final_device_free_bytes": r.final_device_free_bytes,
                     "difference_bytes": r.difference_bytes, "within_one_page": r.within_one_page},
        }));
    }
    for (i, oom) in s.ooms.iter().enumerate() {
        ev.push(json!({
            "name": format!("OOM #{}: {} {} at {}/{}", i + 1, oom.op, oom.name, oom.phase, oom.step),
            "cat": "oom", "ph": "i", "s": "t", "pid": PID, "tid": MARKS_TID, "ts": us(oom.t_ns, t0),
            "args": {"observation": oom.diagnosis.observation, "causes": oom.diagnosis.causes,
                     "requested_bytes": oom.requested_bytes, "rounded_bytes": oom.rounded_bytes,
                     "device_free_bytes": oom.device_free_bytes, "utc": oom.utc},
        }));
    }
}

/// How the events went into the trace.
struct EventCounts {
    /// Events written one by one.
    single: usize,
    /// Completed events counted inside `aggregate` slices.
    aggregated: usize,
    /// The aggregation's time bucket (0: none).
    bucket_us: f64,
}

/// One event as an instant (or a slice, for ops that take time on their stream).
fn event_json(e: &Event, tid: u32, t0: u64) -> Value {
    let name = if e.name.is_empty() {
        e.op.clone()
    } else {
        format!("{} {}", e.op, e.name)
    };
    let mut args = json!({
        "phase": e.phase, "step": e.step, "stream": e.stream, "result": e.result,
        "latency_ns": e.latency_ns,
    });
    for (k, v) in [
        ("requested_bytes", e.requested_bytes),
        ("size_bytes", e.size_bytes),
        ("device_free_bytes", e.device_free_bytes),
    ] {
        if let Some(v) = v {
            args[k] = json!(v);
        }
    }
    if !e.detail.is_empty() {
        args["detail"] = json!(e.detail);
    }
    if e.result == "oom" {
        json!({"name": format!("OOM: {name}"), "cat": "oom", "ph": "i", "s": "g",
               "pid": PID, "tid": tid, "ts": us(e.t_ns, t0), "args": args})
    } else if SPAN_OPS.contains(&e.op.as_str()) {
        let start = e.t_ns.saturating_sub(e.latency_ns);
        json!({"name": name, "cat": e.op, "ph": "X", "pid": PID, "tid": tid,
               "ts": us(start, t0), "dur": us(e.t_ns, start), "args": args})
    } else {
        json!({"name": name, "cat": e.op, "ph": "i", "s": "t", "pid": PID, "tid": tid,
               "ts": us(e.t_ns, t0), "args": args})
    }
}

/// Every event, read from `events.csv` as it is written into the trace; past `events_max`,
/// completed ones aggregated per stream and time bucket (the others kept as they are).
fn events(
    run: &RunData,
    t0: u64,
    streams: &BTreeMap<&str, u32>,
    events_max: usize,
    ev: &mut Events,
) -> anyhow::Result<EventCounts> {
    let tid = |e: &Event| streams.get(e.stream.as_str()).copied().unwrap_or(MARKS_TID);
    if run.events.len() <= events_max {
        let mut single = 0;
        for e in run.events.rows()? {
            let e = e?;
            ev.push(event_json(&e, tid(&e), t0));
            single += 1;
        }
        return Ok(EventCounts {
            single,
            aggregated: 0,
            bucket_us: 0.0,
        });
    }
    // The events that did not complete (a run's few OOMs, errors and stops) are kept; the
    // room left is shared among the streams' buckets.
    let room = events_max
        .saturating_sub(run.events.not_ok)
        .max(streams.len());
    let buckets = (room / streams.len().max(1)).max(1) as u64;
    let span = run.t1_ns().saturating_sub(t0).max(1);
    let width = span.div_ceil(buckets).max(1);
    // (track, bucket) → (first t, last t, per op: count and requested bytes)
    type Ops = BTreeMap<String, (u64, u64)>;
    let mut agg: BTreeMap<(u32, u64), (u64, u64, Ops)> = BTreeMap::new();
    let (mut aggregated, mut single) = (0, 0);
    for e in run.events.rows()? {
        let e = e?;
        if e.result != "ok" {
            ev.push(event_json(&e, tid(&e), t0));
            single += 1;
            continue;
        }
        let b = e.t_ns.saturating_sub(t0) / width;
        let slot = agg
            .entry((tid(&e), b))
            .or_insert((e.t_ns, e.t_ns, BTreeMap::new()));
        slot.0 = slot.0.min(e.t_ns);
        slot.1 = slot.1.max(e.t_ns);
        let op = slot.2.entry(e.op).or_insert((0, 0));
        op.0 += 1;
        op.1 += e.requested_bytes.unwrap_or(0);
        aggregated += 1;
    }
    for ((tid, _), (first, last, ops)) in agg {
        let total: u64 = ops.values().map(|o| o.0).sum();
        let parts: Vec<String> = ops.iter().map(|(op, (n, _))| format!("{n} {op}")).collect();
        let per_op: BTreeMap<&str, Value> = ops
            .iter()
            .map(|(op, (n, b))| (op.as_str(), json!({"count": n, "requested_bytes": b})))
            .collect();
        ev.push(json!({
            "name": format!("{total} events: {}", parts.join(", ")), "cat": "aggregate",
            "ph": "X", "pid": PID, "tid": tid, "ts": us(first, t0), "dur": us(last, first),
            "args": {"events": total, "ops": per_op, "first_t_ns": first, "last_t_ns": last},
        }));
    }
    Ok(EventCounts {
        single,
        aggregated,
        bucket_us: width as f64 / 1e3,
    })
}

/// One counter track per view; returns the views reduced per time bucket.
fn counters(run: &RunData, t0: u64, ev: &mut Events) -> Vec<&'static str> {
    let tl = &run.timeline;
    let span_ns = run.t1_ns().saturating_sub(t0).max(1) as f64;
    let mut reduced = Vec::new();
    for view in View::ALL {
        if tl.view(view).is_none() {
            continue;
        }
        let mut changes: Vec<(f64, u64)> = Vec::new();
        let mut last = None;
        let mut end = None;
        for (t, v) in tl.points(view) {
            if last != Some(v) {
                changes.push((t as f64, v));
                last = Some(v);
            }
            end = Some((t as f64, v));
        }
        if let Some(e) = end
            && changes.last() != Some(&e)
        {
            changes.push(e);
        }
        if changes.len() > COUNTER_POINTS_MAX {
            changes = min_max_columns(changes, span_ns / (COUNTER_POINTS_MAX / 4) as f64);
            reduced.push(view.key());
        }
        for (t, v) in changes {
            ev.push(
                json!({"name": view.key(), "cat": "memory", "ph": "C", "pid": PID,
                           "ts": us(t as u64, t0), "args": {"bytes": v}}),
            );
        }
    }
    reduced
}
