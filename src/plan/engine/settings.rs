//! An engine's flags as the engine spells them (`--max-model-len 8192`, `--tp 2`, `-c 4096`,
//! `-ngl 99`), read into one settings struct. The same reader takes the command line after
//! `--` and a corpus record's `[settings]` table, so a plan and a recorded log mean the same
//! thing by the same flag. A flag that changes memory and is not known is refused by name.

use super::EngineKind;

/// The settings that change memory, with the engine's defaults still unresolved (`None`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineSettings {
    pub tensor_parallel_size: u64,
    pub max_model_len: Option<u64>,
    pub gpu_memory_utilization: Option<f64>,
    pub max_num_seqs: Option<u64>,
    pub max_num_batched_tokens: Option<u64>,
    pub kv_cache_dtype: Option<String>,
    pub block_size: Option<u64>,
    pub enforce_eager: bool,
    pub quantization: Option<String>,
    pub dtype: Option<String>,
    pub kv_cache_memory_bytes: Option<u64>,
    /// SGLang's `--mem-fraction-static`.
    pub mem_fraction_static: Option<f64>,
    /// SGLang's `--page-size`.
    pub page_size: Option<u64>,
    /// SGLang's `--max-total-tokens`.
    pub max_total_tokens: Option<u64>,
    /// llama.cpp's `-ngl` (layers on the GPU).
    pub n_gpu_layers: Option<u64>,
    /// llama.cpp's `-ub` (physical batch).
    pub ubatch_size: Option<u64>,
    /// llama.cpp's `-ctk` / `-ctv`.
    pub cache_type_k: Option<String>,
    pub cache_type_v: Option<String>,
    /// llama.cpp's `-np` (parallel sequences).
    pub parallel: Option<u64>,
    pub flash_attn: Option<bool>,
    /// Not a flag: the card's name, for defaults that depend on it (vLLM's for the A100).
    pub device_name: Option<String>,
}

/// Flags that do not change the memory headroom plans (serving, logging, tokenizer, loading
/// format), accepted and ignored.
const NEUTRAL: &[&str] = &[
    "host",
    "port",
    "served-model-name",
    "trust-remote-code",
    "disable-log-requests",
    "disable-log-stats",
    "enable-prefix-caching",
    "no-enable-prefix-caching",
    "enable-chunked-prefill",
    "swap-space",
    "cpu-offload-gb",
    "load-format",
    "tokenizer-mode",
    "tokenizer",
    "config-format",
    "seed",
    "api-key",
    "chat-template",
    "download-dir",
    "uvicorn-log-level",
    "log-level",
    "disable-custom-all-reduce",
    "distributed-executor-backend",
    "worker-use-ray",
    "dp-size",
    "data-parallel-size",
    "enable-dp-attention",
    "model",
    "model-path",
    "m",
    "threads",
    "t",
    "batch-size",
    "b",
    "no-mmap",
    "mlock",
    "verbose",
    "split-mode",
    "main-gpu",
    "tensor-split",
    "enable-auto-tool-choice",
    "tool-call-parser",
    "reasoning-parser",
    "generation-config",
    "async-scheduling",
];

/// Why a flag was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{place}: {message}")]
pub struct SettingsError {
    pub place: String,
    pub message: String,
}

impl EngineSettings {
    /// Reads the flags after `--` (`--flag value`, `--flag=value`, bare booleans).
    pub fn from_args(engine: EngineKind, args: &[String]) -> Result<Self, SettingsError> {
        let mut pairs = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            let name = a.trim_start_matches('-');
            if name.len() == a.len() || name.is_empty() {
                return Err(SettingsError {
                    place: "engine flags".into(),
                    message: format!("{a:?} is not a flag (engine flags start with - or --)"),
                });
            }
            if let Some((k, v)) = name.split_once('=') {
                pairs.push((k.to_string(), v.to_string()));
                i += 1;
            } else if args.get(i + 1).is_some_and(|n| !is_flag(n)) {
                pairs.push((name.to_string(), args[i + 1].clone()));
                i += 2;
            } else {
                pairs.push((name.to_string(), "true".to_string()));
                i += 1;
            }
        }
        Self::from_pairs(engine, "engine flags", &pairs)
    }

    /// Reads (flag, value) pairs; `place` names where they came from in messages.
    pub fn from_pairs(
        engine: EngineKind,
        place: &str,
        pairs: &[(String, String)],
    ) -> Result<Self, SettingsError> {
        let mut s = EngineSettings {
            tensor_parallel_size: 1,
            ..Default::default()
        };
        for (flag, value) in pairs {
            let err = |m: String| SettingsError {
                place: place.to_string(),
                message: format!("--{flag} {value}: {m}"),
            };
            let uint = || {
                value
                    .parse::<u64>()
                    .map_err(|_| err("not a whole number".into()))
            };
            let frac = || match value.parse::<f64>() {
                Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
                _ => Err(err("not a fraction in (0, 1]".into())),
            };
            let boolean = || match value.as_str() {
                "true" | "1" | "on" => Ok(true),
                "false" | "0" | "off" => Ok(false),
                _ => Err(err("not true or false".into())),
            };
            let f = flag.replace('_', "-");
            match (engine, f.as_str()) {
                (_, "tensor-parallel-size" | "tp" | "tp-size") => {
                    s.tensor_parallel_size = uint()?.max(1)
                }
                (EngineKind::Vllm, "max-model-len")
                | (EngineKind::Sglang, "context-length")
                | (EngineKind::LlamaCpp, "ctx-size" | "c") => s.max_model_len = Some(uint()?),
                (EngineKind::Vllm, "gpu-memory-utilization") => {
                    s.gpu_memory_utilization = Some(frac()?)
                }
                (EngineKind::Vllm, "max-num-seqs")
                | (EngineKind::Sglang, "max-running-requests") => s.max_num_seqs = Some(uint()?),
                (EngineKind::Vllm, "max-num-batched-tokens")
                | (EngineKind::Sglang, "chunked-prefill-size") => {
                    s.max_num_batched_tokens = Some(uint()?)
                }
                (EngineKind::Vllm | EngineKind::Sglang, "kv-cache-dtype") => {
                    s.kv_cache_dtype = Some(value.clone())
                }
                (EngineKind::Vllm, "block-size") => s.block_size = Some(uint()?),
                (EngineKind::Vllm, "enforce-eager")
                | (EngineKind::Sglang, "disable-cuda-graph") => s.enforce_eager = boolean()?,
                (EngineKind::Vllm | EngineKind::Sglang, "quantization") => {
                    s.quantization = Some(value.clone())
                }
                (EngineKind::Vllm | EngineKind::Sglang, "dtype") => s.dtype = Some(value.clone()),
                (EngineKind::Vllm, "kv-cache-memory" | "kv-cache-memory-bytes") => {
                    s.kv_cache_memory_bytes =
                        Some(crate::units::parse_size(value).map_err(|e| err(e.to_string()))?)
                }
                (EngineKind::Sglang, "mem-fraction-static") => {
                    s.mem_fraction_static = Some(frac()?)
                }
                (EngineKind::Sglang, "page-size") => s.page_size = Some(uint()?),
                (EngineKind::Sglang, "max-total-tokens") => s.max_total_tokens = Some(uint()?),
                (EngineKind::LlamaCpp, "n-gpu-layers" | "ngl" | "gpu-layers") => {
                    s.n_gpu_layers = Some(uint()?)
                }
                (EngineKind::LlamaCpp, "ubatch-size" | "ub") => s.ubatch_size = Some(uint()?),
                (EngineKind::LlamaCpp, "cache-type-k" | "ctk") => {
                    s.cache_type_k = Some(value.clone())
                }
                (EngineKind::LlamaCpp, "cache-type-v" | "ctv") => {
                    s.cache_type_v = Some(value.clone())
                }
                (EngineKind::LlamaCpp, "parallel" | "np") => s.parallel = Some(uint()?),
                (EngineKind::LlamaCpp, "flash-attn" | "fa") => {
                    s.flash_attn = Some(value != "off" && value != "false" && value != "0")
                }
                (_, other) if NEUTRAL.contains(&other) => {}
                _ => {
                    return Err(err(format!(
                        "not a {} flag headroom plans with (see docs/model-plans.md for the flags \
                         each engine's plan reads)",
                        engine.name()
                    )));
                }
            }
        }
        Ok(s)
    }
}

fn is_flag(s: &str) -> bool {
    s.starts_with('-') && s.parse::<f64>().is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_as_each_engine_spells_them() {
        let v = EngineSettings::from_args(
            EngineKind::Vllm,
            &args(&[
                "--tensor-parallel-size",
                "2",
                "--max-model-len=8192",
                "--enforce-eager",
            ]),
        )
        .unwrap();
        assert_eq!(
            (v.tensor_parallel_size, v.max_model_len, v.enforce_eager),
            (2, Some(8192), true)
        );
        let l = EngineSettings::from_args(
            EngineKind::LlamaCpp,
            &args(&["-c", "4096", "-ngl", "99", "-ub", "512"]),
        )
        .unwrap();
        assert_eq!(
            (l.max_model_len, l.n_gpu_layers, l.ubatch_size),
            (Some(4096), Some(99), Some(512))
        );
        let s = EngineSettings::from_args(
            EngineKind::Sglang,
            &args(&["--tp", "4", "--mem-fraction-static", "0.8"]),
        )
        .unwrap();
        assert_eq!(
            (s.tensor_parallel_size, s.mem_fraction_static),
            (4, Some(0.8))
        );
    }

    #[test]
    fn a_flag_of_another_engine_is_refused_by_name() {
        let e = EngineSettings::from_args(
            EngineKind::Sglang,
            &args(&["--gpu-memory-utilization", "0.9"]),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("--gpu-memory-utilization 0.9")
                && e.to_string().contains("sglang"),
            "{e}"
        );
        let e = EngineSettings::from_args(
            EngineKind::Vllm,
            &args(&["--gpu-memory-utilization", "1.5"]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a fraction"), "{e}");
    }
}
