//! `headroom plan --model M --engine E [-- ENGINE FLAGS]`: the engine's start-up arithmetic
//! for a model on a card, in the engine's words (or one JSON document).

use serde::Serialize;

use crate::cli::DeviceArgs;
use crate::device::profile::SimProfile;
use crate::device::select;
use crate::model::{self, ModelSpec};
use crate::plan::args::ModelInputs;
use crate::plan::engine::targets::{self, Target, Targets};
use crate::plan::engine::{self, Engine, EnginePlan, EngineSettings, words};

/// `headroom plan --model … --json`.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct ModelPlanJson<'a> {
    format_version: u32,
    /// The model as read (layers, weight groups, quantization, where it came from).
    model: ModelSummary<'a>,
    /// Where the card's total came from: `--capacity`, a profile's name, or the device.
    card: String,
    /// Every figure per GPU, in raw bytes.
    plan: &'a EnginePlan,
    /// The flags that would hold the target.
    targets: &'a Targets,
    /// The lines the engine will print at start-up.
    engine_lines: Vec<String>,
}

#[derive(Serialize, schemars::JsonSchema)]
struct ModelSummary<'a> {
    name: &'a str,
    source: &'a model::ModelSource,
    architecture: &'a str,
    model_type: &'a str,
    parameters: u64,
    checkpoint_bytes: Option<u64>,
    quant: model::Quant,
    layers: usize,
    attention_layers: usize,
}

/// The card's CUDA-visible total and name: `--capacity`, else a `--profile` read without
/// opening a device, else the device itself.
fn card(dev: &DeviceArgs, capacity: Option<u64>) -> anyhow::Result<(u64, Option<String>, String)> {
    if let Some(c) = capacity {
        return Ok((c, None, "--capacity".to_string()));
    }
    if let Some(p) = &dev.profile {
        if let Ok(profile) = SimProfile::resolve(p) {
            return Ok((
                profile.memory.total_bytes.0,
                Some(profile.gpu_name.clone()),
                format!("profile {}", profile.name),
            ));
        }
    }
    let opened = select::open_noted(dev.request(), dev.one_gpu("plan")?)?;
    let info = opened.device.info().clone();
    Ok((
        info.total_bytes,
        Some(info.name.clone()),
        format!("device {}", info.name),
    ))
}

pub fn list_models() -> anyhow::Result<i32> {
    for e in model::catalogue::entries() {
        crate::outln!("{}\t{}", e.id, e.config_source)?;
    }
    Ok(0)
}

/// Reads the model, the engine and its flags; exit 2 on any of them named.
pub fn resolve(m: &ModelInputs) -> anyhow::Result<(ModelSpec, Engine, EngineSettings)> {
    let name = m.model.as_deref().expect("--model given");
    let spec = model::load(name)?;
    let engine: Engine = m.engine.parse().map_err(anyhow::Error::msg)?;
    let settings = EngineSettings::from_args(engine.kind, &m.engine_args)?;
    Ok((spec, engine, settings))
}

pub fn plan(
    dev: &DeviceArgs,
    m: &ModelInputs,
    capacity: Option<u64>,
    json: bool,
) -> anyhow::Result<i32> {
    let (spec, engine, mut settings) = resolve(m)?;
    let (total, gpu_name, card_words) = card(dev, capacity)?;
    settings.device_name = gpu_name;
    let p = engine::plan(&spec, engine, &settings, total).map_err(anyhow::Error::msg)?;
    let target = Target {
        concurrency: m.concurrency.max(1),
        request_tokens: m.request_tokens.unwrap_or(p.max_model_len),
    };
    let t = targets::targets(&spec, engine, &settings, &p, target);
    if json {
        let j = ModelPlanJson {
            format_version: crate::plan::validate::FORMAT_VERSION,
            model: ModelSummary {
                name: &spec.name,
                source: &spec.source,
                architecture: &spec.architecture,
                model_type: &spec.model_type,
                parameters: spec.parameter_count(),
                checkpoint_bytes: spec.checkpoint_bytes,
                quant: spec.quant,
                layers: spec.layers.len(),
                attention_layers: spec.attention_layers(),
            },
            card: card_words,
            plan: &p,
            targets: &t,
            engine_lines: words::engine_lines(&p),
        };
        crate::outln!("{}", serde_json::to_string_pretty(&j)?)?;
    } else {
        crate::out!("{}", words::text(&p, &t))?;
    }
    Ok(if p.failure.is_some() { 1 } else { 0 })
}
