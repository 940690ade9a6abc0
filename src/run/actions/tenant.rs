//! `tenant`: another process takes memory for a while — a `headroom hold` child where
//! processes are launched (a real GPU), the simulator's accounting of one on sim.

use std::time::Duration;

use crate::device::DeviceError;
use crate::run::actions::{Done, Failure, Target};
use crate::tenant::TenantProcess;
use crate::units::Bytes;

/// How long a tenant process has to start and say it holds its memory.
pub(crate) const TENANT_START_NS: u64 = 60_000_000_000;

pub(super) fn start(t: &mut Target, bytes: u64, duration_ns: u64) -> Result<Done, Failure> {
    let mut detail = String::new();
    let mut pid = 4_000_000 + t.held.tenants.len() as u32;
    if let Some(launch) = t.tenant_launch {
        let p = TenantProcess::spawn(
            &launch.exe,
            &launch.device_args,
            bytes,
            duration_ns,
            Duration::from_nanos(TENANT_START_NS),
        )
        .map_err(|e| Failure::Error(format!("{e:#}")))?;
        pid = p.pid;
        detail = p.ready_line.clone();
        t.held.tenants.push(p);
    }
    if t.dev.info().is_sim() {
        let unsupported = Err(DeviceError::Unsupported("a simulated tenant", "cuda"));
        let added = t.dev.simulated_mut().map_or(unsupported, |s| {
            s.add_simulated_tenant(pid, bytes, duration_ns)
        });
        match added {
            Ok(()) => {}
            Err(DeviceError::OutOfMemory { .. }) => {
                let free = t.dev.mem_info()?.free_bytes;
                return Err(Failure::Error(format!(
                    "the tenant could not take {}: only {} is free",
                    Bytes(bytes),
                    Bytes(free)
                )));
            }
            Err(e) => return Err(e.into()),
        }
        if detail.is_empty() {
            detail = format!("simulated tenant pid {pid} holds {bytes} bytes for {duration_ns} ns");
        }
    }
    Ok(Done {
        requested_bytes: Some(bytes),
        detail,
        ..Done::default()
    })
}
