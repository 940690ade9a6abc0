//! Expectations: what a workload (or the command line) says the run must show, checked at the
//! end. A failed expectation makes the run exit 1, which is what CI gates on.

use crate::report::summary::{ExpectationResult, Summary};
use crate::units::Bytes;
use crate::workload::{Expect, OomExpectation};

/// Checks `expect` against a finished run. `expect_oom` (`--expect-oom`) asks for an OOM
/// where the workload asks for none; `fail_on_mismatch` (`--fail-on-mismatch`) makes every
/// `verify` mismatch a failed expectation.
pub fn evaluate(
    expect: &Expect,
    expect_oom: bool,
    fail_on_mismatch: bool,
    s: &Summary,
) -> Vec<ExpectationResult> {
    let mut out = Vec::new();
    let oom = if expect_oom && expect.oom == OomExpectation::None {
        OomExpectation::Any
    } else {
        expect.oom.clone()
    };
    let oom_at: Vec<String> = s
        .ooms()
        .iter()
        .map(|o| format!("{}/{}", o.phase, o.step))
        .collect();
    let actual = if oom_at.is_empty() {
        "no OOM".to_string()
    } else {
        format!("OOM at {}", oom_at.join(", "))
    };
    let (expected, held) = match &oom {
        OomExpectation::None => ("no OOM".to_string(), s.ooms().is_empty()),
        OomExpectation::Any => ("an OOM".to_string(), !s.ooms().is_empty()),
        OomExpectation::At(at) => (
            format!("an OOM at {at}"),
            s.ooms().iter().any(|o| oom.matches(&o.phase, &o.step)),
        ),
    };
    out.push(ExpectationResult {
        name: "oom".into(),
        expected,
        actual,
        held,
    });

    for (view, max) in &expect.max_peak_bytes {
        let peak = s.peaks().run.get(view.key()).map(|p| p.bytes);
        out.push(ExpectationResult {
            name: format!("peak {}", view.key()),
            expected: format!("≤ {max} ({})", Bytes(*max)),
            actual: peak.map_or("not measured".into(), |b| format!("{b} ({})", Bytes(b))),
            held: peak.is_some_and(|b| b <= *max),
        });
    }
    if let Some(min) = expect.min_headroom_bytes {
        let h = s.peaks().headroom_at_peak_bytes;
        out.push(ExpectationResult {
            name: "headroom at peak".into(),
            expected: format!("≥ {min} ({})", Bytes(min)),
            actual: h.map_or("not measured".into(), |b| format!("{b} ({})", Bytes(b))),
            held: h.is_some_and(|b| b >= min),
        });
    }
    let max_mismatches = if fail_on_mismatch {
        Some(0)
    } else {
        expect.max_mismatches
    };
    if let Some(max) = max_mismatches {
        let count: u64 = s.mismatches().iter().map(|m| m.mismatch.count).sum();
        out.push(ExpectationResult {
            name: "verify mismatches".into(),
            expected: format!("≤ {max}"),
            actual: count.to_string(),
            held: count <= max,
        });
    }
    out
}
