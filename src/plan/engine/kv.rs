//! Per-layer KV specs on one GPU and the block arithmetic engines do with them.
//!
//! A layer's bytes per token: `2 × max(1, kv_heads / TP) × head_dim × kv dtype bytes` for
//! full and sliding attention (K and V); `(kv_lora_rank + rope_head_dim) × kv dtype bytes`
//! for MLA's latent, the same on every rank (vLLM pads it to a multiple of 256 bytes in the
//! releases before 0.8, PR #14842); nothing per token for a state-space layer.
//!
//! vLLM V1 (vllm/v1/core/kv_cache_utils.py) groups layers by spec: one group when all
//! layers are alike; otherwise groups of `group_size` layers (the smallest type's layer count,
//! or the largest when it is under 1.5 × the smallest), padded, all sharing one page size.
//! Blocks are `available // page_size // group_size`; the tokens it reports are
//! `blocks // groups × block_size`.

use crate::model::{LayerCache, ModelSpec};

/// One attention layer's cache on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayerKv {
    /// Bytes per token on this GPU.
    pub bytes_per_token: u64,
    /// `Some(window)` for a sliding-window layer.
    pub window: Option<u64>,
}

/// The per-token layers of `model` on one of `tp` ranks with a KV dtype of `dtype_bytes`.
pub fn layers(model: &ModelSpec, tp: u64, dtype_bytes: u64, pad_latent: bool) -> Vec<LayerKv> {
    model
        .layers
        .iter()
        .filter_map(|l| match *l {
            LayerCache::Full { kv_heads, head_dim } => Some(LayerKv {
                bytes_per_token: 2 * (kv_heads / tp).max(1) * head_dim * dtype_bytes,
                window: None,
            }),
            LayerCache::Sliding {
                kv_heads,
                head_dim,
                window_tokens,
            } => Some(LayerKv {
                bytes_per_token: 2 * (kv_heads / tp).max(1) * head_dim * dtype_bytes,
                window: Some(window_tokens),
            }),
            LayerCache::Latent {
                kv_lora_rank,
                rope_head_dim,
            } => {
                let b = (kv_lora_rank + rope_head_dim) * dtype_bytes;
                Some(LayerKv {
                    bytes_per_token: if pad_latent {
                        b.next_multiple_of(256)
                    } else {
                        b
                    },
                    window: None,
                })
            }
            LayerCache::State { .. } => None,
        })
        .collect()
}

/// vLLM V1's KV cache groups: `(spec, layers in the group)` per group.
#[derive(Debug, Clone, PartialEq)]
pub struct Groups {
    pub groups: Vec<LayerKv>,
    /// Layers per group (padding included).
    pub group_size: u64,
    /// Bytes per token of one layer (the uniform page size ÷ block size).
    pub page_bytes_per_token: u64,
}

/// Groups the layers as vLLM V1's hybrid allocator does (`hybrid`), or treats every layer as
/// full attention in one group (V0, or the hybrid manager disabled).
pub fn groups(layers: &[LayerKv], hybrid: bool) -> Groups {
    let mut kinds: Vec<(LayerKv, u64)> = Vec::new();
    for l in layers {
        let l = if hybrid {
            *l
        } else {
            LayerKv { window: None, ..*l }
        };
        match kinds.iter_mut().find(|(k, _)| *k == l) {
            Some((_, n)) => *n += 1,
            None => kinds.push((l, 1)),
        }
    }
    if kinds.len() <= 1 {
        let (spec, n) = kinds.first().copied().unwrap_or((
            LayerKv {
                bytes_per_token: 0,
                window: None,
            },
            0,
        ));
        return Groups {
            groups: vec![spec],
            group_size: n,
            page_bytes_per_token: spec.bytes_per_token,
        };
    }
    let min = kinds.iter().map(|(_, n)| *n).min().unwrap_or(1);
    let max = kinds.iter().map(|(_, n)| *n).max().unwrap_or(1);
    let group_size = if (max as f64) < min as f64 * 1.5 {
        max
    } else {
        min
    };
    let mut groups = Vec::new();
    for (spec, n) in &kinds {
        for _ in 0..n.div_ceil(group_size) {
            groups.push(*spec);
        }
    }
    Groups {
        page_bytes_per_token: kinds
            .iter()
            .map(|(k, _)| k.bytes_per_token)
            .max()
            .unwrap_or(0),
        groups,
        group_size,
    }
}

impl Groups {
    /// Bytes of one block id across its group's layers.
    pub fn block_bytes(&self, block_size: u64) -> u64 {
        self.page_bytes_per_token * block_size * self.group_size
    }

    /// KV bytes per token of capacity: one block in every group per `block_size` tokens.
    pub fn bytes_per_token(&self) -> u64 {
        self.page_bytes_per_token * self.group_size * self.groups.len() as u64
    }

    /// Blocks one request of `max_model_len` tokens may need (V1's
    /// `get_max_concurrency_for_kv_cache_config`): a full group needs the whole length, a
    /// sliding group `min(window − 1 + batched tokens, length)` plus one block.
    pub fn blocks_per_request(&self, max_model_len: u64, block_size: u64, batched: u64) -> u64 {
        self.groups
            .iter()
            .map(|g| match g.window {
                None => max_model_len.div_ceil(block_size),
                Some(w) => {
                    let tokens = (w.saturating_sub(1) + batched).min(max_model_len);
                    tokens.div_ceil(block_size) + 1
                }
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(b: u64) -> LayerKv {
        LayerKv {
            bytes_per_token: b,
            window: None,
        }
    }

    #[test]
    fn alternating_layers_make_two_groups_of_half() {
        let slide = LayerKv {
            bytes_per_token: 512,
            window: Some(128),
        };
        let layers: Vec<LayerKv> = (0..36)
            .map(|i| if i % 2 == 0 { slide } else { full(512) })
            .collect();
        let g = groups(&layers, true);
        assert_eq!((g.groups.len(), g.group_size), (2, 18));
        assert_eq!(g.bytes_per_token(), 36 * 512);
        // 16384-token requests, 2048 batched tokens, blocks of 16: 1024 + (136 + 1).
        assert_eq!(g.blocks_per_request(16_384, 16, 2048), 1161);
        let v0 = groups(&layers, false);
        assert_eq!((v0.groups.len(), v0.group_size), (1, 36));
    }

    #[test]
    fn five_to_one_pattern_groups_by_the_smaller_count() {
        let slide = LayerKv {
            bytes_per_token: 1024,
            window: Some(1024),
        };
        let layers: Vec<LayerKv> = (0..30)
            .map(|i| if i % 6 == 5 { full(1024) } else { slide })
            .collect();
        let g = groups(&layers, true);
        // 25 sliding and 5 full: groups of 5, five sliding groups and one full.
        assert_eq!((g.groups.len(), g.group_size), (6, 5));
    }
}
