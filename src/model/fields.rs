//! A config object read field by field, remembering which fields were placed, so that the
//! fields left over can be named: a config field that may change memory and that the reader
//! did not use is an error, not a silent guess.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::ModelError;

/// Fields that never change the memory a model needs (token ids, training and generation
/// settings, bookkeeping). Every other field must be placed by the family's reader.
const NEUTRAL: &[&str] = &[
    "_name_or_path",
    "architectures",
    "model_type",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "unk_token_id",
    "initializer_range",
    "initializer_factor",
    "use_cache",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "norm_epsilon",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "attention_dropout",
    "hidden_dropout",
    "dropout",
    "activation_dropout",
    "embd_pdrop",
    "resid_pdrop",
    "hidden_act",
    "activation_function",
    "hidden_activation",
    "auto_map",
    "pretraining_tp",
    "use_sliding_window",
    "max_window_layers",
    "sliding_window_pattern",
    "bos_token",
    "eos_token",
    "output_router_logits",
    "router_aux_loss_coef",
    "router_z_loss_coef",
    "router_jitter_noise",
    "norm_topk_prob",
    "scoring_func",
    "topk_method",
    "routed_scaling_factor",
    "n_group",
    "topk_group",
    "aux_loss_alpha",
    "seq_aux",
    "ep_size",
    "tokenizer_class",
    "generation_config",
    "is_encoder_decoder",
    "do_layer_norm_before",
    "enable_bias",
    "prefix",
    "word_embed_proj_dim",
    "original_max_position_embeddings",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    "rope_local_base_freq",
    "swiglu_limit",
    "initial_context_length",
    "experts_per_token_activation",
    "mlp_only_layers",
    "decoder_sparse_step",
    "qk_layernorm",
    "use_qk_norm",
    "tie_encoder_decoder",
    "image_token_index",
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "vision_token_id",
    "boi_token_index",
    "eoi_token_index",
    "mm_tokens_per_image",
    "projector_hidden_act",
    "vision_feature_select_strategy",
    "vision_feature_layer",
    "image_seq_length",
    "ignore_index",
    "mamba_dt_rank",
    "mamba_conv_bias",
    "mamba_proj_bias",
    "use_mamba_kernels",
    "num_logits_to_keep",
    "router_dtype",
];

/// A JSON object and the fields taken from it so far.
pub struct Fields<'a> {
    /// Where the object is, for messages: `path/config.json` or `path/config.json: text_config`.
    pub place: String,
    obj: &'a Map<String, Value>,
    taken: RefCell<BTreeSet<String>>,
}

impl<'a> Fields<'a> {
    pub fn new(place: String, obj: &'a Map<String, Value>) -> Self {
        Fields {
            place,
            obj,
            taken: RefCell::new(BTreeSet::new()),
        }
    }

    fn err(&self, key: &str, message: impl std::fmt::Display) -> ModelError {
        ModelError::Field {
            place: self.place.clone(),
            message: format!("{key}: {message}"),
        }
    }

    /// The raw value, marked placed.
    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        let v = self.obj.get(key).filter(|v| !v.is_null());
        self.taken.borrow_mut().insert(key.to_string());
        v
    }

    /// A whole number, or `None` when absent or null.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .map(Some)
                .ok_or_else(|| self.err(key, format!("{v} is not a whole number ≥ 0"))),
        }
    }

    /// A whole number the family needs.
    pub fn u64(&self, key: &str) -> Result<u64, ModelError> {
        self.opt_u64(key)?
            .ok_or_else(|| self.err(key, "missing (this family needs it)"))
    }

    /// A whole number above zero the family needs.
    pub fn positive(&self, key: &str) -> Result<u64, ModelError> {
        match self.u64(key)? {
            0 => Err(self.err(key, "0 (must be above zero)")),
            n => Ok(n),
        }
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(key, format!("{v} is not true or false"))),
        }
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.err(key, format!("{v} is not a string"))),
        }
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(key, format!("{v} is not a number"))),
        }
    }

    pub fn opt_object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(self.err(key, format!("{v} is not a table"))),
        }
    }

    pub fn opt_array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(self.err(key, format!("{v} is not a list"))),
        }
    }

    /// Marks fields placed without reading them (they are read elsewhere or only checked).
    pub fn take(&self, keys: &[&str]) {
        let mut t = self.taken.borrow_mut();
        for k in keys {
            t.insert((*k).to_string());
        }
    }

    /// The fields neither placed nor neutral, sorted.
    pub fn unplaced(&self) -> Vec<String> {
        let taken = self.taken.borrow();
        self.obj
            .keys()
            .filter(|k| !taken.contains(*k) && !NEUTRAL.contains(&k.as_str()))
            .filter(|k| !self.obj[k.as_str()].is_null())
            .cloned()
            .collect()
    }

    /// Every field of the object that is not neutral (for an unknown architecture's message).
    pub fn all_shape_fields(&self) -> Vec<String> {
        self.obj
            .keys()
            .filter(|k| !NEUTRAL.contains(&k.as_str()))
            .cloned()
            .collect()
    }

    /// Fails naming the fields left unplaced.
    pub fn finish(&self, model_type: &str) -> Result<(), ModelError> {
        let left = self.unplaced();
        if left.is_empty() {
            Ok(())
        } else {
            Err(ModelError::UnplacedFields {
                place: self.place.clone(),
                model_type: model_type.to_string(),
                fields: left.join(", "),
            })
        }
    }
}
