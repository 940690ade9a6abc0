//! vLLM's start-up refusals: the budget arithmetic each one implies.
//!
//! vLLM budgets `total × gpu_memory_utilization` for itself and gives the KV cache what is
//! left after the weights, the profiled activation peak, memory outside torch and the CUDA
//! graph estimate (`vllm/v1/worker/gpu_worker.py`). Its messages print GiB rounded to two
//! places, so every figure here is an interval.

use super::context::{Era, ROOM_MARGIN_BYTES, context_bytes, context_text};
use super::interval::{Iv, Verdict};
use super::{Diagnosis, cause, nvidia_smi_check};
use crate::oom_message::Detail;

pub(super) fn diagnose(detail: &Detail, d: &mut Diagnosis) {
    match detail {
        Detail::VllmStartupFreeMemory {
            device_free,
            device_total,
            gpu_memory_utilization,
            requested,
            ..
        } => {
            let (f, t, b) = (Iv::of(device_free), Iv::of(device_total), Iv::of(requested));
            let used = d.bytes(
                "device_used_at_start_bytes",
                "device_total − device_free",
                t.minus(f),
            );
            let short = d.bytes(
                "shortfall_bytes",
                "requested − device_free",
                b.minus(f).non_negative(),
            );
            let fits = d.fraction(
                "largest_passing_utilization",
                "device_free / device_total",
                f,
                t,
            );
            // vLLM's own process has created its context by now: the rest is someone else's.
            let context = context_bytes(t, Era::Lazy);
            let others = d.bytes(
                "device_used_beyond_context_bytes",
                &format!(
                    "device_used_at_start − one CUDA context ({})",
                    context_text(context)
                ),
                used.minus(Iv::exact(context)).non_negative(),
            );
            match f.plus(others).minus(b).ge(Iv::exact(ROOM_MARGIN_BYTES)) {
                Verdict::Yes => {
                    d.cause = Some(cause::OTHER_PROCESS);
                    d.summary = format!(
                        "vLLM wanted {} ({gpu_memory_utilization} of {}) before loading anything, but {used} was already in use: {others} beyond its own CUDA context, more than the {short} shortfall, so another process (or an earlier vLLM still exiting) holds it.",
                        requested.printed, device_total.printed
                    );
                }
                Verdict::No => {
                    d.cause = Some(cause::CAPACITY);
                    d.summary = format!(
                        "vLLM wanted {} ({gpu_memory_utilization} of {}), more than the card offers beyond one CUDA context: even without the {others} others hold, the budget would not fit.",
                        requested.printed, device_total.printed
                    );
                }
                Verdict::Undecided => {
                    d.summary = format!(
                        "vLLM wanted {} ({gpu_memory_utilization} of {}) and {used} was in use at start: about what a CUDA context, a display or a small tenant takes.",
                        requested.printed, device_total.printed
                    );
                    d.undecided(
                        format!("Who holds the {used} in use at start?"),
                        vec![cause::OTHER_PROCESS, cause::CAPACITY],
                        "beyond one CUDA context it is about the shortfall: the printed precision cannot tell".into(),
                    );
                }
            }
            d.findings.push(format!(
                "The check compares free memory with the whole budget; the shortfall is {short}."
            ));
            nvidia_smi_check(d);
            if let Some((low, _)) = fits {
                let passing = (low * 100.0).floor() / 100.0;
                d.check(
                    format!("vllm serve MODEL --gpu-memory-utilization {passing:.2}"),
                    "the largest utilization the free memory at start allows (budget everything vLLM then needs inside it)",
                );
            }
        }
        Detail::VllmSamplerWarmup { dummy_requests } => {
            d.count("dummy_requests", "as printed", *dummy_requests);
            d.summary = format!(
                "vLLM's sampler warm-up with {dummy_requests} requests ran out of memory after the KV cache took its budget: the sampler's peak was not in the profiled estimate."
            );
            d.undecided(
                "Was the budget too large for the card, or was the memory elsewhere?".into(),
                vec![cause::CAPACITY, cause::OTHER_PROCESS, cause::OUTSIDE_ALLOCATOR],
                "the message carries no figure; the PyTorch error chained before it in the log does".into(),
            );
            d.check(
                format!("vllm serve MODEL --max-num-seqs {}", (*dummy_requests / 2).max(1)),
                "fewer sequences per step shrink the sampler's warm-up (one logits row per sequence)",
            );
            d.check(
                "vllm serve MODEL --gpu-memory-utilization 0.85",
                "a smaller KV-cache budget leaves the sampler room on the card",
            );
            nvidia_smi_check(d);
        }
        Detail::VllmNoKvCacheMemory {} => {
            d.cause = Some(cause::CAPACITY);
            d.summary = "The weights, the profiled activation peak, memory outside torch and the CUDA-graph estimate took the whole gpu_memory_utilization budget: nothing was left for the KV cache.".into();
            kv_checks(d);
        }
        Detail::VllmKvCacheTooSmall {
            max_model_len,
            kv_cache_needed,
            kv_cache_available,
            estimated_max_model_len,
        } => {
            let (n, a) = (Iv::of(kv_cache_needed), Iv::of(kv_cache_available));
            d.count("max_model_len_tokens", "as configured", *max_model_len);
            let short = d.bytes(
                "kv_shortfall_bytes",
                "kv_cache_needed − kv_cache_available",
                n.minus(a).non_negative(),
            );
            let tokens = i128::from((*max_model_len).max(1));
            let per_token = Iv {
                low: n.low / tokens,
                high: (n.high + tokens - 1) / tokens,
            };
            d.bytes(
                "kv_bytes_per_token",
                "kv_cache_needed / max_model_len",
                per_token,
            );
            d.fraction(
                "kv_available_share_of_needed",
                "kv_cache_available / kv_cache_needed",
                a,
                n,
            );
            d.cause = Some(cause::CAPACITY);
            d.summary = format!(
                "One request at max_model_len {max_model_len} needs {} of KV cache; the budget left {}: {short} short.",
                kv_cache_needed.printed, kv_cache_available.printed
            );
            if let Some(len) = estimated_max_model_len {
                d.count(
                    "estimated_max_model_len_tokens",
                    "vLLM's estimate for the available memory",
                    *len,
                );
                d.check(
                    format!("vllm serve MODEL --max-model-len {len}"),
                    "the longest context the available KV memory holds, by vLLM's own estimate",
                );
            }
            d.check(
                format!(
                    "headroom plan --kv-per-request {}B --capacity TOTAL --weights WEIGHTS --other-peak PEAK --margin MARGIN",
                    n.high
                ),
                "the budget for one full-length request, category by category (fill in the figures from vLLM's memory profiling line)",
            );
            kv_checks(d);
        }
        Detail::VllmMaxSeqLen {
            max_model_len,
            kv_cache_tokens: None,
        } => {
            d.count("max_model_len_tokens", "as configured", *max_model_len);
            d.cause = Some(cause::CAPACITY);
            d.summary = format!(
                "vLLM refused max_model_len {max_model_len}: the KV cache holds fewer tokens than one request of that length (the message is cut before it says how many)."
            );
            d.findings.push(
                "The message stops after its first count; vLLM's next words give the tokens the KV cache holds (\"is larger than the maximum number of tokens that can be stored in KV cache (N)\").".into(),
            );
            kv_checks(d);
        }
        Detail::VllmMaxSeqLen {
            max_model_len,
            kv_cache_tokens: Some(kv_cache_tokens),
        } => {
            d.count("max_model_len_tokens", "as configured", *max_model_len);
            d.count("kv_cache_tokens", "blocks × block size", *kv_cache_tokens);
            d.cause = Some(cause::CAPACITY);
            d.summary = format!(
                "The KV cache holds {kv_cache_tokens} tokens, fewer than one request at max_model_len {max_model_len}."
            );
            d.check(
                format!("vllm serve MODEL --max-model-len {kv_cache_tokens}"),
                "the longest context the KV cache holds",
            );
            kv_checks(d);
        }
        _ => {}
    }
}

fn kv_checks(d: &mut Diagnosis) {
    d.findings.push(
        "vLLM's KV budget is total × gpu_memory_utilization − (weights + torch peak in the profile run + memory outside torch) − CUDA-graph estimate; NCCL buffers and graphs larger than estimated shrink it further.".into(),
    );
    d.check(
        "grep -E 'Memory profiling takes|model weights take|Available KV cache memory' vllm.log",
        "vLLM's own breakdown of the budget: weights, activation peak, non-torch memory and what was left",
    );
    d.check(
        "vllm serve MODEL --gpu-memory-utilization 0.95 --max-num-batched-tokens 8192",
        "a utilization above the current one, and fewer batched tokens (a smaller profiled activation peak), leave more for the KV cache",
    );
}
