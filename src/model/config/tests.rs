//! One synthetic config per family (real field names, small made-up sizes) and the exact
//! parameter counts of catalogue models whose checkpoints state their size.

use serde_json::json;

use super::*;
use crate::model::catalogue;

fn read(v: serde_json::Value) -> Result<ModelSpec, ModelError> {
    let serde_json::Value::Object(o) = v else {
        panic!()
    };
    from_object(
        &o,
        "test/config.json",
        "test",
        ModelSource::Config {
            path: "test/config.json".into(),
        },
    )
}

fn catalogue_params(id: &str) -> u64 {
    catalogue::spec(catalogue::find(id).unwrap())
        .unwrap()
        .parameter_count()
}

#[test]
fn dense_gqa_counts_match_the_checkpoints() {
    // metadata.total_size / 2 of each model.safetensors.index.json (bf16 checkpoints).
    assert_eq!(
        catalogue_params("meta-llama/Llama-3.1-8B-Instruct"),
        16_060_522_496 / 2
    );
    assert_eq!(
        catalogue_params("Qwen/Qwen2.5-7B-Instruct"),
        15_231_233_024 / 2
    );
    assert_eq!(catalogue_params("Qwen/Qwen3-8B"), 8_190_735_360);
}

#[test]
fn llama_gqa_with_explicit_head_dim() {
    let s = read(json!({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "vocab_size": 100, "max_position_embeddings": 256, "torch_dtype": "bfloat16"
    }))
    .unwrap();
    assert_eq!(
        s.layers,
        vec![
            LayerCache::Full {
                kv_heads: 2,
                head_dim: 32
            };
            2
        ]
    );
    // embed + lm_head 2·100·64; per layer q 64·128, k, v 64·64 each, o 128·64, mlp 3·64·128,
    // norms 2·64; final norm 64.
    let layer = 64 * 128 + 2 * 64 * 64 + 128 * 64 + 3 * 64 * 128 + 2 * 64;
    assert_eq!(s.parameter_count(), 2 * 100 * 64 + 2 * layer + 64);
    assert_eq!(s.rotary_dim, 32);
}

#[test]
fn phi_has_biases_everywhere_and_partial_rotary() {
    // microsoft/phi-2: 2,779,683,840 parameters (its model card's 2.7B; embeddings and an
    // untied LM head with bias, biased q/k/v/dense and fc1/fc2, one LayerNorm per layer).
    assert_eq!(catalogue_params("microsoft/phi-2"), 2_779_683_840);
    let s = catalogue::spec(catalogue::find("microsoft/phi-2").unwrap()).unwrap();
    // 80-wide heads, 40 % of them rotary.
    assert_eq!(s.rotary_dim, 32);
    let bad = read(
        json!({"model_type": "phi", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
        "qk_layernorm": true}),
    );
    assert!(bad.unwrap_err().to_string().contains("qk_layernorm"));
}

#[test]
fn opt_is_multi_head_with_learned_positions_and_biases() {
    let s = read(json!({
        "model_type": "opt", "hidden_size": 32, "ffn_dim": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "vocab_size": 50, "max_position_embeddings": 16,
        "word_embed_proj_dim": 32, "torch_dtype": "float16"
    }))
    .unwrap();
    assert_eq!(
        s.layers,
        vec![LayerCache::Full {
            kv_heads: 4,
            head_dim: 8
        }]
    );
    let layer = 4 * 32 * 32 + 4 * 32 + 32 * 64 + 64 * 32 + 64 + 32 + 4 * 32;
    assert_eq!(s.parameter_count(), 50 * 32 + 18 * 32 + layer + 2 * 32);
}

#[test]
fn gemma2_alternates_sliding_and_full_layers() {
    let s = read(json!({
        "model_type": "gemma2", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "vocab_size": 10, "sliding_window": 8, "max_position_embeddings": 64
    }))
    .unwrap();
    let slide = LayerCache::Sliding {
        kv_heads: 1,
        head_dim: 16,
        window_tokens: 8,
    };
    let full = LayerCache::Full {
        kv_heads: 1,
        head_dim: 16,
    };
    assert_eq!(s.layers, vec![slide, full, slide, full]);
    assert!(s.tie_word_embeddings);
}

#[test]
fn gemma3_follows_its_pattern_and_gpt_oss_its_layer_types() {
    let g3 = read(json!({
        "model_type": "gemma3_text", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 6, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "vocab_size": 10, "sliding_window": 8, "sliding_window_pattern": 3
    }))
    .unwrap();
    let sliding: Vec<bool> = g3
        .layers
        .iter()
        .map(|l| matches!(l, LayerCache::Sliding { .. }))
        .collect();
    assert_eq!(sliding, [true, true, false, true, true, false]);
    let oss = catalogue::spec(catalogue::find("openai/gpt-oss-20b").unwrap()).unwrap();
    assert_eq!(oss.layers.len(), 24);
    assert!(matches!(
        oss.layers[0],
        LayerCache::Sliding {
            window_tokens: 128,
            ..
        }
    ));
    assert!(matches!(
        oss.layers[1],
        LayerCache::Full {
            kv_heads: 8,
            head_dim: 64
        }
    ));
    assert_eq!(oss.quant, Quant::Mxfp4);
    // gpt-oss-20b: 20.9 B parameters (OpenAI's model card: 21 B total, 3.6 B active).
    let p = oss.parameter_count() as f64 / 1e9;
    assert!((20.8..21.0).contains(&p), "{p}");
}

#[test]
fn mistral_window_slides_every_layer_and_qwen_only_when_enabled() {
    let base = json!({
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 10,
        "sliding_window": 4096
    });
    let mut m = base.clone();
    m["model_type"] = json!("mistral");
    assert!(
        read(m)
            .unwrap()
            .layers
            .iter()
            .all(|l| matches!(l, LayerCache::Sliding { .. }))
    );
    let mut q = base;
    q["model_type"] = json!("qwen2");
    q["use_sliding_window"] = json!(false);
    assert!(
        read(q)
            .unwrap()
            .layers
            .iter()
            .all(|l| matches!(l, LayerCache::Full { .. }))
    );
}

#[test]
fn mla_keeps_one_latent_per_token() {
    let s = read(json!({
        "model_type": "deepseek_v2", "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
        "kv_lora_rank": 16, "q_lora_rank": null, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
        "v_head_dim": 8, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "first_k_dense_replace": 1, "vocab_size": 20
    }))
    .unwrap();
    assert_eq!(
        s.layers,
        vec![
            LayerCache::Latent {
                kv_lora_rank: 16,
                rope_head_dim: 4
            };
            3
        ]
    );
    // DeepSeek V3 without its multi-token-prediction layer: 671 B parameters (its model card).
    let v3 = catalogue_params("deepseek-ai/DeepSeek-V3") as f64 / 1e9;
    assert!((670.5..671.5).contains(&v3), "{v3}");
}

#[test]
fn moe_counts_every_expert() {
    // Mixtral 8x7B: 46.7 B parameters (46,702,792,704 in its checkpoint's bf16 bytes / 2).
    assert_eq!(
        catalogue_params("mistralai/Mixtral-8x7B-Instruct-v0.1"),
        46_702_792_704
    );
    let q = catalogue::spec(catalogue::find("Qwen/Qwen3-30B-A3B").unwrap()).unwrap();
    let p = q.parameter_count() as f64 / 1e9;
    assert!((30.4..30.6).contains(&p), "{p}");
    assert_eq!(q.experts_per_token, 8);
}

#[test]
fn jamba_mixes_mamba_state_and_attention() {
    let s = catalogue::spec(catalogue::find("ai21labs/AI21-Jamba-Mini-1.5").unwrap()).unwrap();
    let attn = s.attention_layers();
    assert_eq!((s.layers.len(), attn), (32, 4));
    // d_inner = 2 × 4096; conv state d_inner × (4 − 1), SSM state d_inner × 16.
    assert_eq!(
        s.layers[0],
        LayerCache::State {
            state_elements: 8192 * 3 + 8192 * 16
        }
    );
    let p = s.parameter_count() as f64 / 1e9;
    assert!(
        (51.4..51.7).contains(&p),
        "Jamba 1.5 Mini has 52 B parameters: {p}"
    );
}

#[test]
fn vision_language_towers_count_as_weights() {
    let vl = catalogue_params("Qwen/Qwen2.5-VL-7B-Instruct");
    let text = catalogue_params("Qwen/Qwen2.5-7B-Instruct");
    // Qwen2.5-VL-7B: 8.29 B parameters in all; its vision tower about 0.67 B.
    let tower = (vl - text) as f64 / 1e9;
    assert!((0.6..0.72).contains(&tower), "{tower}");
    let llava = read(json!({
        "model_type": "llava",
        "text_config": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10},
        "vision_config": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
            "patch_size": 4}
    }))
    .unwrap();
    assert!(llava.tensors.iter().any(|t| t.kind == TensorKind::Tower));
}

#[test]
fn tied_embeddings_are_counted_once() {
    let tied = catalogue_params("Qwen/Qwen2.5-0.5B-Instruct");
    // Qwen2.5-0.5B: 494,032,768 parameters (its checkpoint: 988,065,536 bf16 bytes).
    assert_eq!(tied, 494_032_768);
}

#[test]
fn quantized_layouts_are_read_from_quantization_config() {
    let s = catalogue::spec(catalogue::find("Qwen/Qwen2.5-7B-Instruct-AWQ").unwrap()).unwrap();
    assert_eq!(
        s.quant,
        Quant::Awq {
            bits: 4,
            group_size: 128
        }
    );
    let v3 = catalogue::spec(catalogue::find("deepseek-ai/DeepSeek-V3").unwrap()).unwrap();
    assert_eq!(v3.quant, Quant::Fp8 { block: 128 });
    // compressed-tensors fp8 by its weights' strategy: per channel, per tensor, per block.
    let ct = |weights: serde_json::Value| {
        read(
            json!({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
            "quantization_config": {"quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": weights}}}}),
        )
    };
    let channel = ct(json!({"num_bits": 8, "type": "float", "strategy": "channel"})).unwrap();
    assert_eq!(channel.quant, Quant::Fp8Channel);
    let tensor = ct(json!({"num_bits": 8, "type": "float", "strategy": "tensor"})).unwrap();
    assert_eq!(tensor.quant, Quant::Fp8 { block: 0 });
    let block = ct(json!({"num_bits": 8, "type": "float", "strategy": "block",
        "block_structure": [128, 128]}))
    .unwrap();
    assert_eq!(block.quant, Quant::Fp8 { block: 128 });
    let odd = ct(json!({"num_bits": 8, "type": "float", "strategy": "token"})).unwrap_err();
    assert!(odd.to_string().contains("\"token\""), "{odd}");
    let bad = read(
        json!({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
        "quantization_config": {"quant_method": "hqq"}}),
    );
    let msg = bad.unwrap_err().to_string();
    assert!(
        msg.contains("quantization_config") && msg.contains("\"hqq\""),
        "{msg}"
    );
}

#[test]
fn an_unknown_architecture_names_the_fields_it_could_not_place() {
    let e = read(
        json!({"model_type": "rwkv", "architectures": ["RwkvForCausalLM"],
        "hidden_size": 32, "attention_hidden_size": 32, "num_hidden_layers": 2,
        "bos_token_id": 0}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("test/config.json") && e.contains("\"rwkv\""),
        "{e}"
    );
    assert!(
        e.contains("attention_hidden_size, hidden_size, num_hidden_layers"),
        "{e}"
    );
    assert!(!e.contains("bos_token_id"), "{e}");
}

#[test]
fn a_known_family_with_an_unplaced_field_is_refused() {
    let e = read(
        json!({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
        "num_memory_slots": 4}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("num_memory_slots") && e.contains("\"llama\""),
        "{e}"
    );
}
