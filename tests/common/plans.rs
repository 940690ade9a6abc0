//! Helpers for the plan and validate tests: a tiny plan file, a validate run, its probes.

use std::path::{Path, PathBuf};

use super::*;

/// The tiny plan: 2 GiB weights, 512 MiB other peak, 256 MiB margin, 512 tokens of 128 KiB in
/// 16-token blocks (32 blocks of 2 MiB = 64 MiB per request). `extra` lands in [workload].
pub fn tiny_plan(dir: &Path, name: &str, capacity: Option<&str>, extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let capacity = capacity.map_or(String::new(), |c| format!("capacity = \"{c}\"\n"));
    std::fs::write(
        &path,
        format!(
            "[plan]\nname = \"{name}\"\n{capacity}weights = \"2GiB\"\nother_peak = \"512MiB\"\nmargin = \"256MiB\"\n\n\
             [workload]\nmodel = \"1B bf16\"\ninput_tokens = 256\noutput_tokens = 256\nblock_tokens = 16\n\
             kv_bytes_per_token = \"128KiB\"\n{extra}"
        ),
    )
    .unwrap();
    path
}

pub fn validate(
    dir: &Path,
    plan: &Path,
    profile: &str,
    extra: &[&str],
) -> (Out, serde_json::Value, PathBuf) {
    let stem = plan.file_stem().unwrap().to_string_lossy().into_owned();
    let out_dir = dir.join(format!(
        "val-{stem}-{}",
        extra.join("").replace(['-', '='], "")
    ));
    let mut args = vec![
        "validate",
        plan.to_str().unwrap(),
        "--profile",
        profile,
        "--out",
        out_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = headroom(dir, &args);
    let v = std::fs::read_to_string(out_dir.join("validation.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    if !v.is_null() {
        let schema = if v.get("points").is_some() {
            "validation-sweep"
        } else {
            "validation"
        };
        super::schema::check(schema, &v, "validation.json");
    }
    (out, v, out_dir)
}

pub fn probes(v: &serde_json::Value) -> Vec<(u64, String)> {
    v["admission"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                u(&p["requests"]),
                p["outcome"]["result"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
