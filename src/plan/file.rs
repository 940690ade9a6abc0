//! Plan files (TOML) and plan flags, merged into one `Plan`.
//!
//! A plan states the four budget categories and names the workload its claim is about: a
//! capacity claim that does not say which model, which sequence lengths and how many concurrent
//! requests is not a claim anyone can check. Flags override the file key by key, so one file can
//! be re-planned or swept without editing it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::units::{Size, SizeSpec};

/// `[workload]` of a plan file: the shape of the serving workload the capacity claim is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    /// The model, in words (e.g. "Llama-3-70B, bf16, TP=1").
    pub model: String,
    /// Prompt tokens per request.
    pub input_tokens: u64,
    /// Generated tokens per request (the KV a request holds at its end covers both).
    pub output_tokens: u64,
    /// Tokens per KV block (vLLM's `block_size`).
    #[serde(default = "default_block_tokens")]
    pub block_tokens: u64,
    /// KV bytes one token takes across all layers: 2 × layers × KV heads × head size × dtype.
    pub kv_bytes_per_token: Size,
    /// The number of concurrent requests claimed; when absent, the count the arithmetic gives.
    #[serde(default)]
    pub concurrency: Option<u64>,
    /// How many tensors the weights load as.
    #[serde(default = "default_weight_tensors")]
    pub weight_tensors: u32,
}

fn default_block_tokens() -> u64 {
    16
}
fn default_weight_tensors() -> u32 {
    32
}

impl Shape {
    /// Bytes of one KV block: `block_tokens × kv_bytes_per_token`.
    pub fn block_bytes(&self) -> u64 {
        self.block_tokens * self.kv_bytes_per_token.0
    }

    /// Blocks one request holds at its longest: its tokens, rounded up to whole blocks.
    pub fn blocks_per_request(&self) -> u64 {
        (self.input_tokens + self.output_tokens).div_ceil(self.block_tokens)
    }

    /// KV bytes one request holds at its longest.
    pub fn kv_per_request_bytes(&self) -> u64 {
        self.blocks_per_request() * self.block_bytes()
    }

    fn check(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("[workload] model is empty: name the model the claim is about".into());
        }
        if self.input_tokens == 0 {
            return Err("[workload] input_tokens must be at least 1".into());
        }
        if self.block_tokens == 0 {
            return Err("[workload] block_tokens must be at least 1".into());
        }
        if self.kv_bytes_per_token.0 == 0 {
            return Err(format!(
                "[workload] kv_bytes_per_token is 0 B: {} tokens × 0 B = 0 B of KV per request; give the KV bytes one token takes",
                self.input_tokens + self.output_tokens
            ));
        }
        if self.weight_tensors == 0 {
            return Err("[workload] weight_tensors must be at least 1".into());
        }
        self.block_bytes()
            .checked_mul(self.blocks_per_request())
            .map(|_| ())
            .ok_or_else(|| "[workload] the KV per request is too large to count in bytes".into())
    }
}

/// `[plan]` of a plan file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanSection {
    name: Option<String>,
    #[serde(default)]
    description: String,
    capacity: Option<Size>,
    weights: Option<SizeSpec>,
    other_peak: Option<SizeSpec>,
    margin: Option<SizeSpec>,
}

const SECTIONS: &[&str] = &["plan", "workload", "allocator"];

/// Values given on the command line; each one overrides the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOverrides {
    pub capacity_bytes: Option<u64>,
    pub weights_bytes: Option<u64>,
    pub other_peak_bytes: Option<u64>,
    pub margin_bytes: Option<u64>,
    pub kv_per_request_bytes: Option<u64>,
}

/// Where the capacity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CapacitySource {
    Flag,
    PlanFile,
    /// The selected device's CUDA-visible total.
    Device,
}

/// A plan, from a file and/or flags, before the capacity is known for certain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub name: String,
    pub description: String,
    pub file: Option<PathBuf>,
    /// `None`: the device's CUDA-visible total.
    pub capacity_bytes: Option<u64>,
    pub capacity_source: Option<CapacitySource>,
    pub weights_bytes: u64,
    pub other_peak_bytes: u64,
    pub margin_bytes: u64,
    pub kv_per_request_bytes: u64,
    /// Categories the file gives as a share of the capacity (`"60% of total"`); their bytes
    /// above are known once the capacity is (`at_capacity`).
    pub shares: Shares,
    /// Whether `kv_per_request_bytes` came from a flag (or a sweep) rather than the shape.
    pub kv_per_request_overridden: bool,
    pub shape: Option<Shape>,
    /// The plan file's `[allocator]` table, handed to the validation workload as written.
    #[serde(skip)]
    pub allocator: Option<toml::Table>,
}

/// Shares of the capacity, in hundredths of a percent, for the categories a plan file writes
/// as `"N% of total"`: one file then asks the same question of a 16 GB card and a 141 GB one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Shares {
    pub weights: Option<u32>,
    pub other_peak: Option<u32>,
    pub margin: Option<u32>,
}

impl Shares {
    pub fn any(&self) -> bool {
        self.weights.or(self.other_peak).or(self.margin).is_some()
    }
}

/// A plan that cannot be used, with where the problem is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}{message}")]
pub struct PlanError {
    place: String,
    pub message: String,
}

impl PlanError {
    fn new(file: Option<&Path>, message: impl Into<String>) -> Self {
        PlanError {
            place: file.map_or(String::new(), |f| format!("{}: ", f.display())),
            message: message.into(),
        }
    }
}

impl Plan {
    /// The requests the validation treats as planned: the claimed concurrency, or else the
    /// arithmetic's count.
    pub fn claimed_concurrency(&self) -> Option<u64> {
        self.shape.as_ref().and_then(|s| s.concurrency)
    }

    /// The plan with its shares of the capacity in bytes: the plan's capacity, else
    /// `device_total_bytes` (rounded down to whole 2 MiB pages, as a workload's shares are).
    pub fn at_capacity(&self, device_total_bytes: u64) -> Plan {
        let capacity = self.capacity_bytes.unwrap_or(device_total_bytes);
        let mut p = self.clone();
        let share = |h: Option<u32>, bytes: &mut u64| {
            if let Some(h) = h {
                *bytes = SizeSpec::PercentOfTotal(h).resolve(capacity);
            }
        };
        share(self.shares.weights, &mut p.weights_bytes);
        share(self.shares.other_peak, &mut p.other_peak_bytes);
        share(self.shares.margin, &mut p.margin_bytes);
        p
    }

    /// Reads a plan file and applies the overrides. A `path` that names no file but a shipped plan (`card`, `plans/tiny`) reads that one.
    pub fn load(path: &Path, o: &PlanOverrides) -> Result<Plan, PlanError> {
        use crate::shipped::{self, Kind};
        if let Some(text) = shipped::text_for(path, Kind::Plan) {
            return Plan::from_toml(text, Some(path), o);
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            let hint = shipped::not_found_hint(path, Kind::Plan);
            PlanError::new(Some(path), format!("cannot read the file: {e}{hint}"))
        })?;
        Plan::from_toml(&text, Some(path), o)
    }

    /// A plan from flags alone; every category must be given.
    pub fn from_flags(o: &PlanOverrides) -> Result<Plan, PlanError> {
        let missing: Vec<&str> = [
            ("--weights", o.weights_bytes),
            ("--other-peak", o.other_peak_bytes),
            ("--margin", o.margin_bytes),
            ("--kv-per-request", o.kv_per_request_bytes),
        ]
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| *k)
        .collect();
        if !missing.is_empty() {
            return Err(PlanError::new(
                None,
                format!(
                    "without a plan file, give {} (missing: {})",
                    "--weights, --other-peak, --margin and --kv-per-request",
                    missing.join(", ")
                ),
            ));
        }
        Ok(Plan {
            name: "plan".into(),
            description: String::new(),
            file: None,
            capacity_bytes: o.capacity_bytes,
            capacity_source: o.capacity_bytes.map(|_| CapacitySource::Flag),
            weights_bytes: o.weights_bytes.unwrap_or(0),
            other_peak_bytes: o.other_peak_bytes.unwrap_or(0),
            margin_bytes: o.margin_bytes.unwrap_or(0),
            kv_per_request_bytes: o.kv_per_request_bytes.unwrap_or(0),
            shares: Shares::default(),
            kv_per_request_overridden: true,
            shape: None,
            allocator: None,
        })
    }

    pub fn from_toml(
        text: &str,
        file: Option<&Path>,
        o: &PlanOverrides,
    ) -> Result<Plan, PlanError> {
        let err = |m: String| PlanError::new(file, m);
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            err(match line {
                Some(l) => format!("line {l}: not valid TOML: {}", e.message()),
                None => format!("not valid TOML: {}", e.message()),
            })
        })?;
        if let Some(k) = table.keys().find(|k| !SECTIONS.contains(&k.as_str())) {
            return Err(err(format!(
                "[{k}]: unknown section; a plan file has [plan], [workload] and optionally [allocator]"
            )));
        }
        let section = |key: &str| -> Result<Option<toml::Value>, PlanError> {
            match table.get(key) {
                None => Ok(None),
                Some(v @ toml::Value::Table(_)) => Ok(Some(v.clone())),
                Some(_) => Err(err(format!("[{key}] must be a table"))),
            }
        };
        let plan: PlanSection = section("plan")?
            .ok_or_else(|| {
                err("missing [plan]: it needs weights, other_peak and margin (capacity is optional)".into())
            })?
            .try_into()
            .map_err(|e: toml::de::Error| err(format!("[plan]: {}", e.message().trim())))?;
        let shape: Shape = section("workload")?
            .ok_or_else(|| {
                err("missing [workload]: name the model, input_tokens, output_tokens and kv_bytes_per_token the claim is about".into())
            })?
            .try_into()
            .map_err(|e: toml::de::Error| err(format!("[workload]: {}", e.message().trim())))?;
        shape.check().map_err(err)?;
        let allocator = section("allocator")?.and_then(|v| v.as_table().cloned());
        let (capacity_bytes, capacity_source) = match (o.capacity_bytes, plan.capacity) {
            (Some(c), _) => (Some(c), Some(CapacitySource::Flag)),
            (None, Some(c)) => (Some(c.0), Some(CapacitySource::PlanFile)),
            (None, None) => (None, None),
        };
        // A flag gives bytes; the file gives bytes or a share of the capacity.
        let need = |v: Option<SizeSpec>,
                    key: &str,
                    flag: Option<u64>|
         -> Result<(u64, Option<u32>), PlanError> {
            match (flag, v) {
                (Some(b), _) => Ok((b, None)),
                (None, Some(SizeSpec::Bytes(b))) => Ok((b, None)),
                (None, Some(SizeSpec::PercentOfTotal(h))) => Ok((0, Some(h))),
                (None, None) => Err(err(format!("[plan] {key} is missing"))),
            }
        };
        let (weights_bytes, weights_share) = need(plan.weights, "weights", o.weights_bytes)?;
        let (other_peak_bytes, other_peak_share) =
            need(plan.other_peak, "other_peak", o.other_peak_bytes)?;
        let (margin_bytes, margin_share) = need(plan.margin, "margin", o.margin_bytes)?;
        let name = plan.name.unwrap_or_else(|| {
            file.and_then(|f| f.file_stem())
                .map_or("plan".into(), |s| s.to_string_lossy().into_owned())
        });
        Ok(Plan {
            name,
            description: plan.description,
            file: file.map(Path::to_path_buf),
            capacity_bytes,
            capacity_source,
            weights_bytes,
            other_peak_bytes,
            margin_bytes,
            kv_per_request_bytes: o
                .kv_per_request_bytes
                .unwrap_or_else(|| shape.kv_per_request_bytes()),
            kv_per_request_overridden: o.kv_per_request_bytes.is_some(),
            shares: Shares {
                weights: weights_share,
                other_peak: other_peak_share,
                margin: margin_share,
            },
            shape: Some(shape),
            allocator,
        }
        .at_capacity_if_known())
    }

    /// `at_capacity` when the plan names its capacity (a flag or the file), else unchanged.
    fn at_capacity_if_known(self) -> Plan {
        match self.capacity_bytes {
            Some(c) => self.at_capacity(c),
            None => self,
        }
    }

    /// Blocks each request takes in the validation workload, or why the KV per request cannot
    /// be laid out in the shape's blocks.
    pub fn blocks_per_request(&self) -> Result<(u64, u64), String> {
        let shape = self
            .shape
            .as_ref()
            .ok_or("validation needs a plan file with a [workload] shape (its KV block size)")?;
        let block = shape.block_bytes();
        if self.kv_per_request_bytes % block != 0 {
            return Err(format!(
                "the KV per request, {} ({} bytes), is not a whole number of {} blocks ({} tokens × {})",
                crate::plan::budget::Short(self.kv_per_request_bytes as i128),
                self.kv_per_request_bytes,
                crate::plan::budget::Short(block as i128),
                shape.block_tokens,
                crate::plan::budget::Short(shape.kv_bytes_per_token.0 as i128),
            ));
        }
        Ok((self.kv_per_request_bytes / block, block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{GIB, KIB, MIB};

    const ARTICLE: &str = r#"
[plan]
name = "article"
capacity = "80GiB"
weights = "48GiB"
other_peak = "20GiB"
margin = "4GiB"

[workload]
model = "a 24B model in bf16"
input_tokens = 1024
output_tokens = 3072
block_tokens = 16
kv_bytes_per_token = "128KiB"
"#;

    fn parse(text: &str) -> Result<Plan, PlanError> {
        Plan::from_toml(text, Some(Path::new("p.toml")), &PlanOverrides::default())
    }

    #[test]
    fn the_article_as_a_file() {
        let p = parse(ARTICLE).unwrap();
        assert_eq!(p.capacity_bytes, Some(80 * GIB));
        assert_eq!(p.kv_per_request_bytes, GIB / 2);
        let s = p.shape.as_ref().unwrap();
        assert_eq!(s.block_bytes(), 2 * MIB);
        assert_eq!(s.blocks_per_request(), 256);
        assert_eq!(p.blocks_per_request().unwrap(), (256, 2 * MIB));
        assert_eq!(p.name, "article");
    }

    #[test]
    fn flags_override_the_file() {
        let o = PlanOverrides {
            other_peak_bytes: Some(28 * GIB),
            kv_per_request_bytes: Some(GIB),
            ..Default::default()
        };
        let p = Plan::from_toml(ARTICLE, None, &o).unwrap();
        assert_eq!(p.other_peak_bytes, 28 * GIB);
        assert_eq!(p.kv_per_request_bytes, GIB);
        assert!(p.kv_per_request_overridden);
        assert_eq!(p.blocks_per_request().unwrap(), (512, 2 * MIB));
        let o = PlanOverrides {
            kv_per_request_bytes: Some(3 * MIB),
            ..Default::default()
        };
        let e = Plan::from_toml(ARTICLE, None, &o)
            .unwrap()
            .blocks_per_request()
            .unwrap_err();
        assert!(e.contains("not a whole number of 2 MiB blocks"), "{e}");
    }

    #[test]
    fn partial_blocks_round_up() {
        let p = parse(&ARTICLE.replace("output_tokens = 3072", "output_tokens = 3073")).unwrap();
        assert_eq!(p.kv_per_request_bytes, 257 * 2 * MIB);
        let p = parse(&ARTICLE.replace("\"128KiB\"", "\"96KiB\"")).unwrap();
        assert_eq!(p.shape.unwrap().block_bytes(), 16 * 96 * KIB);
    }

    #[test]
    fn bad_files_say_where() {
        let e = parse(&ARTICLE.replace("\"48GiB\"", "\"-48GiB\"")).unwrap_err();
        assert!(e.to_string().starts_with("p.toml: [plan]: "), "{e}");
        assert!(e.to_string().contains("negative"), "{e}");
        let e = parse(&ARTICLE.replace("\"20GiB\"", "\"20G\"")).unwrap_err();
        assert!(e.to_string().contains("ambiguous"), "{e}");
        let e = parse(&ARTICLE.replace("margin = \"4GiB\"\n", "")).unwrap_err();
        assert!(e.to_string().contains("[plan] margin is missing"), "{e}");
        let e = parse(&ARTICLE.replace("model = ", "modell = ")).unwrap_err();
        assert!(e.to_string().contains("modell"), "{e}");
        let e = parse(&format!("{ARTICLE}\n[extra]\nx = 1\n")).unwrap_err();
        assert!(e.to_string().contains("[extra]: unknown section"), "{e}");
        let e = parse(&ARTICLE.replace("\"128KiB\"", "\"0B\"")).unwrap_err();
        assert!(e.to_string().contains("kv_bytes_per_token is 0 B"), "{e}");
        let e = parse("[plan\n").unwrap_err();
        assert!(e.to_string().contains("line 1: not valid TOML"), "{e}");
    }

    #[test]
    fn shares_of_the_total_resolve_against_the_capacity() {
        let card = ARTICLE
            .replace("capacity = \"80GiB\"\n", "")
            .replace("\"48GiB\"", "\"60% of total\"")
            .replace("\"20GiB\"", "\"25% of total\"")
            .replace("\"4GiB\"", "\"5% of total\"");
        let p = parse(&card).unwrap();
        assert_eq!(p.capacity_bytes, None);
        assert_eq!(p.shares.weights, Some(6000));
        // On the device: whole 2 MiB pages of its total (tiny-4g's 4 GiB: 2456 MiB of weights).
        let on_tiny = p.at_capacity(4 * GIB);
        assert_eq!(on_tiny.weights_bytes, 2456 * MIB);
        assert_eq!(on_tiny.other_peak_bytes, 1024 * MIB);
        assert_eq!(on_tiny.margin_bytes, 204 * MIB);
        let b = crate::plan::budget_for(&p, Some(4 * GIB)).unwrap();
        assert_eq!(b.inputs.weights_bytes, 2456 * MIB);
        assert_eq!(b.inputs.margin_bytes, 204 * MIB);
        // A capacity in the file (or a flag) resolves them at once; a flag overrides a share.
        let sized = parse(&card.replace("[plan]\n", "[plan]\ncapacity = \"80GiB\"\n")).unwrap();
        assert_eq!(sized.weights_bytes, 48 * GIB);
        assert_eq!(sized.other_peak_bytes, 20 * GIB);
        assert_eq!(sized.margin_bytes, 4 * GIB);
        let o = PlanOverrides {
            weights_bytes: Some(GIB),
            ..Default::default()
        };
        let flagged = Plan::from_toml(&card, None, &o).unwrap();
        assert_eq!(flagged.shares.weights, None);
        assert_eq!(flagged.at_capacity(4 * GIB).weights_bytes, GIB);
        let e = parse(&card.replace("\"5% of total\"", "\"5%\"")).unwrap_err();
        assert!(e.to_string().contains("of total"), "{e}");
    }

    #[test]
    fn flags_alone_need_every_category() {
        let e = Plan::from_flags(&PlanOverrides {
            weights_bytes: Some(GIB),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("missing: --other-peak, --margin, --kv-per-request"),
            "{e}"
        );
    }
}
