//! llama.cpp's buffers (src/llama-kv-cache.cpp, src/llama-context.cpp, src/llama-model.cpp).
//!
//! - KV: `n_ctx` cells (rounded up to 256 from b4000-era releases) × Σ over offloaded layers of
//!   `n_embd_k_gqa` K values and `n_embd_v_gqa` V values of `-ctk` / `-ctv` (f16 by default);
//! - model buffer: the GGUF's tensor bytes of the offloaded layers (`-ngl`), and the output
//!   layer when every layer is offloaded; the token embedding stays in host memory;
//! - compute buffer (estimate, fitted): `n_ubatch × (n_vocab + n_embd) × 4` bytes, the logits
//!   of one micro-batch and its hidden state in f32.

use super::vllm::weights_per_rank;
use super::{EngineKind, EnginePlan, EngineSettings, Failure, Term};
use crate::model::weights::ExpertPadding;
use crate::model::{LayerCache, ModelSpec, Quant};

/// Bytes per value of a `-ctk` / `-ctv` type (ggml block sizes).
pub fn cache_type_bytes(t: &str) -> Result<(u64, u64), String> {
    Ok(match t {
        "f16" | "bf16" => (2, 1),
        "f32" => (4, 1),
        "q8_0" => (34, 32),
        "q4_0" => (18, 32),
        "q4_1" => (20, 32),
        "q5_0" => (22, 32),
        "q5_1" => (24, 32),
        "iq4_nl" => (18, 32),
        other => return Err(format!("cache type {other}: not one llama.cpp has")),
    })
}

pub fn plan(model: &ModelSpec, s: &EngineSettings, total_bytes: u64) -> Result<EnginePlan, String> {
    let n_layer = model.layers.len() as u64;
    let ngl = s.n_gpu_layers.unwrap_or(n_layer + 1).min(n_layer + 1);
    let on_gpu = ngl.min(n_layer);
    let n_ctx = s.max_model_len.unwrap_or(4096).max(1);
    let (kb, kd) = cache_type_bytes(s.cache_type_k.as_deref().unwrap_or("f16"))?;
    let (vb, vd) = cache_type_bytes(s.cache_type_v.as_deref().unwrap_or("f16"))?;
    let per_token: u64 = model
        .layers
        .iter()
        .take(on_gpu as usize)
        .map(|l| match *l {
            LayerCache::Full { kv_heads, head_dim }
            | LayerCache::Sliding {
                kv_heads, head_dim, ..
            } => {
                let e = kv_heads * head_dim;
                e.div_ceil(kd) * kb + e.div_ceil(vd) * vb
            }
            LayerCache::Latent {
                kv_lora_rank,
                rope_head_dim,
            } => (kv_lora_rank + rope_head_dim).div_ceil(kd) * kb,
            LayerCache::State { .. } => 0,
        })
        .sum();
    let kv = n_ctx * per_token;
    let weights = match &model.gguf {
        Some(g) => {
            let layers: u64 = g.layer_bytes.iter().take(on_gpu as usize).sum();
            layers + if ngl > n_layer { g.output_bytes } else { 0 }
        }
        None => {
            let (all, _) = weights_per_rank(
                model,
                1,
                model.dtype_bytes.min(2),
                model.quant,
                ExpertPadding::NONE,
            );
            (all as u128 * on_gpu as u128 / n_layer.max(1) as u128) as u64
        }
    };
    let ubatch = s.ubatch_size.unwrap_or(512).min(n_ctx);
    let compute = ubatch * (model.vocab_size + model.hidden_size) * 4;
    let used = weights + kv + compute;
    let failure = (used > total_bytes).then(|| Failure {
        stage: "load",
        message: format!(
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating {:.2} MiB on device 0: cudaMalloc failed: out of memory",
            kv as f64 / (1 << 20) as f64
        ),
    });
    let _ = Quant::None;
    let mut p = EnginePlan {
        engine: EngineKind::LlamaCpp,
        rules: "llama.cpp".to_string(),
        model: model.name.clone(),
        tensor_parallel_size: 1,
        total_bytes,
        usable_bytes: total_bytes,
        context_bytes: super::CONTEXT_BYTES,
        weights_bytes: weights,
        non_torch_bytes: 0,
        activation_peak_bytes: compute,
        cuda_graph_bytes: 0,
        kv_cache_bytes: kv as i64,
        kv_bytes_per_token: per_token,
        block_size: 1,
        block_bytes: per_token,
        kv_cache_tokens: n_ctx,
        gpu_blocks: n_ctx,
        max_model_len: n_ctx,
        max_num_seqs: s.parallel.unwrap_or(1),
        max_num_batched_tokens: ubatch,
        max_concurrency: s.parallel.unwrap_or(1) as f64,
        peak_bytes: 0,
        margin_bytes: 0,
        failure,
        terms: vec![
            Term {
                name: "kv_cache",
                bytes: kv as i64,
                formula: format!(
                    "n_ctx {n_ctx} × {per_token} bytes over {on_gpu} offloaded layers"
                ),
            },
            Term {
                name: "model_buffer",
                bytes: weights as i64,
                formula: format!(
                    "tensors of {on_gpu} offloaded layers{}",
                    if ngl > n_layer { " + output" } else { "" }
                ),
            },
            Term {
                name: "compute_buffer",
                bytes: compute as i64,
                formula: format!(
                    "n_ubatch {ubatch} × (n_vocab {} + n_embd {}) × 4",
                    model.vocab_size, model.hidden_size
                ),
            },
        ],
        estimates: vec!["activation_peak_bytes (the compute buffer)".to_string()],
    };
    p.finish_peak();
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf;

    /// A two-layer GGUF header: 4 heads of 64, 2 KV heads, f16 attention, q4_0 FFN.
    fn tiny() -> ModelSpec {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        let bytes = gguf::write_header(
            &[
                ("llama.block_count", 2),
                ("llama.embedding_length", 256),
                ("llama.attention.head_count", 4),
                ("llama.attention.head_count_kv", 2),
                ("llama.context_length", 4096),
            ],
            &[("general.architecture", "llama")],
            &[
                ("token_embd.weight", &[256, 1000], 1),
                ("blk.0.attn_q.weight", &[256, 256], 1),
                ("blk.0.ffn_up.weight", &[256, 512], 2),
                ("blk.1.attn_q.weight", &[256, 256], 1),
                ("blk.1.ffn_up.weight", &[256, 512], 2),
                ("output.weight", &[256, 1000], 1),
            ],
        );
        std::fs::write(&path, bytes).unwrap();
        gguf::read(&path, "tiny").unwrap()
    }

    #[test]
    fn kv_and_model_buffer_follow_the_offloaded_layers() {
        let m = tiny();
        let layer = 256 * 256 * 2 + 256 * 512 / 32 * 18;
        assert_eq!(m.gguf.as_ref().unwrap().layer_bytes, vec![layer, layer]);
        let all = EngineSettings {
            max_model_len: Some(1024),
            ..Default::default()
        };
        let p = plan(&m, &all, 1 << 30).unwrap();
        // 1024 cells × 2 layers × (2 × 64 K + 2 × 64 V) × 2 bytes (f16).
        assert_eq!(p.kv_cache_bytes, 1024 * 2 * 256 * 2);
        assert_eq!(p.weights_bytes, 2 * layer + 256 * 1000 * 2);
        let one = EngineSettings {
            max_model_len: Some(1024),
            n_gpu_layers: Some(1),
            cache_type_k: Some("q8_0".into()),
            ..Default::default()
        };
        let p = plan(&m, &one, 1 << 30).unwrap();
        // One layer on the GPU, no output layer; K in q8_0 (34 bytes per 32 values).
        assert_eq!(p.weights_bytes, layer);
        assert_eq!(p.kv_cache_bytes, 1024 * (128 / 32 * 34 + 128 * 2));
    }
}
