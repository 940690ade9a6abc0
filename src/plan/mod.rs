//! Capacity plans, from arithmetic to measurement.
//!
//! `KV budget = capacity − weights − other peak − safety margin` is arithmetic until it is run.
//! `budget` does the arithmetic exactly; `file` reads plan files and flags; `probe` writes the
//! workload a plan describes for one request count; `validate` runs probes on the device and
//! finds where admission really stops; `sweep` repeats that as one input varies; `render` is
//! the text for people.

pub mod args;
pub mod budget;
pub mod claims;
pub mod engine;
pub mod file;
pub mod findings;
pub mod probe;
pub mod render;
pub mod sweep;
pub mod validate;

use budget::{Budget, BudgetError, BudgetInputs};
use file::Plan;

/// The plan's arithmetic, with the capacity taken from the plan, else `device_total_bytes`
/// (and the plan's shares of it in bytes).
///
/// Panics if neither is known: callers open the device first when the plan names no capacity.
pub fn budget_for(plan: &Plan, device_total_bytes: Option<u64>) -> Result<Budget, BudgetError> {
    let capacity_bytes = plan
        .capacity_bytes
        .or(device_total_bytes)
        .expect("a capacity from the plan or the device");
    let plan = &plan.at_capacity(capacity_bytes);
    BudgetInputs {
        capacity_bytes,
        weights_bytes: plan.weights_bytes,
        other_peak_bytes: plan.other_peak_bytes,
        margin_bytes: plan.margin_bytes,
        kv_per_request_bytes: plan.kv_per_request_bytes,
    }
    .compute()
}
