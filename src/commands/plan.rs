//! `headroom plan [PLAN]`: the KV budget arithmetic, step by step.

use serde::Serialize;

use crate::cli::DeviceArgs;
use crate::device::DeviceInfo;
use crate::device::select;
use crate::plan::args::PlanArgs;
use crate::plan::budget::Budget;
use crate::plan::file::{CapacitySource, Plan, Shape};
use crate::plan::{budget_for, render};

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PlanJson<'a> {
    format_version: u32,
    name: &'a str,
    description: &'a str,
    file: Option<&'a std::path::Path>,
    capacity_source: CapacitySource,
    #[serde(flatten)]
    budget: &'a Budget,
    arithmetic: [String; 2],
    workload: Option<&'a Shape>,
    block_bytes: Option<u64>,
    blocks_per_request: Option<u64>,
    claimed_concurrency: Option<u64>,
    device: Option<&'a DeviceInfo>,
}

/// Exit 0; 1 when the plan claims more concurrent requests than its arithmetic allows.
pub fn plan(dev: &DeviceArgs, args: &PlanArgs) -> anyhow::Result<i32> {
    if args.model.list_models {
        return super::plan_model::list_models();
    }
    if args.model.model.is_some() {
        return super::plan_model::plan(dev, &args.model, args.inputs.capacity, args.json);
    }
    let o = args.inputs.overrides();
    let plan = match &args.plan {
        Some(path) => Plan::load(path, &o)?,
        None => Plan::from_flags(&o)?,
    };
    // The device is opened only to learn its capacity, and nothing is allocated on it.
    let device = match plan.capacity_bytes {
        Some(_) => None,
        None => {
            let opened = select::open_noted(dev.request(), dev.one_gpu("plan")?)?;
            Some(opened.device.info().clone())
        }
    };
    let plan = match &device {
        Some(d) => plan.at_capacity(d.total_bytes),
        None => plan,
    };
    let budget = budget_for(&plan, device.as_ref().map(|d| d.total_bytes))?;
    let claim = plan.claimed_concurrency();
    if args.json {
        let shape = plan.shape.as_ref();
        let j = PlanJson {
            format_version: crate::plan::validate::FORMAT_VERSION,
            name: &plan.name,
            description: &plan.description,
            file: plan.file.as_deref(),
            capacity_source: plan.capacity_source.unwrap_or(CapacitySource::Device),
            budget: &budget,
            arithmetic: [budget.budget_line(), budget.requests_line()],
            workload: shape,
            block_bytes: shape.map(|s| s.block_bytes()),
            blocks_per_request: shape.map(|s| s.blocks_per_request()),
            claimed_concurrency: claim,
            device: device.as_ref(),
        };
        crate::outln!("{}", serde_json::to_string_pretty(&j)?)?;
    } else {
        crate::out!("{}", render::plan_text(&plan, &budget, device.as_ref()))?;
    }
    Ok(if claim.is_some_and(|c| c > budget.requests) {
        1
    } else {
        0
    })
}
