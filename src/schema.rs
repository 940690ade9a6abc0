//! JSON Schemas of headroom's JSON outputs, generated from the types that write them, so the
//! schemas in `docs/schema/` cannot drift from the files: `tests/suite/schema.rs` fails when a
//! type changes and the committed schema was not regenerated
//! (`cargo test --test suite -- --ignored schema::regenerate_schemas`), and validates the
//! outputs the test suite writes against them.
//!
//! The schemas are closed: every object whose fields the type names refuses any other field
//! (`additionalProperties: false`, or `unevaluatedProperties: false` where a flattened enum
//! adds its variants' fields beside the struct's own), so a renamed or extra field fails
//! validation instead of passing unnoticed. Maps (`BTreeMap`) and free JSON
//! (`serde_json::Value`) stay open: their keys are data, not fields.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;

/// A schema for what `T` serializes to (draft 2020-12), titled and described.
fn schema_of<T: JsonSchema>(title: &str, description: &str) -> serde_json::Value {
    let mut s = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>();
    s.insert("title".into(), title.into());
    s.insert("description".into(), description.into());
    let mut v = s.to_value();
    close(&mut v, false);
    v
}

/// The combinators whose branches add fields to the object beside them.
const COMBINATORS: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// Closes every object schema with named `properties` and no `additionalProperties` of its
/// own. `inside_open` marks the branches of a combinator beside such properties: those see
/// only part of the object and stay open, the object itself closes with
/// `unevaluatedProperties`, which sees what every branch evaluated.
fn close(node: &mut serde_json::Value, inside_open: bool) {
    match node {
        serde_json::Value::Object(map) => {
            let named = map.get("properties").is_some_and(|p| p.is_object());
            let combined = COMBINATORS.iter().any(|k| map.contains_key(*k));
            if named && !inside_open && !map.contains_key("additionalProperties") {
                let key = if combined {
                    "unevaluatedProperties"
                } else {
                    "additionalProperties"
                };
                map.insert(key.into(), false.into());
            }
            for (k, v) in map.iter_mut() {
                let branch = COMBINATORS.contains(&k.as_str());
                // `properties` holds field names, not schemas: its values are schemas.
                close(v, branch && (named || inside_open));
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                close(v, inside_open);
            }
        }
        _ => {}
    }
}

/// Every JSON output: (file name under `docs/schema/`, its schema).
pub fn documents() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (
            "summary.schema.json",
            schema_of::<crate::report::summary::Summary>(
                "summary.json",
                "A run's record (`headroom run`, also printed by `--json`): device, idle and true peaks per view and phase, polled peaks, OOMs with evidence and diagnosis, expectations, release check. Byte counts are raw integers.",
            ),
        ),
        (
            "bandwidth.schema.json",
            schema_of::<crate::bandwidth::BandwidthReport>(
                "headroom bandwidth --json / --out",
                "Bandwidth of headroom's kernels next to the driver's copy and memset, as ratios.",
            ),
        ),
        (
            "replay.schema.json",
            schema_of::<crate::alloc::replay::ReplayReport>(
                "headroom replay --json",
                "An allocation log replayed against an allocator: fits or not, peaks, the first failure.",
            ),
        ),
        (
            "compare.schema.json",
            schema_of::<crate::report::compare::Comparison>(
                "headroom compare --json",
                "Two result folders side by side: idle and peak per view and phase, deltas, OOM outcomes.",
            ),
        ),
        (
            "validation.schema.json",
            schema_of::<crate::plan::validate::Validation>(
                "validation.json",
                "A capacity plan run on the device (`headroom validate`, also its --json): measured peaks, unnamed memory, the admission limit.",
            ),
        ),
        (
            "explain.schema.json",
            schema_of::<crate::explain::Report>(
                "headroom explain --json",
                "Out-of-memory messages explained: figures as byte intervals, the arithmetic, causes, next checks.",
            ),
        ),
        (
            "validation-sweep.schema.json",
            schema_of::<crate::plan::sweep::SweepResult>(
                "validation.json of headroom validate --sweep",
                "A sweep of a plan's parameter: one validation per point, and the worst exit code.",
            ),
        ),
        (
            "node.schema.json",
            schema_of::<crate::node::summary::NodeSummary>(
                "node.json (headroom run/validate/bandwidth/calibrate --device all, also --json)",
                "A node's record: one row per GPU (identity, CUDA-visible total, idle, true peaks, OOM outcome, exit), the spread across GPUs and the GPUs flagged as different.",
            ),
        ),
        (
            "devices.schema.json",
            schema_of::<crate::commands::devices::Listing>(
                "headroom devices --json",
                "The GPUs the driver sees (or a simulated device's or node's), with their identity, and the built-in profiles when there is no driver.",
            ),
        ),
        (
            "plan.schema.json",
            schema_of::<crate::commands::plan::PlanJson>(
                "headroom plan --json",
                "A capacity plan's arithmetic: capacity, weights, other peak, margin, KV budget and the requests it admits.",
            ),
        ),
        (
            "model-plan.schema.json",
            schema_of::<crate::commands::plan_model::ModelPlanJson>(
                "headroom plan --model M --engine E --json",
                "A plan from a model and an engine's start-up arithmetic: the model as read, every figure per GPU in bytes, the flags that hold a target, and the engine's own start-up lines.",
            ),
        ),
        (
            "validation-model.schema.json",
            schema_of::<crate::commands::validate_model::ModelValidation>(
                "validation-model.json of headroom validate --model (also --json)",
                "An engine's start-up pattern run on the device: each category predicted and measured, the true peak of each view, the OOM's stage against the predicted one, and whether the margin held.",
            ),
        ),
        (
            "crosscheck.schema.json",
            schema_of::<crate::crosscheck::Crosscheck>(
                "headroom crosscheck --json",
                "Runs on a device next to the same workloads on the simulator: per workload and view, both peaks and whether they agree, and the OOM outcomes.",
            ),
        ),
        (
            "import-torch.schema.json",
            schema_of::<Vec<crate::commands::import::ImportedDevice<'static>>>(
                "headroom import torch SNAPSHOT --json",
                "A PyTorch memory snapshot imported: one entry per traced device, with the run folder written for it and its summary.json.",
            ),
        ),
        (
            "replay-snapshot.schema.json",
            schema_of::<Vec<crate::commands::replay_torch::DeviceAnswer>>(
                "headroom replay SNAPSHOT --json",
                "A PyTorch memory snapshot replayed per device: the replay, and with --find-capacity and --try-settings what would have fit.",
            ),
        ),
        (
            "diff.schema.json",
            schema_of::<crate::diff::Diff>(
                "headroom diff --json",
                "Two PyTorch snapshots, imports, watches or runs: peaks on each side with B − A, bytes at the peak by category and by source line, settings and segment counts that differ, the largest new allocation.",
            ),
        ),
    ]
}
