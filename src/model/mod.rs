//! A model's shape as a serving engine sees it: the layers that hold KV cache (and of what
//! kind), the tensors that hold weights (and how they are quantized), read from a Hugging Face
//! `config.json` (with the checkpoint's safetensors headers or index when present), a GGUF
//! file's header, or the built-in catalogue of common models.
//!
//! Nothing here knows an engine: `crate::plan::engine` turns a [`ModelSpec`] into an engine's
//! figures. An architecture the reader cannot place is an error naming the fields it could not
//! place, never a guess.

pub mod catalogue;
pub mod config;
pub mod fields;
pub mod gguf;
pub mod safetensors;
pub mod weights;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use weights::{Quant, TensorGroup, TensorKind};

/// The largest `config.json` or safetensors index read whole (real ones are kilobytes): a
/// larger file is refused before any of it is held.
pub const JSON_MAX_BYTES: u64 = 64 << 20;

/// Where a model's description came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// The built-in catalogue (`models/catalogue.toml`), with the config's public address.
    Catalogue { id: String, config_source: String },
    /// A `config.json` on disk (a model folder or the file itself).
    Config { path: PathBuf },
    /// A GGUF file's header.
    Gguf { path: PathBuf },
}

/// What one decoder layer keeps per token (or per request) while a request is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LayerCache {
    /// K and V for every token: `kv_heads × head_dim` each.
    Full { kv_heads: u64, head_dim: u64 },
    /// K and V for the last `window_tokens` tokens only (the engine may still allocate more).
    Sliding {
        kv_heads: u64,
        head_dim: u64,
        window_tokens: u64,
    },
    /// Multi-head latent attention: one latent of `kv_lora_rank + rope_head_dim` per token,
    /// shared by all heads (DeepSeek V2/V3, Kimi K2).
    Latent {
        kv_lora_rank: u64,
        rope_head_dim: u64,
    },
    /// A state-space (Mamba) layer: a fixed state per request, `state_elements` values of the
    /// model's dtype (convolution and SSM state together), nothing per token.
    State { state_elements: u64 },
}

/// A model, as far as memory goes.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ModelSpec {
    /// The name it was asked for by (catalogue id or path).
    pub name: String,
    pub source: ModelSource,
    /// `architectures[0]` of the config (or the GGUF's `general.architecture`).
    pub architecture: String,
    /// `model_type` of the config: the family the reader placed it in.
    pub model_type: String,
    /// Bytes of one value of the checkpoint's unquantized dtype (`torch_dtype`).
    pub dtype_bytes: u64,
    pub dtype: String,
    pub hidden_size: u64,
    pub num_attention_heads: u64,
    pub vocab_size: u64,
    pub max_position_embeddings: u64,
    /// The rotary dimension of one head (0 without rotary embeddings).
    pub rotary_dim: u64,
    /// The largest MLP intermediate width one token passes through (per expert for MoE).
    pub intermediate_size: u64,
    /// Experts a token is routed to (0 for dense models).
    pub experts_per_token: u64,
    pub tie_word_embeddings: bool,
    /// One entry per decoder layer, in order.
    pub layers: Vec<LayerCache>,
    /// How the checkpoint's linear layers are stored.
    pub quant: Quant,
    /// The weights, group by group, before any sharding.
    pub tensors: Vec<TensorGroup>,
    /// The checkpoint's own byte count when its files say it (safetensors headers or index,
    /// GGUF tensor data): then weights are exact rather than computed from the config.
    pub checkpoint_bytes: Option<u64>,
    /// A GGUF's tensor bytes by layer (only for GGUF files).
    pub gguf: Option<gguf::GgufLayout>,
}

/// Why a model could not be read. Every message names the file (or catalogue entry) and the
/// field.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{place}: {message}")]
    Field { place: String, message: String },
    #[error(
        "{place}: unknown architecture {what}: headroom cannot place the fields {fields}; \
         give a model of a known family (see docs/model-plans.md) or a catalogue id"
    )]
    UnknownArchitecture {
        place: String,
        what: String,
        fields: String,
    },
    #[error(
        "{place}: model_type {model_type:?} has fields headroom cannot place: {fields} \
         (they may change the memory the model needs, so nothing is guessed)"
    )]
    UnplacedFields {
        place: String,
        model_type: String,
        fields: String,
    },
    #[error("{0}")]
    Io(String),
}

impl ModelSpec {
    /// Layers that hold a per-token cache (full, sliding or latent attention).
    pub fn attention_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|l| !matches!(l, LayerCache::State { .. }))
            .count()
    }

    /// Parameters of the whole checkpoint (every expert, both embeddings unless tied).
    pub fn parameter_count(&self) -> u64 {
        self.tensors.iter().map(|t| t.params()).sum()
    }
}

/// Reads `--model`: a catalogue id, a model folder, a `config.json`, or a `.gguf` file.
pub fn load(arg: &str) -> Result<ModelSpec, ModelError> {
    let path = Path::new(arg);
    if path.exists() {
        if path.is_dir() {
            let config = path.join("config.json");
            if config.is_file() {
                return config::read_folder(path, arg);
            }
            let ggufs = gguf_files(path);
            if let [one] = ggufs.as_slice() {
                return gguf::read(one, arg);
            }
            return Err(ModelError::Io(format!(
                "{arg}: a model folder needs a config.json (or exactly one .gguf file); found {}",
                if ggufs.is_empty() {
                    "neither".to_string()
                } else {
                    format!("{} .gguf files", ggufs.len())
                }
            )));
        }
        if path.extension().is_some_and(|e| e == "gguf") {
            return gguf::read(path, arg);
        }
        return config::read_file(path, arg);
    }
    match catalogue::find(arg) {
        Some(entry) => catalogue::spec(entry),
        None => Err(ModelError::Io(format!(
            "--model {arg}: no such file or folder, and not in the built-in catalogue ({}); \
             give a model folder, a config.json or a .gguf file",
            catalogue::suggestions(arg)
        ))),
    }
}

fn gguf_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}
