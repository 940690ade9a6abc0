//! Hugging Face `config.json` into a [`ModelSpec`], family by family.
//!
//! Each family's reader takes the fields it knows (with the Transformers names) and builds the
//! per-layer caches and the weight groups; any field left over that is not known to be neutral
//! fails the read with its name (`fields::Fields::finish`). Families: dense MHA/GQA (llama,
//! mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3, opt), MoE (mixtral, qwen2_moe,
//! qwen3_moe, gpt_oss), MLA (deepseek_v2, deepseek_v3, kimi_k2), hybrid Mamba/attention
//! (jamba), and vision-language wrappers (llava, mistral3, gemma3, qwen2_vl, qwen2_5_vl) whose
//! towers count as weights.

use std::path::Path;

use serde_json::{Map, Value};

use super::fields::Fields;
use super::weights::{Quant, TensorGroup, TensorKind};
use super::{LayerCache, ModelError, ModelSource, ModelSpec};

/// Reads a model folder: `config.json`, and the checkpoint's safetensors headers (or the
/// index's `total_size`) when they are there.
pub fn read_folder(dir: &Path, name: &str) -> Result<ModelSpec, ModelError> {
    let mut spec = read_file(&dir.join("config.json"), name)?;
    spec.checkpoint_bytes = super::safetensors::checkpoint_bytes(dir)?;
    Ok(spec)
}

/// Reads one `config.json`.
pub fn read_file(path: &Path, name: &str) -> Result<ModelSpec, ModelError> {
    let text = crate::bounded::read_small_text(path, super::JSON_MAX_BYTES)
        .map_err(|e| ModelError::Io(format!("{}: cannot read: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| ModelError::Field {
        place: path.display().to_string(),
        message: format!("not JSON: {e}"),
    })?;
    let Value::Object(obj) = value else {
        return Err(ModelError::Field {
            place: path.display().to_string(),
            message: "not a JSON object".to_string(),
        });
    };
    from_object(
        &obj,
        &path.display().to_string(),
        name,
        ModelSource::Config {
            path: path.to_path_buf(),
        },
    )
}

/// Reads a config object (from a file, the catalogue, or a corpus record).
pub fn from_object(
    obj: &Map<String, Value>,
    place: &str,
    name: &str,
    source: ModelSource,
) -> Result<ModelSpec, ModelError> {
    let f = Fields::new(place.to_string(), obj);
    let model_type = f.opt_str("model_type")?.unwrap_or("").to_string();
    let architecture = f
        .opt_array("architectures")?
        .and_then(|a| a.first())
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let quant = quantization(&f)?;
    let dtype = dtype_of(&f)?;
    let mut spec = match model_type.as_str() {
        "llava" | "mistral3" | "gemma3" | "llava_next" | "llama4" => {
            vision_wrapper(&f, &model_type, &dtype, quant)?
        }
        _ => {
            let text = text_model(&f, &model_type, &architecture)?;
            let mut text = text;
            if matches!(model_type.as_str(), "qwen2_vl" | "qwen2_5_vl") {
                let vision = f
                    .opt_object("vision_config")?
                    .ok_or_else(|| ModelError::Field {
                        place: place.to_string(),
                        message: "vision_config: missing (this family needs it)".to_string(),
                    })?;
                text.tensors.extend(tower(vision, place, text.hidden_size)?);
            }
            f.finish(&model_type)?;
            text
        }
    };
    spec.name = name.to_string();
    spec.source = source;
    spec.architecture = architecture;
    spec.dtype_bytes = dtype_bytes(&dtype).ok_or_else(|| ModelError::Field {
        place: place.to_string(),
        message: format!("torch_dtype: {dtype:?} is not a dtype headroom knows"),
    })?;
    spec.dtype = dtype;
    spec.quant = quant;
    Ok(spec)
}

fn dtype_of(f: &Fields) -> Result<String, ModelError> {
    Ok(f.opt_str("torch_dtype")?
        .or(f.opt_str("dtype")?)
        .unwrap_or("bfloat16")
        .to_string())
}

/// Bytes per value of a `torch_dtype` name.
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    match dtype {
        "bfloat16" | "float16" | "half" | "bf16" | "fp16" => Some(2),
        "float32" | "float" | "fp32" => Some(4),
        "float8_e4m3fn" | "fp8" | "uint8" | "int8" => Some(1),
        _ => None,
    }
}

fn quantization(f: &Fields) -> Result<Quant, ModelError> {
    let Some(q) = f.opt_object("quantization_config")? else {
        return Ok(Quant::None);
    };
    let place = format!("{}: quantization_config", f.place);
    let qf = Fields::new(place.clone(), q);
    let method = qf.opt_str("quant_method")?.unwrap_or("");
    let bits = qf.opt_u64("bits")?.or(qf.opt_u64("w_bit")?).unwrap_or(4);
    let group_size = qf
        .opt_u64("group_size")?
        .or(qf.opt_u64("q_group_size")?)
        .unwrap_or(128);
    let bad = |what: String| ModelError::Field {
        place: place.clone(),
        message: what,
    };
    Ok(match method {
        "awq" => Quant::Awq { bits, group_size },
        "gptq" => Quant::Gptq { bits, group_size },
        "fp8" => {
            let block = match qf.opt_array("weight_block_size")? {
                Some(b) => b.first().and_then(|v| v.as_u64()).unwrap_or(0),
                None => 0,
            };
            Quant::Fp8 { block }
        }
        "bitsandbytes" => {
            if qf.opt_bool("load_in_8bit")?.unwrap_or(false) {
                Quant::BitsAndBytes8
            } else {
                Quant::BitsAndBytes4
            }
        }
        "mxfp4" => Quant::Mxfp4,
        "compressed-tensors" => compressed_tensors(q).map_err(bad)?,
        other => {
            return Err(bad(format!(
                "quant_method {other:?} is not a layout headroom knows (awq, gptq, fp8, \
                 bitsandbytes, mxfp4, compressed-tensors)"
            )));
        }
    })
}

/// compressed-tensors: the first config group's weight bits, type and group size.
fn compressed_tensors(q: &Map<String, Value>) -> Result<Quant, String> {
    let weights = q
        .get("config_groups")
        .and_then(|g| g.as_object())
        .and_then(|g| g.values().next())
        .and_then(|g| g.get("weights"))
        .ok_or("compressed-tensors without config_groups.*.weights")?;
    let bits = weights
        .get("num_bits")
        .and_then(|v| v.as_u64())
        .unwrap_or(8);
    let kind = weights
        .get("type")
        .and_then(|v| v.as_str())
        .unwrap_or("int");
    let group = weights.get("group_size").and_then(|v| v.as_u64());
    let strategy = weights
        .get("strategy")
        .and_then(|v| v.as_str())
        .unwrap_or("tensor");
    let block = weights
        .get("block_structure")
        .and_then(|v| v.as_array())
        .and_then(|b| b.first())
        .and_then(|v| v.as_u64());
    match (bits, kind) {
        (8, "float") => match (strategy, block) {
            ("channel", _) => Ok(Quant::Fp8Channel),
            ("block", Some(block)) => Ok(Quant::Fp8 { block }),
            ("tensor", _) => Ok(Quant::Fp8 { block: 0 }),
            (other, _) => Err(format!(
                "compressed-tensors fp8 weights with strategy {other:?}: not a layout headroom \
                 knows (tensor, channel, block)"
            )),
        },
        (4 | 8, "int") => Ok(Quant::Gptq {
            bits,
            group_size: group.unwrap_or(128),
        }),
        _ => Err(format!(
            "compressed-tensors weights of {bits} bits, type {kind:?}: not a layout headroom knows"
        )),
    }
}

/// The shape of a decoder-only text model, from the fields at this level of the config.
struct Text {
    hidden: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    vocab: u64,
    max_pos: u64,
}

fn common(f: &Fields) -> Result<Text, ModelError> {
    let hidden = f.positive("hidden_size")?;
    let heads = f.positive("num_attention_heads")?;
    let kv_heads = f.opt_u64("num_key_value_heads")?.unwrap_or(heads);
    let head_dim = f.opt_u64("head_dim")?.unwrap_or(hidden / heads);
    Ok(Text {
        hidden,
        layers: f.positive("num_hidden_layers")?,
        heads,
        kv_heads,
        head_dim,
        vocab: f.positive("vocab_size")?,
        max_pos: f.opt_u64("max_position_embeddings")?.unwrap_or(0),
    })
}

fn group(what: &'static str, kind: TensorKind, count: u64, rows: u64, cols: u64) -> TensorGroup {
    TensorGroup {
        what,
        kind,
        count,
        rows,
        cols,
    }
}

/// q, k, v, o of `n` layers, with biases on q, k, v when `qkv_bias` (and on o when `o_bias`).
fn attention(t: &Text, n: u64, qkv_bias: bool, o_bias: bool) -> Vec<TensorGroup> {
    let q = t.heads * t.head_dim;
    let kv = t.kv_heads * t.head_dim;
    let mut g = vec![
        group("q_proj", TensorKind::Column, n, t.hidden, q),
        group(
            "k_proj",
            TensorKind::KvColumn {
                kv_heads: t.kv_heads,
            },
            n,
            t.hidden,
            kv,
        ),
        group(
            "v_proj",
            TensorKind::KvColumn {
                kv_heads: t.kv_heads,
            },
            n,
            t.hidden,
            kv,
        ),
        group("o_proj", TensorKind::Row, n, q, t.hidden),
    ];
    if qkv_bias {
        g.push(group("qkv bias", TensorKind::Replicated, n, 1, q + 2 * kv));
    }
    if o_bias {
        g.push(group("o bias", TensorKind::Replicated, n, 1, t.hidden));
    }
    g
}

fn gated_mlp(hidden: u64, inter: u64, n: u64) -> Vec<TensorGroup> {
    vec![
        group("gate_up_proj", TensorKind::Column, 2 * n, hidden, inter),
        group("down_proj", TensorKind::Row, n, inter, hidden),
    ]
}

fn embeddings(t: &Text, tied: bool) -> Vec<TensorGroup> {
    let mut g = vec![group(
        "embed_tokens",
        TensorKind::Vocab,
        1,
        t.vocab,
        t.hidden,
    )];
    if !tied {
        g.push(group("lm_head", TensorKind::Vocab, 1, t.vocab, t.hidden));
    }
    g
}

fn norms(what: &'static str, count: u64, width: u64) -> TensorGroup {
    group(what, TensorKind::Replicated, count, 1, width)
}

#[allow(clippy::too_many_arguments)]
fn spec_from(
    t: &Text,
    model_type: &str,
    layers: Vec<LayerCache>,
    tensors: Vec<TensorGroup>,
    tied: bool,
    rotary_dim: u64,
    inter: u64,
    experts_per_token: u64,
) -> ModelSpec {
    ModelSpec {
        name: String::new(),
        source: ModelSource::Config {
            path: Default::default(),
        },
        architecture: String::new(),
        model_type: model_type.to_string(),
        dtype_bytes: 2,
        dtype: String::new(),
        hidden_size: t.hidden,
        num_attention_heads: t.heads,
        vocab_size: t.vocab,
        max_position_embeddings: t.max_pos,
        rotary_dim,
        intermediate_size: inter,
        experts_per_token,
        tie_word_embeddings: tied,
        layers,
        quant: Quant::None,
        tensors,
        checkpoint_bytes: None,
        gguf: None,
    }
}

/// `layer_types` (["sliding_attention", "full_attention", …]) when the config lists them.
fn layer_types(f: &Fields, n: u64) -> Result<Option<Vec<bool>>, ModelError> {
    let Some(list) = f.opt_array("layer_types")? else {
        return Ok(None);
    };
    if list.len() as u64 != n {
        return Err(ModelError::Field {
            place: f.place.clone(),
            message: format!(
                "layer_types: {} entries for num_hidden_layers = {n}",
                list.len()
            ),
        });
    }
    list.iter()
        .map(|v| match v.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            other => Err(ModelError::Field {
                place: f.place.clone(),
                message: format!(
                    "layer_types: {other:?} is not sliding_attention or full_attention"
                ),
            }),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn cache_layers(t: &Text, sliding: &[bool], window: u64) -> Vec<LayerCache> {
    sliding
        .iter()
        .map(|s| {
            if *s {
                LayerCache::Sliding {
                    kv_heads: t.kv_heads,
                    head_dim: t.head_dim,
                    window_tokens: window,
                }
            } else {
                LayerCache::Full {
                    kv_heads: t.kv_heads,
                    head_dim: t.head_dim,
                }
            }
        })
        .collect()
}

fn unknown(f: &Fields, model_type: &str, architecture: &str) -> ModelError {
    ModelError::UnknownArchitecture {
        place: f.place.clone(),
        what: format!("model_type = {model_type:?}, architectures = [{architecture:?}]"),
        fields: f.all_shape_fields().join(", "),
    }
}

/// Every text-only family (and Qwen2-VL's text part, which sits at the top level).
fn text_model(f: &Fields, model_type: &str, architecture: &str) -> Result<ModelSpec, ModelError> {
    match model_type {
        "llama" | "mistral" | "qwen2" | "qwen3" | "phi3" | "qwen2_vl" | "qwen2_5_vl" | "gemma"
        | "gemma2" | "gemma3_text" => dense(f, model_type),
        "opt" => opt(f),
        "phi" => phi(f),
        "mixtral" | "qwen2_moe" | "qwen3_moe" => moe(f, model_type),
        "gpt_oss" => gpt_oss(f),
        "deepseek_v2" | "deepseek_v3" | "kimi_k2" => deepseek(f, model_type),
        "jamba" => jamba(f),
        _ => Err(unknown(f, model_type, architecture)),
    }
}

fn dense(f: &Fields, model_type: &str) -> Result<ModelSpec, ModelError> {
    let t = common(f)?;
    let n = t.layers;
    let inter = f.positive("intermediate_size")?;
    let gemma = model_type.starts_with("gemma");
    let tied = f.opt_bool("tie_word_embeddings")?.unwrap_or(gemma);
    let qkv_bias = match model_type {
        "qwen2" | "qwen2_vl" | "qwen2_5_vl" => true,
        _ => f.opt_bool("attention_bias")?.unwrap_or(false),
    };
    let o_bias = f.opt_bool("attention_bias")?.unwrap_or(false) && !model_type.starts_with("qwen2");
    f.take(&[
        "mlp_bias",
        "vision_config",
        "rope_scaling",
        "partial_rotary_factor",
    ]);
    let partial = f.opt_f64("partial_rotary_factor")?.unwrap_or(1.0);
    let window = f.opt_u64("sliding_window")?;
    let use_window = f.opt_bool("use_sliding_window")?;
    // Which layers slide: an explicit list, Gemma 2's every other layer, Gemma 3's pattern, or
    // the whole model when a window is set (Mistral v0.1); Qwen2's window applies only with
    // use_sliding_window.
    let sliding: Vec<bool> = match (layer_types(f, n)?, window) {
        (Some(list), _) => list,
        (None, Some(_)) if model_type == "gemma2" => (0..n).map(|i| i % 2 == 0).collect(),
        (None, Some(_)) if model_type == "gemma3_text" => {
            let p = f.opt_u64("sliding_window_pattern")?.unwrap_or(6).max(1);
            (0..n).map(|i| (i + 1) % p != 0).collect()
        }
        (None, Some(_)) if model_type.starts_with("qwen") && use_window != Some(true) => {
            vec![false; n as usize]
        }
        (None, Some(_)) if model_type == "phi3" => vec![false; n as usize],
        (None, Some(_)) => vec![true; n as usize],
        (None, None) => vec![false; n as usize],
    };
    let mut tensors = embeddings(&t, tied);
    tensors.extend(attention(&t, n, qkv_bias, o_bias));
    tensors.extend(gated_mlp(t.hidden, inter, n));
    let per_layer_norms = if gemma && model_type != "gemma" { 4 } else { 2 };
    tensors.push(norms("layer norms", n * per_layer_norms, t.hidden));
    tensors.push(norms("final norm", 1, t.hidden));
    if model_type == "qwen3" || model_type == "gemma3_text" {
        tensors.push(norms("q_norm, k_norm", 2 * n, t.head_dim));
    }
    let layers = cache_layers(&t, &sliding, window.unwrap_or(0));
    let rotary = (t.head_dim as f64 * partial) as u64;
    Ok(spec_from(
        &t, model_type, layers, tensors, tied, rotary, inter, 0,
    ))
}

fn opt(f: &Fields) -> Result<ModelSpec, ModelError> {
    let t = common(f)?;
    let n = t.layers;
    let ffn = f.positive("ffn_dim")?;
    let proj = f.opt_u64("word_embed_proj_dim")?.unwrap_or(t.hidden);
    f.take(&[
        "init_std",
        "layerdrop",
        "_remove_final_layer_norm",
        "layer_norm_elementwise_affine",
    ]);
    let tied = f.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    let emb = Text {
        hidden: proj,
        ..common(f)?
    };
    let mut tensors = embeddings(&emb, tied);
    // Learned positions: OPT keeps 2 extra rows (its offset).
    tensors.push(group(
        "embed_positions",
        TensorKind::Replicated,
        1,
        t.max_pos + 2,
        t.hidden,
    ));
    if proj != t.hidden {
        tensors.push(group(
            "project_in/out",
            TensorKind::Replicated,
            2,
            proj,
            t.hidden,
        ));
    }
    tensors.extend(attention(&t, n, true, true));
    tensors.push(group("fc1", TensorKind::Column, n, t.hidden, ffn));
    tensors.push(group("fc2", TensorKind::Row, n, ffn, t.hidden));
    tensors.push(norms("fc biases", n, ffn + t.hidden));
    tensors.push(norms("layer norms", 4 * n, t.hidden));
    tensors.push(norms("final norm", 2, t.hidden));
    let layers = cache_layers(&t, &vec![false; n as usize], 0);
    Ok(spec_from(&t, "opt", layers, tensors, tied, 0, ffn, 0))
}

/// Phi-1/1.5/2 (`PhiForCausalLM`): multi-head attention and a plain fc1/fc2 MLP in parallel
/// after one LayerNorm per layer, biases on every linear layer and on the untied LM head,
/// rotary on `partial_rotary_factor` of each head (transformers' `PhiConfig`; vLLM's
/// vllm/model_executor/models/phi.py builds the same tensors).
fn phi(f: &Fields) -> Result<ModelSpec, ModelError> {
    let t = common(f)?;
    let n = t.layers;
    let inter = f.positive("intermediate_size")?;
    let tied = f.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    let partial = f.opt_f64("partial_rotary_factor")?.unwrap_or(0.5);
    if f.opt_bool("qk_layernorm")?.unwrap_or(false) {
        return Err(ModelError::Field {
            place: f.place.clone(),
            message: "qk_layernorm = true: a Phi variant headroom does not read".into(),
        });
    }
    let mut tensors = embeddings(&t, tied);
    if !tied {
        tensors.push(norms("lm_head bias", 1, t.vocab));
    }
    tensors.extend(attention(&t, n, true, true));
    tensors.push(group("fc1", TensorKind::Column, n, t.hidden, inter));
    tensors.push(group("fc2", TensorKind::Row, n, inter, t.hidden));
    tensors.push(norms("fc biases", n, inter + t.hidden));
    // LayerNorm weight and bias: one per layer, and the final one.
    tensors.push(norms("layer norms", 2 * n, t.hidden));
    tensors.push(norms("final norm", 2, t.hidden));
    let layers = cache_layers(&t, &vec![false; n as usize], 0);
    let rotary = (t.head_dim as f64 * partial) as u64;
    Ok(spec_from(
        &t, "phi", layers, tensors, tied, rotary, inter, 0,
    ))
}

fn moe(f: &Fields, model_type: &str) -> Result<ModelSpec, ModelError> {
    let t = common(f)?;
    let n = t.layers;
    let tied = f.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    let experts = match model_type {
        "mixtral" => f.positive("num_local_experts")?,
        _ => f.positive("num_experts")?,
    };
    let top_k = f.positive("num_experts_per_tok")?;
    let expert_inter = match model_type {
        "mixtral" => f.positive("intermediate_size")?,
        _ => {
            f.take(&["intermediate_size"]);
            f.positive("moe_intermediate_size")?
        }
    };
    let dense_inter = f.opt_u64("intermediate_size")?.unwrap_or(expert_inter);
    let sparse_step = f.opt_u64("decoder_sparse_step")?.unwrap_or(1).max(1);
    let mlp_only: Vec<u64> = f
        .opt_array("mlp_only_layers")?
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default();
    let moe_layers = (0..n)
        .filter(|i| !mlp_only.contains(i) && (i + 1) % sparse_step == 0)
        .count() as u64;
    let window = f.opt_u64("sliding_window")?;
    let use_window = f.opt_bool("use_sliding_window")?;
    f.take(&["shared_expert_intermediate_size", "max_window_layers"]);
    let qkv_bias = model_type == "qwen2_moe" || f.opt_bool("attention_bias")?.unwrap_or(false);
    let mut tensors = embeddings(&t, tied);
    tensors.extend(attention(&t, n, qkv_bias, false));
    tensors.push(group(
        "experts gate_up",
        TensorKind::Expert,
        2 * moe_layers * experts,
        t.hidden,
        expert_inter,
    ));
    tensors.push(group(
        "experts down",
        TensorKind::Expert,
        moe_layers * experts,
        t.hidden,
        expert_inter,
    ));
    tensors.push(group(
        "router",
        TensorKind::Replicated,
        moe_layers,
        t.hidden,
        experts,
    ));
    if n > moe_layers {
        tensors.extend(gated_mlp(t.hidden, dense_inter, n - moe_layers));
    }
    if let Some(shared) = f
        .opt_u64("shared_expert_intermediate_size")?
        .filter(|s| *s > 0)
    {
        tensors.extend(gated_mlp(t.hidden, shared, moe_layers));
        tensors.push(group(
            "shared_expert_gate",
            TensorKind::Replicated,
            moe_layers,
            t.hidden,
            1,
        ));
    }
    tensors.push(norms("layer norms", 2 * n, t.hidden));
    tensors.push(norms("final norm", 1, t.hidden));
    if model_type == "qwen3_moe" {
        tensors.push(norms("q_norm, k_norm", 2 * n, t.head_dim));
    }
    let slide = window.is_some() && (model_type == "mixtral" || use_window == Some(true));
    let layers = cache_layers(&t, &vec![slide; n as usize], window.unwrap_or(0));
    Ok(spec_from(
        &t,
        model_type,
        layers,
        tensors,
        tied,
        t.head_dim,
        expert_inter,
        top_k,
    ))
}

fn gpt_oss(f: &Fields) -> Result<ModelSpec, ModelError> {
    let t = common(f)?;
    let n = t.layers;
    let experts = f.positive("num_local_experts")?;
    let top_k = f
        .opt_u64("num_experts_per_tok")?
        .or(f.opt_u64("experts_per_token")?)
        .unwrap_or(4);
    let inter = f.positive("intermediate_size")?;
    let window = f.positive("sliding_window")?;
    let tied = f.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    f.take(&["attention_bias"]);
    let sliding = layer_types(f, n)?.unwrap_or_else(|| (0..n).map(|i| i % 2 == 0).collect());
    let mut tensors = embeddings(&t, tied);
    tensors.extend(attention(&t, n, true, true));
    tensors.push(group("sinks", TensorKind::Replicated, n, 1, t.heads));
    tensors.push(group(
        "experts gate_up",
        TensorKind::Expert,
        2 * n * experts,
        t.hidden,
        inter,
    ));
    tensors.push(group(
        "experts down",
        TensorKind::Expert,
        n * experts,
        t.hidden,
        inter,
    ));
    tensors.push(group(
        "expert biases",
        TensorKind::Replicated,
        n * experts,
        1,
        2 * inter + t.hidden,
    ));
    tensors.push(group(
        "router",
        TensorKind::Replicated,
        n,
        t.hidden + 1,
        experts,
    ));
    tensors.push(norms("layer norms", 2 * n, t.hidden));
    tensors.push(norms("final norm", 1, t.hidden));
    let layers = cache_layers(&t, &sliding, window);
    Ok(spec_from(
        &t, "gpt_oss", layers, tensors, tied, t.head_dim, inter, top_k,
    ))
}

fn deepseek(f: &Fields, model_type: &str) -> Result<ModelSpec, ModelError> {
    let hidden = f.positive("hidden_size")?;
    let heads = f.positive("num_attention_heads")?;
    f.take(&["num_key_value_heads", "head_dim"]);
    let n = f.positive("num_hidden_layers")?;
    let vocab = f.positive("vocab_size")?;
    let max_pos = f.opt_u64("max_position_embeddings")?.unwrap_or(0);
    let kv_lora = f.positive("kv_lora_rank")?;
    let q_lora = f.opt_u64("q_lora_rank")?;
    let nope = f.positive("qk_nope_head_dim")?;
    let rope = f.positive("qk_rope_head_dim")?;
    let v_dim = f.positive("v_head_dim")?;
    let experts = f.opt_u64("n_routed_experts")?.unwrap_or(0);
    let shared = f.opt_u64("n_shared_experts")?.unwrap_or(0);
    let top_k = f.opt_u64("num_experts_per_tok")?.unwrap_or(0);
    let moe_inter = f.opt_u64("moe_intermediate_size")?.unwrap_or(0);
    let dense_inter = f.positive("intermediate_size")?;
    let first_dense = f.opt_u64("first_k_dense_replace")?.unwrap_or(0).min(n);
    let freq = f.opt_u64("moe_layer_freq")?.unwrap_or(1).max(1);
    let tied = f.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    // The multi-token-prediction layers are in the checkpoint but engines load them only for
    // speculative decoding.
    f.take(&["num_nextn_predict_layers", "attention_bias"]);
    let t = Text {
        hidden,
        layers: n,
        heads,
        kv_heads: 1,
        head_dim: nope + rope,
        vocab,
        max_pos,
    };
    let moe_layers = if experts == 0 {
        0
    } else {
        (first_dense..n).filter(|i| i % freq == 0).count() as u64
    };
    let q_head = nope + rope;
    let mut tensors = embeddings(&t, tied);
    match q_lora {
        Some(r) if r > 0 => {
            tensors.push(group("q_a_proj", TensorKind::Replicated, n, hidden, r));
            tensors.push(norms("q_a_layernorm", n, r));
            tensors.push(group("q_b_proj", TensorKind::Column, n, r, heads * q_head));
        }
        _ => tensors.push(group(
            "q_proj",
            TensorKind::Column,
            n,
            hidden,
            heads * q_head,
        )),
    }
    tensors.push(group(
        "kv_a_proj_with_mqa",
        TensorKind::Replicated,
        n,
        hidden,
        kv_lora + rope,
    ));
    tensors.push(norms("kv_a_layernorm", n, kv_lora));
    tensors.push(group(
        "kv_b_proj",
        TensorKind::Column,
        n,
        kv_lora,
        heads * (nope + v_dim),
    ));
    tensors.push(group("o_proj", TensorKind::Row, n, heads * v_dim, hidden));
    if moe_layers > 0 {
        tensors.push(group(
            "experts gate_up",
            TensorKind::Expert,
            2 * moe_layers * experts,
            hidden,
            moe_inter,
        ));
        tensors.push(group(
            "experts down",
            TensorKind::Expert,
            moe_layers * experts,
            hidden,
            moe_inter,
        ));
        tensors.push(group(
            "router",
            TensorKind::Replicated,
            moe_layers,
            hidden,
            experts,
        ));
        if model_type != "deepseek_v2" {
            tensors.push(norms("e_score_correction_bias", moe_layers * 2, experts));
        }
        if shared > 0 {
            tensors.extend(gated_mlp(hidden, moe_inter * shared, moe_layers));
        }
    }
    if n > moe_layers {
        tensors.extend(gated_mlp(hidden, dense_inter, n - moe_layers));
    }
    tensors.push(norms("layer norms", 2 * n, hidden));
    tensors.push(norms("final norm", 1, hidden));
    let layers = vec![
        LayerCache::Latent {
            kv_lora_rank: kv_lora,
            rope_head_dim: rope,
        };
        n as usize
    ];
    let inter = if moe_layers > 0 {
        moe_inter
    } else {
        dense_inter
    };
    Ok(spec_from(
        &t, model_type, layers, tensors, tied, rope, inter, top_k,
    ))
}

fn jamba(f: &Fields) -> Result<ModelSpec, ModelError> {
    let t = common(f)?;
    let n = t.layers;
    let inter = f.positive("intermediate_size")?;
    let a_period = f.positive("attn_layer_period")?;
    let a_offset = f.u64("attn_layer_offset")?;
    let e_period = f.positive("expert_layer_period")?;
    let e_offset = f.u64("expert_layer_offset")?;
    let experts = f.opt_u64("num_experts")?.unwrap_or(1);
    let top_k = f.opt_u64("num_experts_per_tok")?.unwrap_or(1);
    let d_state = f.positive("mamba_d_state")?;
    let d_conv = f.positive("mamba_d_conv")?;
    let expand = f.positive("mamba_expand")?;
    let dt_rank = f.opt_u64("mamba_dt_rank")?.unwrap_or(t.hidden.div_ceil(16));
    let tied = f.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    f.take(&["sliding_window", "calc_logits_for_entire_prompt"]);
    let inner = expand * t.hidden;
    let attn: Vec<bool> = (0..n).map(|i| i % a_period == a_offset).collect();
    let moe: Vec<bool> = (0..n)
        .map(|i| experts > 1 && i % e_period == e_offset)
        .collect();
    let n_attn = attn.iter().filter(|a| **a).count() as u64;
    let n_mamba = n - n_attn;
    let n_moe = moe.iter().filter(|m| **m).count() as u64;
    let mut tensors = embeddings(&t, tied);
    tensors.extend(attention(&t, n_attn, false, false));
    tensors.push(group(
        "mamba in_proj",
        TensorKind::Column,
        n_mamba,
        t.hidden,
        2 * inner,
    ));
    tensors.push(group(
        "mamba conv1d",
        TensorKind::Replicated,
        n_mamba,
        inner,
        d_conv,
    ));
    tensors.push(group(
        "mamba x_proj",
        TensorKind::Replicated,
        n_mamba,
        inner,
        dt_rank + 2 * d_state,
    ));
    tensors.push(group(
        "mamba dt_proj",
        TensorKind::Replicated,
        n_mamba,
        dt_rank + 1,
        inner,
    ));
    tensors.push(group(
        "mamba A_log, D",
        TensorKind::Replicated,
        n_mamba,
        inner,
        d_state + 1,
    ));
    tensors.push(group(
        "mamba out_proj",
        TensorKind::Row,
        n_mamba,
        inner,
        t.hidden,
    ));
    tensors.push(norms("mamba dt/b/c norms", n_mamba, dt_rank + 2 * d_state));
    tensors.push(group(
        "experts gate_up",
        TensorKind::Expert,
        2 * n_moe * experts,
        t.hidden,
        inter,
    ));
    tensors.push(group(
        "experts down",
        TensorKind::Expert,
        n_moe * experts,
        t.hidden,
        inter,
    ));
    tensors.push(group(
        "router",
        TensorKind::Replicated,
        n_moe,
        t.hidden,
        experts,
    ));
    tensors.extend(gated_mlp(t.hidden, inter, n - n_moe));
    tensors.push(norms("layer norms", 2 * n, t.hidden));
    tensors.push(norms("final norm", 1, t.hidden));
    let state = inner * (d_conv - 1) + inner * d_state;
    let layers = attn
        .iter()
        .map(|a| {
            if *a {
                LayerCache::Full {
                    kv_heads: t.kv_heads,
                    head_dim: t.head_dim,
                }
            } else {
                LayerCache::State {
                    state_elements: state,
                }
            }
        })
        .collect();
    Ok(spec_from(
        &t, "jamba", layers, tensors, tied, 0, inter, top_k,
    ))
}

/// A vision tower's weights from its `vision_config` (an estimate from the shape: blocks of
/// attention and MLP, patch embedding, projector into the text model's width).
fn tower(
    v: &Map<String, Value>,
    place: &str,
    text_hidden: u64,
) -> Result<Vec<TensorGroup>, ModelError> {
    let vf = Fields::new(format!("{place}: vision_config"), v);
    let h = vf
        .opt_u64("hidden_size")?
        .or(vf.opt_u64("embed_dim")?)
        .ok_or_else(|| ModelError::Field {
            place: vf.place.clone(),
            message: "hidden_size: missing (the tower's width)".to_string(),
        })?;
    let depth = vf
        .opt_u64("num_hidden_layers")?
        .or(vf.opt_u64("depth")?)
        .ok_or_else(|| ModelError::Field {
            place: vf.place.clone(),
            message: "num_hidden_layers (or depth): missing".to_string(),
        })?;
    let inter = vf.opt_u64("intermediate_size")?.unwrap_or(4 * h);
    let patch = vf.opt_u64("patch_size")?.unwrap_or(14);
    let temporal = vf.opt_u64("temporal_patch_size")?.unwrap_or(1);
    let channels = vf
        .opt_u64("in_channels")?
        .or(vf.opt_u64("num_channels")?)
        .unwrap_or(3);
    let out = vf.opt_u64("out_hidden_size")?.unwrap_or(text_hidden);
    let gated = vf.opt_str("hidden_act")? == Some("silu");
    let mlp_mats = if gated { 3 } else { 2 };
    Ok(vec![
        group("vision attention", TensorKind::Tower, depth, h, 4 * h + 4),
        group("vision mlp", TensorKind::Tower, depth * mlp_mats, h, inter),
        group("vision norms", TensorKind::Tower, depth, 1, 4 * h + inter),
        group(
            "vision patch embed",
            TensorKind::Tower,
            1,
            channels * temporal * patch * patch,
            h,
        ),
        group("projector", TensorKind::Tower, 1, 4 * h, 4 * h + out),
    ])
}

/// Llava-style wrappers: `text_config` holds the language model, `vision_config` the tower.
fn vision_wrapper(
    f: &Fields,
    model_type: &str,
    dtype: &str,
    quant: Quant,
) -> Result<ModelSpec, ModelError> {
    let text = f
        .opt_object("text_config")?
        .ok_or_else(|| ModelError::Field {
            place: f.place.clone(),
            message:
                "text_config: missing (a vision-language model keeps its language model there)"
                    .to_string(),
        })?;
    let vision = f
        .opt_object("vision_config")?
        .ok_or_else(|| ModelError::Field {
            place: f.place.clone(),
            message: "vision_config: missing".to_string(),
        })?;
    f.take(&[
        "multimodal_projector_bias",
        "spatial_merge_size",
        "tie_word_embeddings",
    ]);
    f.finish(model_type)?;
    let tf = Fields::new(format!("{}: text_config", f.place), text);
    let text_type = tf.opt_str("model_type")?.unwrap_or("llama").to_string();
    tf.take(&["torch_dtype", "dtype"]);
    let _ = (dtype, quant);
    let mut spec = text_model(&tf, &text_type, "")?;
    tf.finish(&text_type)?;
    spec.tensors
        .extend(tower(vision, &f.place, spec.hidden_size)?);
    spec.model_type = model_type.to_string();
    Ok(spec)
}

#[cfg(test)]
mod tests;
