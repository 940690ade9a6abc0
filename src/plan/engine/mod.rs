//! Plans from the model and the engine: what vLLM, SGLang or llama.cpp will do with a model on
//! a card of a given total, term by term, as the engine computes it at start-up.
//!
//! `settings` reads the engine's flags; `vllm`, `sglang`, `llamacpp` hold each engine's rules
//! (by version where they changed); `kv` the per-layer KV specs and block arithmetic they
//! share; `words` prints the result in the engine's own start-up lines; `targets` the flags
//! that would hold a stated target. Every term's formula and source is in docs/model-plans.md.

pub mod kv;
pub mod llamacpp;
pub mod pattern;
pub mod settings;
pub mod sglang;
pub mod targets;
pub mod vllm;
pub mod words;

use serde::Serialize;

use crate::model::ModelSpec;
pub use settings::EngineSettings;

/// Which engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    Vllm,
    Sglang,
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
            EngineKind::LlamaCpp => "llama.cpp",
        }
    }
}

/// A release number, compared by its numeric parts (`0.6.5.dev` is 0.6.5; `0.10.1.1` is
/// 0.10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// Reads the leading numeric parts; `None` for a text without any.
    pub fn parse(s: &str) -> Option<Version> {
        let mut parts = s
            .trim_start_matches('v')
            .split(['.', '+', '-', 'r'])
            .map(|p| {
                p.chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect::<String>()
            });
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// `--engine vllm[@VERSION]|sglang[@VERSION]|llama.cpp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Engine {
    pub kind: EngineKind,
    /// `None`: the newest rules headroom knows.
    pub version: Option<Version>,
}

impl std::str::FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, version) = match s.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        let kind = match name.to_ascii_lowercase().as_str() {
            "vllm" => EngineKind::Vllm,
            "sglang" => EngineKind::Sglang,
            "llama.cpp" | "llamacpp" | "llama-cpp" | "llama-server" => EngineKind::LlamaCpp,
            other => {
                return Err(format!(
                    "--engine {other:?}: headroom plans for vllm, sglang and llama.cpp"
                ));
            }
        };
        let version = match version {
            None | Some("") => None,
            Some(v) => Some(Version::parse(v).ok_or_else(|| {
                format!("--engine {s}: {v:?} is not a release number such as 0.7.3")
            })?),
        };
        Ok(Engine { kind, version })
    }
}

/// Why the engine would not start, and where in its start-up it would stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Failure {
    /// `load`, `profile_run`, `kv_allocation`, `max_model_len`, `graph_capture` or `serve`
    /// (a serving step's activations beside the KV cache and the graph pools).
    pub stage: &'static str,
    /// What the engine says, in its words.
    pub message: String,
}

/// One term of the arithmetic, with its formula and where the rule was read.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Term {
    pub name: &'static str,
    pub bytes: i64,
    pub formula: String,
}

/// The plan, per GPU, in the names of the part 3.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct EnginePlan {
    pub engine: EngineKind,
    /// The rules applied (`vllm 0.11.0 (V1)`); the newest when no version was given.
    pub rules: String,
    pub model: String,
    pub tensor_parallel_size: u64,
    pub total_bytes: u64,
    /// What the engine lets itself use: `total × --gpu-memory-utilization` (vLLM),
    /// `total × --mem-fraction-static` (SGLang), the card's total (llama.cpp).
    pub usable_bytes: u64,
    /// The CUDA context and runtime, outside every figure the engine prints (estimate: 300–550
    /// MiB on recent GPUs with lazy loading, FACTS.md).
    pub context_bytes: u64,
    pub weights_bytes: u64,
    pub non_torch_bytes: u64,
    pub activation_peak_bytes: u64,
    pub cuda_graph_bytes: u64,
    /// Negative when the other terms already exceed the usable memory.
    pub kv_cache_bytes: i64,
    /// KV bytes one token takes on this GPU, over every layer that keeps a per-token cache.
    pub kv_bytes_per_token: u64,
    pub block_size: u64,
    /// Bytes of one block over every layer (vLLM's page size × layers per group).
    pub block_bytes: u64,
    pub kv_cache_tokens: u64,
    pub gpu_blocks: u64,
    pub max_model_len: u64,
    pub max_num_seqs: u64,
    pub max_num_batched_tokens: u64,
    /// Requests of `max_model_len` tokens the KV cache holds at once.
    pub max_concurrency: f64,
    /// Device memory in use at the peak: weights, non-torch, the KV cache, graphs, and the
    /// activation workspace the allocator keeps.
    pub peak_bytes: u64,
    /// `total − peak`: what is left at the peak (negative: the engine fails).
    pub margin_bytes: i64,
    pub failure: Option<Failure>,
    pub terms: Vec<Term>,
    /// Estimated (not exact) parts, named.
    pub estimates: Vec<String>,
}

/// The context headroom assumes beside every engine's figures.
pub const CONTEXT_BYTES: u64 = 512 << 20;

/// Plans `model` on `engine` with `settings` on a card of `total_bytes` (CUDA-visible).
pub fn plan(
    model: &ModelSpec,
    engine: Engine,
    settings: &EngineSettings,
    total_bytes: u64,
) -> Result<EnginePlan, String> {
    match engine.kind {
        EngineKind::Vllm => vllm::plan(model, engine.version, settings, total_bytes),
        EngineKind::Sglang => sglang::plan(model, engine.version, settings, total_bytes),
        EngineKind::LlamaCpp => llamacpp::plan(model, settings, total_bytes),
    }
}

impl EnginePlan {
    /// Fills `peak_bytes`, `margin_bytes` from the terms.
    pub(crate) fn finish_peak(&mut self) {
        let kv = self.kv_cache_bytes.max(0) as u64;
        self.peak_bytes = self.context_bytes
            + self.weights_bytes
            + self.non_torch_bytes
            + self.activation_peak_bytes
            + self.cuda_graph_bytes
            + kv;
        self.margin_bytes = self.total_bytes as i64 - self.peak_bytes as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_their_numbers() {
        assert_eq!(Version::parse("0.6.5.dev"), Some(Version(0, 6, 5)));
        assert_eq!(
            Version::parse("0.4.2.dev+torch2.3.0"),
            Some(Version(0, 4, 2))
        );
        assert_eq!(Version::parse("0.20.1rc1.dev16"), Some(Version(0, 20, 1)));
        assert!(Version(0, 10, 1) < Version(0, 11, 0));
        let e: Engine = "vllm@0.7.3".parse().unwrap();
        assert_eq!(e.version, Some(Version(0, 7, 3)));
        assert!(
            "tgi"
                .parse::<Engine>()
                .unwrap_err()
                .contains("vllm, sglang and llama.cpp")
        );
    }
}
