//! JSON Schemas of headroom's JSON outputs, generated from the types that write them, so the
//! schemas in `docs/schema/` cannot drift from the files: `tests/schema.rs` fails when a type
//! changes and the committed schema was not regenerated
//! (`cargo test --test schema -- --ignored regenerate_schemas`), and validates the outputs the
//! test suite writes against them.

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
    s.to_value()
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
    ]
}
