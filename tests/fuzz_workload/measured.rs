//! A child's own peak resident memory, measured through a small intermediate process.
//!
//! Linux keeps the high-water mark of the memory a process had before `exec` as part of its
//! `ru_maxrss` (exec saves the old address space's peak into the process's record), and a
//! forked child starts with a copy of its parent's pages: a command forked from this fuzzer,
//! whose own peak grows over a long run, would report the fuzzer's pages as its own. A small
//! Python process forks the command instead and reports what `wait4` says of it; the
//! command's figure then carries at most the intermediate's few MiB, not the fuzzer's.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Forks `argv` under an address-space limit, its stdout to /dev/null, stderr inherited
/// (the caller's pipe), and prints on stdout `maxrss_kib code signal` for it.
const METER_PY: &str = r#"
import os, resource, sys
limit = int(sys.argv[1])
argv = sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.execv(argv[0], argv)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
print(ru.ru_maxrss, code, sig)
"#;

/// How a measured child ended.
pub struct Measured {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr: String,
    /// The command's own peak resident memory (at most the intermediate's at its fork more).
    pub rss_bytes: u64,
}

/// Runs `program args` in `cwd` under `address_space_bytes`, killing it (and the
/// intermediate) after `limit`.
pub fn run(
    program: &str,
    args: &[String],
    cwd: &std::path::Path,
    address_space_bytes: u64,
    limit: Duration,
) -> Result<Measured, String> {
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(METER_PY)
        .arg(address_space_bytes.to_string())
        .arg(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start python3 to measure the command: {e}"))?;
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let group = child.id() as libc::pid_t;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the measured command: {e}")),
        }
        if started.elapsed() > limit {
            // SAFETY: signals only the process group this function started.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            let _ = child.wait();
            return Err(format!("a hang: still running {limit:?} after its start"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let stderr = err_reader.join().unwrap_or_default();
    let line = out_reader.join().unwrap_or_default();
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 3 {
        return Err(format!(
            "the measuring process said {line:?}; stderr: {stderr}"
        ));
    }
    let num = |i: usize| -> Result<i64, String> {
        f[i].parse::<i64>()
            .map_err(|_| format!("the measuring process said {line:?}"))
    };
    let code = num(1)? as i32;
    let signal = num(2)? as i32;
    Ok(Measured {
        code: (code >= 0).then_some(code),
        signal: (signal > 0).then_some(signal),
        stderr,
        rss_bytes: num(0)? as u64 * 1024,
    })
}
