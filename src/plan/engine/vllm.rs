//! vLLM's start-up arithmetic, by release era.
//!
//! - before 0.6.4 (V0, `vllm/worker/worker.py` `determine_num_available_blocks`): the KV cache
//!   is `total × utilization − peak`, the peak being what the profile run left in use
//!   (weights, activation, non-torch); blocks are `kv // (block_size × Σ per-token bytes)`
//!   (`vllm/worker/cache_engine.py` `get_cache_block_size`);
//! - 0.6.4 up to 0.8 (V0 with `memory_profiling`, `vllm/utils.py`): `total × utilization −
//!   weights − non_torch − activation peak`, the same blocks;
//! - 0.8 on (V1, `vllm/v1/worker/gpu_worker.py` `determine_available_memory`, `vllm/v1/core/
//!   kv_cache_utils.py`): the same budget, blocks per KV cache group, tokens and maximum
//!   concurrency as `kv_cache_utils.py` reports them; from 0.11 the sampler's profile run keeps
//!   more of the vocabulary-wide buffers, and from 0.19 its peak stands apart from the forward
//!   pass's (fitted, [`profile_rules`]).
//!
//! Weights are exact from the checkpoint or the config (plus the rotary cos/sin cache of
//! `max_position_embeddings × rotary_dim` values); the activation peak, non-torch memory and
//! CUDA-graph pool are estimates whose constants were fitted on the corpus's fitted logs
//! (tests/fixtures/engine-logs/fitted) and are listed in docs/model-plans.md.

use super::kv::{self, Groups};
use super::{EngineKind, EnginePlan, EngineSettings, Failure, Term, Version};
use crate::model::weights::{ExpertPadding, bytes_per_rank_padded};
use crate::model::{ModelSpec, Quant};
use crate::units::{GIB, MIB};

/// The newest release whose rules headroom follows (the default of `--engine vllm`).
pub const NEWEST: Version = Version(0, 19, 0);

/// Non-torch memory (cuBLAS workspaces, the CUDA runtime's own allocations after the
/// baseline) at TP 1: 0.13–0.14 GiB printed by 0.11 on H100 (corpus vllm-0016..0026).
const NON_TORCH_TP1_BYTES: u64 = 140 * MIB;
/// V0's non-torch memory at TP 1: 0.35 GiB on an RTX 3090 (0.6.4, vllm-0001), 0.10 on an
/// A100 (0.6.6, vllm-0049), 0.30 at TP 2 on L40S (0.7.2, vllm-0014); the profiled-peak
/// releases before 0.6.4 count the same memory inside their peak.
const NON_TORCH_V0_BYTES: u64 = 256 * MIB;
/// Added at TP ≥ 2 (NCCL and custom all-reduce buffers): 0.55 − 0.13 GiB (vllm-0018).
const NON_TORCH_TP_EXTRA_BYTES: u64 = 430 * MIB;
/// Graph memory per captured batch size and layer (about 0.5 GiB for 67 sizes of a 28-layer
/// model, vllm-0028/0029).
const GRAPH_BYTES_PER_SIZE_LAYER: u64 = 272 * 1024;

/// Which rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// V0 before 0.6.4: the profile's peak as one figure.
    V0Peak,
    /// V0 from 0.6.4: weights, non-torch and activation apart.
    V0Profiled,
    /// V1 (0.8 on).
    V1,
}

pub fn era(v: Version) -> Era {
    if v < Version(0, 6, 4) {
        Era::V0Peak
    } else if v < Version(0, 8, 0) {
        Era::V0Profiled
    } else {
        Era::V1
    }
}

/// KV dtype bytes: `auto` is the model's dtype; fp8 variants one byte.
pub fn kv_dtype_bytes(setting: Option<&str>, model_dtype_bytes: u64) -> Result<u64, String> {
    match setting.unwrap_or("auto") {
        "auto" | "bfloat16" | "float16" | "half" => Ok(model_dtype_bytes),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "fp8_inc" | "fp8_ds_mla" => Ok(1),
        "float32" => Ok(4),
        other => Err(format!(
            "--kv-cache-dtype {other}: not a KV dtype headroom knows"
        )),
    }
}

/// The engine's compute dtype bytes: `--dtype`, else the checkpoint's (float32 checkpoints
/// run in 16 bits, as vLLM's `auto` does).
pub fn compute_dtype_bytes(setting: Option<&str>, model: &ModelSpec) -> Result<u64, String> {
    match setting.unwrap_or("auto") {
        "auto" => Ok(model.dtype_bytes.min(2)),
        "bfloat16" | "float16" | "half" | "bf16" | "fp16" => Ok(2),
        "float32" | "float" => Ok(4),
        other => Err(format!("--dtype {other}: not a dtype headroom knows")),
    }
}

/// The quantization the engine loads with: the checkpoint's, or `--quantization fp8` on an
/// unquantized checkpoint (weights cast to fp8 on load).
pub fn effective_quant(model: &ModelSpec, setting: Option<&str>) -> Quant {
    match (model.quant, setting) {
        (Quant::None, Some("fp8")) => Quant::Fp8 { block: 0 },
        (q, _) => q,
    }
}

/// The weights one rank holds, and whether they came from the checkpoint's own size. `pad` is
/// how the MoE kernel pads mxfp4 experts on this card ([`mxfp4_expert_padding`]); a
/// checkpoint's own bytes are the unpadded layout, shared out as the padded one is.
pub fn weights_per_rank(
    model: &ModelSpec,
    tp: u64,
    dtype_bytes: u64,
    quant: Quant,
    pad: ExpertPadding,
) -> (u64, bool) {
    let computed = bytes_per_rank_padded(&model.tensors, quant, dtype_bytes, tp, pad);
    match model.checkpoint_bytes {
        Some(ckpt) if model.tensors.is_empty() => (ckpt.div_ceil(tp), true),
        Some(ckpt) if quant == model.quant && dtype_bytes == model.dtype_bytes => {
            let whole =
                bytes_per_rank_padded(&model.tensors, quant, dtype_bytes, 1, ExpertPadding::NONE)
                    .max(1);
            (
                (ckpt as u128 * computed as u128 / whole as u128) as u64,
                tp == 1,
            )
        }
        _ => (computed, false),
    }
}

/// How vLLM's mxfp4 MoE method pads the experts on a card, by its compute capability as its
/// name tells it (vllm/model_executor/layers/quantization/mxfp4.py `get_mxfp4_backend` and
/// `create_weights`): Marlin below 9.0 (Ampere, Ada: A100, A10, A40, L4, L40, RTX 30/40) and
/// on the consumer Blackwell cards (RTX 50, compute capability 12.0, which the Triton kernels
/// do not take); FlashInfer's TRT-LLM kernels on data-centre Blackwell (B100, B200, B300,
/// GB200, GB300); Hopper's rule otherwise (H100, H200, H20, GH200, and a card not named).
pub fn mxfp4_expert_padding(device_name: &str) -> ExpertPadding {
    let n = device_name.to_ascii_uppercase();
    let has = |w: &str| n.contains(w);
    let ampere_ada = [
        "A100", "A800", "A10", "A30", "A40", "A6000", "A5000", "A4000", "L40", "L4", "L20",
    ]
    .iter()
    .any(|w| has(w))
        || has("RTX 30")
        || has("RTX 40")
        || has("RTX 50")
        || has("RTX A")
        || has("RTX PRO");
    let blackwell = ["B100", "B200", "B300", "GB200", "GB300"]
        .iter()
        .any(|w| has(w));
    if ampere_ada {
        ExpertPadding::MARLIN
    } else if blackwell {
        ExpertPadding::BLACKWELL
    } else {
        ExpertPadding::HOPPER
    }
}

/// vLLM's rotary cos/sin cache: `max_position_embeddings × rotary_dim` values of the model's
/// dtype (`RotaryEmbedding._compute_cos_sin_cache`), one per distinct rotary configuration.
pub fn rotary_cache_bytes(model: &ModelSpec, dtype_bytes: u64) -> u64 {
    model.max_position_embeddings * model.rotary_dim * dtype_bytes
}

/// Defaults of `max_num_seqs` and `max_num_batched_tokens` for `vllm serve` (V1:
/// `EngineArgs._set_default_args`: 1024 and 8192 on cards of 70 GiB or more other than the
/// A100, else 256 and 2048; V0: 256 and `max(max_model_len, 2048)`, 512 with chunked prefill
/// above 32K tokens).
fn defaults(era: Era, total_bytes: u64, device_name: &str, max_model_len: u64) -> (u64, u64) {
    match era {
        Era::V1 => {
            let big = total_bytes >= 70 * GIB && !device_name.to_ascii_lowercase().contains("a100");
            if big { (1024, 8192) } else { (256, 2048) }
        }
        _ if max_model_len > 32_768 => (256, 512),
        _ => (256, max_model_len.max(2048)),
    }
}

/// Workspace beside the profile run's tensors (cuBLAS, attention): fitted.
const ACTIVATION_WORKSPACE_BYTES: u64 = 128 * MIB;

/// The profile run's peak: the forward pass over `tokens` tokens (the hidden state and the
/// MLP's gate/up and activation outputs of one layer: `tokens × (2 × hidden + 3 × mlp width ÷
/// TP)` values, the MLP width times the experts per token for MoE), a fixed workspace, and
/// the sampler's float32 logits for `seqs` requests, `copies` times.
/// When `rules.sampler_apart`, the sampler's peak stands beside the forward pass's instead of on
/// top of it (the larger of the two is the peak).
fn activation_bytes(
    model: &ModelSpec,
    tp: u64,
    tokens: u64,
    seqs: u64,
    rules: &ProfileRules,
    dtype: u64,
) -> u64 {
    let width = model.intermediate_size * model.experts_per_token.max(1) / tp;
    let forward = tokens * (2 * model.hidden_size + 3 * width) * dtype + ACTIVATION_WORKSPACE_BYTES;
    let logits = seqs * model.vocab_size * 4 * rules.logits_copies;
    if rules.sampler_apart {
        forward.max(logits)
    } else {
        forward + logits
    }
}

/// The release-dependent constants of the profile run and of the memory outside PyTorch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileRules {
    /// How many `max_num_seqs × vocab` float32 buffers the sampler's dummy run holds at once.
    pub logits_copies: u64,
    /// Whether the sampler's peak is apart from the forward pass's (the larger counts).
    pub sampler_apart: bool,
    pub non_torch_tp1_bytes: u64,
    pub non_torch_tp_extra_bytes: u64,
}

/// vLLM 0.19's non-torch memory at TP 1: 0.25 and 0.24 GiB (corpus vllm-0061, -0066).
const NON_TORCH_TP1_019_BYTES: u64 = 250 * MIB;
/// Added at TP ≥ 2 in 0.19 (NCCL and custom all-reduce buffers): 2.06–2.13 GiB printed at TP 2
/// and 4 against 0.24–0.25 at TP 1 (corpus vllm-0071..0074).
const NON_TORCH_TP_EXTRA_019_BYTES: u64 = 1_850 * MIB;

/// The rules of a release. Before 0.11 the sampler adds one copy of the logits to the forward
/// pass; 0.11 eight (fitted on the corpus's 0.11 reports); from 0.19 the activation peak no
/// longer moves with the tensor-parallel size (the same 1.89 GiB for Llama-3.1-8B at TP 1, 2
/// and 4, 2.21 GiB for Qwen2.5-7B: corpus vllm-0061, -0066, -0071..0074), so the sampler's
/// four copies stand apart from the forward pass (fitted: 3.87 and 3.81 copies printed). The
/// releases between 0.11 and 0.19 are not in the corpus and keep the 0.11 rules.
pub fn profile_rules(v: Version, era: Era) -> ProfileRules {
    let (tp1, extra) = match era {
        Era::V1 if v >= Version(0, 19, 0) => {
            (NON_TORCH_TP1_019_BYTES, NON_TORCH_TP_EXTRA_019_BYTES)
        }
        Era::V1 => (NON_TORCH_TP1_BYTES, NON_TORCH_TP_EXTRA_BYTES),
        _ => (NON_TORCH_V0_BYTES, NON_TORCH_TP_EXTRA_BYTES),
    };
    let (logits_copies, sampler_apart) = if v >= Version(0, 19, 0) {
        (4, true)
    } else if v >= Version(0, 11, 0) {
        (8, false)
    } else {
        (1, false)
    };
    ProfileRules {
        logits_copies,
        sampler_apart,
        non_torch_tp1_bytes: tp1,
        non_torch_tp_extra_bytes: extra,
    }
}

/// vLLM's captured batch sizes: 1, 2, 4, then every 8 up to the largest (V1: 512, capped at
/// twice `max_num_seqs`; V0: 256, capped at `max_num_seqs`).
fn capture_sizes(era: Era, max_num_seqs: u64) -> u64 {
    let largest = match era {
        Era::V1 => 512.min(2 * max_num_seqs),
        _ => 256.min(max_num_seqs),
    };
    [1u64, 2, 4].iter().filter(|s| **s <= largest).count() as u64 + largest / 8
}

pub fn plan(
    model: &ModelSpec,
    version: Option<Version>,
    s: &EngineSettings,
    total_bytes: u64,
) -> Result<EnginePlan, String> {
    let v = version.unwrap_or(NEWEST);
    let era = era(v);
    let tp = s.tensor_parallel_size.max(1);
    let dtype = compute_dtype_bytes(s.dtype.as_deref(), model)?;
    let kv_dtype = kv_dtype_bytes(s.kv_cache_dtype.as_deref(), dtype)?;
    let quant = effective_quant(model, s.quantization.as_deref());
    let mla = model
        .layers
        .iter()
        .any(|l| matches!(l, crate::model::LayerCache::Latent { .. }));
    let block_size = s
        .block_size
        .unwrap_or(if mla && era == Era::V1 { 64 } else { 16 });
    let max_model_len = s
        .max_model_len
        .unwrap_or(model.max_position_embeddings)
        .max(1);
    let util = s.gpu_memory_utilization.unwrap_or(0.9);
    let device_name = s.device_name.clone().unwrap_or_default();
    let (d_seqs, d_tokens) = defaults(era, total_bytes, &device_name, max_model_len);
    let max_num_seqs = s.max_num_seqs.unwrap_or(d_seqs);
    let max_num_batched_tokens = s.max_num_batched_tokens.unwrap_or(d_tokens);

    let usable = (total_bytes as f64 * util) as u64;
    let pad = mxfp4_expert_padding(&device_name);
    let (ckpt_weights, exact) = weights_per_rank(model, tp, dtype, quant, pad);
    let rotary = rotary_cache_bytes(model, dtype);
    let weights = ckpt_weights + rotary;
    let rules = profile_rules(v, era);
    let non_torch = rules.non_torch_tp1_bytes
        + if tp > 1 {
            rules.non_torch_tp_extra_bytes
        } else {
            0
        };
    let activation = activation_bytes(
        model,
        tp,
        max_num_batched_tokens,
        max_num_seqs,
        &rules,
        dtype,
    );
    let layers_kv = kv::layers(model, tp, kv_dtype, era != Era::V1);
    let graphs = if s.enforce_eager {
        0
    } else {
        capture_sizes(era, max_num_seqs)
            * layers_kv.len().max(1) as u64
            * GRAPH_BYTES_PER_SIZE_LAYER
    };
    let kv_budget = match s.kv_cache_memory_bytes {
        Some(b) => b as i64,
        None => usable as i64 - weights as i64 - non_torch as i64 - activation as i64,
    };
    let g: Groups = kv::groups(&layers_kv, era == Era::V1);
    let block_bytes = g.block_bytes(block_size).max(1);
    let kv_pos = kv_budget.max(0) as u64;
    let (gpu_blocks, tokens, concurrency) = if layers_kv.is_empty() {
        (0, 0, 0.0)
    } else {
        match era {
            Era::V1 => {
                let blocks = kv_pos / block_bytes;
                let tokens = blocks / g.groups.len() as u64 * block_size;
                let per_req =
                    g.blocks_per_request(max_model_len, block_size, max_num_batched_tokens);
                (blocks, tokens, blocks as f64 / per_req.max(1) as f64)
            }
            _ => {
                let blocks = kv_pos / block_bytes;
                let tokens = blocks * block_size;
                (blocks, tokens, tokens as f64 / max_model_len as f64)
            }
        }
    };
    let failure = failure(
        total_bytes,
        weights,
        non_torch,
        activation,
        kv_budget,
        graphs,
        tokens,
        max_model_len,
        era,
        v,
        g.bytes_per_token(),
    );
    let mut terms = vec![
        Term {
            name: "usable",
            bytes: usable as i64,
            formula: format!("total {total_bytes} × --gpu-memory-utilization {util}"),
        },
        Term {
            name: "weights",
            bytes: weights as i64,
            formula: format!(
                "{} {ckpt_weights} + rotary cos/sin cache {} × {} × {dtype} = {rotary}",
                if exact {
                    "checkpoint"
                } else {
                    "weights from the config"
                },
                model.max_position_embeddings,
                model.rotary_dim
            ),
        },
        Term {
            name: "non_torch",
            bytes: non_torch as i64,
            formula: format!(
                "{} at TP 1, + {} at TP ≥ 2",
                rules.non_torch_tp1_bytes, rules.non_torch_tp_extra_bytes
            ),
        },
        Term {
            name: "activation_peak",
            bytes: activation as i64,
            formula: format!(
                "{}({max_num_batched_tokens} tokens × (2 × {} + 3 × {} ÷ {tp}) × {dtype} + {ACTIVATION_WORKSPACE_BYTES}{} {max_num_seqs} × {} × 4 × {}{}",
                if rules.sampler_apart { "max" } else { "" },
                model.hidden_size,
                model.intermediate_size * model.experts_per_token.max(1),
                if rules.sampler_apart { "," } else { ") +" },
                model.vocab_size,
                rules.logits_copies,
                if rules.sampler_apart { ")" } else { "" },
            ),
        },
        Term {
            name: "kv_cache",
            bytes: kv_budget,
            formula: match s.kv_cache_memory_bytes {
                Some(_) => "--kv-cache-memory".to_string(),
                None => "usable − weights − non_torch − activation_peak".to_string(),
            },
        },
        Term {
            name: "cuda_graph",
            bytes: graphs as i64,
            formula: if s.enforce_eager {
                "--enforce-eager: none".to_string()
            } else {
                format!(
                    "{} captured sizes × {} layers × {GRAPH_BYTES_PER_SIZE_LAYER}",
                    capture_sizes(era, max_num_seqs),
                    layers_kv.len()
                )
            },
        },
    ];
    terms.retain(|t| t.name != "cuda_graph" || graphs > 0 || s.enforce_eager);
    let mut estimates = vec![
        "non_torch_bytes".to_string(),
        "activation_peak_bytes".to_string(),
        "cuda_graph_bytes".to_string(),
    ];
    if !exact {
        estimates.push("weights_bytes (from the config, not the checkpoint's files)".to_string());
    }
    if model
        .layers
        .iter()
        .any(|l| matches!(l, crate::model::LayerCache::State { .. }))
    {
        estimates.push("Mamba state is not part of kv_cache_tokens".to_string());
    }
    let mut p = EnginePlan {
        engine: EngineKind::Vllm,
        rules: format!(
            "vllm {v} ({})",
            match era {
                Era::V0Peak => "V0, profiled peak",
                Era::V0Profiled => "V0, memory profiling",
                Era::V1 => "V1",
            }
        ),
        model: model.name.clone(),
        tensor_parallel_size: tp,
        total_bytes,
        usable_bytes: usable,
        context_bytes: super::CONTEXT_BYTES,
        weights_bytes: weights,
        non_torch_bytes: non_torch,
        activation_peak_bytes: activation,
        cuda_graph_bytes: graphs,
        kv_cache_bytes: kv_budget,
        kv_bytes_per_token: g.bytes_per_token(),
        block_size,
        block_bytes,
        kv_cache_tokens: tokens,
        gpu_blocks,
        max_model_len,
        max_num_seqs,
        max_num_batched_tokens,
        max_concurrency: concurrency,
        peak_bytes: 0,
        margin_bytes: 0,
        failure,
        terms,
        estimates,
    };
    p.finish_peak();
    Ok(p)
}

#[allow(clippy::too_many_arguments)]
fn failure(
    total: u64,
    weights: u64,
    non_torch: u64,
    activation: u64,
    kv: i64,
    graphs: u64,
    tokens: u64,
    max_model_len: u64,
    era: Era,
    v: Version,
    per_token: u64,
) -> Option<Failure> {
    let gib = |b: i64| b as f64 / GIB as f64;
    if super::CONTEXT_BYTES + weights + non_torch > total {
        return Some(Failure {
            stage: "load",
            message: format!(
                "CUDA out of memory while loading the weights: {:.2} GiB of weights on a card of {:.2} GiB",
                gib(weights as i64),
                gib(total as i64)
            ),
        });
    }
    if super::CONTEXT_BYTES + weights + non_torch + activation > total {
        return Some(Failure {
            stage: "profile_run",
            message: format!(
                "CUDA out of memory in the profile run: weights {:.2} GiB + activation peak {:.2} GiB exceed {:.2} GiB",
                gib(weights as i64),
                gib(activation as i64),
                gib(total as i64)
            ),
        });
    }
    if kv <= 0 {
        return Some(Failure {
            stage: "kv_allocation",
            message: "No available memory for the cache blocks. Try increasing \
                      `gpu_memory_utilization` when initializing the engine."
                .to_string(),
        });
    }
    if tokens < max_model_len {
        let message = if era == Era::V1 {
            format!(
                "To serve at least one request with the models's max seq len ({max_model_len}), \
                 ({:.2} GiB KV cache is needed, which is larger than the available KV cache \
                 memory ({:.2} GiB). Based on the available memory, the estimated maximum model \
                 length is {tokens}. Try increasing `gpu_memory_utilization` or decreasing \
                 `max_model_len` when initializing the engine.",
                gib((per_token * max_model_len) as i64),
                gib(kv)
            )
        } else {
            format!(
                "The model's max seq len ({max_model_len}) is larger than the maximum number of \
                 tokens that can be stored in KV cache ({tokens}). Try increasing \
                 `gpu_memory_utilization` or decreasing `max_model_len` when initializing the \
                 engine."
            )
        };
        let _ = v;
        return Some(Failure {
            stage: "max_model_len",
            message,
        });
    }
    let resident = super::CONTEXT_BYTES + weights + non_torch + kv as u64 + graphs;
    if resident > total {
        return Some(Failure {
            stage: "graph_capture",
            message: format!(
                "CUDA out of memory while capturing CUDA graphs: {:.2} GiB of graph pools do not fit beside the KV cache",
                gib(graphs as i64)
            ),
        });
    }
    if resident + activation > total {
        return Some(Failure {
            stage: "serve",
            message: format!(
                "CUDA out of memory in a serving step: the {:.2} GiB activation peak does not fit beside the KV cache and {:.2} GiB of graph pools",
                gib(activation as i64),
                gib(graphs as i64)
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests;
