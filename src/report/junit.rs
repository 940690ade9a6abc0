//! `junit.xml`: one test case per expectation of the workload (a failure says expected vs
//! actual), plus an error case when the run could not finish, or a skipped case when the
//! workload did not fit the device, for CI systems that show JUnit. A `headroom validate`
//! probe's unmet expectations are outcomes of the search, never failures.

use std::fmt::Write as _;

use crate::report::markdown::status_name;
use crate::report::rundata::RunData;
use crate::report::summary::RunStatus;
use crate::report::xml_escape;

/// The JUnit XML of a run.
pub fn render(run: &RunData) -> String {
    let s = &run.summary;
    let suite = format!("headroom.{}", s.workload.name);
    let seconds = match s.end_ns {
        Some(e) => e.saturating_sub(s.start_ns) as f64 / 1e9,
        None => 0.0,
    };
    let skipped = (s.status == RunStatus::Skipped).then(|| {
        format!(
            "skipped{}",
            s.status_detail
                .as_ref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )
    });
    let could_not_run = match s.status {
        RunStatus::Completed | RunStatus::Oom | RunStatus::Skipped => None,
        _ => Some(format!(
            "the run ended {}{}",
            status_name(s),
            s.status_detail
                .as_ref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )),
    };
    let tests = s.expectations.len()
        + usize::from(could_not_run.is_some())
        + usize::from(skipped.is_some());
    let skipped_count = usize::from(skipped.is_some());
    // A `headroom validate` probe: its expectations are the search's outcomes (a count above
    // the limit is meant to fail), recorded as passed cases with the outcome in system-out;
    // the plan's own verdict is the validation folder's junit.xml.
    let probe = s.plan.is_some();
    let failures = s.expectations.iter().filter(|e| !e.held && !probe).count();
    let errors = usize::from(could_not_run.is_some());
    // JUnit's timestamp has no zone or fraction; the exact UTC is a property.
    let timestamp: String = s.started_utc.chars().take(19).collect();

    let mut o = String::new();
    let _ = writeln!(o, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        o,
        r#"<testsuites name="headroom" tests="{tests}" failures="{failures}" errors="{errors}" time="{seconds:.3}">"#
    );
    let _ = writeln!(
        o,
        r#"  <testsuite name="{}" tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped_count}" time="{seconds:.3}" timestamp="{timestamp}">"#,
        xml_escape(&suite)
    );
    let _ = writeln!(o, "    <properties>");
    let props = [
        ("format_version", s.format_version.to_string()),
        ("headroom_version", s.headroom_version.clone()),
        ("workload_file", s.workload.file.clone()),
        ("device", s.device.name.clone()),
        ("backend", s.device.backend.to_string()),
        ("driver_version", s.device.driver_version.clone()),
        ("started_utc", s.started_utc.clone()),
        ("status", status_name(s)),
        (
            "exit_code",
            s.exit_code.map_or("-".into(), |c| c.to_string()),
        ),
        ("results", run.dir.display().to_string()),
    ];
    let probe_prop = probe.then(|| ("validate_probe", "true".to_string()));
    for (k, v) in props.into_iter().chain(probe_prop) {
        let _ = writeln!(
            o,
            r#"      <property name="{k}" value="{}"/>"#,
            xml_escape(&v)
        );
    }
    let _ = writeln!(o, "    </properties>");
    if let Some(msg) = &could_not_run {
        let _ = writeln!(
            o,
            r#"    <testcase classname="{}" name="run" time="{seconds:.3}">"#,
            xml_escape(&suite)
        );
        let _ = writeln!(
            o,
            r#"      <error message="{m}" type="could-not-run">{m}</error>"#,
            m = xml_escape(msg)
        );
        let _ = writeln!(o, "    </testcase>");
    }
    if let Some(msg) = &skipped {
        let _ = writeln!(
            o,
            r#"    <testcase classname="{}" name="run" time="0">"#,
            xml_escape(&suite)
        );
        let _ = writeln!(o, r#"      <skipped message="{}"/>"#, xml_escape(msg));
        let _ = writeln!(o, "    </testcase>");
    }
    for e in &s.expectations {
        let _ = write!(
            o,
            r#"    <testcase classname="{}" name="{}" time="0">"#,
            xml_escape(&suite),
            xml_escape(&e.name)
        );
        if e.held {
            let _ = writeln!(o, "</testcase>");
            continue;
        }
        let msg = format!("expected {}, actual {}", e.expected, e.actual);
        let _ = writeln!(o);
        if probe {
            let _ = writeln!(
                o,
                "      <system-out>{}: the outcome of a validate probe, expected while searching for the admission limit</system-out>",
                xml_escape(&msg)
            );
            let _ = writeln!(o, "    </testcase>");
            continue;
        }
        let _ = writeln!(
            o,
            r#"      <failure message="{}" type="expectation">expected: {}
actual: {}</failure>"#,
            xml_escape(&msg),
            xml_escape(&e.expected),
            xml_escape(&e.actual)
        );
        let _ = writeln!(o, "    </testcase>");
    }
    let _ = writeln!(o, "  </testsuite>");
    let _ = writeln!(o, "</testsuites>");
    o
}
