//! Sweeps: the admission limit as one plan input varies, as CSV (raw bytes) and a small SVG.
//!
//! `KEY=FROM..TO:STEP` (both ends included when the steps land on TO) or `KEY=V1,V2,…`, where
//! KEY is `other_peak`, `weights`, `margin` or `kv_per_request`. Every point's arithmetic is
//! checked before the first probe runs; each point is validated in its own folder.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::plan::budget::Short;
use crate::plan::file::PlanOverrides;
use crate::plan::validate::{Outcome, Validation};
use crate::text_table::{Align, TextTable};
use crate::units::parse_size;

/// The most points a sweep may have.
pub const MAX_POINTS: usize = 64;

/// Which plan input a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SweepKey {
    OtherPeak,
    Weights,
    Margin,
    KvPerRequest,
}

impl SweepKey {
    pub const ALL: [SweepKey; 4] = [
        SweepKey::OtherPeak,
        SweepKey::Weights,
        SweepKey::Margin,
        SweepKey::KvPerRequest,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SweepKey::OtherPeak => "other_peak",
            SweepKey::Weights => "weights",
            SweepKey::Margin => "margin",
            SweepKey::KvPerRequest => "kv_per_request",
        }
    }

    /// The overrides with this input set to `bytes`.
    pub fn apply(self, base: &PlanOverrides, bytes: u64) -> PlanOverrides {
        let mut o = base.clone();
        match self {
            SweepKey::OtherPeak => o.other_peak_bytes = Some(bytes),
            SweepKey::Weights => o.weights_bytes = Some(bytes),
            SweepKey::Margin => o.margin_bytes = Some(bytes),
            SweepKey::KvPerRequest => o.kv_per_request_bytes = Some(bytes),
        }
        o
    }
}

/// A parsed `--sweep`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SweepSpec {
    pub key: SweepKey,
    pub values_bytes: Vec<u64>,
}

/// Parses `KEY=FROM..TO:STEP` or `KEY=V1,V2,…`.
pub fn parse(spec: &str) -> Result<SweepSpec, String> {
    let keys: Vec<&str> = SweepKey::ALL.iter().map(|k| k.name()).collect();
    let (key, rest) = spec.split_once('=').ok_or_else(|| {
        format!(
            "--sweep {spec:?}: write KEY=FROM..TO:STEP or KEY=V1,V2,… with KEY one of {}",
            keys.join(", ")
        )
    })?;
    let key = SweepKey::ALL
        .into_iter()
        .find(|k| k.name() == key.trim().replace('-', "_"))
        .ok_or_else(|| {
            format!(
                "--sweep: unknown input {:?}; sweepable inputs are {}",
                key.trim(),
                keys.join(", ")
            )
        })?;
    let size = |s: &str| parse_size(s).map_err(|e| format!("--sweep {}: {e}", key.name()));
    let values_bytes = if let Some((range, step)) = rest.split_once(':') {
        let (from, to) = range
            .split_once("..")
            .ok_or_else(|| format!("--sweep {}: a range is FROM..TO:STEP", key.name()))?;
        let (from, to, step) = (size(from)?, size(to)?, size(step)?);
        if step == 0 {
            return Err(format!(
                "--sweep {}: the step must be above zero",
                key.name()
            ));
        }
        if from > to {
            return Err(format!(
                "--sweep {}: FROM ({}) is above TO ({})",
                key.name(),
                Short(from as i128),
                Short(to as i128)
            ));
        }
        let count = (to - from) / step + 1;
        if count as usize > MAX_POINTS {
            return Err(format!(
                "--sweep {}: {count} points; at most {MAX_POINTS}",
                key.name()
            ));
        }
        (0..count).map(|i| from + i * step).collect()
    } else {
        let v: Vec<u64> = rest
            .split(',')
            .map(|s| size(s.trim()))
            .collect::<Result<_, _>>()?;
        if v.len() > MAX_POINTS {
            return Err(format!(
                "--sweep {}: {} points; at most {MAX_POINTS}",
                key.name(),
                v.len()
            ));
        }
        v
    };
    Ok(SweepSpec { key, values_bytes })
}

/// The folder of one point: `other_peak-16GiB`.
pub fn point_dir(key: SweepKey, bytes: u64) -> String {
    format!(
        "{}-{}",
        key.name(),
        Short(bytes as i128).to_string().replace(' ', "")
    )
}

/// Everything `validation.json` holds for a sweep.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SweepResult<'a> {
    pub format_version: u32,
    pub sweep: &'a SweepSpec,
    pub points: &'a [Validation],
    pub exit_code: i32,
}

#[derive(Serialize)]
struct CsvRow {
    key: &'static str,
    value_bytes: u64,
    capacity_bytes: u64,
    weights_bytes: u64,
    other_peak_bytes: u64,
    margin_bytes: u64,
    kv_per_request_bytes: u64,
    kv_budget_bytes: u64,
    planned_requests: u64,
    admitted_requests: Option<u64>,
    first_failure_requests: Option<u64>,
    first_failure: String,
    planned_outcome: String,
    unnamed_bytes: i64,
    probes: usize,
}

fn result_key(o: &Outcome) -> &'static str {
    match o {
        Outcome::Admitted => "admitted",
        Outcome::MarginViolated { .. } => "margin_violated",
        Outcome::Oom { .. } => "oom",
    }
}

/// Writes `sweep.csv`: one row per point, raw bytes.
pub fn write_csv(path: &Path, spec: &SweepSpec, points: &[Validation]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    for (value, v) in spec.values_bytes.iter().zip(points) {
        let b = &v.plan.budget;
        let a = &v.admission;
        w.serialize(CsvRow {
            key: spec.key.name(),
            value_bytes: *value,
            capacity_bytes: b.inputs.capacity_bytes,
            weights_bytes: b.inputs.weights_bytes,
            other_peak_bytes: b.inputs.other_peak_bytes,
            margin_bytes: b.inputs.margin_bytes,
            kv_per_request_bytes: b.inputs.kv_per_request_bytes,
            kv_budget_bytes: b.kv_budget_bytes,
            planned_requests: v.planned_requests,
            admitted_requests: a.admitted_requests,
            first_failure_requests: a.first_failure.as_ref().map(|f| f.requests),
            first_failure: a
                .first_failure
                .as_ref()
                .map_or(String::new(), |f| result_key(&f.outcome).into()),
            planned_outcome: result_key(&v.planned_run.outcome).into(),
            unnamed_bytes: v.unnamed.total_bytes,
            probes: a.probes.len(),
        })?;
    }
    w.flush()?;
    Ok(())
}

/// A small hand-written SVG: planned count (dashed) and measured limit (solid) per point.
pub fn svg(spec: &SweepSpec, points: &[Validation], title: &str) -> String {
    let (w, h) = (640.0, 360.0);
    let (left, right, top, bottom) = (60.0, 20.0, 40.0, 50.0);
    let xs: Vec<f64> = spec.values_bytes.iter().map(|v| *v as f64).collect();
    let (xmin, xmax) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
    let xspan = if xmax > xmin { xmax - xmin } else { 1.0 };
    let ymax = points
        .iter()
        .flat_map(|p| [Some(p.planned_requests), p.admission.admitted_requests])
        .flatten()
        .max()
        .unwrap_or(0)
        .max(1);
    let ystep = nice_step(ymax);
    let ytop = ymax.div_ceil(ystep) * ystep;
    let px = |x: f64| left + (x - xmin) / xspan * (w - left - right);
    let single = xs.len() == 1;
    let px = |x: f64| {
        if single {
            (left + w - right) / 2.0
        } else {
            px(x)
        }
    };
    let py = |y: u64| h - bottom - y as f64 / ytop as f64 * (h - top - bottom);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{left}" y="22" font-size="14">{}</text>"#,
        escape(title)
    );
    // Axes, y grid and labels.
    let mut y = 0;
    while y <= ytop {
        let yy = py(y);
        let _ = writeln!(
            o,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{y}</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
        y += ystep;
    }
    for x in &xs {
        let xx = px(*x);
        let _ = writeln!(
            o,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#999"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            h - bottom,
            h - bottom + 5.0,
            h - bottom + 18.0,
            Short(*x as i128)
        );
    }
    let _ = writeln!(
        o,
        r##"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="#333"/>"##,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (left + w - right) / 2.0,
        h - 12.0,
        spec.key.name()
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">requests</text>"#,
        (top + h - bottom) / 2.0
    );
    // Series.
    let series = |o: &mut String, ys: Vec<Option<u64>>, colour: &str, dash: &str| {
        let pts: Vec<String> = xs
            .iter()
            .zip(&ys)
            .filter_map(|(x, y)| y.map(|y| format!("{:.1},{:.1}", px(*x), py(y))))
            .collect();
        let _ = writeln!(
            o,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            pts.join(" ")
        );
        for p in pts {
            let (cx, cy) = p.split_once(',').unwrap();
            let _ = writeln!(
                o,
                r#"<circle cx="{cx}" cy="{cy}" r="3.5" fill="{colour}"/>"#
            );
        }
    };
    series(
        &mut o,
        points.iter().map(|p| Some(p.planned_requests)).collect(),
        "#888",
        r#" stroke-dasharray="6 4""#,
    );
    series(
        &mut o,
        points
            .iter()
            .map(|p| p.admission.admitted_requests)
            .collect(),
        "#c0392b",
        "",
    );
    // A point where not even zero requests fit has no limit to draw: say so at the axis.
    for (x, p) in xs.iter().zip(points) {
        if p.admission.admitted_requests.is_none() {
            let _ = writeln!(
                o,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#c0392b">none</text>"##,
                px(*x),
                py(0) - 8.0
            );
        }
    }
    let (lx, ly) = (w - right - 170.0, top + 12.0);
    let _ = writeln!(
        o,
        r##"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="#888" stroke-width="2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}">planned (arithmetic)</text>"##,
        lx + 24.0,
        lx + 30.0,
        ly + 4.0
    );
    let _ = writeln!(
        o,
        r##"<line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#c0392b" stroke-width="2"/><text x="{:.1}" y="{:.1}">measured limit</text>"##,
        ly + 18.0,
        lx + 24.0,
        ly + 18.0,
        lx + 30.0,
        ly + 22.0
    );
    let _ = writeln!(o, "</svg>");
    o
}

/// A round grid step giving at most about eight lines up to `max`.
fn nice_step(max: u64) -> u64 {
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if max / (step * m) <= 8 {
                return step * m;
            }
        }
        step *= 10;
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The sweep as a table for people.
pub fn text(spec: &SweepSpec, points: &[Validation], dir: &Path) -> String {
    let mut o = String::new();
    if let Some(first) = points.first() {
        let d = &first.device;
        let _ = writeln!(
            o,
            "headroom validate · plan {:?}, sweeping {} over {} value{} on {}",
            first.plan.name,
            spec.key.name(),
            points.len(),
            if points.len() == 1 { "" } else { "s" },
            d.name
        );
    }
    let mut t = TextTable::new(&[
        (spec.key.name(), Align::Right),
        ("KV budget", Align::Right),
        ("planned", Align::Right),
        ("admitted", Align::Right),
        ("first failure", Align::Left),
        ("planned run", Align::Left),
    ]);
    for (value, v) in spec.values_bytes.iter().zip(points) {
        let a = &v.admission;
        t.row([
            Short(*value as i128).to_string(),
            Short(v.plan.budget.kv_budget_bytes as i128).to_string(),
            v.planned_requests.to_string(),
            a.admitted_requests.map_or("none".into(), |x| x.to_string()),
            a.first_failure.as_ref().map_or("-".into(), |f| {
                format!("{} ({})", f.requests, f.outcome.word())
            }),
            v.planned_run.outcome.word().to_string(),
        ]);
    }
    o.push_str(&t.render());
    let _ = writeln!(
        o,
        "results: {} (sweep.csv, sweep.svg, validation.json; one folder per point)",
        dir.display()
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::GIB;

    #[test]
    fn ranges_and_lists() {
        let s = parse("other_peak=16GiB..28GiB:4GiB").unwrap();
        assert_eq!(s.key, SweepKey::OtherPeak);
        assert_eq!(s.values_bytes, [16, 20, 24, 28].map(|g| g * GIB));
        let s = parse("kv-per-request=0.5GiB,1GiB").unwrap();
        assert_eq!(s.key, SweepKey::KvPerRequest);
        assert_eq!(s.values_bytes, [GIB / 2, GIB]);
        let s = parse("margin=1GiB..2.5GiB:1GiB").unwrap();
        assert_eq!(s.values_bytes, [GIB, 2 * GIB]);
    }

    #[test]
    fn bad_sweeps_say_why() {
        assert!(
            parse("other_peak")
                .unwrap_err()
                .contains("KEY=FROM..TO:STEP")
        );
        assert!(parse("colour=1GiB").unwrap_err().contains("unknown input"));
        assert!(
            parse("margin=2GiB..1GiB:1GiB")
                .unwrap_err()
                .contains("above TO")
        );
        assert!(
            parse("margin=1GiB..2GiB:0B")
                .unwrap_err()
                .contains("above zero")
        );
        assert!(parse("margin=-1GiB,2GiB").unwrap_err().contains("negative"));
        assert!(
            parse("margin=0B..1GiB:1MiB")
                .unwrap_err()
                .contains("at most 64")
        );
    }

    #[test]
    fn point_folders_and_steps() {
        assert_eq!(point_dir(SweepKey::OtherPeak, 16 * GIB), "other_peak-16GiB");
        assert_eq!(
            point_dir(SweepKey::KvPerRequest, GIB / 2),
            "kv_per_request-0.5GiB"
        );
        assert_eq!(nice_step(8), 1);
        assert_eq!(nice_step(24), 5);
        assert_eq!(nice_step(135), 20);
    }
}
