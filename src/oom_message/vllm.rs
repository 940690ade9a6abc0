//! vLLM's start-up refusals, read as vLLM raises them.
//!
//! - `vllm/v1/worker/utils.py` `request_memory` (commit 001cabc1 of vllm-project/vllm):
//!   `f"Free memory on device {device} ({format_gib(free)}/{format_gib(total)} GiB) on startup
//!   is less than desired GPU memory utilization ({utilization}, {format_gib(requested)} GiB).
//!   Decrease GPU memory utilization or reduce GPU memory used by other processes."`; older
//!   releases printed no device.
//! - `vllm/v1/core/kv_cache_utils.py` `_check_enough_kv_cache_memory`: "No available memory for
//!   the cache blocks. …" when nothing is left, else "To serve at least one request with the
//!   models's max seq len ({max_model_len}), ({format_gib(needed)} GiB KV cache is needed, which
//!   is larger than the available KV cache memory ({format_gib(available)} GiB). Based on the
//!   available memory, the estimated maximum model length is {n}. …" (other releases: "model's"
//!   and no parenthesis before the size).
//! - `vllm/worker/worker.py` `raise_if_cache_size_invalid` (before V1): "The model's max seq len
//!   ({max_model_len}) is larger than the maximum number of tokens that can be stored in KV
//!   cache ({max_seq_len}). …".
//!
//! `format_gib` (`vllm/utils/mem_utils.py`, commit a6d5c390) is `round(b / GiB_bytes, 2)`.

use super::Detail;
use super::cursor::Cursor;
use super::scan::{Found, Reader, raised_as};

const WINDOW: usize = 2048;

pub(super) const ANCHORS: &[(&str, Reader)] = &[
    ("Free memory on device", |t, a, e| {
        read(t, a, e, startup_free_memory)
    }),
    ("No available memory for the cache blocks", |t, a, e| {
        read(t, a, e, no_kv_cache_memory)
    }),
    ("To serve at least one request with the model", |t, a, e| {
        read(t, a, e, kv_cache_too_small)
    }),
    ("The model's max seq len (", read_max_seq_len),
    (
        "out of memory occurred when warming up sampler",
        read_sampler,
    ),
];

fn read(
    text: &str,
    at: usize,
    anchor_end: usize,
    parse: fn(&mut Cursor) -> Option<Detail>,
) -> Option<Found> {
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    let detail = c.attempt(parse)?;
    Some(Found {
        start: at,
        end: c.pos,
        raised_as: raised_as(text, at),
        detail,
    })
}

/// `vllm/v1/worker/gpu_model_runner.py` `_dummy_sampler_run`: "CUDA out of memory occurred
/// when warming up sampler with {num_reqs} dummy requests. Please try lowering `max_num_seqs`
/// or `gpu_memory_utilization` when initializing the engine."
fn read_sampler(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let start = text[..at].strip_suffix("CUDA ").map_or(at, |b| b.len());
    let mut c = Cursor::new(text, anchor_end, anchor_end + WINDOW);
    c.lit(" with ").then_some(())?;
    let dummy_requests = c.uint()?;
    c.lit(" dummy requests.").then_some(())?;
    c.lit(" Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.");
    Some(Found {
        start,
        end: c.pos,
        raised_as: raised_as(text, start),
        detail: Detail::VllmSamplerWarmup { dummy_requests },
    })
}

/// " See https://docs.vllm.ai/… for more details."
fn see_more(c: &mut Cursor) {
    c.attempt(|c| {
        c.lit(" See ").then_some(())?;
        c.token(b"")?;
        c.lit(" for more details.").then_some(())
    });
}

fn startup_free_memory(c: &mut Cursor) -> Option<Detail> {
    let device = c.attempt(|c| {
        c.lit(" ").then_some(())?;
        c.token(b"(").map(str::to_string)
    });
    c.lit(" (").then_some(())?;
    let device_free = c.vllm_gib()?;
    c.lit("/").then_some(())?;
    let device_total = c.vllm_gib()?;
    c.lit(" GiB) on startup is less than desired GPU memory utilization (")
        .then_some(())?;
    let gpu_memory_utilization = c.number_text()?.to_string();
    c.lit(", ").then_some(())?;
    let requested = c.vllm_gib()?;
    c.lit(" GiB).").then_some(())?;
    c.lit(" Decrease GPU memory utilization or reduce GPU memory used by other processes.");
    Some(Detail::VllmStartupFreeMemory {
        device,
        device_free,
        device_total,
        gpu_memory_utilization,
        requested,
    })
}

fn no_kv_cache_memory(c: &mut Cursor) -> Option<Detail> {
    if !c.lit(".") {
        return Some(Detail::VllmNoKvCacheMemory {});
    }
    if c.lit(" Try increasing `gpu_memory_utilization` when initializing the engine.") {
        see_more(c);
    }
    Some(Detail::VllmNoKvCacheMemory {})
}

fn kv_cache_too_small(c: &mut Cursor) -> Option<Detail> {
    (c.lit_loose("'s max seq len (") || c.lit_loose("s's max seq len (")).then_some(())?;
    let max_model_len = c.uint()?;
    c.lit_loose("),").then_some(())?;
    c.lit(" (");
    c.skip_ws();
    let kv_cache_needed = c.vllm_gib()?;
    c.lit(" GiB KV cache is needed, which is larger than the available KV cache memory (")
        .then_some(())?;
    let kv_cache_available = c.vllm_gib()?;
    c.lit(" GiB).").then_some(())?;
    let estimated_max_model_len = c.attempt(|c| {
        c.lit(" Based on the available memory,");
        c.lit(" the");
        (c.lit(" estimated maximum model length is ")
            || c.lit(" Estimated maximum model length is "))
        .then_some(())?;
        let n = c.uint()?;
        c.lit_loose(".").then_some(n)
    });
    if c.lit(" Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.") {
        see_more(c);
    }
    Some(Detail::VllmKvCacheTooSmall {
        max_model_len,
        kv_cache_needed,
        kv_cache_available,
        estimated_max_model_len,
    })
}

fn max_seq_len(c: &mut Cursor) -> Option<Detail> {
    let max_model_len = c.uint()?;
    c.lit(") is larger than the maximum number of tokens that can be stored in KV cache (")
        .then_some(())?;
    let kv_cache_tokens = c.uint()?;
    c.lit_loose(").").then_some(())?;
    c.lit(" Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.");
    Some(Detail::VllmMaxSeqLen {
        max_model_len,
        kv_cache_tokens: Some(kv_cache_tokens),
    })
}

/// The message whole, or cut by the paste right after its first count: an issue title that
/// ends at "The model's max seq len (32768)" still names vLLM's refusal (no other vLLM message
/// opens so), without the KV cache's count.
fn read_max_seq_len(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    if let Some(found) = read(text, at, anchor_end, max_seq_len) {
        return Some(found);
    }
    let mut c = Cursor::new(text, anchor_end, text.len());
    let max_model_len = c.uint()?;
    c.lit(")").then_some(())?;
    let cut = text[c.pos..]
        .trim_matches(|ch: char| {
            ch.is_whitespace() || matches!(ch, '`' | '*' | '"' | '\'' | '.' | '_')
        })
        .is_empty();
    cut.then(|| Found {
        start: at,
        end: c.pos,
        raised_as: raised_as(text, at),
        detail: Detail::VllmMaxSeqLen {
            max_model_len,
            kv_cache_tokens: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Detail, find_all};

    #[test]
    fn the_max_seq_len_refusal_cut_after_its_first_count_is_still_read() {
        for text in [
            "ValueError: The model's max seq len (32768)",
            "The model's max seq len (8192)\n",
            "**ValueError: The model's max seq len (131072)**",
            "`The model's max seq len (4096)`",
        ] {
            let found = find_all(text);
            assert_eq!(found.len(), 1, "{text}");
            assert!(
                matches!(
                    found[0].detail,
                    Detail::VllmMaxSeqLen {
                        kv_cache_tokens: None,
                        ..
                    }
                ),
                "{text}: {:?}",
                found[0].detail
            );
        }
        let found = find_all(
            "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (21840). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        );
        assert!(matches!(
            found[0].detail,
            Detail::VllmMaxSeqLen {
                kv_cache_tokens: Some(21840),
                ..
            }
        ));
        // The same words going on to something else are not the refusal.
        assert!(find_all("The model's max seq len (4096) is set from the config.").is_empty());
        assert!(find_all("The model's max seq len (4096) and batch 8\nnext line").is_empty());
    }
}
