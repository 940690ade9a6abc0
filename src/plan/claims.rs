//! What a validated plan claims, one check each, and the top-level `junit.xml` and `report.md`
//! of `headroom validate` built from them: the planned count admitted, the margin free at the
//! planned run's true peak, and each category within what the plan gave it. A CI server's
//! failures are exactly the claims that failed; the probes (runs above the limit that are
//! meant to fail) are outcomes of the search, never failures (`report::junit` marks them).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::plan::findings::{Outcome, Validation};
use crate::report::md_table::{Left, header};
use crate::report::xml_escape;
use crate::units::Bytes;

/// One claim of the plan and what the device said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Claim {
    /// `admitted count`, `margin at the peak`, `category: NAME`.
    pub name: String,
    /// Whether it held; None when the planned run did not reach what it needs (an OOM before
    /// the category's phase).
    pub held: Option<bool>,
    pub expected: String,
    pub actual: String,
}

/// The plan's claims, checked against what `v` measured.
pub fn claims(v: &Validation) -> Vec<Claim> {
    let n = v.planned_requests;
    let a = &v.admission;
    let first_failure = a.first_failure.as_ref().map_or(String::new(), |f| {
        format!("; {} fails: {}", f.requests, f.outcome.word())
    });
    let mut out = vec![Claim {
        name: "admitted count".into(),
        held: Some(v.planned_admitted),
        expected: format!("{n} requests admitted"),
        actual: match a.admitted_requests {
            Some(k) => format!("{k} requests admitted{first_failure}"),
            None => format!("no request count admitted{first_failure}"),
        },
    }];
    let r = &v.planned_run;
    out.push(Claim {
        name: "margin at the peak".into(),
        held: Some(v.margin_held == Some(true)),
        expected: format!(
            "≥ {} ({}) free at the true peak of {n} requests",
            v.margin_bytes,
            Bytes(v.margin_bytes)
        ),
        actual: match &r.outcome {
            Outcome::Oom {
                at,
                requested_bytes,
            } => format!("out of memory at {at} (a request of {requested_bytes} bytes): no margin"),
            _ => {
                let h = r.headroom_at_peak_bytes.unwrap_or(0);
                format!("{h} ({}) free at the peak", Bytes(h))
            }
        },
    });
    for c in &r.categories {
        out.push(Claim {
            name: format!("category: {}", c.category),
            held: c.own_bytes.map(|own| own <= c.planned_bytes),
            expected: format!("≤ {} ({})", c.planned_bytes, Bytes(c.planned_bytes)),
            actual: match c.own_bytes {
                Some(own) => format!("{own} ({}) asked for", Bytes(own)),
                None => "not measured: the planned run did not reach it".into(),
            },
        });
    }
    out
}

/// The top-level `junit.xml`: one test suite per validated plan (one, or one per sweep
/// point), one test case per claim.
pub fn junit(points: &[(String, &Validation)]) -> String {
    let all: Vec<(&str, &Validation, &[Claim])> = points
        .iter()
        .map(|(label, v)| (label.as_str(), *v, v.claims.as_slice()))
        .collect();
    let count = |f: &dyn Fn(&Claim) -> bool| -> usize {
        all.iter()
            .map(|(_, _, c)| c.iter().filter(|c| f(c)).count())
            .sum()
    };
    let tests = count(&|_| true);
    let failures = count(&|c| c.held == Some(false));
    let mut o = String::new();
    let _ = writeln!(o, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        o,
        r#"<testsuites name="headroom validate" tests="{tests}" failures="{failures}" errors="0">"#
    );
    for (label, v, claims) in all {
        let suite = if label.is_empty() {
            format!("headroom.validate.{}", v.plan.name)
        } else {
            format!("headroom.validate.{} {label}", v.plan.name)
        };
        let f = claims.iter().filter(|c| c.held == Some(false)).count();
        let s = claims.iter().filter(|c| c.held.is_none()).count();
        let _ = writeln!(
            o,
            r#"  <testsuite name="{}" tests="{}" failures="{f}" errors="0" skipped="{s}">"#,
            xml_escape(&suite),
            claims.len()
        );
        let _ = writeln!(o, "    <properties>");
        for (k, val) in [
            ("format_version", v.format_version.to_string()),
            ("device", v.device.name.clone()),
            ("planned_requests", v.planned_requests.to_string()),
            ("exit_code", v.exit_code.to_string()),
        ] {
            let _ = writeln!(
                o,
                r#"      <property name="{k}" value="{}"/>"#,
                xml_escape(&val)
            );
        }
        let _ = writeln!(o, "    </properties>");
        for c in claims {
            let _ = write!(
                o,
                r#"    <testcase classname="{}" name="{}" time="0">"#,
                xml_escape(&suite),
                xml_escape(&c.name)
            );
            match c.held {
                Some(true) => {
                    let _ = writeln!(o, "</testcase>");
                    continue;
                }
                Some(false) => {
                    let _ = writeln!(
                        o,
                        "\n      <failure message=\"{}\" type=\"claim\">expected: {}\nactual: {}</failure>",
                        xml_escape(&format!("expected {}, actual {}", c.expected, c.actual)),
                        xml_escape(&c.expected),
                        xml_escape(&c.actual)
                    );
                }
                None => {
                    let _ = writeln!(
                        o,
                        "\n      <skipped message=\"{}\"/>",
                        xml_escape(&c.actual)
                    );
                }
            }
            let _ = writeln!(o, "    </testcase>");
        }
        let _ = writeln!(o, "  </testsuite>");
    }
    let _ = writeln!(o, "</testsuites>");
    o
}

/// The top-level `report.md`: the claims as a table per plan, then the text report.
pub fn markdown(points: &[(String, &Validation, String)]) -> String {
    let mut o = String::new();
    let first = points.first().map(|p| p.1);
    let _ = writeln!(
        o,
        "# headroom validate: {} on {}\n",
        first.map_or("", |v| v.plan.name.as_str()),
        first.map_or("", |v| v.device.name.as_str())
    );
    for (label, v, text) in points {
        if !label.is_empty() {
            let _ = writeln!(o, "## {label}\n");
        }
        let _ = writeln!(
            o,
            "{}",
            header(&[
                ("claim", Left),
                ("expected", Left),
                ("actual", Left),
                ("result", Left)
            ])
        );
        for c in &v.claims {
            let result = match c.held {
                Some(true) => "held",
                Some(false) => "**failed**",
                None => "skipped",
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {result} |",
                crate::report::escape::md(&c.name),
                crate::report::escape::md(&c.expected),
                crate::report::escape::md(&c.actual)
            );
        }
        let _ = writeln!(
            o,
            "\nExit code {}. Each probe is a run in its own folder; probes above the limit are meant to fail and are outcomes here, not failures.\n",
            v.exit_code
        );
        let _ = writeln!(o, "```text\n{}```\n", text.replace("```", "'''"));
    }
    o
}

/// Writes `junit.xml` and `report.md` into the validation folder.
pub fn write(dir: &Path, points: &[(String, &Validation, String)]) -> anyhow::Result<()> {
    let j: Vec<(String, &Validation)> = points.iter().map(|(l, v, _)| (l.clone(), *v)).collect();
    for (name, text) in [("junit.xml", junit(&j)), ("report.md", markdown(points))] {
        let path = dir.join(name);
        crate::outdir::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
