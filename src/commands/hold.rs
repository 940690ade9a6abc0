//! `headroom hold SIZE --for DURATION`: be another tenant holding device memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cli::{DeviceArgs, HoldArgs};
use crate::device::{Kernel, StreamId, select};
use crate::units::{Bytes, Nanos};

pub fn hold(
    dev: &DeviceArgs,
    args: &HoldArgs,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    anyhow::ensure!(args.duration > 0, "--for must be above zero");
    // The parent to outlive: named by the runner that started us (so a parent that died
    // before we looked is still noticed), else whoever started us.
    let parent = std::env::var(crate::tenant::PARENT_PID_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(std::os::unix::process::parent_id);

    let mut opened = select::open_noted(dev.request(), dev.one_gpu("hold")?)?;
    let d = opened.device.as_mut();
    let total = d.info().total_bytes;
    let size = args.size.resolve(total);
    anyhow::ensure!(
        size > 0,
        "the size to hold must be above zero (a share of this device rounds down to whole 2 MiB pages)"
    );
    anyhow::ensure!(
        size <= total,
        "cannot hold {} ({} bytes): the device has {} in all",
        Bytes(size),
        size,
        Bytes(total)
    );
    let simulated = d.info().is_sim();
    let ptr = if simulated {
        None
    } else {
        let p = d
            .malloc(size)
            .with_context(|| format!("cannot take {}", Bytes(size)))?;
        // Written through, so the pages are resident and counted like any tenant's.
        d.launch(
            Kernel::Memset {
                ptr: p,
                bytes: size / 4 * 4,
                value: 0,
            },
            StreamId::MAIN,
        )?;
        d.synchronize()?;
        Some(p)
    };
    crate::outln!(
        "holding {} bytes ({}) on {} as pid {} for {}{}",
        size,
        Bytes(size),
        d.info().name,
        std::process::id(),
        Nanos(args.duration),
        if simulated {
            " (simulated device: no memory is taken)"
        } else {
            ""
        }
    )?;
    let end = Instant::now() + Duration::from_nanos(args.duration);
    let mut why = "the time was up";
    while Instant::now() < end {
        if interrupted.load(Ordering::Relaxed) {
            why = "interrupted";
            break;
        }
        if std::os::unix::process::parent_id() != parent {
            why = "the parent process exited";
            break;
        }
        std::thread::sleep(
            Duration::from_millis(20).min(end.saturating_duration_since(Instant::now())),
        );
    }
    if let Some(p) = ptr {
        d.free(p)?;
    }
    crate::errln!("released {} ({why})", Bytes(size));
    // Interrupted by a signal is exit 130, as for every command.
    Ok(if why == "interrupted" { 130 } else { 0 })
}
