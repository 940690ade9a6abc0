//! `headroom validate PLAN [--sweep KEY=VALUES]`: run a plan on the device and measure it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use anyhow::{Context, bail};

use crate::cli::DeviceArgs;
use crate::device::select;
use crate::node::summary::NodeCommand;
use crate::node::{NodeJob, run_node};
use crate::outdir;
use crate::plan::args::ValidateArgs;
use crate::plan::budget::Short;
use crate::plan::file::Plan;
use crate::plan::sweep::{self, SweepResult};
use crate::plan::validate::{self, Interrupted, Resolved, Session};
use crate::plan::{budget_for, claims, render};
use crate::units::utc_folder_stamp;

pub fn validate(
    dev: &DeviceArgs,
    args: &ValidateArgs,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    match run(dev, args, interrupted) {
        Err(e) if e.downcast_ref::<Interrupted>().is_some() => {
            crate::errln!("interrupted: the probes so far are in their folders");
            Ok(130)
        }
        other => other,
    }
}

fn run(dev: &DeviceArgs, args: &ValidateArgs, interrupted: Arc<AtomicBool>) -> anyhow::Result<i32> {
    let Some(plan_path) = args.plan.as_deref() else {
        if args.model.model.is_none() {
            return super::validate_engine::validate(
                dev,
                &args.model.engine,
                &args.model.engine_args,
                args.out.as_deref(),
                &args.results,
                args.json,
                interrupted,
            );
        }
        return super::validate_model::validate(
            dev,
            &args.model,
            args.out.as_deref(),
            &args.results,
            args.json,
            interrupted,
        );
    };
    let base = args.inputs.overrides();
    let spec = args
        .sweep
        .as_deref()
        .map(sweep::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    // One plan per point (one in all without a sweep), each checked before the device opens
    // as far as it can be without knowing the device's capacity.
    let points: Vec<(String, Plan)> = match &spec {
        None => vec![(String::new(), Plan::load(plan_path, &base)?)],
        Some(s) => s
            .values_bytes
            .iter()
            .map(|v| {
                let label = format!("--sweep {}={}", s.key.name(), Short(*v as i128));
                Plan::load(plan_path, &s.key.apply(&base, *v))
                    .map(|p| (label, p))
                    .map_err(anyhow::Error::from)
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let context = |label: &str, e: anyhow::Error| {
        if label.is_empty() {
            e
        } else {
            e.context(label.to_string())
        }
    };
    if dev.device.is_node() {
        return run_node(dev, &node_job(args, &points[0].1.name), interrupted);
    }
    for (label, p) in &points {
        let checked = p
            .blocks_per_request()
            .map_err(anyhow::Error::msg)
            .and_then(|_| match p.capacity_bytes {
                Some(_) => budget_for(p, None).map(|_| ()).map_err(Into::into),
                None => Ok(()),
            });
        checked.map_err(|e| context(label, e))?;
    }

    let mut opened = select::open_noted(dev.request(), dev.one_gpu("validate")?)?;
    let total = opened.device.info().total_bytes;
    let resolved: Vec<(String, Resolved)> = points
        .iter()
        .map(|(label, p)| {
            Resolved::new(p, total)
                .map(|r| (label.clone(), r))
                .map_err(|e| context(label, e))
        })
        .collect::<anyhow::Result<_>>()?;

    let name = format!("validate-{}", resolved[0].1.plan.name);
    if let Some(out) = args
        .out
        .as_ref()
        .filter(|o| o.join("validation.json").exists())
    {
        bail!(
            "--out {}: already holds a validation; results are never overwritten, choose another folder",
            out.display()
        );
    }
    let dir = outdir::create(
        args.out.as_deref(),
        &args.results,
        &utc_folder_stamp(SystemTime::now()),
        &name,
    )?;
    let progress = !args.quiet && !args.json;
    let mut session = Session {
        device: opened.device.as_mut(),
        before_context: opened.before_context,
        interrupted,
        progress,
    };
    let Some(spec) = spec else {
        let r = &resolved[0].1;
        if progress {
            crate::errln!(
                "validating plan {:?}: {} planned; each probe is a run under {}",
                r.plan.name,
                r.planned_requests,
                dir.display()
            );
        }
        let v = validate::validate(r, &mut session, &dir)?;
        let text = render::validation_text(&v, &r.plan, &dir);
        claims::write(&dir, &[(String::new(), &v, text.clone())])?;
        if args.json {
            crate::outln!("{}", serde_json::to_string_pretty(&v)?)?;
        } else if !args.quiet {
            crate::output::print_table(&text)?;
        }
        return Ok(v.exit_code);
    };

    let mut results = Vec::new();
    for ((label, r), value) in resolved.iter().zip(&spec.values_bytes) {
        let pdir = dir.join(sweep::point_dir(spec.key, *value));
        std::fs::create_dir_all(&pdir)
            .with_context(|| format!("cannot create {}", pdir.display()))?;
        if progress {
            crate::errln!("{label}: {} planned", r.planned_requests);
        }
        results.push(validate::validate(r, &mut session, &pdir).with_context(|| label.clone())?);
    }
    let exit_code = results.iter().map(|v| v.exit_code).max().unwrap_or(0);
    write_sweep(&dir, &spec, &results, exit_code)?;
    let points: Vec<(String, &validate::Validation, String)> = resolved
        .iter()
        .zip(&results)
        .zip(&spec.values_bytes)
        .map(|(((label, r), v), value)| {
            let pdir = dir.join(sweep::point_dir(spec.key, *value));
            (label.clone(), v, render::validation_text(v, &r.plan, &pdir))
        })
        .collect();
    claims::write(&dir, &points)?;
    if args.json {
        let j = SweepResult {
            format_version: validate::FORMAT_VERSION,
            sweep: &spec,
            points: &results,
            exit_code,
        };
        crate::outln!("{}", serde_json::to_string_pretty(&j)?)?;
    } else if !args.quiet {
        crate::output::print_table(&sweep::text(&spec, &results, &dir))?;
    }
    Ok(exit_code)
}

fn write_sweep(
    dir: &Path,
    spec: &sweep::SweepSpec,
    points: &[validate::Validation],
    exit_code: i32,
) -> anyhow::Result<()> {
    sweep::write_csv(&dir.join("sweep.csv"), spec, points)?;
    let title = format!(
        "{}: admission limit as {} varies ({})",
        points.first().map_or("", |p| p.plan.name.as_str()),
        spec.key.name(),
        points.first().map_or("", |p| p.device.name.as_str())
    );
    let path = dir.join("sweep.svg");
    std::fs::write(&path, sweep::svg(spec, points, &title))
        .with_context(|| format!("cannot write {}", path.display()))?;
    validate::write_json(
        dir,
        &SweepResult {
            format_version: validate::FORMAT_VERSION,
            sweep: spec,
            points,
            exit_code,
        },
    )
}

/// The same validation on every GPU of a node: each worker gets these arguments (and `--out`).
fn node_job(args: &ValidateArgs, plan_name: &str) -> NodeJob {
    let mut w: Vec<std::ffi::OsString> = vec![
        "validate".into(),
        args.plan.clone().unwrap_or_default().into(),
    ];
    let i = &args.inputs;
    for (flag, v) in [
        ("--capacity", i.capacity),
        ("--weights", i.weights),
        ("--other-peak", i.other_peak),
        ("--margin", i.margin),
        ("--kv-per-request", i.kv_per_request),
    ] {
        if let Some(b) = v {
            w.extend([flag.into(), format!("{b}B").into()]);
        }
    }
    if let Some(s) = &args.sweep {
        w.extend(["--sweep".into(), s.into()]);
    }
    w.push("--quiet".into());
    NodeJob {
        command: NodeCommand::Validate,
        label: format!("validate-{plan_name}"),
        input: args.plan.clone(),
        worker_args: w,
        workload_check: None,
        out: args.out.clone(),
        results_root: args.results.clone(),
        shared_ok: args.shared_ok,
        json: args.json,
        quiet: args.quiet,
    }
}
