//! `plan --model` and `validate --model`: the engine's figures from the model, in JSON and
//! text, the errors that name what they refuse, and the start-up pattern run on the simulator
//! and on the fake driver with its numbers checked to the byte.

use serde_json::Value;

use crate::common::{headroom, on_fake, u};

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn plan_model_json_has_every_field_per_gpu() {
    let r = headroom(
        &root(),
        &[
            "plan",
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--engine",
            "vllm@0.10.1",
            "--profile",
            "h100-80g",
            "--json",
            "--",
            "--max-model-len",
            "16384",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&r.stdout);
    let p = &j["plan"];
    for k in [
        "total_bytes",
        "usable_bytes",
        "weights_bytes",
        "non_torch_bytes",
        "activation_peak_bytes",
        "cuda_graph_bytes",
        "kv_cache_bytes",
        "kv_bytes_per_token",
        "kv_cache_tokens",
        "gpu_blocks",
        "max_concurrency",
        "margin_bytes",
        "peak_bytes",
    ] {
        assert!(p.get(k).is_some_and(|v| v.is_number()), "{k} missing: {p}");
    }
    assert_eq!(u(&p["total_bytes"]), 81_089 << 20);
    assert_eq!(u(&p["weights_bytes"]), 15_231_233_024 + 8_388_608);
    assert_eq!(u(&p["kv_bytes_per_token"]), 57_344);
    assert_eq!(u(&p["kv_cache_tokens"]), u(&p["gpu_blocks"]) * 16);
    let kv = p["kv_cache_bytes"].as_i64().unwrap() as u64;
    assert_eq!(u(&p["gpu_blocks"]), kv / (57_344 * 16));
    let t = &j["targets"];
    assert_eq!(
        t["kv_cache_memory_flag"],
        format!("--kv-cache-memory={}", 1024 * 57_344 * 16)
    );
    assert_eq!(u(&t["largest_max_model_len"]), 32_768);
    assert_eq!(
        j["engine_lines"][2],
        format!(
            "GPU KV cache size: {} tokens",
            thousands(u(&p["kv_cache_tokens"]))
        )
    );
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn text_speaks_the_engine_s_words() {
    let r = headroom(
        &root(),
        &[
            "plan",
            "--model",
            "meta-llama/Meta-Llama-3-8B-Instruct",
            "--engine",
            "vllm@0.6.6",
            "--capacity",
            "40336MiB",
            "--",
            "--max-model-len",
            "8192",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Loading model weights took 14.96 GB"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("# GPU blocks: "), "{}", r.stdout);
    let sg = headroom(
        &root(),
        &[
            "plan",
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--engine",
            "sglang",
            "--profile",
            "h100-80g",
            "--",
            "--context-length",
            "8192",
        ],
    );
    assert_eq!(sg.code, 0, "{}", sg.stderr);
    assert!(
        sg.stdout.contains("KV Cache is allocated. #tokens: "),
        "{}",
        sg.stdout
    );
}

#[test]
fn bad_inputs_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, r#"{"model_type": "rwkv", "hidden_size": 64, "attention_hidden_size": 64, "num_hidden_layers": 2}"#).unwrap();
    let r = headroom(
        dir.path(),
        &["plan", "--model", "config.json", "--capacity", "80GiB"],
    );
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("config.json") && r.stderr.contains("attention_hidden_size"),
        "{}",
        r.stderr
    );
    let r = headroom(
        dir.path(),
        &["plan", "--model", "no/such-model", "--capacity", "80GiB"],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no/such-model"), "{}", r.stderr);
    let r = headroom(
        dir.path(),
        &[
            "plan",
            "--model",
            "facebook/opt-125m",
            "--capacity",
            "80GiB",
            "--",
            "--mem-fraction-static",
            "0.8",
        ],
    );
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("--mem-fraction-static 0.8"),
        "{}",
        r.stderr
    );
}

#[test]
fn validate_model_on_the_simulator_measures_each_category() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v");
    let r = headroom(
        dir.path(),
        &[
            "validate",
            "--model",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--engine",
            "vllm",
            "--profile",
            "t4-16g",
            "--out",
            out.to_str().unwrap(),
            "--json",
            "--",
            "--max-model-len",
            "4096",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["status"], "completed");
    assert_eq!(j["margin_held"], true);
    // Every category the pattern allocates is measured back exactly (requested bytes).
    for c in j["categories"].as_array().unwrap() {
        assert_eq!(c["measured_bytes"], c["predicted_bytes"], "{c}");
    }
    // The true device peak: the predicted peak's parts plus what the plan does not name.
    let peak = u(&j["peaks"]["device_used_bytes"]);
    let p = &j["plan"];
    let named = u(&p["weights_bytes"]) + u(&p["non_torch_bytes"]) + u(&p["activation_peak_bytes"]);
    assert!(peak > named, "{peak} vs {named}");
    assert!(peak <= u(&p["total_bytes"]));
    assert!(out.join("validation-model.json").is_file() && out.join("run/summary.json").is_file());
}

#[test]
fn validate_model_reproduces_the_engine_s_oom_at_its_stage() {
    let dir = tempfile::tempdir().unwrap();
    let r = headroom(
        dir.path(),
        &[
            "validate",
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--engine",
            "vllm",
            "--profile",
            "t4-16g",
            "--json",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["predicted_stage"], "load");
    assert_eq!(j["oom_stage"], "load");
}

#[test]
fn validate_model_on_the_fake_driver() {
    let dir = tempfile::tempdir().unwrap();
    let r = on_fake(
        dir.path(),
        &[
            "validate",
            "--model",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--engine",
            "vllm",
            "--json",
            "--",
            "--max-model-len",
            "1024",
            "--gpu-memory-utilization",
            "0.8",
            "--enforce-eager",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["status"], "completed");
    for c in j["categories"].as_array().unwrap() {
        assert_eq!(c["measured_bytes"], c["predicted_bytes"], "{c}");
    }
    // The fake driver's own reading of the device: at least everything the pattern holds.
    let p = &j["plan"];
    let kv = p["kv_cache_bytes"].as_i64().unwrap() as u64;
    assert!(u(&j["peaks"]["device_used_bytes"]) >= u(&p["weights_bytes"]) + kv);
}

#[test]
fn validate_engine_command_prints_three_columns_on_the_fake() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v");
    let script = root().join("tests/fixtures/engine-stand-in/vllm-serve.sh");
    let r = on_fake(
        dir.path(),
        &[
            "validate",
            "--engine",
            "vllm@0.11.0",
            "--out",
            out.to_str().unwrap(),
            "--",
            "bash",
            script.to_str().unwrap(),
            "serve",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--max-model-len",
            "16000",
            "--block-size",
            "128",
        ],
        &[
            ("HEADROOM_FAKE_PROFILE", "h100-80g"),
            ("HEADROOM", env!("CARGO_BIN_EXE_headroom")),
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&std::fs::read_to_string(out.join("engine-check.json")).unwrap());
    let row = |f: &str| {
        j["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["figure"] == f)
            .cloned()
            .unwrap()
    };
    // The engine's own figures, read from the stand-in's lines.
    assert_eq!(row("weights_gib")["engine"], "14.99");
    assert_eq!(row("kv_cache_gib")["engine"], "51.38");
    // headroom's prediction from the command line's model and flags (H100, vLLM 0.11 rules).
    assert_eq!(row("weights_gib")["predicted"], "14.99");
    let kv: f64 = row("kv_cache_gib")["predicted"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((kv - 51.38).abs() / 51.38 < 0.01, "{kv}");
    // The true device peak: what the stand-in held (67963 MiB) and its holder's context.
    let peak: f64 = row("device_peak_gib")["measured"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((66.37..67.5).contains(&peak), "{peak}");
    for col in ["headroom", "engine", "device peak"] {
        assert!(r.stdout.contains(col), "{}", r.stdout);
    }
}

/// One catalogue model of every architecture family, planned for vLLM on an H100: the KV
/// bytes per token are the family's own rule, worked out by hand from its config.
#[test]
fn every_family_plans_with_its_own_kv_rule() {
    let cases: &[(&str, u64, i32)] = &[
        // dense GQA: layers × 2 × kv heads × head_dim × 2 bytes
        (
            "meta-llama/Meta-Llama-3-8B-Instruct",
            32 * 2 * 8 * 128 * 2,
            0,
        ),
        ("Qwen/Qwen2.5-7B-Instruct", 28 * 2 * 4 * 128 * 2, 0),
        ("Qwen/Qwen3-8B", 36 * 2 * 8 * 128 * 2, 0),
        (
            "mistralai/Mistral-7B-Instruct-v0.3",
            32 * 2 * 8 * 128 * 2,
            0,
        ),
        ("microsoft/Phi-3-mini-4k-instruct", 32 * 2 * 32 * 96 * 2, 0),
        ("microsoft/phi-4", 40 * 2 * 10 * 128 * 2, 0),
        // sliding and full layers alike hold a page per token in vLLM's one group
        ("google/gemma-2-9b-it", 42 * 2 * 8 * 256 * 2, 0),
        ("openai/gpt-oss-20b", 24 * 2 * 8 * 64 * 2, 0),
        // Phi-2: multi-head, 80-wide heads, biases everywhere
        ("microsoft/phi-2", 32 * 2 * 32 * 80 * 2, 0),
        // multi-head attention with learned positions
        ("facebook/opt-125m", 12 * 2 * 12 * 64 * 2, 0),
        // MoE: the experts change the weights, not the cache (Mixtral's 93 GB do not load)
        (
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            32 * 2 * 8 * 128 * 2,
            1,
        ),
        ("Qwen/Qwen3-30B-A3B", 48 * 2 * 4 * 128 * 2, 0),
        // MLA: one latent of kv_lora_rank + rope per layer
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", 27 * (512 + 64) * 2, 0),
        ("deepseek-ai/DeepSeek-V3", 61 * (512 + 64) * 2, 1),
        ("moonshotai/Kimi-K2-Instruct", 61 * (512 + 64) * 2, 1),
        // hybrid: only the attention layers (one in 8 of 32) hold KV
        ("ai21labs/AI21-Jamba-Mini-1.5", 4 * 2 * 8 * 128 * 2, 1),
        // vision-language: the language model's cache; the tower is weights
        ("Qwen/Qwen2.5-VL-7B-Instruct", 28 * 2 * 4 * 128 * 2, 0),
        // AWQ: packed weights, the cache in 16 bits
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", 28 * 2 * 4 * 128 * 2, 0),
    ];
    for (id, per_token, code) in cases {
        let r = headroom(
            &root(),
            &[
                "plan",
                "--model",
                id,
                "--engine",
                "vllm",
                "--profile",
                "h100-80g",
                "--json",
            ],
        );
        assert_eq!(r.code, *code, "{id}: {}", r.stderr);
        let p = &json(&r.stdout)["plan"];
        assert_eq!(u(&p["kv_bytes_per_token"]), *per_token, "{id}");
        assert!(u(&p["weights_bytes"]) > 0, "{id}");
    }
}

/// vLLM pads mxfp4 experts by the card's kernel: Marlin on an A100 pads gpt-oss-20b's hidden
/// size 2880 to 3072 and its width to 2944; the Hopper rule pads the width to 3072 only. Each
/// of its 2304 expert matrices grows by 3072 × 2944 × 17/32 − 2880 × 3072 × 17/32 bytes.
#[test]
fn mxfp4_experts_are_padded_by_the_card_s_kernel() {
    let weights = |profile: &str| {
        let r = headroom(
            &root(),
            &[
                "plan",
                "--model",
                "openai/gpt-oss-20b",
                "--engine",
                "vllm",
                "--profile",
                profile,
                "--json",
                "--",
                "--max-model-len",
                "4096",
            ],
        );
        u(&json(&r.stdout)["plan"]["weights_bytes"])
    };
    let per_matrix = (3072 * 2944 / 2 + 3072 * 2944 / 32) - (2880 * 3072 / 2 + 2880 * 3072 / 32);
    assert_eq!(weights("a100-40g") - weights("h100-80g"), 2304 * per_matrix);
}

/// From vLLM 0.19 the sampler's dummy run stands apart from the forward pass: the activation
/// peak is its four float32 copies of the logits, `max_num_seqs × vocab × 4 × 4` bytes, at every
/// tensor-parallel size (0.11 adds its eight copies to a forward pass that shrinks with TP).
#[test]
fn vllm_0_19_activation_is_the_sampler_s_at_every_tp() {
    let activation = |engine: &str, tp: &str| {
        let r = headroom(
            &root(),
            &[
                "plan",
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--engine",
                engine,
                "--profile",
                "h100-80g",
                "--json",
                "--",
                "--max-model-len",
                "8192",
                "--tensor-parallel-size",
                tp,
            ],
        );
        assert!(r.code <= 1, "{}", r.stderr);
        u(&json(&r.stdout)["plan"]["activation_peak_bytes"])
    };
    let sampler = 1024 * 128_256 * 4 * 4;
    assert_eq!(activation("vllm@0.19.0", "1"), sampler);
    assert_eq!(activation("vllm@0.19.0", "2"), sampler);
    assert_ne!(
        activation("vllm@0.11.0", "1"),
        activation("vllm@0.11.0", "2")
    );
}
