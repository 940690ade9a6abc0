//! `trace.json` in the Chrome trace-event format (opens in Perfetto UI and chrome://tracing):
//! a counter track per memory view, the phases as duration slices, and every allocate, free,
//! launch and OOM from `events.csv` as an instant event on its stream's track.
//!
//! Timestamps are microseconds since the run's first reading. A counter is written only when
//! its value changes (and at the last reading), which keeps steady sampler rows out without
//! changing the step line a viewer draws. A run long enough to change a view more than
//! `COUNTER_POINTS_MAX` times gets that counter reduced to the first, lowest, highest and last
//! value per time bucket (every peak kept), and more than `EVENTS_MAX` events are thinned
//! evenly, keeping every OOM, error and stop; `otherData` says so, and the CSVs keep it all.

use std::collections::BTreeMap;
use std::io::Write as _;

use serde_json::{Value, json};

use crate::record::View;
use crate::report::plot::downsample::min_max_columns;
use crate::report::rundata::RunData;

const PID: u32 = 1;
const PHASES_TID: u32 = 1;
const MARKS_TID: u32 = 2;
/// Stream tracks are numbered from here, in order of first appearance.
const FIRST_STREAM_TID: u32 = 10;

/// Operations that take time on their stream: drawn as slices ending at their `t_ns`.
const SPAN_OPS: &[&str] = &["sleep", "spin", "synchronize"];

/// The most value changes one counter track carries before it is reduced per time bucket.
pub const COUNTER_POINTS_MAX: usize = 20_000;
/// The most events (allocate, free, launch, …) the trace carries before `ok` ones are thinned.
pub const EVENTS_MAX: usize = 50_000;

fn us(t_ns: u64, t0_ns: u64) -> f64 {
    t_ns.saturating_sub(t0_ns) as f64 / 1e3
}

/// The trace of a run as JSON text, one event per line.
pub fn render(run: &RunData) -> anyhow::Result<Vec<u8>> {
    let s = &run.summary;
    let t0 = run.t0_ns();
    let mut ev: Vec<Value> = Vec::new();
    let process = format!("headroom · {} on {}", s.workload.name, s.device.name);
    ev.push(
        json!({"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": process}}),
    );
    let mut thread = |tid: u32, name: &str, sort: u32| {
        ev.push(json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}}));
        ev.push(json!({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid, "args": {"sort_index": sort}}));
    };
    thread(PHASES_TID, "phases", 0);
    thread(MARKS_TID, "readings and OOMs", 1);
    let mut streams: BTreeMap<&str, u32> = BTreeMap::new();
    for e in &run.events {
        let next = FIRST_STREAM_TID + streams.len() as u32;
        streams.entry(e.stream.as_str()).or_insert(next);
    }
    for (name, tid) in &streams {
        thread(*tid, &format!("stream {name}"), *tid);
    }

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
    let idle = &s.idle.after_context;
    ev.push(json!({
        "name": "idle reading", "cat": "reading", "ph": "i", "s": "t", "pid": PID, "tid": MARKS_TID,
        "ts": us(idle.t_ns, t0),
        "args": {"device_free_bytes": idle.device_free_bytes, "device_used_bytes": idle.device_used_bytes,
                 "device_total_bytes": idle.device_total_bytes},
    }));
    if let (Some(r), Some(end)) = (&s.release, s.end_ns) {
        ev.push(json!({
            "name": "release check", "cat": "reading", "ph": "i", "s": "t", "pid": PID, "tid": MARKS_TID,
            "ts": us(run.t1_ns().max(end), t0),
            "args": {"idle_device_free_bytes": r.idle_device_free_bytes,
                     "final_device_free_bytes": r.final_device_free_bytes,
                     "difference_bytes": r.difference_bytes, "within_one_page": r.within_one_page},
        }));
    }

    let kept_ok = EVENTS_MAX.saturating_sub(run.events.iter().filter(|e| e.result != "ok").count());
    let ok_total = run.events.iter().filter(|e| e.result == "ok").count();
    let stride = ok_total.div_ceil(kept_ok.max(1)).max(1);
    let mut ok_seen = 0usize;
    let mut events_in_trace = 0usize;
    for e in &run.events {
        if e.result == "ok" {
            ok_seen += 1;
            if (ok_seen - 1) % stride != 0 {
                continue;
            }
        }
        events_in_trace += 1;
        let tid = streams[e.stream.as_str()];
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
            ev.push(
                json!({"name": format!("OOM: {name}"), "cat": "oom", "ph": "i", "s": "g",
                           "pid": PID, "tid": tid, "ts": us(e.t_ns, t0), "args": args}),
            );
        } else if SPAN_OPS.contains(&e.op.as_str()) {
            let start = e.t_ns.saturating_sub(e.latency_ns);
            ev.push(
                json!({"name": name, "cat": e.op, "ph": "X", "pid": PID, "tid": tid,
                           "ts": us(start, t0), "dur": us(e.t_ns, start), "args": args}),
            );
        } else {
            ev.push(
                json!({"name": name, "cat": e.op, "ph": "i", "s": "t", "pid": PID, "tid": tid,
                           "ts": us(e.t_ns, t0), "args": args}),
            );
        }
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

    let other = json!({
        "format_version": s.format_version,
        "headroom_version": s.headroom_version,
        "workload": s.workload.name,
        "device": s.device.name,
        "driver_version": s.device.driver_version,
        "started_utc": s.started_utc,
        "t0_ns": t0,
        "events_total": run.events.len(),
        "events_in_trace": events_in_trace,
        "counters_reduced_per_time_bucket": reduced,
    });
    let mut out = Vec::new();
    writeln!(
        out,
        "{{\"displayTimeUnit\":\"ms\",\"otherData\":{other},\"traceEvents\":["
    )?;
    for (i, e) in ev.iter().enumerate() {
        serde_json::to_writer(&mut out, e)?;
        out.extend_from_slice(if i + 1 < ev.len() { b",\n" } else { b"\n" });
    }
    out.extend_from_slice(b"]}\n");
    Ok(out)
}
