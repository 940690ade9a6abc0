//! A GGUF file's header: the metadata llama.cpp reads (`{arch}.block_count`,
//! `{arch}.attention.head_count_kv`, `{arch}.attention.key_length`, …) and every tensor's type
//! and shape, so that weights are exact per tensor and per layer (what `-ngl` offloads).
//!
//! Layout (ggml's `docs/gguf.md`): magic `GGUF`, version u32, tensor count u64, metadata count
//! u64, the metadata (key string, type u32, value), then per tensor: name, dimension count u32,
//! dimensions u64 each, ggml type u32, offset u64. Strings are a u64 length and UTF-8 bytes.
//! Only the header is read; tensor data is never touched.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::Serialize;

use super::{LayerCache, ModelError, ModelSource, ModelSpec, Quant};

/// Where a GGUF's tensor bytes sit, as llama.cpp places them by `-ngl`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct GgufLayout {
    /// Bytes of `blk.N.*` for each layer N.
    pub layer_bytes: Vec<u64>,
    /// `token_embd.*`: llama.cpp keeps the input layer in host memory.
    pub input_bytes: u64,
    /// `output.*` and `output_norm.*`: on the GPU when every layer is offloaded.
    pub output_bytes: u64,
}

/// (block elements, block bytes) of a ggml type (ggml/src/ggml.c `type_traits`).
fn type_size(t: u32) -> Option<(u64, u64)> {
    Some(match t {
        0 => (1, 4),
        1 | 30 => (1, 2),
        2 => (32, 18),
        3 => (32, 20),
        6 => (32, 22),
        7 => (32, 24),
        8 => (32, 34),
        9 => (32, 36),
        10 => (256, 84),
        11 => (256, 110),
        12 => (256, 144),
        13 => (256, 176),
        14 => (256, 210),
        15 => (256, 292),
        16 => (256, 66),
        17 => (256, 74),
        18 => (256, 98),
        19 => (256, 50),
        20 => (32, 18),
        21 => (256, 110),
        22 => (256, 82),
        23 => (256, 136),
        24 => (1, 1),
        25 => (1, 2),
        26 => (1, 4),
        27 | 28 => (1, 8),
        29 => (256, 56),
        34 => (256, 54),
        35 => (256, 66),
        39 => (32, 17),
        _ => return None,
    })
}

#[derive(Debug, Clone)]
enum Meta {
    Int(i128),
    Float,
    Str(String),
    Array(Vec<Meta>),
    Bool,
}

struct Reader<R> {
    r: R,
    place: String,
}

impl<R: Read> Reader<R> {
    fn bad(&self, what: impl std::fmt::Display) -> ModelError {
        ModelError::Field {
            place: self.place.clone(),
            message: what.to_string(),
        }
    }
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], ModelError> {
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|e| self.bad(format!("header ends early: {e}")))?;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn string(&mut self) -> Result<String, ModelError> {
        let n = self.u64()?;
        if n > 1 << 20 {
            return Err(self.bad(format!("a string of {n} bytes in the header")));
        }
        let mut b = vec![0u8; n as usize];
        self.r
            .read_exact(&mut b)
            .map_err(|e| self.bad(format!("header ends early: {e}")))?;
        String::from_utf8(b).map_err(|_| self.bad("a string in the header is not UTF-8"))
    }
    fn value(&mut self, t: u32, depth: u32) -> Result<Meta, ModelError> {
        Ok(match t {
            0 => Meta::Int(self.bytes::<1>()?[0] as i128),
            1 => Meta::Int(self.bytes::<1>()?[0] as i8 as i128),
            2 => Meta::Int(u16::from_le_bytes(self.bytes()?) as i128),
            3 => Meta::Int(i16::from_le_bytes(self.bytes()?) as i128),
            4 => Meta::Int(self.u32()? as i128),
            5 => Meta::Int(i32::from_le_bytes(self.bytes()?) as i128),
            6 => {
                self.bytes::<4>()?;
                Meta::Float
            }
            7 => {
                self.bytes::<1>()?;
                Meta::Bool
            }
            8 => Meta::Str(self.string()?),
            9 if depth == 0 => {
                let et = self.u32()?;
                let n = self.u64()?;
                if n > 1 << 24 {
                    return Err(self.bad(format!("an array of {n} values in the header")));
                }
                // Long arrays (the tokenizer's) are read and dropped; only their length is kept.
                let mut v = Vec::with_capacity(n.min(4096) as usize);
                for _ in 0..n {
                    let x = self.value(et, 1)?;
                    if v.len() < 4096 {
                        v.push(x);
                    }
                }
                if n > 4096 {
                    return Ok(Meta::Int(n as i128));
                }
                Meta::Array(v)
            }
            10 => Meta::Int(self.u64()? as i128),
            11 => Meta::Int(i64::from_le_bytes(self.bytes()?) as i128),
            12 => {
                self.bytes::<8>()?;
                Meta::Float
            }
            other => return Err(self.bad(format!("metadata value type {other} is not GGUF's"))),
        })
    }
}

/// Reads a GGUF file's header into a model.
pub fn read(path: &Path, name: &str) -> Result<ModelSpec, ModelError> {
    let place = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|e| ModelError::Io(format!("{place}: cannot read: {e}")))?;
    let mut r = Reader {
        r: BufReader::new(file),
        place: place.clone(),
    };
    if &r.bytes::<4>()? != b"GGUF" {
        return Err(r.bad("not a GGUF file (no GGUF magic)"));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(r.bad(format!(
            "GGUF version {version}: headroom reads versions 2 and 3"
        )));
    }
    let tensors = r.u64()?;
    let kvs = r.u64()?;
    let mut meta = BTreeMap::new();
    for _ in 0..kvs {
        let k = r.string()?;
        let t = r.u32()?;
        let v = r.value(t, 0)?;
        meta.insert(k, v);
    }
    let mut layout = GgufLayout::default();
    let mut total = 0u64;
    for _ in 0..tensors {
        let tname = r.string()?;
        let dims = r.u32()?;
        let mut elements = 1u64;
        for _ in 0..dims {
            elements = elements.saturating_mul(r.u64()?);
        }
        let ty = r.u32()?;
        let _offset = r.u64()?;
        let (blk, bytes) = type_size(ty).ok_or_else(|| {
            r.bad(format!(
                "tensor {tname:?}: ggml type {ty} is not one headroom knows"
            ))
        })?;
        let size = elements.div_ceil(blk) * bytes;
        total += size;
        if let Some(rest) = tname.strip_prefix("blk.") {
            let idx: usize = rest
                .split('.')
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| r.bad(format!("tensor {tname:?}: no layer number")))?;
            if layout.layer_bytes.len() <= idx {
                layout.layer_bytes.resize(idx + 1, 0);
            }
            layout.layer_bytes[idx] += size;
        } else if tname.starts_with("token_embd") {
            layout.input_bytes += size;
        } else {
            layout.output_bytes += size;
        }
    }
    from_meta(&meta, &place, name, path, layout, total)
}

fn from_meta(
    meta: &BTreeMap<String, Meta>,
    place: &str,
    name: &str,
    path: &Path,
    layout: GgufLayout,
    total: u64,
) -> Result<ModelSpec, ModelError> {
    let arch = match meta.get("general.architecture") {
        Some(Meta::Str(s)) => s.clone(),
        _ => {
            return Err(ModelError::Field {
                place: place.to_string(),
                message: "general.architecture: missing".to_string(),
            });
        }
    };
    let int = |key: &str| -> Option<u64> {
        match meta.get(&format!("{arch}.{key}")) {
            Some(Meta::Int(i)) if *i >= 0 => Some(*i as u64),
            _ => None,
        }
    };
    let need = |key: &str| -> Result<u64, ModelError> {
        int(key).ok_or_else(|| ModelError::Field {
            place: place.to_string(),
            message: format!("{arch}.{key}: missing (llama.cpp needs it)"),
        })
    };
    let n = need("block_count")?;
    let hidden = need("embedding_length")?;
    let heads = need("attention.head_count")?;
    // head_count_kv may be one number or one per layer.
    let kv_per_layer: Vec<u64> = match meta.get(&format!("{arch}.attention.head_count_kv")) {
        Some(Meta::Int(i)) => vec![*i as u64; n as usize],
        Some(Meta::Array(a)) => a
            .iter()
            .map(|m| match m {
                Meta::Int(i) => *i as u64,
                _ => 0,
            })
            .collect(),
        _ => vec![heads; n as usize],
    };
    let head_dim = int("attention.key_length").unwrap_or(hidden / heads.max(1));
    let window = int("attention.sliding_window");
    let layers = kv_per_layer
        .iter()
        .map(|kv| match window {
            Some(w) if w > 0 => LayerCache::Sliding {
                kv_heads: *kv,
                head_dim,
                window_tokens: w,
            },
            _ => LayerCache::Full {
                kv_heads: *kv,
                head_dim,
            },
        })
        .collect();
    let max_pos = int("context_length").unwrap_or(0);
    let rotary_dim = int("rope.dimension_count").unwrap_or(head_dim);
    let intermediate_size = int("feed_forward_length").unwrap_or(0);
    let experts_per_token = int("expert_used_count").unwrap_or(0);
    let vocab = match meta.get("tokenizer.ggml.tokens") {
        Some(Meta::Int(n)) => *n as u64,
        Some(Meta::Array(a)) => a.len() as u64,
        _ => 0,
    };
    Ok(ModelSpec {
        name: name.to_string(),
        source: ModelSource::Gguf {
            path: path.to_path_buf(),
        },
        architecture: arch.clone(),
        model_type: arch,
        dtype_bytes: 2,
        dtype: "gguf".to_string(),
        hidden_size: hidden,
        num_attention_heads: heads,
        vocab_size: vocab,
        max_position_embeddings: max_pos,
        rotary_dim,
        intermediate_size,
        experts_per_token,
        tie_word_embeddings: false,
        layers,
        quant: Quant::None,
        tensors: Vec::new(),
        checkpoint_bytes: Some(total),
        gguf: Some(layout),
    })
}

/// Writes a GGUF header (no tensor data) for tests: metadata of u32s and strings, tensors of
/// (name, dims, ggml type).
#[cfg(test)]
pub fn write_header(
    meta_u32: &[(&str, u32)],
    meta_str: &[(&str, &str)],
    tensors: &[(&str, &[u64], u32)],
) -> Vec<u8> {
    let mut b = Vec::new();
    let s = |b: &mut Vec<u8>, t: &str| {
        b.extend((t.len() as u64).to_le_bytes());
        b.extend(t.as_bytes());
    };
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend(((meta_u32.len() + meta_str.len()) as u64).to_le_bytes());
    for (k, v) in meta_str {
        s(&mut b, k);
        b.extend(8u32.to_le_bytes());
        s(&mut b, v);
    }
    for (k, v) in meta_u32 {
        s(&mut b, k);
        b.extend(4u32.to_le_bytes());
        b.extend(v.to_le_bytes());
    }
    for (name, dims, ty) in tensors {
        s(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in *dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(ty.to_le_bytes());
        b.extend(0u64.to_le_bytes());
    }
    b
}
