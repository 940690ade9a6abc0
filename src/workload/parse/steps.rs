//! One written step from its TOML table, with the place errors name.

use std::path::Path;

use super::WorkloadError;
use crate::workload::step::Step;

/// Parses one step table; `place` names it in errors.
pub fn parse_step(file: &Path, place: &str, value: &toml::Value) -> Result<Step, WorkloadError> {
    parse_step_owned(file, place, value.clone())
}

/// `parse_step` of a table the caller owns, which is not copied (a `capture` or `repeat` of
/// many steps holds them all).
pub fn parse_step_owned(
    file: &Path,
    place: &str,
    value: toml::Value,
) -> Result<Step, WorkloadError> {
    parse_step_at(file, || place.to_string(), value)
}

/// `parse_step_owned` with its place made only for an error.
pub fn parse_step_at(
    file: &Path,
    place: impl FnOnce() -> String,
    value: toml::Value,
) -> Result<Step, WorkloadError> {
    let op = value
        .get("op")
        .and_then(|o| o.as_str())
        .unwrap_or("?")
        .to_string();
    step_from_value(value).map_err(|e: toml::de::Error| {
        let msg = e.message().replace("\nin `op`", " (in `op`)");
        WorkloadError::new(file, format!("{} ({op})", place()), msg)
    })
}

/// A step from its table. A `repeat` or `capture` keeps its inner steps as written
/// (`Vec<toml::Value>`): they are moved into the step, not passed through serde's buffer for
/// tagged enums, which would copy every inner table twice (a capture can hold a million).
/// The step and every error are what `value.try_into()` gives.
pub(crate) fn step_from_value(value: toml::Value) -> Result<Step, toml::de::Error> {
    let toml::Value::Table(mut table) = value else {
        return value.try_into();
    };
    let nests = matches!(
        table.get("op").and_then(|o| o.as_str()),
        Some("repeat" | "capture")
    );
    let inner = match table.get_mut("steps") {
        Some(toml::Value::Array(inner)) if nests => std::mem::take(inner),
        _ => return toml::Value::Table(table).try_into(),
    };
    let mut step: Step = toml::Value::Table(table).try_into()?;
    if let Step::Repeat { steps, .. } | Step::Capture { steps, .. } = &mut step {
        *steps = inner;
    }
    Ok(step)
}
