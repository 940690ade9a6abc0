//! `report.md` of a watch: the job and how it ended, idle vs true vs polled peak of the device
//! and of the job, how each view was read and at what rate (and what that resolution means),
//! the phases the job marked, its processes, every out-of-memory message with the readings at
//! that instant and its diagnosis, and the release check.

use std::fmt::Write as _;

use crate::record::View;
use crate::report::escape::md;
use crate::report::markdown::{
    cell, device_line, difference_text, phase_status, phase_time, status_name,
};
use crate::report::md_table::{Left, Right, header};
use crate::report::rundata::RunData;
use crate::report::summary::Summary;
use crate::report::watch::{WatchOom, WatchSection};
use crate::sampler::SamplerStats;
use crate::units::{Bytes, Nanos, SignedBytes};

fn bytes(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |b| Bytes(b).to_string())
}

/// How the job is named in text: its command, or the pid attached to.
pub fn job_label(w: &WatchSection) -> String {
    match &w.job.command {
        Some(argv) => format!("`{}`", shell_words(argv).replace('`', "'")),
        None => format!("pid {}", w.job.pid),
    }
}

/// A command line as a shell would take it back: words quoted where they need it.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn render(run: &RunData, w: &WatchSection) -> String {
    let s = &run.summary;
    let d = &s.device;
    let mut o = String::new();
    let _ = writeln!(o, "# headroom · watch of {} on {}\n", job_label(w), d.name);
    let _ = writeln!(o, "{}", header(&[("", Left), ("", Left)]));
    let row = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(o, "| {k} | {} |", cell(&v));
    };
    row(
        &mut o,
        "status",
        format!(
            "{}{}{}",
            status_name(s),
            s.exit_code
                .map(|c| format!(" (exit {c})"))
                .unwrap_or_default(),
            s.status_detail
                .as_ref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ),
    );
    row(
        &mut o,
        "job",
        if w.job.attached {
            format!("attached to pid {} (running before the watch)", w.job.pid)
        } else {
            format!("{} started as pid {}", job_label(w), w.job.pid)
        },
    );
    row(&mut o, "device", device_line(d));
    row(
        &mut o,
        "read through",
        match (&d.profile, w.sampling.device_view.as_str()) {
            (Some(p), _) => format!("a usage script on the simulated device (profile {p}): modeled, not measured"),
            (None, "cuda") => "cuMemGetInfo from headroom's own CUDA context (--cuda-info) and NVML's process list".into(),
            _ => "NVML (memory info and the process list): no CUDA context, no device memory taken".into(),
        },
    );
    row(&mut o, "driver", d.driver_version.clone());
    row(&mut o, "started (UTC)", s.started_utc.clone());
    row(
        &mut o,
        "finished (UTC)",
        s.finished_utc.clone().unwrap_or_else(|| "-".into()),
    );
    row(
        &mut o,
        "headroom",
        format!(
            "{}, format_version {}",
            s.headroom_version, s.format_version
        ),
    );
    peaks(&mut o, s, w);
    sampling(&mut o, s, w);
    phases(&mut o, s, w);
    processes(&mut o, w, s.start_ns);
    if !w.job.signals.is_empty() {
        let _ = writeln!(o, "\n## Signals\n");
        for g in &w.job.signals {
            let _ = writeln!(
                o,
                "- {} at {} (from {}): {}",
                g.signal,
                Nanos(g.t_ns.saturating_sub(s.start_ns)),
                g.origin,
                if g.forwarded {
                    "passed on to the job"
                } else {
                    "not passed on"
                }
            );
        }
    }
    let _ = writeln!(o, "\n## Out-of-memory messages in the job's stderr\n");
    if w.ooms.is_empty() {
        let _ = writeln!(
            o,
            "{}",
            if w.job.attached {
                "Not read: an attached process's stderr is not headroom's."
            } else {
                "None."
            }
        );
    }
    for (i, m) in w.ooms.iter().enumerate() {
        oom(&mut o, i, m, s);
    }
    if w.ooms_beyond_limit > 0 {
        let _ = writeln!(
            o,
            "\n{} more message(s) were counted, not recorded.",
            w.ooms_beyond_limit
        );
    }
    expectations(&mut o, s);
    release(&mut o, s, w);
    let _ = writeln!(
        o,
        "\n---\nFiles: `summary.json` (its `watch` key holds the job's part), `timeline.csv` ({} rows), `events.csv` ({} events: the job's start, marks, messages, signals, exit, the release); plot `timeline.svg` / `timeline.png`, trace `trace.json`, `junit.xml`.",
        run.summary.timeline_rows,
        run.events.len()
    );
    o
}

fn peaks(o: &mut String, s: &Summary, w: &WatchSection) {
    let _ = writeln!(o, "\n## Idle vs peak\n");
    let idle_used = s.idle_after().map(|i| i.device_used_bytes);
    match &s.idle {
        Some(i) => first_reading(o, i, w),
        None => {
            let _ = writeln!(o, "First reading: {}.\n", md(&s.idle_missing()));
        }
    }
    peaks_table(o, s, w, idle_used);
}

/// The first reading's line: device free, total, and who was on the device then.
fn first_reading(o: &mut String, i: &crate::report::summary::Idle, w: &WatchSection) {
    let idle = &i.after_context;
    let _ = write!(
        o,
        "{}: {} free of {} ({} used)",
        if w.job.attached {
            "First reading, at attach, with the job already running"
        } else {
            "Idle reading before the job started"
        },
        Bytes(idle.device_free_bytes),
        Bytes(idle.device_total_bytes),
        Bytes(idle.device_used_bytes)
    );
    let others: Vec<String> = i
        .processes
        .iter()
        .flatten()
        .map(|p| format!("pid {} {}", p.pid, bytes(p.used_bytes)))
        .collect();
    if !others.is_empty() {
        let _ = write!(o, "; processes on the device then: {}", others.join(", "));
    }
    if let Some(why) = &i.processes_unavailable {
        let _ = write!(o, "; no process list ({})", md(why));
    }
    let _ = writeln!(o, ".\n");
}

fn peaks_table(o: &mut String, s: &Summary, w: &WatchSection, idle_used: Option<u64>) {
    let _ = writeln!(o, "{}", header(crate::report::markdown::PEAK_COLUMNS));
    for v in [View::DeviceUsed, View::JobUsed] {
        let Some(peak) = s.peaks.run.get(v.key()) else {
            continue;
        };
        let idle_v = match v {
            View::DeviceUsed => idle_used,
            _ => w.job.job_used_at_start_bytes,
        };
        let scope = match (v, w.sampling.device_view.as_str()) {
            (View::DeviceUsed, "nvml") => "whole device, all processes (NVML used)",
            (View::DeviceUsed, "sim-script") => "whole device, all processes (simulated)",
            (View::JobUsed, _) if w.sampling.modeled => {
                "the watched job's processes (usage script)"
            }
            _ => v.scope(),
        };
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            v.key(),
            scope,
            bytes(idle_v),
            Bytes(peak.bytes),
            Nanos(peak.t_ns.saturating_sub(s.start_ns)),
            bytes(s.polled_peak("1hz", v)),
            bytes(s.polled_peak("10hz", v))
        );
    }
    if let (Some(p), Some(idle_used)) = (s.peaks.run.get(View::DeviceUsed.key()), idle_used) {
        let _ = writeln!(
            o,
            "\nThe device's true peak is {} above the idle reading ({} B); a dashboard polling once a second would have shown {}.",
            SignedBytes(p.bytes as i128 - idle_used as i128),
            p.bytes,
            bytes(s.polled_peak("1hz", View::DeviceUsed))
        );
    }
    if let Some(h) = s.peaks.headroom_at_peak_bytes {
        let _ = writeln!(o, "Headroom at the device-used peak: {} free.", Bytes(h));
    }
    if let Some(c) = &w.cuda_context {
        let _ = writeln!(
            o,
            "\nheadroom's own CUDA context (--cuda-info) took {} ({} B: NVML used {} before it, {} after), created in {}; it is part of every reading above, idle included.",
            SignedBytes(c.cost_bytes as i128),
            c.cost_bytes,
            Bytes(c.nvml_used_before_bytes),
            Bytes(c.nvml_used_after_bytes),
            Nanos(c.create_ns)
        );
    }
}

fn rate(st: &SamplerStats) -> String {
    format!(
        "{} readings, {:.1}/s achieved; interval p50 {} p99 {}; one call p50 {} p99 {}",
        st.readings,
        st.achieved_rate_hz,
        Nanos(st.interval.p50_ns),
        Nanos(st.interval.p99_ns),
        Nanos(st.query_latency.p50_ns),
        Nanos(st.query_latency.p99_ns)
    )
}

fn sampling(o: &mut String, s: &Summary, w: &WatchSection) {
    let sm = &w.sampling;
    let pl = &sm.process_list;
    let _ = writeln!(o, "\n## How each view was read\n");
    let device = match sm.device_view.as_str() {
        "cuda" => "`cuMemGetInfo` from headroom's own context",
        "nvml" => "NVML's memory info (`used`)",
        _ => "the usage script on the simulated device",
    };
    let _ = writeln!(
        o,
        "- `device_used_bytes`: {device}, every {} asked.",
        Nanos(sm.device_interval_ns)
    );
    let _ = writeln!(
        o,
        "- `job_used_bytes`: {}, summed over the job's process tree (/proc), every {}: {}.",
        if sm.job_view == "nvml" {
            "NVML's process list (contexts included)"
        } else {
            "the usage script"
        },
        Nanos(pl.interval_ns),
        pl.interval_reason
    );
    let _ = writeln!(
        o,
        "- The process list cost {} per call (p50; p99 {}) when measured before the job started.",
        Nanos(pl.call_latency.p50_ns),
        Nanos(pl.call_latency.p99_ns)
    );
    if let Some(n) = &pl.resolution_note {
        let _ = writeln!(o, "\n**Resolution:** {n}.");
    }
    let _ = writeln!(o, "\n{}", header(&[("reader", Left), ("achieved", Left)]));
    let _ = writeln!(o, "| device ({}) | {} |", sm.device_view, rate(&s.sampler));
    let _ = writeln!(
        o,
        "| process list ({}) | {} |",
        sm.job_view,
        rate(&pl.stats)
    );
    if let Some(share) = pl.lock_share {
        let _ = writeln!(
            o,
            "\nThe process-list calls took {:.2}% of the time watched (NVML holds a global driver lock during each).",
            share * 100.0
        );
    }
    let _ = writeln!(
        o,
        "`job_used_bytes` changed value {} time(s){}.",
        pl.changes,
        pl.shortest_change_interval_ns
            .map(|n| format!(", at the closest {} apart", Nanos(n)))
            .unwrap_or_default()
    );
    for (reader, st) in [("device", &s.sampler), ("process list", &pl.stats)] {
        if let Some(e) = &st.first_error {
            let _ = writeln!(
                o,
                "\n**A {reader} reading failed** at {}: {} (the readings before and after it stand).",
                Nanos(e.t_ns.saturating_sub(s.start_ns)),
                e.error
            );
        }
    }
    if sm.modeled {
        let _ = writeln!(
            o,
            "\nModeled: on the simulated device the readings come from the usage script; the rates are the script's, not a driver's."
        );
    }
}

fn phases(o: &mut String, s: &Summary, w: &WatchSection) {
    let _ = writeln!(o, "\n## Phases marked by the job\n");
    if s.phases.is_empty() {
        let _ = writeln!(
            o,
            "{}",
            if w.job.attached {
                "None: a process attached to has no HEADROOM_MARK."
            } else {
                "None: the job wrote nothing to the file named in `HEADROOM_MARK` (see `docs/headroom_mark.py`)."
            }
        );
        return;
    }
    let _ = writeln!(
        o,
        "{}",
        header(&[
            ("phase", Left),
            ("status", Left),
            ("time", Right),
            ("device used", Right),
            ("job used", Right)
        ])
    );
    for p in &s.phases {
        let time = phase_time(p);
        let peak = |v: View| bytes(p.peaks.get(v.key()).map(|x| x.bytes));
        let status = phase_status(p);
        let _ = writeln!(
            o,
            "| {} | {status} | {time} | {} | {} |",
            cell(&p.name),
            peak(View::DeviceUsed),
            peak(View::JobUsed)
        );
    }
    if w.marks.beyond_limit > 0 {
        let _ = writeln!(
            o,
            "\n{} marks came after the phase limit ({}) and stayed in the last phase.",
            w.marks.beyond_limit,
            crate::report::watch::MAX_PHASES
        );
    }
}

fn processes(o: &mut String, w: &WatchSection, start_ns: u64) {
    let _ = writeln!(o, "\n## The job's processes on the device\n");
    let rel = |t: u64| Nanos(t.saturating_sub(start_ns));
    if w.job_processes.is_empty() {
        let _ = writeln!(o, "None listed by the driver.");
    } else {
        let _ = writeln!(
            o,
            "{}",
            header(&[
                ("pid", Right),
                ("peak (NVML, context included)", Right),
                ("first listed", Right),
                ("last listed", Right)
            ])
        );
        for p in &w.job_processes {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                p.pid,
                Bytes(p.peak_used_bytes),
                rel(p.first_seen_ns),
                rel(p.last_seen_ns)
            );
        }
    }
    if let Some(d) = &w.processes_doubt {
        let _ = writeln!(o, "\n**The process list may miss the job:** {d}.");
    }
}

fn oom(o: &mut String, i: usize, m: &WatchOom, s: &Summary) {
    let _ = writeln!(
        o,
        "### OOM {} · stderr line {} · {} · at {}{}\n",
        i + 1,
        m.stderr_line,
        m.format,
        Nanos(m.t_ns.saturating_sub(s.start_ns)),
        m.phase
            .as_ref()
            .map(|p| format!(" (phase {})", cell(p)))
            .unwrap_or_default()
    );
    let text: String = m.text.chars().take(800).collect();
    for line in text.lines() {
        let _ = writeln!(o, "> {}", line.replace(['\u{1b}', '\r'], " "));
    }
    let _ = writeln!(
        o,
        "\n**Cause:** {}{}.{}\n",
        m.cause.map_or("undecided".to_string(), |c| c.to_string()),
        if m.secondary_causes.is_empty() {
            String::new()
        } else {
            format!(" (also: {})", crate::cause::join(&m.secondary_causes, ", "))
        },
        if m.summary.is_empty() {
            String::new()
        } else {
            format!(" {}", m.summary)
        }
    );
    let a = &m.at;
    let age = |t: Option<u64>| {
        t.map_or(String::new(), |t| {
            format!(" ({} before)", Nanos(m.t_ns.saturating_sub(t)))
        })
    };
    let _ = writeln!(
        o,
        "headroom's readings when the message arrived:\n\n{}",
        header(&[("view", Left), ("bytes", Right), ("", Right)])
    );
    let rows = [
        (
            format!("device free{}", age(a.device_reading_t_ns)),
            a.device_free_bytes,
        ),
        ("device used".to_string(), a.device_used_bytes),
        (
            "device used, highest in the second before".to_string(),
            a.device_used_max_last_second_bytes,
        ),
        (
            format!("job used{}", age(a.job_reading_t_ns)),
            a.job_used_bytes,
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(
            o,
            "| {k} | {} | {} |",
            v.map_or("-".into(), |b| b.to_string()),
            bytes(v)
        );
    }
    if let Some(ps) = &a.processes {
        let list: Vec<String> = ps
            .iter()
            .map(|p| format!("pid {} {}", p.pid, bytes(p.used_bytes)))
            .collect();
        let _ = writeln!(
            o,
            "\nProcesses NVML listed: {}.",
            if list.is_empty() {
                "none".into()
            } else {
                list.join(", ")
            }
        );
    }
    let lists: [(&str, &Vec<String>); 4] = [
        ("The message against the readings", &m.measured),
        ("Ruled out", &m.ruled_out),
        ("Undecided", &m.undecided),
        ("Findings", &m.findings),
    ];
    for (title, items) in lists {
        if !items.is_empty() {
            let _ = writeln!(o, "\n{title}:\n");
            for x in items {
                let _ = writeln!(o, "- {x}");
            }
        }
    }
    if !m.next_checks.is_empty() {
        let _ = writeln!(o, "\nWhat to check next:\n");
        for c in &m.next_checks {
            let _ = writeln!(
                o,
                "- `{}` ({}): {}",
                c.command.replace('`', "'"),
                c.kind,
                c.why
            );
        }
    }
    let _ = writeln!(o);
}

fn expectations(o: &mut String, s: &Summary) {
    if s.expectations.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n## Expectations\n");
    crate::report::markdown::expectation_table(o, s);
}

fn release(o: &mut String, s: &Summary, w: &WatchSection) {
    let _ = writeln!(o, "\n## Release\n");
    match &s.release {
        None if w.job.attached && w.job.ended_by != crate::report::watch::EndedBy::Exit => {
            let _ = writeln!(
                o,
                "Not checked: pid {} was still running when the watch ended.",
                w.job.pid
            );
        }
        None => {
            let _ = writeln!(
                o,
                "Not checked: no reading after the job, or no reference to judge it by."
            );
        }
        Some(r) => {
            let _ = writeln!(
                o,
                "Device free {} the reference after the job: {} then, {} at the end (difference {}){}.{}",
                if r.within_one_page {
                    "came back to"
                } else {
                    "did **not** come back to"
                },
                Bytes(r.idle_device_free_bytes),
                Bytes(r.final_device_free_bytes),
                difference_text(r.difference_bytes),
                w.release_settle_ns
                    .map(|n| format!(", {} after the job ended", Nanos(n)))
                    .unwrap_or_default(),
                r.note
                    .as_ref()
                    .map(|n| format!(" {n}."))
                    .unwrap_or_default()
            );
        }
    }
}
