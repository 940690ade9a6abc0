//! `headroom validate --engine vllm -- vllm serve MODEL …`: the real engine run under `watch`,
//! its start-up lines read as they pass, and three columns printed: headroom's prediction
//! (from the model and the flags on the command line), the engine's own figures, and the true
//! device peak `watch` measured.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use serde::Serialize;

use crate::cli::DeviceArgs;
use crate::model;
use crate::outdir;
use crate::plan::engine::{self, Engine, EnginePlan, EngineSettings};
use crate::record::View;
use crate::units::{GIB, utc_folder_stamp};
use crate::watch::{Target, WatchOptions};

/// The engine's start-up figures, by the words that introduce them (every release's wording
/// that headroom knows): (key, text before the figure).
const MARKERS: &[(&str, &str)] = &[
    ("weights_gib", "Model loading took "),
    ("weights_gib", "Loading model weights took "),
    ("weights_gib", "model weights take "),
    ("non_torch_gib", "non_torch_memory takes "),
    (
        "activation_peak_gib",
        "PyTorch activation peak memory takes ",
    ),
    (
        "kv_cache_gib",
        "the rest of the memory reserved for KV Cache is ",
    ),
    ("kv_cache_gib", "Available KV cache memory: "),
    ("kv_cache_tokens", "GPU KV cache size: "),
    ("gpu_blocks", "# GPU blocks: "),
    ("gpu_blocks", "# cuda blocks: "),
    ("max_concurrency", "tokens per request: "),
    ("kv_cache_tokens", "KV Cache is allocated. #tokens: "),
    ("kv_cache_tokens", "max_total_num_tokens="),
];

/// The figures found in `text`: the last one printed for each key, as printed.
pub fn engine_figures(text: &str) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        for (key, marker) in MARKERS {
            if let Some(at) = line.find(marker) {
                let rest = &line[at + marker.len()..];
                let figure: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',' || *c == '-')
                    .filter(|c| *c != ',')
                    .collect();
                if !figure.is_empty() {
                    out.insert(*key, figure.trim_end_matches('.').to_string());
                }
            }
        }
    }
    out
}

/// The model and the engine's flags from its command line: `… serve MODEL --flags` or
/// `… --model MODEL --flags`.
pub fn model_and_flags(cmd: &[String]) -> Option<(String, Vec<String>)> {
    if let Some(i) = cmd.iter().position(|a| a == "serve") {
        let model = cmd.get(i + 1).filter(|m| !m.starts_with('-'))?.clone();
        return Some((model, cmd[i + 2..].to_vec()));
    }
    let i = cmd
        .iter()
        .position(|a| a == "--model" || a == "--model-path")?;
    let model = cmd.get(i + 1)?.clone();
    let mut flags: Vec<String> = cmd[..i]
        .iter()
        .skip_while(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    flags.extend(cmd[i + 2..].iter().cloned());
    Some((model, flags))
}

/// One row: headroom's prediction, the engine's figure, the device's true peak.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Row {
    pub figure: &'static str,
    pub predicted: Option<String>,
    pub engine: Option<String>,
    pub measured: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EngineCheck {
    pub rows: Vec<Row>,
    /// Why there is no prediction, when there is none.
    pub prediction_note: Option<String>,
    pub job_exit_code: i32,
    pub watch_dir: String,
}

fn gib(b: i64) -> String {
    format!("{:.2}", b as f64 / GIB as f64)
}

fn predict(engine: Engine, cmd: &[String], total: u64, device: &str) -> Result<EnginePlan, String> {
    let (name, flags) = model_and_flags(cmd)
        .ok_or("no model on the command line (… serve MODEL or --model MODEL)")?;
    let spec = model::load(&name).map_err(|e| e.to_string())?;
    let known: Vec<String> = keep_known(engine, &flags);
    let mut s = EngineSettings::from_args(engine.kind, &known).map_err(|e| e.to_string())?;
    s.device_name = Some(device.to_string());
    engine::plan(&spec, engine, &s, total)
}

/// The flags the plan reads, each with its value; the rest of the command line is the
/// engine's business.
fn keep_known(engine: Engine, flags: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < flags.len() {
        let f = &flags[i];
        let has_value = flags.get(i + 1).is_some_and(|n| !n.starts_with("--")) && !f.contains('=');
        let pair: Vec<String> = if has_value {
            vec![f.clone(), flags[i + 1].clone()]
        } else {
            vec![f.clone()]
        };
        if f.starts_with('-') && EngineSettings::from_args(engine.kind, &pair).is_ok() {
            out.extend(pair.iter().cloned());
        }
        i += if has_value { 2 } else { 1 };
    }
    out
}

pub fn validate(
    dev: &DeviceArgs,
    engine_arg: &str,
    cmd: &[String],
    out: Option<&Path>,
    results: &Path,
    json: bool,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    let engine: Engine = engine_arg.parse().map_err(anyhow::Error::msg)?;
    let dir = outdir::create(
        out,
        results,
        &utc_folder_stamp(SystemTime::now()),
        &format!("validate-{}-run", engine.kind.name()),
    )?;
    let log = dir.join("engine.log");
    // The job's output passes through and is kept: `tee` copies it into engine.log.
    let mut wrapped: Vec<OsString> = vec![
        "bash".into(),
        "-c".into(),
        "set -o pipefail; \"${@:2}\" 2>&1 | tee \"$1\"".into(),
        "headroom-engine".into(),
        log.clone().into(),
    ];
    wrapped.extend(cmd.iter().map(OsString::from));
    let opts = WatchOptions {
        target: Target::Launch(wrapped),
        interval_ns: 1_000_000,
        process_interval_ns: None,
        duration_ns: None,
        out_dir: Some(dir.join("watch")),
        results_root: dir.clone(),
        cuda_info: false,
        sim_script: None,
        job_stdout_to_stderr: json,
        job_env: Vec::new(),
        keep_orphans: false,
        on_record: super::watch::arm_watchdog_record,
    };
    let report = crate::watch::watch(dev, &opts, &interrupted)?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let figures = engine_figures(&text);
    let total = report.summary.device().total_bytes;
    let prediction = predict(engine, cmd, total, &report.summary.device().name);
    let device_peak = report
        .summary
        .peaks()
        .run
        .get(View::DeviceUsed.key())
        .map(|p| p.bytes);
    let p = prediction.as_ref().ok();
    let row = |figure: &'static str, predicted: Option<String>, measured: Option<String>| Row {
        figure,
        predicted,
        engine: figures.get(figure).cloned(),
        measured,
    };
    let rows = vec![
        row("weights_gib", p.map(|p| gib(p.weights_bytes as i64)), None),
        row(
            "non_torch_gib",
            p.map(|p| gib(p.non_torch_bytes as i64)),
            None,
        ),
        row(
            "activation_peak_gib",
            p.map(|p| gib(p.activation_peak_bytes as i64)),
            None,
        ),
        row("kv_cache_gib", p.map(|p| gib(p.kv_cache_bytes)), None),
        row(
            "kv_cache_tokens",
            p.map(|p| p.kv_cache_tokens.to_string()),
            None,
        ),
        row("gpu_blocks", p.map(|p| p.gpu_blocks.to_string()), None),
        row(
            "max_concurrency",
            p.map(|p| format!("{:.2}", p.max_concurrency)),
            None,
        ),
        Row {
            figure: "device_peak_gib",
            predicted: p.map(|p| gib(p.peak_bytes as i64)),
            engine: None,
            measured: device_peak.map(|b| gib(b as i64)),
        },
    ];
    let check = EngineCheck {
        rows,
        prediction_note: prediction.err(),
        job_exit_code: report.exit_code,
        watch_dir: report.dir.display().to_string(),
    };
    let path = dir.join("engine-check.json");
    std::fs::write(&path, serde_json::to_string_pretty(&check)? + "\n")?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&check)?)?;
    } else {
        crate::out!("{}", table(&check))?;
    }
    Ok(report.exit_code)
}

fn table(c: &EngineCheck) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".into());
    let _ = writeln!(
        s,
        "\n{:<22} {:>14} {:>14} {:>14}",
        "", "headroom", "engine", "device peak"
    );
    for r in &c.rows {
        if r.predicted.is_none() && r.engine.is_none() && r.measured.is_none() {
            continue;
        }
        let _ = writeln!(
            s,
            "{:<22} {:>14} {:>14} {:>14}",
            r.figure,
            dash(&r.predicted),
            dash(&r.engine),
            dash(&r.measured)
        );
    }
    if let Some(n) = &c.prediction_note {
        let _ = writeln!(s, "no prediction: {n}");
    }
    let _ = writeln!(s, "watch folder: {}", c.watch_dir);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_in_each_release_s_words() {
        let f = engine_figures(
            "INFO 12-01 10:00:00 [gpu_model_runner.py:2000] Model loading took 14.99 GiB and 4.1 seconds\n\
             INFO 12-01 10:00:09 [gpu_worker.py:298] Available KV cache memory: 51.38 GiB\n\
             INFO 12-01 10:00:09 [kv_cache_utils.py:1087] GPU KV cache size: 420,928 tokens\n\
             INFO 12-01 10:00:09 [kv_cache_utils.py:1091] Maximum concurrency for 16,000 tokens per request: 26.31x\n",
        );
        assert_eq!(f["weights_gib"], "14.99");
        assert_eq!(f["kv_cache_gib"], "51.38");
        assert_eq!(f["kv_cache_tokens"], "420928");
        assert_eq!(f["max_concurrency"], "26.31");
    }

    #[test]
    fn the_model_and_flags_come_from_the_command_line() {
        let cmd: Vec<String> = [
            "vllm",
            "serve",
            "Qwen/Qwen2.5-7B-Instruct",
            "--max-model-len",
            "8192",
            "--port",
            "8000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (m, flags) = model_and_flags(&cmd).unwrap();
        assert_eq!(m, "Qwen/Qwen2.5-7B-Instruct");
        let engine: Engine = "vllm".parse().unwrap();
        assert_eq!(
            keep_known(engine, &flags),
            ["--max-model-len", "8192", "--port", "8000"]
        );
    }
}
