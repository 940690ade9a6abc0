//! `headroom validate --model M --engine E [-- ENGINE FLAGS]`: the engine's start-up pattern
//! run on the device through the caching allocator, predicted against measured per category,
//! the true peak per view, and whether the margin held. A plan that does not fit runs into
//! its out-of-memory on purpose, in the phase named after the engine's stage.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use anyhow::Context;
use serde::Serialize;

use crate::cli::DeviceArgs;
use crate::device::select;
use crate::outdir;
use crate::plan::args::ModelInputs;
use crate::plan::engine::pattern::{self, PHASES};
use crate::plan::engine::{self, EnginePlan, words};
use crate::record::View;
use crate::report::summary::{RunStatus, Summary};
use crate::run::{RunOptions, run_on};
use crate::text_table::{Align, TextTable};
use crate::units::{GIB, utc_folder_stamp};
use crate::workload::Workload;

/// One category, predicted and measured.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Category {
    pub name: &'static str,
    pub predicted_bytes: u64,
    /// What the run's allocations held in that phase (requested bytes, or driver bytes for
    /// non-torch); `null` when the run stopped before it.
    pub measured_bytes: Option<u64>,
}

/// `validation-model.json` of `validate --model`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ModelValidation {
    pub format_version: u32,
    pub plan: EnginePlan,
    pub categories: Vec<Category>,
    /// True interval peak of each view over the run.
    pub peaks: std::collections::BTreeMap<String, u64>,
    /// Device free memory at the device-used peak.
    pub free_at_peak_bytes: Option<u64>,
    /// `completed` or `oom`.
    pub status: String,
    /// The stage where the run ran out of memory, and the engine's stage the plan predicted.
    pub oom_stage: Option<String>,
    pub predicted_stage: Option<String>,
    /// The run completed with memory free at its peak (0: held; otherwise the exit is 1).
    pub margin_held: bool,
    pub run_dir: String,
}

fn phase_peak(sm: &Summary, phase: &str, view: View) -> Option<u64> {
    sm.phases()
        .iter()
        .find(|p| p.name == phase)
        .and_then(|p| p.peaks.get(view.key()))
        .map(|p| p.bytes)
}

fn measure(sm: &Summary, plan: &EnginePlan, planned: [u64; 5]) -> Vec<Category> {
    let req = |ph: &str| phase_peak(sm, ph, View::AllocRequested);
    let own = |ph: &str| phase_peak(sm, ph, View::OwnBytes);
    let weights = req("load");
    let sub = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
    let _ = plan;
    vec![
        Category {
            name: "weights",
            predicted_bytes: planned[0],
            measured_bytes: weights,
        },
        Category {
            name: "non_torch",
            predicted_bytes: planned[1],
            measured_bytes: sub(own("load"), phase_peak(sm, "load", View::AllocReserved)),
        },
        Category {
            name: "activation_peak",
            predicted_bytes: planned[2],
            measured_bytes: sub(req("profile_run"), weights),
        },
        Category {
            name: "kv_cache",
            predicted_bytes: planned[3],
            measured_bytes: sub(req("kv_allocation"), weights),
        },
        Category {
            name: "cuda_graph",
            predicted_bytes: planned[4],
            measured_bytes: sub(req("graph_capture"), req("kv_allocation")),
        },
    ]
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / GIB as f64)
}

pub fn validate(
    dev: &DeviceArgs,
    m: &ModelInputs,
    out: Option<&Path>,
    results: &Path,
    json: bool,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    let (spec, engine, mut settings) = super::plan_model::resolve(m)?;
    let mut opened = select::open_noted(dev.request(), dev.one_gpu("validate")?)?;
    let info = opened.device.info().clone();
    settings.device_name = Some(info.name.clone());
    let plan =
        engine::plan(&spec, engine, &settings, info.total_bytes).map_err(anyhow::Error::msg)?;
    let dir = outdir::create(
        out,
        results,
        &utc_folder_stamp(SystemTime::now()),
        &format!("validate-{}", engine.kind.name()),
    )?;
    let wl_path = dir.join("workload.toml");
    std::fs::write(&wl_path, pattern::workload_toml(&spec, &plan))
        .with_context(|| format!("cannot write {}", wl_path.display()))?;
    let wl = Workload::load(&wl_path, info.total_bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let run_dir = dir.join("run");
    let opts = RunOptions {
        out_dir: Some(run_dir.clone()),
        results_root: dir.clone(),
        allow_oom: true,
        interrupted,
        ..RunOptions::default()
    };
    let report = run_on(&wl, opened.device.as_mut(), opened.before_context, &opts)
        .with_context(|| format!("the engine's pattern ({})", run_dir.display()))?;
    let sm = report.summary;
    let planned = pattern::planned_bytes(&spec, &plan);
    let categories = measure(&sm, &plan, planned);
    let oom_stage = sm.ooms().first().map(|o| o.phase.clone());
    let completed = sm.status() == RunStatus::Completed;
    let v = ModelValidation {
        format_version: crate::plan::validate::FORMAT_VERSION,
        categories,
        peaks: sm
            .peaks()
            .run
            .iter()
            .map(|(k, p)| (k.clone(), p.bytes))
            .collect(),
        free_at_peak_bytes: sm.peaks().headroom_at_peak_bytes,
        status: if completed {
            "completed".into()
        } else {
            crate::report::word(&sm.status()).to_string()
        },
        oom_stage,
        predicted_stage: plan.failure.as_ref().map(|f| f.stage.to_string()),
        margin_held: completed && sm.ooms().is_empty() && plan.failure.is_none(),
        run_dir: run_dir.display().to_string(),
        plan,
    };
    let path = dir.join("validation-model.json");
    std::fs::write(&path, serde_json::to_string_pretty(&v)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        crate::out!("{}", text(&v, &info.name))?;
    }
    Ok(if v.margin_held { 0 } else { 1 })
}

fn text(v: &ModelValidation, device: &str) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let p = &v.plan;
    let _ = writeln!(
        s,
        "{} on {device}, rules of {}: the start-up pattern run through the caching allocator",
        p.model, p.rules
    );
    let _ = writeln!(s, "\nthe engine's lines, as headroom predicts them:");
    for l in words::engine_lines(p) {
        let _ = writeln!(s, "  {l}");
    }
    let mut t = TextTable::new(&[
        ("category", Align::Left),
        ("predicted", Align::Right),
        ("measured", Align::Right),
    ]);
    for c in &v.categories {
        t.row([
            c.name.to_string(),
            gib(c.predicted_bytes),
            c.measured_bytes
                .map(gib)
                .unwrap_or_else(|| "not reached".into()),
        ]);
    }
    let _ = writeln!(s);
    s.push_str(&t.render());
    let _ = writeln!(s, "\ntrue peaks:");
    for view in [
        View::DeviceUsed,
        View::OwnBytes,
        View::AllocReserved,
        View::AllocAllocated,
    ] {
        if let Some(b) = v.peaks.get(view.key()) {
            let _ = writeln!(s, "  {:<24} {}", view.key(), gib(*b));
        }
    }
    let _ = writeln!(
        s,
        "  predicted peak {} (margin {}); free at the measured peak: {}",
        gib(p.peak_bytes),
        format_args!("{:.2} GiB", p.margin_bytes as f64 / GIB as f64),
        v.free_at_peak_bytes
            .map(gib)
            .unwrap_or_else(|| "unknown".into())
    );
    match (&v.oom_stage, &p.failure) {
        (Some(stage), Some(f)) if *stage == f.stage => {
            let _ = writeln!(
                s,
                "\nout of memory at {stage}, as the plan predicted: {}",
                f.message
            );
        }
        (Some(stage), Some(f)) => {
            let _ = writeln!(
                s,
                "\nout of memory at {stage}; the plan predicted {}: {}",
                f.stage, f.message
            );
        }
        (Some(stage), None) => {
            let _ = writeln!(
                s,
                "\nout of memory at {stage}, which the plan did not predict: the memory it does not name (context, rounding) was more than the margin"
            );
        }
        (None, Some(f)) => {
            let _ = writeln!(s, "\nthe engine would stop at {}: {}", f.stage, f.message);
        }
        (None, None) => {
            let _ = writeln!(
                s,
                "\nthe margin held: every phase ran ({})",
                PHASES.join(", ")
            );
        }
    }
    let _ = writeln!(s, "run folder: {}", v.run_dir);
    s
}
