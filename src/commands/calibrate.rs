//! `headroom calibrate`.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

use crate::calibrate::{calibrate as measure, to_toml};
use crate::cli::{CalibrateArgs, DeviceArgs};
use crate::device::select;
use crate::node::summary::NodeCommand;
use crate::node::{NodeJob, run_node};
use crate::units::{Bytes, Nanos, utc_timestamp};

pub fn calibrate(
    dev: &DeviceArgs,
    args: &CalibrateArgs,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    if dev.device.is_node() {
        let job = NodeJob {
            command: NodeCommand::Calibrate,
            label: "calibrate".into(),
            input: None,
            workload_check: None,
            worker_args: vec![
                "calibrate".into(),
                "--name".into(),
                args.name.clone().into(),
            ],
            out: args.out.clone(),
            results_root: "results".into(),
            shared_ok: args.shared_ok,
            json: false,
            quiet: false,
        };
        return run_node(dev, &job, interrupted);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| "calibrated-profile.toml".into());
    let mut file = std::fs::File::create_new(&out).with_context(|| {
        format!(
            "{}: cannot create it (an existing profile is never overwritten)",
            out.display()
        )
    })?;
    let mut opened = select::open_noted(dev.request(), dev.one_gpu("calibrate")?)?;
    let info = opened.device.info().clone();
    let result = measure(
        opened.device.as_mut(),
        opened.before_context,
        opened.context_create_ns,
        &args.name,
    );
    let release = opened.device.release_all();
    let c = match result {
        Ok(c) => c,
        Err(e) => {
            drop(file);
            let _ = std::fs::remove_file(&out);
            return Err(e.context("calibration failed"));
        }
    };
    release?;
    let header = format!(
        "Measured by headroom {} calibrate on {} (GPU {}, driver {}) at {}.\nLoad it with --profile {}.",
        env!("CARGO_PKG_VERSION"),
        info.name,
        info.index,
        info.driver_version,
        utc_timestamp(std::time::SystemTime::now()),
        out.display()
    );
    file.write_all(to_toml(&c, &header).as_bytes())?;
    let p = &c.profile;
    crate::outln!("calibrated {} → {}", info.name, out.display())?;
    crate::outln!(
        "  total {} · context {} · NVML reserved {} · pages {} · small allocations ≤ {} packed at {}",
        Bytes(p.memory.total_bytes.0),
        Bytes(p.memory.context_overhead_bytes.0),
        Bytes(p.memory.nvml_reserved_bytes.0),
        Bytes(p.memory.page_bytes.0),
        Bytes(p.memory.small_alloc_limit_bytes.0),
        Bytes(p.memory.small_alloc_spacing_bytes.0)
    )?;
    crate::outln!(
        "  cuMemGetInfo {} · cuMemAlloc {} + {} per GiB · launch {} · copy {:.0} GB/s · fill {:.0} GB/s",
        Nanos(p.latency.mem_get_info.0),
        Nanos(p.latency.malloc_base.0),
        Nanos(p.latency.malloc_per_gib.0),
        Nanos(p.latency.launch.0),
        p.bandwidth.copy_bytes_per_s / 1e9,
        p.bandwidth.fill_bytes_per_s / 1e9
    )?;
    crate::outln!(
        "  stack: {} threads per SM, {} per thread by default",
        p.stack.threads_per_multiprocessor,
        Bytes(p.stack.default_per_thread_bytes.0)
    )?;
    Ok(0)
}
