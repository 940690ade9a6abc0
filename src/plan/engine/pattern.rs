//! The engine's start-up memory pattern as a workload file, so `validate --model` runs it on
//! the device (simulated, fake or real) through the caching allocator:
//!
//! 1. `load`: the weights, one tensor per layer plus the embedding and the head, in load order;
//!    then the buffers outside the allocator (NCCL and cuBLAS-like), straight from the driver;
//! 2. `profile_run`: the profile run's activation peak, allocated and freed, then the cache
//!    emptied (vLLM's worker calls `torch.cuda.empty_cache()` after profiling);
//! 3. `kv_allocation`: one KV tensor per attention layer (per layer group in vLLM V1), the
//!    plan's blocks × block bytes in all;
//! 4. `graph_capture`: one graph pool per captured batch size, through the allocator;
//! 5. `serve`: a serving step's activations (the profile run's peak again) beside everything.
//!
//! Each phase is named after the stage where the engine would fail, so an OOM in the run says
//! which stage it reproduced.

use std::fmt::Write as _;

use super::EnginePlan;
use crate::model::ModelSpec;

/// Phase names, in order, as `Failure::stage` names them.
pub const PHASES: [&str; 5] = [
    "load",
    "profile_run",
    "kv_allocation",
    "graph_capture",
    "serve",
];

/// The number of graph pools the pattern allocates (vLLM's captured batch sizes; 1 when the
/// plan has no graph memory).
fn graph_pools(p: &EnginePlan) -> u64 {
    if p.cuda_graph_bytes == 0 {
        0
    } else {
        (p.cuda_graph_bytes / (8 << 20)).clamp(1, 67)
    }
}

/// The workload file for `plan` of `model`.
pub fn workload_toml(model: &ModelSpec, p: &EnginePlan) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Written by `headroom validate --model`: the start-up pattern of {} for {} (TP {}).",
        p.rules, p.model, p.tensor_parallel_size
    );
    let _ = writeln!(
        o,
        "# An OOM is an outcome here: its phase is the engine's stage that would fail.\n"
    );
    let _ = writeln!(
        o,
        "[workload]\nname = {:?}",
        format!("engine-{}", p.engine.name())
    );
    let _ = writeln!(
        o,
        "description = {:?}\n",
        format!("{} start-up pattern of {}", p.rules, p.model)
    );
    let _ = writeln!(o, "[settings]\nallow_oom = true\n");
    let _ = writeln!(o, "[allocator]\nkind = \"caching\"\n");
    let tensors = (model.layers.len() as u64 + 2).min(p.weights_bytes.max(1));
    let _ = writeln!(
        o,
        "[[phase]]\nname = \"load\"\nsteps = [\n  {{ op = \"weights\", total = {}, tensors = {tensors} }},",
        p.weights_bytes.max(1)
    );
    if p.non_torch_bytes > 0 {
        let _ = writeln!(
            o,
            "  {{ op = \"allocate\", name = \"non_torch\", size = {}, via = \"driver\" }},",
            p.non_torch_bytes
        );
    }
    let _ = writeln!(o, "  {{ op = \"sleep\", for = \"1ms\" }},\n]\n");
    let _ = writeln!(o, "[[phase]]\nname = \"profile_run\"\nsteps = [");
    if p.activation_peak_bytes > 0 {
        let _ = writeln!(
            o,
            "  {{ op = \"allocate\", name = \"activation\", size = {} }},\n  {{ op = \"sleep\", for = \"1ms\" }},\n  {{ op = \"free\", name = \"activation\" }},\n  {{ op = \"empty_cache\" }},",
            p.activation_peak_bytes
        );
    }
    let _ = writeln!(o, "]\n");
    let _ = writeln!(o, "[[phase]]\nname = \"kv_allocation\"\nsteps = [");
    let (kv_tensors, each) = kv_tensors(model, p);
    if kv_tensors > 0 {
        let _ = writeln!(
            o,
            "  {{ op = \"allocate\", name = \"kv\", size = {each}, count = {kv_tensors} }},"
        );
    }
    let _ = writeln!(o, "  {{ op = \"sleep\", for = \"1ms\" }},\n]\n");
    let _ = writeln!(o, "[[phase]]\nname = \"graph_capture\"\nsteps = [");
    let pools = graph_pools(p);
    if let Some(each) = p.cuda_graph_bytes.checked_div(pools) {
        let _ = writeln!(
            o,
            "  {{ op = \"allocate\", name = \"graph_pool\", size = {each}, count = {pools} }},"
        );
    }
    let _ = writeln!(o, "  {{ op = \"sleep\", for = \"1ms\" }},\n]\n");
    // Serving: a step's activations beside everything else (the memory the budget kept free
    // for them).
    let _ = writeln!(o, "[[phase]]\nname = \"serve\"\nsteps = [");
    if p.activation_peak_bytes > 0 {
        let _ = writeln!(
            o,
            "  {{ op = \"allocate\", name = \"step\", size = {} }},\n  {{ op = \"sleep\", for = \"1ms\" }},\n  {{ op = \"free\", name = \"step\" }},",
            p.activation_peak_bytes
        );
    }
    let _ = writeln!(o, "  {{ op = \"sleep\", for = \"1ms\" }},\n]");
    o
}

/// One KV tensor per attention layer: (count, bytes each); none without a KV cache.
fn kv_tensors(model: &ModelSpec, p: &EnginePlan) -> (u64, u64) {
    let count = (model.attention_layers() as u64).clamp(1, 256);
    let each = p.gpu_blocks * p.block_bytes / count;
    if p.kv_cache_bytes <= 0 || each == 0 {
        (0, 0)
    } else {
        (count, each)
    }
}

/// Bytes the pattern asks for in each category: (weights, non-torch, activation, KV, graphs).
pub fn planned_bytes(model: &ModelSpec, p: &EnginePlan) -> [u64; 5] {
    let pools = graph_pools(p);
    let (n, each) = kv_tensors(model, p);
    let kv_tensors_bytes = n * each;
    [
        p.weights_bytes.max(1),
        p.non_torch_bytes,
        p.activation_peak_bytes,
        kv_tensors_bytes,
        p.cuda_graph_bytes.checked_div(pools).unwrap_or(0) * pools,
    ]
}
