//! A child's exit code and peak resident set size from `wait4`: that child's own usage, not
//! every child's as `getrusage(RUSAGE_CHILDREN)` would give.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Reaps `child` with `wait4`: its exit code (-1 when a signal ended it) and its peak resident
/// set size in bytes.
pub fn wait_measured(child: Child) -> (i32, u64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for; both pointers are to live locals.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    // ru_maxrss is in KiB on Linux.
    (code, usage.ru_maxrss as u64 * 1024)
}

/// Runs `headroom ARGS` in `cwd`, its stdout into `stdout` when given: exit code, stderr and
/// peak resident set size in bytes.
// The child is reaped by `wait_measured`.
#[allow(clippy::zombie_processes)]
pub fn headroom_measured(cwd: &Path, args: &[&str], stdout: Option<&Path>) -> (i32, String, u64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headroom"));
    cmd.args(args).current_dir(cwd).stderr(Stdio::piped());
    if let Some(path) = stdout {
        cmd.stdout(std::fs::File::create(path).unwrap());
    }
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let (code, rss) = wait_measured(child);
    (code, reader.join().unwrap(), rss)
}
