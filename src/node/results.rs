//! Reading what a worker left in its GPU folder into that GPU's row: the run's figures (idle,
//! true peak per view, headroom at the peak, OOM outcome), a validation's admission, a
//! bandwidth report's rates, a calibration's measured constants. A folder a killed worker left
//! behind is incomplete, and its figures are not taken.

use std::collections::BTreeMap;
use std::path::Path;

use crate::device::profile::SimProfile;
use crate::node::summary::{GpuRow, NodeCommand, OomBrief};
use crate::record::View;
use crate::report::complete::{describe, incomplete_reasons};
use crate::report::rundata::load_summary;

/// What a GPU folder holds, read for its row.
#[derive(Debug, Default)]
pub struct Found {
    pub status: Option<String>,
    pub ooms: Option<u64>,
    pub first_oom: Option<OomBrief>,
    pub figures: BTreeMap<String, u64>,
}

/// Reads the result of `command` in `dir`; an error says why it is not a complete result.
pub fn read(command: NodeCommand, dir: &Path) -> Result<Found, String> {
    match command {
        NodeCommand::Run => read_run(dir),
        NodeCommand::Validate => read_json(&dir.join("validation.json")).map(validation),
        NodeCommand::Bandwidth => read_json(&dir.join("bandwidth.json")).map(bandwidth),
        NodeCommand::Calibrate => read_profile(&dir.join("profile.toml")),
    }
}

fn read_run(dir: &Path) -> Result<Found, String> {
    let reasons = incomplete_reasons(dir);
    if !reasons.is_empty() {
        return Err(format!("incomplete: {}", describe(&reasons)));
    }
    let s = load_summary(dir).map_err(|e| format!("{e:#}"))?;
    let mut figures = BTreeMap::new();
    if let Some(idle) = s.idle_after() {
        figures.insert("idle_device_used_bytes".into(), idle.device_used_bytes);
        figures.insert("idle_device_free_bytes".into(), idle.device_free_bytes);
    }
    if let Some(c) = s.idle().as_ref().and_then(|i| i.context_overhead_bytes) {
        figures.insert("context_overhead_bytes".into(), c);
    }
    for v in View::ALL {
        if let Some(p) = s.peaks().run.get(v.key()) {
            figures.insert(format!("peak_{}", v.key()), p.bytes);
        }
    }
    if let Some(h) = s.peaks().headroom_at_peak_bytes {
        figures.insert("headroom_at_peak_bytes".into(), h);
    }
    if let Some(p) = s.polled_peak("1hz", View::DeviceUsed) {
        figures.insert("poll_1hz_device_used_bytes".into(), p);
    }
    Ok(Found {
        status: Some(crate::report::markdown::status_name(&s)),
        ooms: Some(s.ooms().len() as u64),
        first_oom: s.ooms().first().map(|o| OomBrief {
            at: format!("{}/{}", o.phase, o.step),
            requested_bytes: o.requested_bytes,
            observation: o.diagnosis.observation.clone(),
        }),
        figures,
    })
}

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let text = std::fs::read_to_string(path).map_err(|_| format!("{name} is missing"))?;
    serde_json::from_str(&text).map_err(|_| format!("{name} is not whole JSON (cut short?)"))
}

fn validation(v: serde_json::Value) -> Found {
    let mut figures = BTreeMap::new();
    let mut put = |key: &str, x: Option<u64>| {
        if let Some(x) = x {
            figures.insert(key.to_string(), x);
        }
    };
    put("planned_requests", v["planned_requests"].as_u64());
    put(
        "admission_limit_requests",
        v["admission"]["admitted_requests"].as_u64(),
    );
    put("margin_line_bytes", v["margin_line_bytes"].as_u64());
    let status = match v["planned_admitted"].as_bool() {
        Some(true) => "admitted",
        Some(false) => "not admitted",
        None => "sweep",
    };
    Found {
        status: Some(status.into()),
        figures,
        ..Found::default()
    }
}

fn bandwidth(v: serde_json::Value) -> Found {
    let mut figures = BTreeMap::new();
    for row in v["rows"].as_array().into_iter().flatten() {
        if let (Some(name), Some(rate)) = (row["name"].as_str(), row["bytes_per_s"].as_f64()) {
            figures.insert(format!("{name}_bytes_per_s"), rate.round() as u64);
        }
    }
    let mismatches = v["verify_mismatches"].as_u64().unwrap_or(0);
    figures.insert("verify_mismatches".into(), mismatches);
    Found {
        status: Some(
            if mismatches == 0 {
                "verified"
            } else {
                "mismatches"
            }
            .into(),
        ),
        figures,
        ..Found::default()
    }
}

fn read_profile(path: &Path) -> Result<Found, String> {
    let text = std::fs::read_to_string(path).map_err(|_| "profile.toml is missing".to_string())?;
    let p = SimProfile::from_toml(&text, &path.display().to_string())
        .map_err(|e| format!("profile.toml: {e:#}"))?;
    let m = &p.memory;
    let figures = BTreeMap::from([
        ("total_bytes".to_string(), m.total_bytes.0),
        (
            "context_overhead_bytes".to_string(),
            m.context_overhead_bytes.0,
        ),
        ("nvml_reserved_bytes".to_string(), m.nvml_reserved_bytes.0),
        ("page_bytes".to_string(), m.page_bytes.0),
    ]);
    Ok(Found {
        status: Some("calibrated".into()),
        figures,
        ..Found::default()
    })
}

/// Puts what was found into the row.
pub fn apply(row: &mut GpuRow, found: Found) {
    row.status = found.status;
    row.ooms = found.ooms;
    row.first_oom = found.first_oom;
    row.figures = found.figures;
}
