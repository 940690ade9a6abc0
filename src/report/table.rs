//! The summary a person reads on the terminal: idle vs true peak vs polled peak per view, then
//! per phase, then OOMs with their diagnosis and the release check.

use std::fmt::Write as _;

use crate::record::View;
use crate::report::summary::{RunStatus, Summary};
use crate::text_table::{Align, PeakRow, TextTable, bytes_cell as cell, peaks_table};
use crate::units::{Bytes, Nanos, SignedBytes};

/// Renders the terminal summary of a run.
pub fn render(s: &Summary, dir: &std::path::Path) -> String {
    let mut o = String::new();
    let d = &s.device;
    let backend = match &d.profile {
        Some(p) => format!("{}, profile {p}", d.backend),
        None => format!("{}, driver {}", d.backend, d.driver_version),
    };
    // The status as summary.json spells it, and an OOM's cause word.
    let cause = s
        .ooms
        .first()
        .and_then(|o| o.diagnosis.causes.first())
        .map_or(String::new(), |c| format!(" ({})", c.as_str()));
    let _ = writeln!(
        o,
        "headroom · {} on {} [{backend}] · {}{cause}",
        s.workload.name,
        d.name,
        crate::report::word(&s.status)
    );
    match &s.idle {
        Some(i) => {
            let idle = &i.after_context;
            let _ = write!(
                o,
                "idle: {} free of {}",
                Bytes(idle.device_free_bytes),
                Bytes(idle.device_total_bytes)
            );
            if let Some(c) = i.context_overhead_bytes {
                let _ = write!(o, " (creating the context took {})", Bytes(c));
            }
            if let Some(b) = s.idle_basis_short() {
                let _ = write!(o, " [{b}]");
            }
        }
        None => {
            let _ = write!(o, "idle: {}", s.idle_basis_short().unwrap_or("none taken"));
        }
    }
    let _ = writeln!(o);
    if s.status == RunStatus::Skipped {
        // Nothing ran: the reason is the whole story.
        let why = s
            .status_detail
            .as_deref()
            .unwrap_or("it does not fit this device");
        let _ = writeln!(o, "skipped: {why}");
        let _ = writeln!(o, "results: {}", dir.display());
        return crate::report::escape::document(&o);
    }
    if let Some(k) = s
        .idle
        .as_ref()
        .and_then(|i| i.kernels)
        .filter(|k| k.device_bytes > 0)
    {
        let _ = writeln!(
            o,
            "kernels: loading {} modules before the idle reading took {}",
            k.modules,
            crate::units::Bytes(k.device_bytes.max(0) as u64)
        );
    }
    let _ = writeln!(o);
    let views = View::ALL.into_iter().filter_map(|v| {
        let peak = s.peaks.run.get(v.key())?;
        Some(PeakRow {
            view: v.key(),
            idle_bytes: s.idle_view(v),
            peak_bytes: Some(peak.bytes),
            poll_1hz_bytes: s.polled_peak("1hz", v),
            poll_10hz_bytes: s.polled_peak("10hz", v),
        })
    });
    o.push_str(&peaks_table(views));
    match (s.peaks.headroom_at_peak_bytes, s.idle_basis_short()) {
        (Some(h), None) => {
            let _ = writeln!(o, "headroom at the device-used peak: {} free", Bytes(h));
        }
        (Some(h), Some(b)) => {
            let _ = writeln!(
                o,
                "headroom at the device-used peak: {} free [{b}]",
                Bytes(h)
            );
        }
        (None, Some(b)) => {
            let _ = writeln!(
                o,
                "headroom at the device-used peak: unknown (the device total is {b})"
            );
        }
        (None, None) => {}
    }
    let _ = writeln!(o);
    let mut phases = TextTable::new(&[
        ("phase", Align::Left),
        ("status", Align::Left),
        ("time", Align::Right),
        ("device used", Align::Right),
        ("own", Align::Right),
        ("alloc reserved", Align::Right),
    ]);
    for p in &s.phases {
        let time = match (p.start_ns, p.end_ns) {
            (Some(a), Some(b)) => Nanos(b - a).to_string(),
            _ => "-".into(),
        };
        let peak = |v: View| cell(p.peaks.get(v.key()).map(|x| x.bytes));
        phases.row([
            p.name.clone(),
            crate::report::word(&p.status),
            time,
            peak(View::DeviceUsed),
            peak(View::OwnBytes),
            peak(View::AllocReserved),
        ]);
    }
    o.push_str(&phases.render());
    let sm = &s.sampler;
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "sampler: {} readings at {:.0} per second{}; cuMemGetInfo p50 {} p99 {}",
        sm.readings,
        sm.achieved_rate_hz,
        if sm.modeled { " (modeled)" } else { "" },
        Nanos(sm.query_latency.p50_ns),
        Nanos(sm.query_latency.p99_ns)
    );
    if let Some(p) = s.sampler_perturbation {
        let _ = writeln!(
            o,
            "sampler at full rate: a 2 MiB cuMemAlloc + cuMemFree took {} (p50) with it running, {} without (x{:.2})",
            Nanos(p.alloc_free_p50_with_sampler_ns),
            Nanos(p.alloc_free_p50_without_sampler_ns),
            p.alloc_free_p50_with_sampler_ns as f64
                / p.alloc_free_p50_without_sampler_ns.max(1) as f64
        );
    }
    if let Some(a) = s.latency.get("allocate").filter(|a| a.count > 0) {
        let _ = writeln!(
            o,
            "allocate: {} calls, p50 {} p99 {} max {}",
            a.count,
            Nanos(a.p50_ns),
            Nanos(a.p99_ns),
            Nanos(a.max_ns)
        );
    }
    if let Some(g) = &s.graphs {
        crate::report::graphs::render(g, &mut o);
    }
    for m in &s.mismatches {
        let _ = writeln!(o, "verify {}", m.line());
    }
    for oom in &s.ooms {
        let _ = writeln!(o);
        let causes: Vec<&str> = oom.diagnosis.causes.iter().map(|c| c.as_str()).collect();
        let _ = writeln!(
            o,
            "OOM ({}) at {}/{} ({} {}): {}",
            if causes.is_empty() {
                "cause undecided".to_string()
            } else {
                causes.join(", ")
            },
            oom.phase,
            oom.step,
            oom.op,
            oom.name,
            oom.diagnosis.observation
        );
        for f in &oom.diagnosis.findings {
            let _ = writeln!(o, "  - {f}");
        }
        for c in &oom.diagnosis.check_next {
            let _ = writeln!(o, "  next: {c}");
        }
    }
    if let Some(detail) = &s.status_detail {
        let _ = writeln!(o);
        let _ = writeln!(o, "stopped: {detail}");
    }
    if let Some(r) = &s.release {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "release: device free {} the idle reading ({} difference){}",
            if r.within_one_page {
                "is back at"
            } else {
                "did NOT return to"
            },
            SignedBytes(r.difference_bytes as i128),
            r.note
                .as_ref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default()
        );
    }
    for e in &s.expectations {
        let _ = writeln!(
            o,
            "expect {}: {} — {} [{}]",
            e.name,
            e.expected,
            e.actual,
            if e.held { "held" } else { "FAILED" }
        );
    }
    let _ = writeln!(o, "results: {}", dir.display());
    // Names come from the workload file: none may drive the terminal.
    crate::report::escape::document(&o)
}
