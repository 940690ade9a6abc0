//! `report.md`: what a person pastes into a bug report — the device and driver, when, the
//! workload's shape, idle vs true peak vs polled peak per view and per phase, every OOM with
//! its diagnosis and evidence, the expectations and the release check. Human units for reading,
//! exact bytes where a number may be quoted.

use std::fmt::Write as _;

use crate::oom::OomRecord;
use crate::record::View;
use crate::report::escape::{self, md};
use crate::report::rundata::RunData;
use crate::report::summary::{RunStatus, Summary};
use crate::units::{Bytes, Nanos, SignedBytes};

pub use crate::report::md_table::cell;
use crate::report::md_table::{self, Align, Left, Right};

/// The columns of a report's peaks table (`report.md`'s and a watch's): each view's idle
/// reading, true peak and when, and what 1 Hz and 10 Hz pollers would have shown.
pub const PEAK_COLUMNS: &[(&str, Align)] = &[
    ("view", Left),
    ("scope", Left),
    ("idle", Right),
    ("true peak", Right),
    ("peak at", Right),
    ("1 Hz poll", Right),
    ("10 Hz poll", Right),
];

/// The device row of a report: name, index, compute capability, SMs, CUDA-visible memory, UUID.
pub fn device_line(d: &crate::device::DeviceInfo) -> String {
    format!(
        "{} · GPU {} · compute {} · {} SMs · {}{}",
        d.name,
        d.index,
        d.compute_capability,
        d.multiprocessors,
        // 0: an import whose evidence does not record the total (`Summary::device_total`).
        if d.total_bytes > 0 {
            format!("{} CUDA-visible", Bytes(d.total_bytes))
        } else {
            "CUDA-visible total not in the snapshot".to_string()
        },
        d.uuid
            .as_ref()
            .map(|u| format!(" · {u}"))
            .unwrap_or_default()
    ) + &d
        .mig
        .as_ref()
        .map(|m| {
            format!(
                " · MIG instance {} of {}",
                m.profile.as_deref().unwrap_or("(profile unknown)"),
                m.parent_uuid
            )
        })
        .unwrap_or_default()
}

/// A phase's duration for a table cell (`-` when it did not both start and end).
pub fn phase_time(p: &crate::report::summary::PhaseSummary) -> String {
    match (p.start_ns, p.end_ns) {
        (Some(a), Some(b)) => Nanos(b - a).to_string(),
        _ => "-".into(),
    }
}

/// A phase's status as `summary.json` spells it.
pub fn phase_status(p: &crate::report::summary::PhaseSummary) -> String {
    serde_json::to_value(p.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A release check's difference: `0 B`, or signed human units with the raw bytes.
pub fn difference_text(difference_bytes: i64) -> String {
    if difference_bytes == 0 {
        "0 B".to_string()
    } else {
        format!(
            "{}, {} bytes",
            SignedBytes(difference_bytes as i128),
            difference_bytes
        )
    }
}

fn bytes(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |b| Bytes(b).to_string())
}

/// The status as written in summary.json (`completed`, `stopped_at_floor`, …).
pub fn status_name(s: &Summary) -> String {
    serde_json::to_value(s.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The report of a run. Every name and message from the run is escaped (`escape::md`), and
/// no control character is left in the document.
pub fn render(run: &RunData) -> String {
    if let Some(w) = &run.watch {
        return crate::report::watch_markdown::render(run, w);
    }
    let s = &run.summary;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# headroom · {} on {}\n",
        md(&s.workload.name),
        md(&s.device.name)
    );
    header(&mut o, s);
    if s.status == RunStatus::Skipped {
        let _ = writeln!(
            o,
            "\nSkipped: the workload does not fit this device (the reason is under status \
             above); no step ran and nothing was allocated."
        );
        phases(&mut o, s);
        let _ = writeln!(
            o,
            "\n---\nFiles: `summary.json`, `timeline.csv` (the idle reading), `events.csv` (no \
             events), `junit.xml` (a skipped test case)."
        );
        return escape::document(&o);
    }
    if let Some(i) = &s.import {
        crate::report::imported::section(&mut o, i);
    }
    peaks(&mut o, s);
    phases(&mut o, s);
    let _ = writeln!(o, "\n## OOMs\n");
    if s.ooms.is_empty() {
        let _ = writeln!(o, "None.");
    }
    for (i, oom) in s.ooms.iter().enumerate() {
        oom_section(&mut o, i, oom);
    }
    mismatches(&mut o, s);
    expectations(&mut o, s);
    release(&mut o, s);
    let _ = writeln!(
        o,
        "\n---\nFiles: `summary.json`, `timeline.csv` ({} rows), `events.csv` ({} events), `alloc-log.csv` (every allocator call, for `headroom replay`); plot `timeline.svg` / `timeline.png`, trace `trace.json` (Perfetto UI, chrome://tracing), `junit.xml`.",
        run.summary.timeline_rows,
        run.events.len()
    );
    escape::document(&o)
}

/// The key–value table at the top: status, device, backend, driver, times, workload, shape.
fn header(o: &mut String, s: &Summary) {
    let d = &s.device;
    let _ = writeln!(o, "{}", md_table::header(&[("", Left), ("", Left)]));
    let row = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(o, "| {k} | {} |", cell(&v));
    };
    row(
        o,
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
    row(o, "device", device_line(d));
    row(
        o,
        "backend",
        match &d.profile {
            Some(p) => format!("{} (simulated, profile {p})", d.backend),
            None => d.backend.to_string(),
        },
    );
    row(o, "driver", d.driver_version.clone());
    row(o, "started (UTC)", s.started_utc.clone());
    row(
        o,
        "finished (UTC)",
        s.finished_utc.clone().unwrap_or_else(|| "-".into()),
    );
    let w = &s.workload;
    let steps: u64 = s.phases.iter().map(|p| p.actions_planned).sum();
    let description = if w.description.is_empty() {
        String::new()
    } else {
        format!(": {}", w.description)
    };
    row(
        o,
        "workload",
        format!("{} ({}){description}", w.name, w.file),
    );
    row(
        o,
        "shape",
        format!(
            "{} phases, {steps} steps · allocator {} · sampler every {} · floor {} free · OOM {}",
            s.phases.len(),
            w.allocator,
            Nanos(w.sample_interval_ns),
            Bytes(w.keep_free_bytes),
            if w.allow_oom {
                "allowed"
            } else {
                "not allowed"
            }
        ),
    );
    row(
        o,
        "headroom",
        format!(
            "{}, format_version {}",
            s.headroom_version, s.format_version
        ),
    );
}

fn mismatches(o: &mut String, s: &Summary) {
    if s.mismatches.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n## Verify mismatches\n");
    for m in &s.mismatches {
        let _ = writeln!(o, "- {}", md(&m.line()));
    }
}

fn expectations(o: &mut String, s: &Summary) {
    let _ = writeln!(o, "\n## Expectations\n");
    if s.expectations.is_empty() {
        let _ = writeln!(o, "None evaluated.");
        return;
    }
    expectation_table(o, s);
}

/// The expectations' table: each one, what it expected, what the run showed, and whether it
/// held.
pub fn expectation_table(o: &mut String, s: &Summary) {
    let _ = writeln!(
        o,
        "{}",
        md_table::header(&[
            ("expectation", Left),
            ("expected", Left),
            ("actual", Left),
            ("result", Left)
        ])
    );
    for e in &s.expectations {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            cell(&e.name),
            cell(&e.expected),
            cell(&e.actual),
            if e.held { "held" } else { "**FAILED**" }
        );
    }
}

fn release(o: &mut String, s: &Summary) {
    let _ = writeln!(o, "\n## Release\n");
    let Some(r) = &s.release else {
        if s.import.is_some() {
            let _ = writeln!(
                o,
                "Not applicable: the run was imported, not run on this device."
            );
        } else {
            let _ = writeln!(o, "Not checked (the final reading failed).");
        }
        return;
    };
    let _ = writeln!(
        o,
        "Device free {} the idle reading: {} at idle, {} at the end (final − idle: {}).{}",
        if r.within_one_page {
            "is back at"
        } else {
            "did **not** return to"
        },
        Bytes(r.idle_device_free_bytes),
        Bytes(r.final_device_free_bytes),
        difference_text(r.difference_bytes),
        r.note
            .as_ref()
            .map(|n| format!(" {}.", md(n)))
            .unwrap_or_default()
    );
}

fn peaks(o: &mut String, s: &Summary) {
    let _ = writeln!(o, "\n## Idle vs peak\n");
    match &s.idle {
        Some(i) => idle_line(o, i, s.idle_basis.as_deref()),
        None => {
            let _ = writeln!(
                o,
                "Idle reading: {}.\n",
                md(s.idle_basis.as_deref().unwrap_or("none was taken"))
            );
        }
    }
    peaks_table(o, s);
}

/// `Idle reading: 78.64 GiB free of 79.19 GiB (…)`, and what it rests on when not measured.
fn idle_line(o: &mut String, i: &crate::report::summary::Idle, basis: Option<&str>) {
    let idle = &i.after_context;
    let _ = write!(
        o,
        "Idle reading: {} free of {} ({} used)",
        Bytes(idle.device_free_bytes),
        Bytes(idle.device_total_bytes),
        Bytes(idle.device_used_bytes)
    );
    if let Some(c) = i.context_overhead_bytes {
        let _ = write!(o, "; creating the context took {}", Bytes(c));
    }
    if let Some(k) = i.kernels.filter(|k| k.device_bytes > 0) {
        let _ = write!(
            o,
            "; loading headroom's {} kernel modules before it took {}",
            k.modules,
            crate::units::Bytes(k.device_bytes.max(0) as u64)
        );
    }
    let others: Vec<String> = i
        .processes
        .iter()
        .flatten()
        .filter(|p| !p.is_self)
        .map(|p| format!("pid {} {}", p.pid, bytes(p.used_bytes)))
        .collect();
    if !others.is_empty() {
        let _ = write!(o, "; other processes: {}", others.join(", "));
    }
    if let Some(why) = &i.processes_unavailable {
        let _ = write!(o, "; no process list ({})", md(why));
    }
    if let Some(b) = basis {
        let _ = write!(o, " — not measured: {}", md(b));
    }
    let _ = writeln!(o, ".\n");
}

fn peaks_table(o: &mut String, s: &Summary) {
    let _ = writeln!(o, "{}", md_table::header(PEAK_COLUMNS));
    for v in View::ALL {
        let Some(peak) = s.peaks.run.get(v.key()) else {
            continue;
        };
        let idle_v = s.idle_view(v);
        let polled = |k: &str| s.polled_peak(k, v);
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            v.key(),
            v.scope(),
            bytes(idle_v),
            Bytes(peak.bytes),
            if peak.bytes == 0 {
                "-".to_string()
            } else {
                Nanos(peak.t_ns.saturating_sub(s.start_ns)).to_string()
            },
            bytes(polled("1hz")),
            bytes(polled("10hz"))
        );
    }
    match (s.peaks.headroom_at_peak_bytes, s.idle_basis_short()) {
        (Some(h), None) => {
            let _ = writeln!(o, "\nHeadroom at the device-used peak: {} free.", Bytes(h));
        }
        (Some(h), Some(b)) => {
            let _ = writeln!(
                o,
                "\nHeadroom at the device-used peak: {} free ({}).",
                Bytes(h),
                md(b)
            );
        }
        (None, Some(b)) => {
            let _ = writeln!(
                o,
                "\nHeadroom at the device-used peak: unknown (the device total is {}).",
                md(b)
            );
        }
        (None, None) => {}
    }
    if let Some(a) = &s.allocator_stats {
        let _ = writeln!(
            o,
            "Allocator counters at the end of the run: {} segments held, num_alloc_retries {}, num_ooms {}.",
            a.segment_count, a.num_alloc_retries, a.num_ooms
        );
    }
    if let Some(p) = &s.peaks.pool_high_water {
        let _ = writeln!(
            o,
            "Stream-ordered pool high-water marks (driver): used {}, reserved {}.",
            Bytes(p.used_high_bytes),
            Bytes(p.reserved_high_bytes)
        );
    }
    if let Some(p) = &s.plan {
        let _ = writeln!(
            o,
            "\nPlan ({}): capacity {}, margin line {} (device total − safety margin: device used must stay at or under it), KV budget {}.",
            p.label,
            Bytes(p.capacity_bytes),
            Bytes(p.margin_line_bytes),
            Bytes(p.kv_budget_bytes)
        );
    }
}

fn phases(o: &mut String, s: &Summary) {
    let _ = writeln!(o, "\n## Phases\n");
    let _ = writeln!(
        o,
        "{}",
        md_table::header(&[
            ("phase", Left),
            ("status", Left),
            ("time", Right),
            ("steps", Right),
            ("device used", Right),
            ("own", Right),
            ("alloc reserved", Right),
            ("alloc allocated", Right)
        ])
    );
    for p in &s.phases {
        let time = phase_time(p);
        let peak = |v: View| bytes(p.peaks.get(v.key()).map(|x| x.bytes));
        let status = phase_status(p);
        let _ = writeln!(
            o,
            "| {} | {status} | {time} | {}/{} | {} | {} | {} | {} |",
            cell(&p.name),
            p.actions_run,
            p.actions_planned,
            peak(View::DeviceUsed),
            peak(View::OwnBytes),
            peak(View::AllocReserved),
            peak(View::AllocAllocated)
        );
    }
}

fn oom_section(o: &mut String, i: usize, r: &OomRecord) {
    let d = &r.diagnosis;
    let _ = writeln!(
        o,
        "### OOM {} · {}/{} · {} `{}`\n",
        i + 1,
        md(&r.phase),
        md(&r.step),
        r.op,
        md(&r.name)
    );
    let _ = writeln!(
        o,
        "**Observation:** {} (causes: {})\n",
        md(&d.observation),
        crate::cause::join(&d.causes, ", ")
    );
    for f in &d.findings {
        let _ = writeln!(o, "- {}", md(f));
    }
    let _ = writeln!(o, "\nWhat to check next:\n");
    for c in &d.check_next {
        let _ = writeln!(o, "- {}", md(c));
    }
    let _ = writeln!(
        o,
        "\nEvidence at {} (via {}, pool {}, stream {}):\n",
        r.utc,
        r.via,
        md(&r.pool),
        md(&r.stream)
    );
    let _ = writeln!(
        o,
        "{}",
        md_table::header(&[("", Left), ("bytes", Right), ("", Right)])
    );
    let rows: [(&str, Option<u64>); 14] = [
        ("requested", Some(r.requested_bytes)),
        ("after rounding", Some(r.rounded_bytes)),
        ("asked of the driver", Some(r.driver_request_bytes)),
        ("device free", Some(r.device_free_bytes)),
        ("device used", r.device_used_bytes),
        ("device total", r.device_total_bytes),
        ("device free at idle", r.idle_device_free_bytes),
        ("own bytes", Some(r.own_bytes)),
        ("outside the allocator", r.outside_allocator_bytes),
        ("alloc allocated", Some(r.alloc_allocated_bytes)),
        ("alloc reserved", Some(r.alloc_reserved_bytes)),
        (
            "reserved − allocated (a clue)",
            Some(r.reserved_but_unallocated_bytes),
        ),
        ("largest free block", Some(r.largest_free_block_bytes)),
        ("inactive split blocks", Some(r.inactive_split_bytes)),
    ];
    for (k, v) in rows {
        let _ = match v {
            Some(v) => writeln!(o, "| {k} | {v} | {} |", Bytes(v)),
            None => writeln!(o, "| {k} | {} | |", crate::oom::NOT_RECORDED),
        };
    }
    let _ = writeln!(
        o,
        "| inactive split block count | {} | |",
        r.inactive_split_count
    );
    let _ = match r.unexplained_used_bytes {
        Some(v) => writeln!(
            o,
            "| used by neither this run nor the idle baseline | {v} | {} |",
            SignedBytes(v as i128)
        ),
        None => writeln!(
            o,
            "| used by neither this run nor the idle baseline | {} | |",
            crate::oom::NOT_RECORDED
        ),
    };
    if let Some(ps) = &r.processes {
        let list: Vec<String> = ps
            .iter()
            .map(|p| {
                format!(
                    "pid {}{} {}",
                    p.pid,
                    if p.is_self { " (this run)" } else { "" },
                    bytes(p.used_bytes)
                )
            })
            .collect();
        let _ = writeln!(o, "\nProcesses on the device: {}.", list.join(", "));
    }
    if let Some(why) = &r.processes_doubt {
        let _ = writeln!(o, "\nThe process list cannot be trusted here: {}.", md(why));
    }
}
