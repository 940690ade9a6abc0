//! Another tenant on the GPU, made on purpose: a child `headroom hold` process that takes
//! memory for a while, so a workload can show what a second process does to its own views.
//!
//! Children are always reaped: `stop` (called at the end of every run) kills and waits for
//! them; a second Ctrl-C kills every registered child before the parent exits; and `hold`
//! itself exits when its parent disappears.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};

/// The environment variable through which a runner names itself as a `hold` child's parent.
pub const PARENT_PID_ENV: &str = "HEADROOM_PARENT_PID";

/// Every live child, by pid, so an interrupt can reap them all.
static CHILDREN: Mutex<Option<HashMap<u32, Child>>> = Mutex::new(None);

fn registry() -> std::sync::MutexGuard<'static, Option<HashMap<u32, Child>>> {
    CHILDREN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running `headroom hold` child.
#[derive(Debug)]
pub struct TenantProcess {
    pub pid: u32,
    pub bytes: u64,
    /// The line the child printed once it held its memory.
    pub ready_line: String,
}

impl TenantProcess {
    /// Starts `exe hold <bytes>B --for <duration>` with `device_args` and waits (up to
    /// `timeout`) until it says it holds the memory.
    pub fn spawn(
        exe: &Path,
        device_args: &[String],
        bytes: u64,
        duration_ns: u64,
        timeout: Duration,
    ) -> anyhow::Result<TenantProcess> {
        let mut cmd = Command::new(exe);
        cmd.arg("hold")
            .arg(format!("{bytes}B"))
            .arg("--for")
            .arg(format!("{duration_ns}ns"))
            .args(device_args)
            .env(PARENT_PID_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} hold", exe.display()))?;
        let pid = child.id();
        let stdout = child
            .stdout
            .take()
            .context("the hold child has no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(timeout) {
            Ok(l) if l.starts_with("holding") => l.trim().to_string(),
            other => {
                let _ = child.kill();
                let out = child.wait_with_output();
                let stderr = out
                    .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
                    .unwrap_or_default();
                match other {
                    Err(_) => bail!(
                        "the tenant process (pid {pid}) did not report within {timeout:?}: {stderr}"
                    ),
                    Ok(_) => bail!(
                        "the tenant process (pid {pid}) could not take {bytes} bytes: {stderr}"
                    ),
                }
            }
        };
        registry()
            .get_or_insert_with(HashMap::new)
            .insert(pid, child);
        Ok(TenantProcess {
            pid,
            bytes,
            ready_line: line,
        })
    }

    /// Kills the child (the driver frees a dead process's memory) and reaps it.
    pub fn stop(self) -> anyhow::Result<()> {
        let child = registry().as_mut().and_then(|m| m.remove(&self.pid));
        if let Some(mut c) = child {
            let _ = c.kill();
            c.wait()
                .with_context(|| format!("reaping tenant pid {}", self.pid))?;
        }
        Ok(())
    }
}

/// Kills and reaps every tenant still registered (for an interrupt on the way out).
pub fn stop_all() {
    let children: Vec<Child> = registry()
        .take()
        .map(|m| m.into_values().collect())
        .unwrap_or_default();
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Whether the process `pid` exists (and is not a zombie) on this machine.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
