//! The weights of a model, group by group, and the bytes each group takes on one GPU of a
//! tensor-parallel group under the checkpoint's quantization.
//!
//! Packed layouts (per weight matrix of `in × out` values):
//! - unquantized: `in × out × dtype_bytes`;
//! - AWQ / GPTQ (`bits`, `group_size`): `in × out × bits / 8` packed, plus per group and output
//!   an fp16 scale and a `bits`-wide zero point (GPTQ adds a 4-byte `g_idx` per input row);
//! - fp8: one byte per value, plus one fp32 scale per tensor, per output channel
//!   (compressed-tensors' `strategy = "channel"`, llm-compressor's FP8_DYNAMIC scheme), or per
//!   `block × block` tile when the checkpoint gives `weight_block_size` (DeepSeek V3);
//! - bitsandbytes 4-bit: half a byte per value plus one fp32 absmax per 64 values;
//!   bitsandbytes 8-bit: one byte per value plus one fp32 scale per output row;
//! - mxfp4 (gpt-oss's experts): half a byte per value plus one e8m0 byte per 32 values.
//!
//! Embeddings, norms, biases and routers stay in the checkpoint's dtype.

use serde::Serialize;

/// How the checkpoint stores its linear layers (`quantization_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Quant {
    None,
    Awq {
        bits: u64,
        group_size: u64,
    },
    Gptq {
        bits: u64,
        group_size: u64,
    },
    /// `block` is 0 for one scale per tensor.
    Fp8 {
        block: u64,
    },
    /// fp8 values with one fp32 scale per output channel.
    Fp8Channel,
    BitsAndBytes4,
    BitsAndBytes8,
    /// Only the MoE experts are mxfp4; everything else keeps the dtype.
    Mxfp4,
}

/// What a group of weights is, which decides its sharding and whether it is quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// Token embedding or LM head: `vocab × hidden`, sharded by vocabulary rows.
    Vocab,
    /// A linear layer split by output columns (q, k, v, gate, up, fc1).
    Column,
    /// K or V projection: split by heads, replicated when there are fewer heads than ranks.
    KvColumn { kv_heads: u64 },
    /// A linear layer split by input rows (o, down, fc2).
    Row,
    /// An MoE expert's linear layer, `rows = hidden`, `cols = the expert's intermediate
    /// width` (the down projection too, transposed), split by the intermediate width.
    Expert,
    /// Kept whole on every rank and never quantized: norms, routers, small projections.
    Replicated,
    /// A vision or audio tower: counted as weights, kept whole, never quantized by the text
    /// model's method.
    Tower,
}

/// `count` tensors of `rows × cols` values each (biases and norms have `rows = 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TensorGroup {
    pub what: &'static str,
    pub kind: TensorKind,
    pub count: u64,
    /// Input features (for `Vocab`: the vocabulary).
    pub rows: u64,
    /// Output features (for `Vocab`: the hidden size).
    pub cols: u64,
}

impl TensorGroup {
    pub fn params(&self) -> u64 {
        self.count * self.rows * self.cols
    }
}

/// vLLM pads the vocabulary of its embedding and LM head to a multiple of 64
/// (`DEFAULT_VOCAB_PADDING_SIZE`, vllm/model_executor/layers/vocab_parallel_embedding.py).
pub const VOCAB_PADDING: u64 = 64;

/// The bytes of `rows × cols` values stored under `quant` (for a quantized kind).
fn packed_bytes(quant: Quant, rows: u64, cols: u64, dtype_bytes: u64, expert: bool) -> u64 {
    let values = rows * cols;
    match quant {
        Quant::None => values * dtype_bytes,
        Quant::Awq { bits, group_size } => {
            let groups = rows.div_ceil(group_size.max(1));
            values * bits / 8 + groups * cols * 2 + groups * cols * bits / 8
        }
        Quant::Gptq { bits, group_size } => {
            let groups = rows.div_ceil(group_size.max(1));
            values * bits / 8 + groups * cols * 2 + groups * cols * bits / 8 + rows * 4
        }
        Quant::Fp8 { block: 0 } => values + 4,
        Quant::Fp8 { block } => values + rows.div_ceil(block) * cols.div_ceil(block) * 4,
        Quant::Fp8Channel => values + cols * 4,
        Quant::BitsAndBytes4 => values / 2 + values.div_ceil(64) * 4,
        Quant::BitsAndBytes8 => values + cols * 4,
        Quant::Mxfp4 if expert => values / 2 + values.div_ceil(32),
        Quant::Mxfp4 => values * dtype_bytes,
    }
}

/// How an mxfp4 MoE kernel pads every expert's matrices on one rank: the rank's share of the
/// intermediate width and the hidden size are rounded up to these multiples before the
/// weights are allocated (vLLM's `Mxfp4MoEMethod.create_weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertPadding {
    pub intermediate_multiple: u64,
    pub hidden_multiple: u64,
}

impl ExpertPadding {
    /// No padding: the checkpoint's own layout.
    pub const NONE: ExpertPadding = ExpertPadding {
        intermediate_multiple: 1,
        hidden_multiple: 1,
    };
    /// The width padded to 256, the hidden size kept: what vLLM 0.10–0.11 allocated on
    /// Hopper (the corpus's H100 reports vllm-0016/0017 match it within 0.3 %).
    pub const HOPPER: ExpertPadding = ExpertPadding {
        intermediate_multiple: 256,
        hidden_multiple: 1,
    };
    /// The Marlin kernel, vLLM's mxfp4 backend below compute capability 9.0: the width to a
    /// multiple of 128 and the hidden size to 256 ("n % 256 == 0 and k % 128 == 0").
    pub const MARLIN: ExpertPadding = ExpertPadding {
        intermediate_multiple: 128,
        hidden_multiple: 256,
    };
    /// FlashInfer's TRT-LLM kernels on compute capability 10.x: both to 256.
    pub const BLACKWELL: ExpertPadding = ExpertPadding {
        intermediate_multiple: 256,
        hidden_multiple: 256,
    };
}

/// Bytes of one group on one rank of `tp` tensor-parallel ranks.
pub fn group_bytes_per_rank(g: &TensorGroup, quant: Quant, dtype_bytes: u64, tp: u64) -> u64 {
    group_bytes_per_rank_padded(g, quant, dtype_bytes, tp, ExpertPadding::HOPPER)
}

/// [`group_bytes_per_rank`] with the mxfp4 experts padded as `pad` says.
pub fn group_bytes_per_rank_padded(
    g: &TensorGroup,
    quant: Quant,
    dtype_bytes: u64,
    tp: u64,
    pad: ExpertPadding,
) -> u64 {
    let tp = tp.max(1);
    let per = match g.kind {
        TensorKind::Vocab => {
            let padded = g.rows.next_multiple_of(VOCAB_PADDING);
            padded.div_ceil(tp) * g.cols * dtype_bytes
        }
        TensorKind::Column => packed_bytes(quant, g.rows, g.cols.div_ceil(tp), dtype_bytes, false),
        TensorKind::KvColumn { kv_heads } => {
            let head_dim = g.cols / kv_heads.max(1);
            let heads = kv_heads.div_ceil(tp).max(1);
            packed_bytes(quant, g.rows, heads * head_dim, dtype_bytes, false)
        }
        TensorKind::Row => packed_bytes(quant, g.rows.div_ceil(tp), g.cols, dtype_bytes, false),
        TensorKind::Expert => {
            let cols = g.cols.div_ceil(tp);
            // vLLM's mxfp4 MoE kernels pad each expert's matrices
            // (vllm/model_executor/layers/quantization/mxfp4.py, `create_weights`).
            let (rows, cols) = if quant == Quant::Mxfp4 {
                (
                    g.rows.next_multiple_of(pad.hidden_multiple.max(1)),
                    cols.next_multiple_of(pad.intermediate_multiple.max(1)),
                )
            } else {
                (g.rows, cols)
            };
            packed_bytes(quant, rows, cols, dtype_bytes, true)
        }
        TensorKind::Replicated | TensorKind::Tower => g.rows * g.cols * dtype_bytes,
    };
    per * g.count
}

/// The weights of one rank: every group, sharded and packed.
pub fn bytes_per_rank(groups: &[TensorGroup], quant: Quant, dtype_bytes: u64, tp: u64) -> u64 {
    bytes_per_rank_padded(groups, quant, dtype_bytes, tp, ExpertPadding::HOPPER)
}

/// [`bytes_per_rank`] with the mxfp4 experts padded as `pad` says.
pub fn bytes_per_rank_padded(
    groups: &[TensorGroup],
    quant: Quant,
    dtype_bytes: u64,
    tp: u64,
    pad: ExpertPadding,
) -> u64 {
    groups
        .iter()
        .map(|g| group_bytes_per_rank_padded(g, quant, dtype_bytes, tp, pad))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(kind: TensorKind, rows: u64, cols: u64) -> TensorGroup {
        TensorGroup {
            what: "t",
            kind,
            count: 1,
            rows,
            cols,
        }
    }

    #[test]
    fn awq_4bit_packs_values_scales_and_zeros() {
        // 4096 × 4096 in groups of 128: 8 MiB of nibbles, 32 × 4096 fp16 scales, 32 × 4096 nibbles.
        let b = packed_bytes(
            Quant::Awq {
                bits: 4,
                group_size: 128,
            },
            4096,
            4096,
            2,
            false,
        );
        assert_eq!(b, 8_388_608 + 262_144 + 65_536);
    }

    #[test]
    fn vocabulary_is_padded_to_64_then_split() {
        // 32001 rows pad to 32064; over 2 ranks 16032 rows of 4096 bf16 values each.
        let b = group_bytes_per_rank(&g(TensorKind::Vocab, 32_001, 4096), Quant::None, 2, 2);
        assert_eq!(b, 16_032 * 4096 * 2);
    }

    #[test]
    fn kv_heads_are_replicated_when_fewer_than_ranks() {
        // 8 KV heads of 128 on 16 ranks: each rank keeps one whole head.
        let kv = g(TensorKind::KvColumn { kv_heads: 8 }, 8192, 1024);
        assert_eq!(
            group_bytes_per_rank(&kv, Quant::None, 2, 16),
            8192 * 128 * 2
        );
        assert_eq!(group_bytes_per_rank(&kv, Quant::None, 2, 4), 8192 * 256 * 2);
    }

    #[test]
    fn mxfp4_applies_to_experts_only() {
        let e = g(TensorKind::Expert, 2880, 5760);
        let c = g(TensorKind::Column, 2880, 5760);
        let v = 2880 * 5760;
        let padded = 2880 * 5888;
        assert_eq!(
            group_bytes_per_rank(&e, Quant::Mxfp4, 2, 1),
            padded / 2 + padded / 32
        );
        assert_eq!(group_bytes_per_rank(&c, Quant::Mxfp4, 2, 1), v * 2);
    }

    #[test]
    fn marlin_pads_the_hidden_size_to_256_and_the_width_to_128() {
        // gpt-oss-120b's down projection at TP 4: 720 columns a rank pad to 768, the hidden
        // size 2880 to 3072 (Hopper's rule keeps 2880 rows).
        let e = g(TensorKind::Expert, 2880, 2880);
        let marlin = group_bytes_per_rank_padded(&e, Quant::Mxfp4, 2, 4, ExpertPadding::MARLIN);
        assert_eq!(marlin, 3072 * 768 / 2 + 3072 * 768 / 32);
        let hopper = group_bytes_per_rank(&e, Quant::Mxfp4, 2, 4);
        assert_eq!(hopper, 2880 * 768 / 2 + 2880 * 768 / 32);
        // At TP 1 Marlin pads 2880 to 2944, Hopper's rule to 3072.
        let m1 = group_bytes_per_rank_padded(&e, Quant::Mxfp4, 2, 1, ExpertPadding::MARLIN);
        assert_eq!(m1, 3072 * 2944 / 2 + 3072 * 2944 / 32);
    }

    #[test]
    fn fp8_per_channel_has_one_fp32_scale_per_output() {
        let b = packed_bytes(Quant::Fp8Channel, 8192, 28672, 2, false);
        assert_eq!(b, 8192 * 28672 + 28672 * 4);
    }

    #[test]
    fn fp8_block_scales_are_fp32_per_tile() {
        let b = packed_bytes(Quant::Fp8 { block: 128 }, 7168, 2048, 2, false);
        assert_eq!(b, 7168 * 2048 + 56 * 16 * 4);
    }
}
