//! The few lines `watch` prints when the job has ended (on stderr, so a job's stdout stays
//! the job's): idle vs true vs polled peaks, the rates, phases, messages, release, folder.

use std::fmt::Write as _;
use std::path::Path;

use crate::record::View;
use crate::report::markdown::status_name;
use crate::report::summary::Summary;
use crate::report::watch::WatchSection;
use crate::report::watch_markdown::job_label;
use crate::text_table::{Align, PeakRow, TextTable, bytes_cell, peaks_table};
use crate::units::{Bytes, Nanos, SignedBytes};

pub fn render(s: &Summary, w: &WatchSection, dir: &Path) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "headroom · watch of {} on {} · {}{}",
        job_label(w),
        s.device().name,
        status_name(s),
        s.exit_code()
            .map(|c| format!(" (exit {c})"))
            .unwrap_or_default()
    );
    if let Some(d) = &s.status_detail() {
        let _ = writeln!(o, "{d}");
    }
    let idle = s.idle_after();
    let _ = writeln!(
        o,
        "{}: {}\n",
        if w.job.attached { "at attach" } else { "idle" },
        idle.map_or(s.idle_missing(), |i| format!(
            "{} free of {}",
            Bytes(i.device_free_bytes),
            Bytes(i.device_total_bytes)
        ))
    );
    let views = [View::DeviceUsed, View::JobUsed]
        .into_iter()
        .filter_map(|v| {
            let p = s.peaks().run.get(v.key())?;
            Some(PeakRow {
                view: v.key(),
                idle_bytes: match v {
                    View::DeviceUsed => idle.map(|i| i.device_used_bytes),
                    _ => w.job.job_used_at_start_bytes,
                },
                peak_bytes: Some(p.bytes),
                poll_1hz_bytes: s.polled_peak("1hz", v),
                poll_10hz_bytes: s.polled_peak("10hz", v),
            })
        });
    o.push_str(&peaks_table(views));
    if !s.phases().is_empty() {
        let mut phases = TextTable::new(&[
            ("phase", Align::Left),
            ("status", Align::Left),
            ("time", Align::Right),
            ("device used", Align::Right),
            ("job", Align::Right),
        ]);
        for p in s.phases() {
            let peak = |v: View| bytes_cell(p.peaks.get(v.key()).map(|x| x.bytes));
            let time = match (p.start_ns, p.end_ns) {
                (Some(a), Some(b)) => Nanos(b.saturating_sub(a)).to_string(),
                _ => "-".into(),
            };
            phases.row([
                p.name.clone(),
                crate::report::word(&p.status),
                time,
                peak(View::DeviceUsed),
                peak(View::JobUsed),
            ]);
        }
        let _ = writeln!(o);
        o.push_str(&phases.render());
    }
    let pl = &w.sampling.process_list;
    let _ = writeln!(
        o,
        "\nread: device every {} ({}, {:.0}/s achieved); process list every {} ({:.0}/s, {} per call)",
        Nanos(w.sampling.device_interval_ns),
        w.sampling.device_view,
        s.sampler().achieved_rate_hz,
        Nanos(pl.interval_ns),
        pl.stats.achieved_rate_hz,
        Nanos(pl.call_latency.p50_ns)
    );
    if let Some(c) = &w.cuda_context {
        let _ = writeln!(
            o,
            "headroom's own CUDA context (--cuda-info) took {}",
            SignedBytes(c.cost_bytes as i128)
        );
    }
    if pl.resolution_note.is_some() {
        let _ = writeln!(
            o,
            "job_used_bytes has the process list's resolution ({}), not --interval's",
            Nanos(pl.interval_ns)
        );
    }
    for (i, m) in w.ooms.iter().enumerate() {
        let _ = writeln!(
            o,
            "OOM {} ({} at stderr line {}): {} — {}",
            i + 1,
            m.format,
            m.stderr_line,
            m.cause.map_or("undecided".to_string(), |c| c.to_string()),
            m.summary
        );
    }
    if let Some(d) = &w.processes_doubt {
        let _ = writeln!(o, "note: {d}");
    }
    if let Some(r) = &s.release() {
        let _ = writeln!(
            o,
            "release: device free {} ({} against the reference)",
            if r.within_one_page {
                "came back"
            } else {
                "did NOT come back"
            },
            SignedBytes(r.difference_bytes as i128)
        );
    }
    let _ = writeln!(o, "results: {}", dir.display());
    o
}
