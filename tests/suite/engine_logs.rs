//! The corpus of real engine start-up reports (tests/fixtures/engine-logs/): headroom's plan
//! for each report's model, card and settings against the figures the engine printed.
//!
//! Per report: weights (error against the printed figure), KV bytes per token (exact when it
//! lies inside the interval the printed KV memory and token or block count allow, given their
//! printed precision), and KV cache tokens predicted from the model, card and settings alone
//! (never from the report's own weights or activation figures). The scores of the fitted set
//! and of the held-out families are printed and must equal the table in docs/model-plans.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use headroom::model::{self, ModelSource, ModelSpec};
use headroom::plan::engine::{self, Engine, EngineSettings};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const GIB: f64 = (1u64 << 30) as f64;

struct Record {
    id: String,
    doc: toml::Table,
}

fn records(dir: &Path) -> Vec<Record> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let doc: toml::Table =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{}: not TOML: {e}", p.display()));
            Record {
                id: doc["id"].as_str().unwrap_or("?").to_string(),
                doc,
            }
        })
        .collect()
}

fn s<'a>(t: &'a toml::Table, k: &str) -> &'a str {
    t.get(k).and_then(|v| v.as_str()).unwrap_or("")
}

fn printed(r: &Record, k: &str) -> Option<String> {
    r.doc
        .get("printed")
        .and_then(|p| p.get(k))
        .and_then(|v| v.as_str())
        .map(|v| v.replace(',', ""))
}

/// A printed decimal and half a unit of its last printed digit.
fn with_precision(text: &str) -> Option<(f64, f64)> {
    let v: f64 = text.parse().ok()?;
    let decimals = text.split_once('.').map(|(_, d)| d.len()).unwrap_or(0) as i32;
    Some((v, 0.5 * 10f64.powi(-decimals)))
}

/// The corpus's free-text quantization, as a `quantization_config`.
fn quantization_config(text: &str) -> Option<serde_json::Value> {
    let t = text.to_ascii_lowercase();
    let v = if t.contains("mxfp4") {
        serde_json::json!({"quant_method": "mxfp4"})
    } else if t.contains("fp8") && t.contains("per-channel") {
        serde_json::json!({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})
    } else if t.contains("fp8") && t.contains("128") {
        serde_json::json!({"quant_method": "fp8", "weight_block_size": [128, 128]})
    } else if t.contains("fp8") {
        serde_json::json!({"quant_method": "fp8"})
    } else if t.contains("gptq") {
        serde_json::json!({"quant_method": "gptq", "bits": 4, "group_size": 128})
    } else if t.contains("awq") {
        serde_json::json!({"quant_method": "awq", "bits": 4, "group_size": 128})
    } else {
        return None;
    };
    Some(v)
}

/// The report's model: the catalogue entry of its id, else its `[model_config]`. A report
/// whose checkpoint cannot be known (`checkpoint_unknown` says why) is not planned.
fn model_of(r: &Record) -> Result<ModelSpec, String> {
    if let Some(why) = r.doc.get("checkpoint_unknown").and_then(|v| v.as_str()) {
        return Err(format!("the checkpoint is not known: {why}"));
    }
    let id = s(&r.doc, "model");
    if let Some(e) = model::catalogue::find(id) {
        return model::catalogue::spec(e).map_err(|e| e.to_string());
    }
    let Some(mc) = r.doc.get("model_config").and_then(|m| m.as_table()) else {
        return Err("no model_config and not in the catalogue".into());
    };
    let mut obj = serde_json::Map::new();
    for (k, v) in mc {
        match k.as_str() {
            "config_source" => {}
            "quantization" => {
                let text = v.as_str().unwrap_or("");
                let q = quantization_config(text)
                    .ok_or_else(|| format!("quantization {text:?}: no layout headroom knows"))?;
                obj.insert("quantization_config".into(), q);
            }
            "layer_types" if v.is_str() => {}
            // TOML has no null: a recorded "null" is the config's null.
            _ if v.as_str() == Some("null") => {
                obj.insert(k.clone(), serde_json::Value::Null);
            }
            _ => {
                obj.insert(k.clone(), model::catalogue::to_json(v));
            }
        }
    }
    obj.entry("model_type")
        .or_insert_with(|| serde_json::Value::String(s(&r.doc, "family").to_string()));
    model::config::from_object(
        &obj,
        &format!("{}: model_config", r.id),
        id,
        ModelSource::Config {
            path: PathBuf::from(&r.id),
        },
    )
    .map_err(|e| e.to_string())
}

fn settings_of(r: &Record, engine: Engine) -> Result<EngineSettings, String> {
    let pairs: Vec<(String, String)> = r
        .doc
        .get("settings")
        .and_then(|t| t.as_table())
        .map(|t| {
            t.iter()
                .map(|(k, v)| {
                    let v = match v {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut set =
        EngineSettings::from_pairs(engine.kind, &r.id, &pairs).map_err(|e| e.to_string())?;
    set.device_name = Some(s(&r.doc, "gpu").to_string());
    Ok(set)
}

/// The card's CUDA-visible total: the report's own `gpu_total_bytes` or printed total, else
/// the total another report printed for the same card name (a fact of the card).
fn total_of(r: &Record, cards: &BTreeMap<String, u64>) -> Option<u64> {
    if let Some(b) = r.doc.get("gpu_total_bytes").and_then(|v| v.as_integer()) {
        return Some(b as u64);
    }
    if let Some(g) = printed(r, "total_gpu_memory_gib").and_then(|t| t.parse::<f64>().ok()) {
        return Some((g * GIB) as u64);
    }
    let gpu = s(&r.doc, "gpu");
    cards.get(gpu).copied().or_else(|| {
        CARDS
            .iter()
            .find(|(name, _)| gpu.contains(name))
            .map(|(_, b)| *b)
    })
}

/// CUDA-visible totals of cards no fitted report printed, as facts with their sources:
/// H100 80GB 81089 MiB (FACTS.md, profiles/h100-80g.toml), A100 40GB 40336 MiB
/// (profiles/a100-40g.toml), A100 80GB 85174583296 bytes (the corpus format's own example for
/// an A100-SXM4-80GB; unverified), RTX A6000 47.50 GiB (PyTorch's "47.50 GiB total capacity"
/// in the project's OOM corpus; unverified that it was an A6000).
const CARDS: &[(&str, u64)] = &[
    ("H100 80GB", 81_089 << 20),
    ("A100 40GB", 40_336 << 20),
    ("A100-SXM4-40GB", 40_336 << 20),
    ("A100 80GB", 85_174_583_296),
    ("A100-SXM4-80GB", 85_174_583_296),
    ("RTX A6000", 51_002_736_640),
];

#[derive(Default)]
struct Scores {
    reports: usize,
    planned: usize,
    not_planned: Vec<String>,
    weights_err: Vec<f64>,
    per_token: Vec<bool>,
    tokens_err: Vec<f64>,
    kv_gib_err: Vec<f64>,
}

fn pct(v: &[f64]) -> String {
    if v.is_empty() {
        return "–".into();
    }
    format!(
        "{:.2} %",
        v.iter().map(|e| e.abs()).sum::<f64>() / v.len() as f64 * 100.0
    )
}

fn share(v: &[f64], within: f64) -> String {
    if v.is_empty() {
        return "–".into();
    }
    let n = v.iter().filter(|e| e.abs() <= within).count();
    format!("{n}/{}", v.len())
}

impl Scores {
    fn lines(&self, name: &str) -> Vec<String> {
        let exact = self.per_token.iter().filter(|x| **x).count();
        vec![format!(
            "| {name} | {} | {} | {}/{} | {} ({}) | {} | {} / {} / {} | {} |",
            self.reports,
            self.planned,
            exact,
            self.per_token.len(),
            pct(&self.weights_err),
            share(&self.weights_err, 0.01),
            pct(&self.kv_gib_err),
            share(&self.tokens_err, 0.01),
            share(&self.tokens_err, 0.03),
            share(&self.tokens_err, 0.05),
            pct(&self.tokens_err),
        )]
    }
}

/// Scores one folder; prints a row per report.
fn score(dir: &Path, cards: &BTreeMap<String, u64>, only_known: bool, rows: bool) -> Scores {
    let mut sc = Scores::default();
    for r in records(dir) {
        if only_known && r.doc.get("settings_known").and_then(|v| v.as_bool()) != Some(true) {
            continue;
        }
        sc.reports += 1;
        let engine_name = s(&r.doc, "engine");
        let version = s(&r.doc, "engine_version");
        let engine: Engine = match if version.is_empty() {
            engine_name.parse()
        } else {
            format!("{engine_name}@{version}").parse()
        } {
            Ok(e) => e,
            Err(e) => {
                sc.not_planned.push(format!("{}: {e}", r.id));
                continue;
            }
        };
        let plan = model_of(&r).and_then(|m| {
            let set = settings_of(&r, engine)?;
            let total = total_of(&r, cards).ok_or("the card's total is not known")?;
            engine::plan(&m, engine, &set, total).map(|p| (m, p))
        });
        let (_m, p) = match plan {
            Ok(x) => x,
            Err(e) => {
                sc.not_planned.push(format!("{}: {e}", r.id));
                continue;
            }
        };
        sc.planned += 1;
        let mut row = format!("{:<14}", r.id);
        // Weights.
        let printed_weights = printed(&r, "weights_gib")
            .and_then(|t| t.parse::<f64>().ok())
            .map(|g| g * GIB)
            .or_else(|| {
                printed(&r, "weights_mib")
                    .and_then(|t| t.parse::<f64>().ok())
                    .map(|m| m * (1u64 << 20) as f64)
            })
            .or_else(|| {
                printed(&r, "model_buffer_mib")
                    .and_then(|t| t.parse::<f64>().ok())
                    .map(|m| m * (1u64 << 20) as f64)
            });
        if let Some(w) = printed_weights.filter(|w| *w > 0.0) {
            let e = (p.weights_bytes as f64 - w) / w;
            sc.weights_err.push(e);
            row += &format!(" weights {:+.2}%", e * 100.0);
        }
        // KV tokens: printed tokens, else blocks × block size.
        let printed_tokens = printed(&r, "kv_cache_tokens")
            .and_then(|t| t.parse::<u64>().ok())
            .or_else(|| {
                printed(&r, "gpu_blocks")
                    .and_then(|t| t.parse::<u64>().ok())
                    .map(|b| b * p.block_size)
            })
            .or_else(|| printed(&r, "n_ctx").and_then(|t| t.parse::<u64>().ok()));
        let printed_kv = printed(&r, "kv_cache_gib")
            .and_then(|t| with_precision(&t))
            .map(|(v, h)| (v * GIB, h * GIB))
            .or_else(|| {
                printed(&r, "kv_buffer_mib")
                    .and_then(|t| with_precision(&t))
                    .map(|(v, h)| (v * (1u64 << 20) as f64, h * (1u64 << 20) as f64))
            })
            .or_else(|| {
                let k = printed(&r, "k_size_gib").and_then(|t| with_precision(&t))?;
                let v = printed(&r, "v_size_gib").and_then(|t| with_precision(&t))?;
                Some(((k.0 + v.0) * GIB, (k.1 + v.1) * GIB))
            });
        if let (Some(n), Some((kv, half))) = (printed_tokens, printed_kv) {
            if n > 0 && kv > 0.0 {
                let slack = (2 * p.block_size) as f64;
                let lo = (kv - half) / (n as f64 + slack);
                let hi = (kv + half) / n as f64;
                let ok = (lo..=hi).contains(&(p.kv_bytes_per_token as f64));
                sc.per_token.push(ok);
                row += &format!(
                    " kv/token {} {}",
                    p.kv_bytes_per_token,
                    if ok { "exact" } else { "OFF" }
                );
            }
        }
        if let Some((kv, _)) = printed_kv.filter(|(kv, _)| *kv > 0.0) {
            sc.kv_gib_err.push((p.kv_cache_bytes as f64 - kv) / kv);
        }
        if let Some(n) = printed_tokens.filter(|n| *n > 0) {
            let e = (p.kv_cache_tokens as f64 - n as f64) / n as f64;
            sc.tokens_err.push(e);
            row += &format!(" tokens {} vs {n} ({:+.2}%)", p.kv_cache_tokens, e * 100.0);
        }
        if rows {
            println!("{row}");
        }
    }
    if rows {
        for n in &sc.not_planned {
            println!("not planned: {n}");
        }
    }
    sc
}

fn cards(dir: &Path) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for r in records(dir) {
        if let Some(g) = printed(&r, "total_gpu_memory_gib").and_then(|t| t.parse::<f64>().ok()) {
            let name = s(&r.doc, "gpu");
            if !name.is_empty() {
                m.entry(name.to_string()).or_insert((g * GIB) as u64);
            }
        }
    }
    m
}

const HEADER: &str = "| set | reports | planned | KV bytes/token exact | weights MAE (within 1 %) | KV memory MAE | KV tokens within 1 / 3 / 5 % | KV tokens MAE |";

/// The fitted reports one by one (what the formulas were fitted on).
#[test]
fn fitted_reports_one_by_one() {
    let base = root().join("tests/fixtures/engine-logs");
    let cards = cards(&base.join("fitted"));
    let sc = score(&base.join("fitted"), &cards, false, true);
    assert!(sc.planned > 0, "no fitted report could be planned");
}

/// The held-out reports one by one (scored, never fitted on).
#[test]
fn held_out_reports_one_by_one() {
    let base = root().join("tests/fixtures/engine-logs");
    let cards = cards(&base.join("fitted"));
    let sc = score(&base.join("held-out"), &cards, false, true);
    assert!(sc.planned > 0, "no held-out report could be planned");
}

/// Both sets' scores, as docs/model-plans.md states them.
#[test]
fn corpus_scores_fitted_and_held_out() {
    let base = root().join("tests/fixtures/engine-logs");
    if !base.join("fitted").is_dir() {
        panic!("tests/fixtures/engine-logs/fitted is missing");
    }
    let cards = cards(&base.join("fitted"));
    let mut table = vec![
        HEADER.to_string(),
        "| --- | --- | --- | --- | --- | --- | --- | --- |".to_string(),
    ];
    for (name, dir, known) in [
        ("fitted, settings known", "fitted", true),
        ("fitted, all", "fitted", false),
        ("held out, settings known", "held-out", true),
        ("held out, all", "held-out", false),
    ] {
        println!("== {name}");
        let sc = score(&base.join(dir), &cards, known, false);
        table.extend(sc.lines(name));
    }
    let table = table.join("\n");
    println!("{table}");
    let doc = std::fs::read_to_string(root().join("docs/model-plans.md")).unwrap();
    assert!(
        doc.contains(&table),
        "docs/model-plans.md must hold the corpus scores as computed:\n{table}"
    );
}

/// Every report sits in the folder its family's line in `HELD_OUT_FAMILIES` puts it in.
#[test]
fn reports_sit_in_the_folder_their_family_decides() {
    let base = root().join("tests/fixtures/engine-logs");
    let list = std::fs::read_to_string(base.join("HELD_OUT_FAMILIES")).unwrap();
    let held: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    for (dir, want_held) in [("fitted", false), ("held-out", true)] {
        for r in records(&base.join(dir)) {
            let family = s(&r.doc, "family");
            assert_eq!(
                held.contains(&family),
                want_held,
                "{}: family {family:?} belongs in {}",
                r.id,
                if want_held { "fitted/" } else { "held-out/" }
            );
        }
    }
}
