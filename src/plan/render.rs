//! The text people read: the plan's arithmetic step by step, and a validation's findings.
//!
//! Human units only; the same numbers in raw bytes are in `--json` and `validation.json`.

use std::fmt::Write as _;
use std::path::Path;

use crate::device::DeviceInfo;
use crate::plan::budget::{Budget, Short};
use crate::plan::file::{CapacitySource, Plan};
use crate::plan::validate::{Outcome, Validation};
use crate::text_table::{Align, TextTable};
use crate::units::{Bytes, SignedBytes};

fn device_words(d: &DeviceInfo) -> String {
    match &d.profile {
        Some(p) => format!("{} [{}, profile {p}]", d.name, d.backend),
        None => format!("{} [{}, device {}]", d.name, d.backend, d.index),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The workload shape in one line, or why its absence matters.
fn shape_line(plan: &Plan) -> String {
    match &plan.shape {
        None => "workload: not named. A capacity claim must name the model, the sequence \
                 lengths and the concurrency it is about; a plan file's [workload] does."
            .to_string(),
        Some(s) => {
            let tokens = s.input_tokens + s.output_tokens;
            let mut line = format!(
                "workload: {}; {} tokens in + {} out = {tokens}, {} block{} of {} tokens × {} = {} of KV per request",
                s.model,
                s.input_tokens,
                s.output_tokens,
                s.blocks_per_request(),
                plural(s.blocks_per_request()),
                s.block_tokens,
                Short(s.kv_bytes_per_token.0 as i128),
                Short(s.kv_per_request_bytes() as i128),
            );
            if plan.kv_per_request_overridden {
                let _ = write!(
                    line,
                    " (overridden: {} per request)",
                    Short(plan.kv_per_request_bytes as i128)
                );
            }
            line
        }
    }
}

/// `headroom plan`: the arithmetic step by step.
pub fn plan_text(plan: &Plan, b: &Budget, device: Option<&DeviceInfo>) -> String {
    let mut o = String::new();
    let i = &b.inputs;
    let source = match (plan.capacity_source, device) {
        (Some(CapacitySource::Flag), _) => "from --capacity".to_string(),
        (Some(CapacitySource::PlanFile), _) => "from the plan file".to_string(),
        (_, Some(d)) => format!("the CUDA-visible total of {}", device_words(d)),
        (_, None) => String::new(),
    };
    let file = plan
        .file
        .as_ref()
        .map_or(String::new(), |f| format!(" ({})", f.display()));
    let _ = writeln!(o, "plan {:?}{file}", plan.name);
    let w = |o: &mut String, sign: &str, label: &str, v: u64, note: &str| {
        let line = format!(
            "{sign} {label:<14} {:>12}   {note}",
            Short(v as i128).to_string()
        );
        let _ = writeln!(o, "{}", line.trim_end());
    };
    let share = |h: Option<u32>, note: &str| match h {
        Some(h) => format!("{}% of the capacity{}", h as f64 / 100.0, note),
        None => note.trim_start_matches("; ").to_string(),
    };
    let sh = &plan.shares;
    w(&mut o, " ", "capacity", i.capacity_bytes, &source);
    w(
        &mut o,
        "−",
        "weights",
        i.weights_bytes,
        &share(sh.weights, ""),
    );
    w(
        &mut o,
        "−",
        "other peak",
        i.other_peak_bytes,
        &share(
            sh.other_peak,
            "; activations, workspace, runtime/communication, graphs",
        ),
    );
    w(
        &mut o,
        "−",
        "safety margin",
        i.margin_bytes,
        &share(sh.margin, ""),
    );
    w(&mut o, "=", "KV budget", b.kv_budget_bytes, "");
    let _ = writeln!(o);
    let _ = writeln!(o, "{}", b.budget_line());
    let _ = writeln!(o, "{}", b.requests_line());
    let _ = writeln!(o);
    let _ = writeln!(o, "{}", shape_line(plan));
    if let Some(c) = plan.claimed_concurrency() {
        if c <= b.requests {
            let _ = writeln!(
                o,
                "claim: {c} concurrent request{}, within the {} the arithmetic allows",
                plural(c),
                b.requests
            );
        } else {
            let _ = writeln!(
                o,
                "claim: {c} concurrent requests, {} more than the {} the arithmetic allows",
                c - b.requests,
                b.requests
            );
        }
    }
    let _ = writeln!(
        o,
        "These counts are arithmetic, not measured limits: they ignore the context, page and \
         allocator rounding and anything else on the device. `headroom validate` runs them."
    );
    o
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), |b| Bytes(b).to_string())
}

fn outcome_words(o: &Outcome) -> String {
    match o {
        Outcome::Admitted => "admitted".into(),
        Outcome::MarginViolated {
            free_at_peak_bytes,
            short_by_bytes,
        } => format!(
            "margin violated ({} free at the peak, {} short)",
            Bytes(*free_at_peak_bytes),
            Bytes(*short_by_bytes)
        ),
        Outcome::Oom {
            at,
            requested_bytes,
        } => format!("OOM at {at} (asked {})", Bytes(*requested_bytes)),
    }
}

/// `headroom validate`: what was planned, what was measured, where admission stops.
pub fn validation_text(v: &Validation, plan: &Plan, dir: &Path) -> String {
    let mut o = String::new();
    header(&mut o, v, plan);
    planned_run(&mut o, v);
    margin_and_unnamed(&mut o, v);
    admission(&mut o, v);
    let n = v.planned_requests;
    let result = if v.planned_admitted {
        format!("the plan holds: {n} requests admitted with the margin free at the peak")
    } else {
        format!(
            "the plan fails: {} at the planned {n} request{}",
            v.planned_run.outcome.word(),
            plural(n)
        )
    };
    let _ = writeln!(o, "result: {result} (exit {})", v.exit_code);
    let _ = writeln!(o, "results: {}", dir.display());
    o
}

/// The device, the plan's arithmetic, the workload shape and the count validated.
fn header(o: &mut String, v: &Validation, plan: &Plan) {
    let b = &v.plan.budget;
    let _ = writeln!(
        o,
        "headroom validate · plan {:?} on {}",
        v.plan.name,
        device_words(&v.device)
    );
    let _ = writeln!(o, "plan: {}; {}", b.budget_line(), b.requests_line());
    let _ = writeln!(o, "{}", shape_line(plan));
    let n = v.planned_requests;
    let _ = writeln!(
        o,
        "validating {n} request{} ({})",
        plural(n),
        if v.planned_from == "concurrency" {
            "the plan's claimed concurrency"
        } else {
            "the arithmetic's count"
        }
    );
    let _ = writeln!(o);
}

/// The planned run: each category planned vs what it took, each view's true peak vs plan.
fn planned_run(o: &mut String, v: &Validation) {
    let pr = &v.planned_run;
    let n = v.planned_requests;
    let _ = writeln!(
        o,
        "planned run, {n} request{}: {} ({})",
        plural(n),
        outcome_words(&pr.outcome),
        pr.dir
    );
    let mut categories = TextTable::new(&[
        ("category", Align::Left),
        ("planned", Align::Right),
        ("asked (own)", Align::Right),
        ("device used", Align::Right),
    ]);
    for c in &pr.categories {
        categories.row([
            c.category.to_string(),
            Bytes(c.planned_bytes).to_string(),
            opt(c.own_bytes),
            opt(c.device_bytes),
        ]);
    }
    categories.row([
        "idle (context, others)".to_string(),
        "-".into(),
        "-".into(),
        Bytes(v.unnamed.idle_used_bytes).to_string(),
    ]);
    o.push_str(&categories.render());
    let _ = writeln!(o);
    let mut views = TextTable::new(&[
        ("view", Align::Left),
        ("true peak", Align::Right),
        ("planned", Align::Right),
        ("difference", Align::Right),
        ("scope", Align::Left),
    ]);
    for row in &pr.views {
        let scope = crate::record::View::from_key(&row.view).map_or("", |v| v.scope());
        views.row([
            row.view.clone(),
            Bytes(row.peak_bytes).to_string(),
            opt(row.planned_bytes),
            row.planned_bytes.map_or("-".into(), |p| {
                SignedBytes(row.peak_bytes as i128 - p as i128).to_string()
            }),
            scope.to_string(),
        ]);
    }
    o.push_str(&views.render());
    let _ = writeln!(
        o,
        "(planned: weights + KV + other peak; the allocator's views leave out the {} workspace, \
         which goes straight to the driver)",
        Bytes(v.plan.workspace_bytes)
    );
    let _ = writeln!(o);
}

/// Whether the margin held at the true peak, and the memory the plan did not name.
fn margin_and_unnamed(o: &mut String, v: &Validation) {
    let pr = &v.planned_run;
    let n = v.planned_requests;
    let held = match v.margin_held {
        Some(true) => "held".to_string(),
        Some(false) => "VIOLATED".to_string(),
        None => "not reached (the run ended in an OOM before its peak)".to_string(),
    };
    let _ = writeln!(
        o,
        "margin: {} must stay free at the true peak (device used ≤ {}); free at the peak: {} → {held}",
        Bytes(v.margin_bytes),
        Bytes(v.margin_line_bytes),
        opt(pr.headroom_at_peak_bytes),
    );
    let u = &v.unnamed;
    let _ = writeln!(o);
    let _ = writeln!(o, "not in the plan, measured at the planned run's peak:");
    let mut idle_parts = Vec::new();
    if let Some(c) = u.context_overhead_bytes {
        idle_parts.push(format!("context {}", Bytes(c)));
    }
    if let Some(p) = u.other_processes_bytes {
        idle_parts.push(format!("other processes {}", Bytes(p)));
    }
    let mut rows = vec![
        (
            format!("idle use ({})", idle_parts.join(", ")),
            u.idle_used_bytes as i64,
        ),
        (
            "driver page rounding (and other changes)".to_string(),
            u.driver_rounding_bytes,
        ),
    ];
    if let Some(a) = u.allocator_rounding_bytes {
        rows.push(("allocator rounding and caching".into(), a));
    }
    rows.push((
        "capacity the plan counted beyond the device".into(),
        u.capacity_beyond_device_bytes,
    ));
    rows.push(("total".into(), u.total_bytes));
    let width = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    for (label, v) in rows {
        let pad = width - label.chars().count();
        let _ = writeln!(
            o,
            "  {label}{:pad$} {:>13}",
            "",
            SignedBytes(v as i128).to_string()
        );
    }
    let _ = writeln!(
        o,
        "  the plan's slack beyond its margin at {n} request{} (KV budget − {n} × KV per request): {}",
        plural(n),
        SignedBytes(u.plan_slack_bytes as i128)
    );
    let _ = writeln!(o);
}

/// The real admission limit and the probes that found it.
fn admission(o: &mut String, v: &Validation) {
    let n = v.planned_requests;
    let a = &v.admission;
    let limit = match a.admitted_requests {
        Some(l) => format!("{l} request{}", plural(l)),
        None => "none (not even 0 requests fit)".into(),
    };
    let failure = a.first_failure.as_ref().map_or(String::new(), |f| {
        format!("; {} fails: {}", f.requests, outcome_words(&f.outcome))
    });
    let verdict = match a.over_admitted_by {
        Some(0) => "the plan matches the measured limit".to_string(),
        Some(d) if d > 0 => format!("the plan over-admits by {d}"),
        Some(d) => format!("the plan leaves {} more admissible", -d),
        None => "nothing is admissible".to_string(),
    };
    let _ = writeln!(
        o,
        "admission limit: {limit}{failure}. Planned {n} → {verdict}"
    );
    let _ = writeln!(
        o,
        "probes (each a run in its folder, OOM allowed; the {} floor a run without --allow-oom keeps does not stop them):",
        Bytes(v.floor_bytes)
    );
    let mut probes = TextTable::new(&[
        ("requests", Align::Right),
        ("outcome", Align::Left),
        ("device used peak", Align::Right),
        ("free at peak", Align::Right),
        ("folder", Align::Left),
    ]);
    for p in &a.probes {
        probes.row([
            p.requests.to_string(),
            p.outcome.word().to_string(),
            opt(p.device_used_peak_bytes),
            opt(p.headroom_at_peak_bytes),
            format!(
                "{}{}",
                p.dir,
                if p.below_floor && p.outcome.admitted() {
                    "  (below the floor)"
                } else {
                    ""
                }
            ),
        ]);
    }
    o.push_str(&probes.render());
    if v.margin_bytes < v.floor_bytes {
        let _ = writeln!(
            o,
            "note: the margin ({}) is smaller than the floor ({}): a plain `headroom run` stops before a peak the margin would allow",
            Bytes(v.margin_bytes),
            Bytes(v.floor_bytes)
        );
    }
    let _ = writeln!(o);
}
