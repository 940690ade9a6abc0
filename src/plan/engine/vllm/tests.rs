//! vLLM plans checked to the byte on catalogue models (the arithmetic of vllm.rs, by hand).

use super::*;
use crate::model::catalogue;

fn model(id: &str) -> ModelSpec {
    catalogue::spec(catalogue::find(id).unwrap()).unwrap()
}

fn settings(pairs: &[(&str, &str)]) -> EngineSettings {
    let p: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    EngineSettings::from_pairs(EngineKind::Vllm, "test", &p).unwrap()
}

const H100: u64 = 81_089 << 20;

#[test]
fn qwen25_7b_on_an_h100_v1() {
    let m = model("Qwen/Qwen2.5-7B-Instruct");
    let s = settings(&[("max-model-len", "16384")]);
    let p = plan(&m, Some(Version(0, 10, 1)), &s, H100).unwrap();
    // Checkpoint 15,231,233,024 bytes + cos/sin cache 32768 × 128 × 2.
    assert_eq!(p.weights_bytes, 15_231_233_024 + 8_388_608);
    // 28 layers × 2 × 4 KV heads × 128 × 2 bytes.
    assert_eq!(p.kv_bytes_per_token, 57_344);
    assert_eq!(p.block_bytes, 57_344 * 16);
    let usable = (H100 as f64 * 0.9) as u64;
    assert_eq!(p.usable_bytes, usable);
    // 8192 tokens × (2 × 3584 + 3 × 18944) × 2 + 128 MiB + 1024 × 152064 × 4 (one copy).
    let act = 8192 * (2 * 3584 + 3 * 18944) * 2 + (128 << 20) + 1024 * 152_064 * 4;
    assert_eq!(p.activation_peak_bytes, act);
    let kv = usable as i64 - p.weights_bytes as i64 - (140 << 20) - act as i64;
    assert_eq!(p.kv_cache_bytes, kv);
    assert_eq!(p.gpu_blocks, kv as u64 / (57_344 * 16));
    assert_eq!(p.kv_cache_tokens, p.gpu_blocks * 16);
    assert_eq!(p.max_concurrency, p.gpu_blocks as f64 / 1024.0);
    assert!(p.failure.is_none());
}

#[test]
fn tensor_parallel_splits_kv_heads_and_weights() {
    let m = model("meta-llama/Llama-3.1-70B-Instruct");
    let tp4 = settings(&[("tensor-parallel-size", "4"), ("max-model-len", "8192")]);
    let p = plan(&m, Some(Version(0, 11, 0)), &tp4, H100).unwrap();
    // 80 layers × 2 × (8 ÷ 4) × 128 × 2.
    assert_eq!(p.kv_bytes_per_token, 80 * 2 * 2 * 128 * 2);
    assert_eq!(p.non_torch_bytes, (140 + 430) << 20);
    // The newest rules (0.19): 250 MiB at TP 1, 1.85 GiB more at TP ≥ 2.
    let newest = plan(&m, None, &tp4, H100).unwrap();
    assert_eq!(newest.kv_bytes_per_token, p.kv_bytes_per_token);
    assert_eq!(newest.non_torch_bytes, (250 + 1_850) << 20);
    let one = plan(&m, None, &settings(&[("max-model-len", "8192")]), H100).unwrap();
    assert_eq!(one.failure.as_ref().map(|f| f.stage), Some("load"));
}

#[test]
fn mla_is_one_latent_padded_before_0_8() {
    let m = model("deepseek-ai/DeepSeek-V2-Lite-Chat");
    let new = plan(&m, None, &settings(&[("max-model-len", "4096")]), H100).unwrap();
    // 27 layers × (512 + 64) × 2 bytes; blocks of 64 tokens in V1.
    assert_eq!(new.kv_bytes_per_token, 27 * 1152);
    assert_eq!(new.block_size, 64);
    let old = plan(
        &m,
        Some(Version(0, 7, 3)),
        &settings(&[("max-model-len", "4096")]),
        H100,
    )
    .unwrap();
    assert_eq!(old.kv_bytes_per_token, 27 * 1280);
    assert_eq!(old.block_size, 16);
}

#[test]
fn sliding_and_full_layers_form_groups_in_v1() {
    let m = model("openai/gpt-oss-20b");
    let s = settings(&[
        ("max-model-len", "16384"),
        ("max-num-batched-tokens", "2048"),
    ]);
    let p = plan(&m, Some(Version(0, 10, 1)), &s, H100).unwrap();
    // 24 layers × 2 × 8 × 64 × 2; two groups of 12 layers; tokens = blocks ÷ 2 × 16.
    assert_eq!(p.kv_bytes_per_token, 24 * 2048);
    assert_eq!(p.block_bytes, 12 * 2048 * 16);
    assert_eq!(p.kv_cache_tokens, p.gpu_blocks / 2 * 16);
    // Per request: 1024 full blocks + (ceil((127 + 2048) ÷ 16) + 1) sliding blocks.
    assert_eq!(p.max_concurrency, p.gpu_blocks as f64 / 1161.0);
}

#[test]
fn fp8_kv_cache_halves_the_bytes_per_token() {
    let m = model("meta-llama/Llama-3.1-8B-Instruct");
    let auto = plan(&m, None, &settings(&[]), H100).unwrap();
    let fp8 = plan(&m, None, &settings(&[("kv-cache-dtype", "fp8")]), H100).unwrap();
    assert_eq!(auto.kv_bytes_per_token, 131_072);
    assert_eq!(fp8.kv_bytes_per_token, 65_536);
}

#[test]
fn too_long_a_context_is_refused_as_the_engine_refuses_it() {
    let m = model("meta-llama/Llama-3.1-8B-Instruct");
    let p = plan(
        &m,
        None,
        &settings(&[("gpu-memory-utilization", "0.3")]),
        H100,
    )
    .unwrap();
    let f = p.failure.unwrap();
    assert_eq!(f.stage, "max_model_len");
    assert!(f.message.contains("max seq len (131072)"), "{}", f.message);
    let none = plan(
        &m,
        None,
        &settings(&[("gpu-memory-utilization", "0.2")]),
        H100,
    )
    .unwrap();
    assert_eq!(none.failure.unwrap().stage, "kv_allocation");
}
