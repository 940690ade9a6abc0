//! SGLang's KV pool (python/sglang/srt/model_executor/model_runner.py,
//! `profile_max_num_token` and `init_memory_pool`).
//!
//! SGLang measures the free memory before loading (`total_gpu_memory`, after the context and
//! the distributed set-up) and after; the pool gets `free_after − free_before × (1 −
//! mem_fraction_static)`, divided by the cell size `layers × KV heads ÷ TP × head_dim × 2 ×
//! dtype` (MLA: `layers × (kv_lora_rank + rope_head_dim) × dtype`), rounded down to whole
//! pages. Graphs and activations live in the remaining `1 − mem_fraction_static` share.
//! Default `mem_fraction_static` by TP (server_args.py, before the per-card table of 0.4.x):
//! 0.88 at TP 1, 0.87 at 2, 0.85 at 4, 0.81 at 8, 0.79 at 16.

use super::kv;
use super::vllm::{compute_dtype_bytes, effective_quant, kv_dtype_bytes, weights_per_rank};
use super::{EngineKind, EnginePlan, EngineSettings, Failure, Term, Version};
use crate::model::weights::ExpertPadding;
use crate::model::{LayerCache, ModelSpec};
use crate::units::MIB;

/// The CUDA context and runtime before SGLang's first measurement (estimate).
const CONTEXT_BYTES: u64 = 512 * MIB;
/// NCCL and custom all-reduce buffers at TP ≥ 2, before the first measurement (estimate).
const TP_EXTRA_BYTES: u64 = 1024 * MIB;

pub fn default_fraction(tp: u64) -> f64 {
    match tp {
        t if t >= 16 => 0.79,
        t if t >= 8 => 0.81,
        t if t >= 4 => 0.85,
        t if t >= 2 => 0.87,
        _ => 0.88,
    }
}

pub fn plan(
    model: &ModelSpec,
    version: Option<Version>,
    s: &EngineSettings,
    total_bytes: u64,
) -> Result<EnginePlan, String> {
    let tp = s.tensor_parallel_size.max(1);
    let dtype = compute_dtype_bytes(s.dtype.as_deref(), model)?;
    let kv_dtype = kv_dtype_bytes(s.kv_cache_dtype.as_deref(), dtype)?;
    let quant = effective_quant(model, s.quantization.as_deref());
    let frac = s.mem_fraction_static.unwrap_or(default_fraction(tp));
    let page = s.page_size.unwrap_or(1).max(1);
    let before =
        total_bytes.saturating_sub(CONTEXT_BYTES + if tp > 1 { TP_EXTRA_BYTES } else { 0 });
    let (weights, exact) = weights_per_rank(model, tp, dtype, quant, ExpertPadding::HOPPER);
    let after = before as i64 - weights as i64;
    let reserve = (before as f64 * (1.0 - frac)) as i64;
    let rest = after - reserve;
    let layers = kv::layers(model, tp, kv_dtype, false);
    let cell: u64 = layers.iter().map(|l| l.bytes_per_token).sum();
    let mut tokens = (rest.max(0) as u64).checked_div(cell).unwrap_or(0) / page * page;
    if let Some(cap) = s.max_total_tokens {
        tokens = tokens.min(cap);
    }
    let kv_bytes = (tokens * cell) as i64;
    let max_model_len = s
        .max_model_len
        .unwrap_or(model.max_position_embeddings)
        .max(1);
    let usable = (before as f64 * frac) as u64;
    let failure = if weights > before {
        Some(Failure {
            stage: "load",
            message: "CUDA out of memory while loading the weights".to_string(),
        })
    } else if rest <= 0 {
        Some(Failure {
            stage: "kv_allocation",
            message: "Not enough memory. Please try to increase --mem-fraction-static.".to_string(),
        })
    } else {
        None
    };
    let _ = LayerCache::State { state_elements: 0 };
    let mut p = EnginePlan {
        engine: EngineKind::Sglang,
        rules: format!(
            "sglang {}",
            version
                .map(|v| v.to_string())
                .unwrap_or_else(|| "(newest rules)".into())
        ),
        model: model.name.clone(),
        tensor_parallel_size: tp,
        total_bytes,
        usable_bytes: usable,
        context_bytes: super::CONTEXT_BYTES,
        weights_bytes: weights,
        non_torch_bytes: total_bytes - before,
        activation_peak_bytes: 0,
        cuda_graph_bytes: 0,
        kv_cache_bytes: kv_bytes,
        kv_bytes_per_token: cell,
        block_size: page,
        block_bytes: cell * page,
        kv_cache_tokens: tokens,
        gpu_blocks: tokens / page,
        max_model_len,
        max_num_seqs: s.max_num_seqs.unwrap_or(0),
        max_num_batched_tokens: s.max_num_batched_tokens.unwrap_or(0),
        max_concurrency: tokens as f64 / max_model_len as f64,
        peak_bytes: 0,
        margin_bytes: 0,
        failure,
        terms: vec![
            Term {
                name: "free_before_load",
                bytes: before as i64,
                formula: format!("total {total_bytes} − context and TP buffers (estimate)"),
            },
            Term {
                name: "weights",
                bytes: weights as i64,
                formula: if exact {
                    "checkpoint"
                } else {
                    "from the config"
                }
                .to_string(),
            },
            Term {
                name: "kv_cache",
                bytes: rest,
                formula: format!(
                    "free after load − free before × (1 − --mem-fraction-static {frac})"
                ),
            },
        ],
        estimates: vec!["non_torch_bytes (context and TP buffers)".to_string()],
    };
    p.finish_peak();
    // SGLang's activations and graphs live in the share it leaves free.
    p.margin_bytes = p.total_bytes as i64 - (p.non_torch_bytes + weights) as i64 - kv_bytes;
    p.context_bytes = 0; // SGLang's measurements start after the context: it is in non_torch.
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalogue;

    #[test]
    fn the_pool_is_the_static_fraction_minus_the_weights_over_the_cell() {
        let m = catalogue::spec(catalogue::find("Qwen/Qwen2.5-7B-Instruct").unwrap()).unwrap();
        let s = EngineSettings {
            tensor_parallel_size: 1,
            ..Default::default()
        };
        let total = 81_089u64 << 20;
        let p = plan(&m, None, &s, total).unwrap();
        let before = total - CONTEXT_BYTES;
        let weights = 15_231_233_024u64;
        let rest = before as i64 - weights as i64 - (before as f64 * (1.0 - 0.88)) as i64;
        // Cell: 28 layers × 4 KV heads × 128 × 2 (K and V) × 2 bytes.
        assert_eq!(p.kv_bytes_per_token, 57_344);
        assert_eq!(p.kv_cache_tokens, rest as u64 / 57_344);
        assert_eq!(p.weights_bytes, weights);
    }
}
