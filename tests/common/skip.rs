//! What a test does when a tool it needs is missing: under CI (`CI` set, as `.ci/run` sets it)
//! the test fails naming the tool; elsewhere the reason goes straight to the terminal, past the
//! test harness's capture, so a skip is always seen, and the caller returns.

use std::io::Write;

/// Whether missing tools are failures: `CI` set to anything but empty, `0` or `false`.
pub fn strict() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// Fails under CI; elsewhere prints `WHAT: NOT RUN: WHY` on the terminal. The caller skips.
#[track_caller]
pub fn missing(what: &str, why: &str) {
    assert!(
        !strict(),
        "{what}: needed under CI=true, and missing: {why}"
    );
    let _ = writeln!(std::io::stderr(), "{what}: NOT RUN: {why}");
}
