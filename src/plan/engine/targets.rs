//! The flags that would hold a stated target: the `--kv-cache-memory` that reproduces the
//! plan's KV cache (or holds the target), the largest `--max-model-len` one request can have,
//! the `--gpu-memory-utilization` (`--mem-fraction-static`) for N requests of L tokens, and the
//! smallest shipped card profile on which the plan starts.

use serde::Serialize;

use super::{Engine, EngineKind, EnginePlan, EngineSettings};
use crate::device::profile::SimProfile;
use crate::model::ModelSpec;

/// N concurrent requests of L tokens each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Target {
    pub concurrency: u64,
    pub request_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Targets {
    pub target: Target,
    /// KV bytes the target needs on each GPU (whole blocks).
    pub target_kv_cache_bytes: u64,
    /// `--kv-cache-memory=BYTES` for the target (vLLM 0.11 on).
    pub kv_cache_memory_flag: String,
    /// The engine's share flag that holds the target, rounded up to 0.01 (`None` when even
    /// 1.0 does not).
    pub utilization_flag: Option<String>,
    /// The largest `--max-model-len` one request can have with this plan's KV cache (capped at
    /// the model's `max_position_embeddings`).
    pub largest_max_model_len: u64,
    /// The smallest shipped card profile on which the plan starts and holds the target.
    pub smallest_card: Option<String>,
}

fn blocks_needed(p: &EnginePlan, t: Target) -> u64 {
    let per_req = t.request_tokens.div_ceil(p.block_size.max(1));
    let groups = (p.kv_bytes_per_token * p.block_size)
        .checked_div(p.block_bytes)
        .unwrap_or(1)
        .max(1);
    t.concurrency * per_req * groups
}

pub fn targets(
    model: &ModelSpec,
    engine: Engine,
    settings: &EngineSettings,
    plan: &EnginePlan,
    target: Target,
) -> Targets {
    let need = blocks_needed(plan, target) * plan.block_bytes;
    let others = plan.weights_bytes + plan.non_torch_bytes + plan.activation_peak_bytes;
    let share = (others + need) as f64 / plan.total_bytes.max(1) as f64;
    let share = (share * 100.0).ceil() / 100.0;
    let utilization_flag = (share <= 1.0).then(|| match engine.kind {
        EngineKind::Vllm => format!("--gpu-memory-utilization {share:.2}"),
        EngineKind::Sglang => format!("--mem-fraction-static {share:.2}"),
        EngineKind::LlamaCpp => format!("-c {}", target.request_tokens * target.concurrency),
    });
    let cap = model.max_position_embeddings.max(1);
    let largest = if plan.kv_bytes_per_token == 0 {
        cap
    } else {
        plan.kv_cache_tokens.min(cap)
    };
    let mut cards: Vec<SimProfile> = SimProfile::builtin_all()
        .into_iter()
        .filter(|p| p.memory.total_bytes.0 > 0)
        .collect();
    cards.sort_by_key(|p| p.memory.total_bytes.0);
    let smallest_card = cards.into_iter().find_map(|card| {
        let mut s = settings.clone();
        s.device_name = Some(card.gpu_name.clone());
        let p = super::plan(model, engine, &s, card.memory.total_bytes.0).ok()?;
        let holds = p.failure.is_none() && p.kv_cache_bytes.max(0) as u64 >= need;
        holds.then(|| card.name.clone())
    });
    Targets {
        target,
        target_kv_cache_bytes: need,
        kv_cache_memory_flag: format!("--kv-cache-memory={need}"),
        utilization_flag,
        largest_max_model_len: largest,
        smallest_card,
    }
}
