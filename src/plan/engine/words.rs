//! The plan in the engine's own start-up lines (the wording of the release the rules come
//! from), so that a user can hold them beside the engine's log; then headroom's own lines: the
//! peak, the margin, and the flags that would hold a target.

use std::fmt::Write as _;

use super::targets::Targets;
use super::{EngineKind, EnginePlan};
use crate::units::{GIB, MIB};

fn gib(b: i64) -> String {
    format!("{:.2}", b as f64 / GIB as f64)
}

/// `1234567` as `1,234,567` (Python's `{:,}`).
pub fn thousands(n: u64) -> String {
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

/// The engine's start-up lines for this plan.
pub fn engine_lines(p: &EnginePlan) -> Vec<String> {
    let mut l = Vec::new();
    match p.engine {
        EngineKind::Vllm if p.rules.contains("V1") => {
            l.push(format!(
                "Model loading took {} GiB",
                gib(p.weights_bytes as i64)
            ));
            l.push(format!(
                "Available KV cache memory: {} GiB",
                gib(p.kv_cache_bytes)
            ));
            l.push(format!(
                "GPU KV cache size: {} tokens",
                thousands(p.kv_cache_tokens)
            ));
            l.push(format!(
                "Maximum concurrency for {} tokens per request: {:.2}x",
                thousands(p.max_model_len),
                p.max_concurrency
            ));
        }
        EngineKind::Vllm => {
            l.push(format!(
                "Loading model weights took {} GB",
                gib(p.weights_bytes as i64)
            ));
            l.push(format!(
                "the current vLLM instance can use total_gpu_memory ({}GiB) x gpu_memory_utilization ({:.2}) = {}GiB",
                gib(p.total_bytes as i64),
                p.usable_bytes as f64 / p.total_bytes.max(1) as f64,
                gib(p.usable_bytes as i64)
            ));
            l.push(format!(
                "model weights take {}GiB; non_torch_memory takes {}GiB; PyTorch activation peak memory takes {}GiB; the rest of the memory reserved for KV Cache is {}GiB.",
                gib(p.weights_bytes as i64),
                gib(p.non_torch_bytes as i64),
                gib(p.activation_peak_bytes as i64),
                gib(p.kv_cache_bytes)
            ));
            l.push(format!("# GPU blocks: {}", p.gpu_blocks));
            l.push(format!(
                "Maximum concurrency for {} tokens per request: {:.2}x",
                p.max_model_len, p.max_concurrency
            ));
        }
        EngineKind::Sglang => {
            let half = p.kv_cache_bytes / 2;
            l.push(format!(
                "Load weight end. mem usage={} GB.",
                gib(p.weights_bytes as i64)
            ));
            l.push(format!(
                "KV Cache is allocated. #tokens: {}, K size: {} GB, V size: {} GB",
                p.kv_cache_tokens,
                gib(half),
                gib(half)
            ));
            l.push(format!("max_total_num_tokens={}", p.kv_cache_tokens));
        }
        EngineKind::LlamaCpp => {
            let mib = |b: u64| format!("{:.2}", b as f64 / MIB as f64);
            l.push(format!(
                "load_tensors:        CUDA0 model buffer size = {} MiB",
                mib(p.weights_bytes)
            ));
            l.push(format!(
                "llama_kv_cache_unified:      CUDA0 KV buffer size = {} MiB",
                mib(p.kv_cache_bytes.max(0) as u64)
            ));
            l.push(format!(
                "llama_context:      CUDA0 compute buffer size = {} MiB",
                mib(p.activation_peak_bytes)
            ));
        }
    }
    l
}

/// The whole text: the engine's lines, headroom's peak and margin, the failure if any, and
/// the targets.
pub fn text(p: &EnginePlan, t: &Targets) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} on {} (TP {}), rules of {}",
        p.model,
        gib(p.total_bytes as i64) + " GiB",
        p.tensor_parallel_size,
        p.rules
    );
    let _ = writeln!(s, "\nwhat the engine will print:");
    for line in engine_lines(p) {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(s, "\nper GPU, at the peak:");
    for (name, b) in [
        ("weights", p.weights_bytes as i64),
        ("non-torch", p.non_torch_bytes as i64),
        ("activation peak", p.activation_peak_bytes as i64),
        ("CUDA graphs", p.cuda_graph_bytes as i64),
        ("KV cache", p.kv_cache_bytes.max(0)),
    ] {
        let _ = writeln!(s, "  {name:<16} {:>9} GiB", gib(b));
    }
    let _ = writeln!(
        s,
        "  {:<16} {:>9} GiB of {} GiB",
        "peak",
        gib(p.peak_bytes as i64),
        gib(p.total_bytes as i64)
    );
    let _ = writeln!(s, "  {:<16} {:>9} GiB", "margin", gib(p.margin_bytes));
    let _ = writeln!(
        s,
        "  KV: {} bytes per token, blocks of {} tokens ({} bytes), {} blocks",
        p.kv_bytes_per_token, p.block_size, p.block_bytes, p.gpu_blocks
    );
    if !p.estimates.is_empty() {
        let _ = writeln!(s, "  estimated, not exact: {}", p.estimates.join(", "));
    }
    if let Some(f) = &p.failure {
        let _ = writeln!(
            s,
            "\nthe engine will not start ({}): {}",
            f.stage, f.message
        );
    }
    let _ = writeln!(
        s,
        "\nto hold {} requests of {} tokens: {} ({} GiB of KV per GPU){}",
        t.target.concurrency,
        t.target.request_tokens,
        t.utilization_flag
            .as_deref()
            .unwrap_or("no share of this card is enough"),
        gib(t.target_kv_cache_bytes as i64),
        if p.engine == EngineKind::Vllm {
            format!(", or {}", t.kv_cache_memory_flag)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "largest --max-model-len this KV cache holds: {}",
        t.largest_max_model_len
    );
    let _ = writeln!(
        s,
        "smallest shipped card profile that fits: {}",
        t.smallest_card.as_deref().unwrap_or("none")
    );
    s
}
