//! Command-line arguments of `headroom plan` and `headroom validate` (clap definitions only).

use std::path::PathBuf;

use clap::Args;

use crate::plan::file::PlanOverrides;
use crate::units::size_arg;

/// The plan file format, shown after both commands' long help.
macro_rules! plan_file_help {
    () => {
        "\
A plan file (TOML) states the budget and names the workload the claim is about:

  [plan]
  name = \"article\"
  capacity = \"80GiB\"        # optional: default is the device's CUDA-visible total
  weights = \"48GiB\"
  other_peak = \"20GiB\"      # activations, workspace, runtime/communication, graphs
  margin = \"4GiB\"           # free memory that must remain at the peak

  [workload]
  model = \"24B model, bf16\"
  input_tokens = 1024
  output_tokens = 3072
  block_tokens = 16          # tokens per KV block (default 16)
  kv_bytes_per_token = \"128KiB\"   # 2 × layers × KV heads × head size × dtype bytes
  concurrency = 16           # optional: the claim; default is the arithmetic's count
  weight_tensors = 32        # optional: how the weights load

  [allocator]                # optional, as in a workload file (default: direct)
  kind = \"pool\"

KV per request = ceil((input + output) / block_tokens) blocks × block_tokens × kv_bytes_per_token.
Flags override the file's values."
    };
}

const PLAN_HELP: &str = concat!(
    "Prints the arithmetic step by step and the requests the KV budget holds. Exit 0; 1 when \
the plan claims more concurrent requests than its arithmetic allows; 2 when the arithmetic is \
refused (categories over the capacity, a zero KV per request, a bad size).\n\n",
    plan_file_help!()
);

const VALIDATE_HELP: &str = concat!(
    "Builds the workload the plan describes (the weights held; the KV blocks of each admitted \
request; then, with all of that resident, an activation + workspace peak equal to the other \
peak) and runs it at the planned count: the plan's concurrency, else the arithmetic's count. \
Reports each category's and each memory view's true peak against the plan, whether the margin \
was free at the peak, the memory the plan did not name (context and idle use, driver page \
rounding, allocator rounding, capacity beyond the device), and the real admission limit: \
further runs (probes) at other request counts, placed by bisection, up to the largest count \
that completes with the margin free and the smallest that does not (an OOM or a margin \
violation). Probes allow OOM, so the free-memory floor does not stop them; each is an ordinary \
run in its own folder, with the workload.toml it ran, next to validation.json (raw bytes).\n\n\
Exit codes: 0 the planned count was admitted with the margin free at the peak; 1 it was not; \
2 could not run (bad plan, arithmetic refused, device error); 130 interrupted.\n\n",
    plan_file_help!()
);

/// The plan inputs a flag can set or override.
#[derive(Debug, Clone, Args)]
pub struct PlanInputs {
    /// Device memory to plan against, e.g. 80GiB [default: the plan file's capacity, else the
    /// selected device's CUDA-visible total].
    #[arg(long, value_name = "SIZE", value_parser = size_arg, allow_hyphen_values = true)]
    pub capacity: Option<u64>,
    /// Model weights, e.g. 48GiB.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, allow_hyphen_values = true)]
    pub weights: Option<u64>,
    /// Other peak use: activations, workspace, runtime/communication and graphs at their peak
    /// (everything but weights, KV and the margin).
    #[arg(long, value_name = "SIZE", value_parser = size_arg, allow_hyphen_values = true)]
    pub other_peak: Option<u64>,
    /// Safety margin: device memory that must stay free at the peak.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, allow_hyphen_values = true)]
    pub margin: Option<u64>,
    /// KV bytes one request holds [default: from the plan file's [workload]].
    #[arg(long, value_name = "SIZE", value_parser = size_arg, allow_hyphen_values = true)]
    pub kv_per_request: Option<u64>,
}

impl PlanInputs {
    pub fn overrides(&self) -> PlanOverrides {
        PlanOverrides {
            capacity_bytes: self.capacity,
            weights_bytes: self.weights,
            other_peak_bytes: self.other_peak,
            margin_bytes: self.margin,
            kv_per_request_bytes: self.kv_per_request,
        }
    }
}

/// `--model` and `--engine`: a plan from the model and the engine's rules.
#[derive(Debug, Clone, Args)]
pub struct ModelInputs {
    /// The model: a Hugging Face model folder (config.json, with safetensors headers or
    /// model.safetensors.index.json when present), a config.json, a .gguf file, or a built-in
    /// catalogue id such as Qwen/Qwen2.5-7B-Instruct (--list-models lists them).
    #[arg(long, value_name = "PATH|ID")]
    pub model: Option<String>,
    /// The engine whose rules to follow: vllm[@VERSION], sglang[@VERSION] or llama.cpp; the
    /// newest rules when no version is given. Its flags follow `--`, spelled as the engine
    /// spells them (e.g. -- --max-model-len 8192 --tensor-parallel-size 2).
    #[arg(long, value_name = "ENGINE[@VERSION]", default_value = "vllm")]
    pub engine: String,
    /// The target the flags are sized for: this many concurrent requests…
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub concurrency: u64,
    /// …of this many tokens each [default: the engine's max model length].
    #[arg(long, value_name = "TOKENS")]
    pub request_tokens: Option<u64>,
    /// List the built-in model catalogue and exit.
    #[arg(long)]
    pub list_models: bool,
    /// The engine's flags, after `--` (validate without --model: the engine's command).
    #[arg(last = true, value_name = "ENGINE FLAGS")]
    pub engine_args: Vec<String>,
}

/// `headroom plan`.
#[derive(Debug, Args)]
#[command(after_long_help = PLAN_HELP)]
pub struct PlanArgs {
    /// A plan file (TOML); without one, give --weights, --other-peak, --margin and
    /// --kv-per-request, or --model.
    #[arg(conflicts_with = "model")]
    pub plan: Option<PathBuf>,
    #[command(flatten)]
    pub inputs: PlanInputs,
    #[command(flatten)]
    pub model: ModelInputs,
    /// Print JSON (raw bytes) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `headroom validate`.
#[derive(Debug, Args)]
#[command(after_long_help = VALIDATE_HELP)]
pub struct ValidateArgs {
    /// The plan file (TOML), or the name of a built-in one (`card`, `tiny`, `article`:
    /// `headroom workloads` lists them; a file wins); or give --model and --engine; or
    /// --engine and the engine's command after `--` (`validate --engine vllm -- vllm serve
    /// MODEL …`: run under watch, its start-up figures beside headroom's prediction and the
    /// device's true peak).
    #[arg(required_unless_present_any = ["model", "engine_args"], conflicts_with = "model")]
    pub plan: Option<PathBuf>,
    #[command(flatten)]
    pub inputs: PlanInputs,
    #[command(flatten)]
    pub model: ModelInputs,
    /// Vary one input and find the admission limit at each value: KEY=FROM..TO:STEP or
    /// KEY=V1,V2,… with KEY one of other_peak, weights, margin, kv_per_request.
    #[arg(
        long,
        value_name = "KEY=VALUES",
        long_help = "Vary one plan input and find the measured admission limit at each value, \
next to the planned count. KEY=FROM..TO:STEP (TO included when a step lands on it) or \
KEY=V1,V2,… (at most 64 values), with KEY one of other_peak, weights, margin, kv_per_request; \
e.g. --sweep other_peak=16GiB..28GiB:4GiB or --sweep kv_per_request=0.25GiB,0.5GiB,1GiB \
(kv_per_request values must be whole KV blocks). Every point's arithmetic is checked before \
anything runs. Writes sweep.csv (raw bytes), sweep.svg (planned vs measured) and \
validation.json into the result folder, and one folder of probes per point. Exit 0 when \
every point's planned count was admitted with its margin, 1 otherwise."
    )]
    pub sweep: Option<String>,
    /// Write results into this folder (new or empty) instead of
    /// results/<UTC stamp>-validate-<plan>/.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where result folders are created.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub results: PathBuf,
    /// Print validation.json to stdout instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
    /// With --device all or a list: also validate on GPUs other processes are using.
    #[arg(long)]
    pub shared_ok: bool,
}
