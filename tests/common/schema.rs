//! Validation of JSON outputs against the committed schemas in `docs/schema/`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// Checks `value` against `docs/schema/<name>.schema.json`; panics naming what does not fit.
pub fn check(name: &str, value: &serde_json::Value, what: &str) {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, jsonschema::Validator>>> = OnceLock::new();
    let cache = VALIDATORS.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap();
    let v = cache.entry(name.to_string()).or_insert_with(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/schema")
            .join(format!("{name}.schema.json"));
        let schema: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        jsonschema::validator_for(&schema).expect("the committed schema is valid")
    });
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .take(5)
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match docs/schema/{name}.schema.json: {errors:#?}"
    );
}
