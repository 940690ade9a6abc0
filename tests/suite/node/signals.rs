//! The node's signals on the cuda backend over the fake driver, where steps take real time: a
//! worker killed mid-run, Ctrl-C forwarded to every worker, the node process itself killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Backend, Bench, NO_BUSY, flags_of, node_json};

/// Starts a node run in the background on the fake; returns it and its node folder.
fn start_node(b: &Bench, body: &str) -> (Child, PathBuf) {
    let wl = b.workload("slow", body);
    let out = b.path().join("node");
    let child = b
        .command(&[
            "run",
            &wl,
            "--device",
            "all",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, out)
}

/// Waits until every worker has written its first summary; returns their pids by GPU.
fn wait_for_workers(out: &Path, count: usize) -> Vec<u32> {
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "workers never started"
        );
        if let Ok(text) = std::fs::read_to_string(out.join("node.json"))
            && let Ok(n) = serde_json::from_str::<serde_json::Value>(&text)
        {
            let gpus = n["gpus"].as_array().unwrap();
            let pids: Vec<u32> = gpus
                .iter()
                .filter_map(|g| g["pid"].as_u64())
                .map(|p| p as u32)
                .collect();
            let written = gpus.iter().all(|g| {
                out.join(g["folder"].as_str().unwrap())
                    .join("summary.json")
                    .is_file()
            });
            if pids.len() == count && written {
                return pids;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A minute of GPU work in short steps. (A `sleep` step interrupted on a GPU ends the run as
/// failed, not interrupted: these workers are stopped between steps.)
const LONG: &str = "[[phase]]\nname = \"a\"\nsteps = [\n { op = \"allocate\", name = \"x\", size = \"256MiB\" },\n { op = \"repeat\", times = 3000, steps = [{ op = \"spin\", for = \"20ms\" }, { op = \"synchronize\" }] },\n]\n";

#[test]
fn a_killed_worker_is_a_failed_gpu_and_the_others_results_are_kept() {
    let b = Bench::new(Backend::Fake);
    std::fs::write(b.path().join("node.toml"), NO_BUSY).unwrap();
    let (mut node, out) = start_node(
        &b,
        "[[phase]]\nname = \"a\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"256MiB\" }]\n\n[[phase]]\nname = \"b\"\nsteps = [{ op = \"sleep\", for = \"3s\" }]\n",
    );
    let pids = wait_for_workers(&out, 3);
    signal(pids[1], "-KILL");
    let status = node.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(2),
        "the worst worker: a killed one counts as 2"
    );
    let n = node_json(&out);
    // The node as a whole failed, not completed, with the killed worker's 2.
    assert_eq!(
        (&n["status"], &n["exit_code"]),
        (&"failed".into(), &2.into())
    );
    let g = n["gpus"].as_array().unwrap();
    assert_eq!(g[1]["outcome"], "failed");
    assert_eq!(g[1]["signal"], 9);
    let why = g[1]["reason"].as_str().unwrap();
    assert!(
        why.contains("killed by signal 9 (SIGKILL)") && why.contains("still says \"running\""),
        "{why}"
    );
    for i in [0, 2] {
        assert_eq!(g[i]["outcome"], "ran");
        assert_eq!(g[i]["status"], "completed");
        assert_eq!(g[i]["exit_code"], 0);
    }
    assert!(
        flags_of(&n, 1)
            .iter()
            .any(|f| f.starts_with("failed: failed: the worker was killed"))
    );
    // merge refuses the node while it holds the killed run, unless told to skip it.
    let killed = out.join(g[1]["folder"].as_str().unwrap());
    let m = b.run(&["merge", out.to_str().unwrap()]);
    assert_eq!(m.code, 2);
    assert!(
        m.stderr.contains(killed.to_str().unwrap()) && m.stderr.contains("--skip-incomplete"),
        "{}",
        m.stderr
    );
    let m = b.run(&["merge", out.to_str().unwrap(), "--skip-incomplete"]);
    assert_eq!(m.code, 0, "{}", m.stderr);
    assert!(
        m.stdout.contains("## headroom merge: 2 runs"),
        "{}",
        m.stdout
    );
    assert!(
        m.stdout.contains("### Skipped: incomplete (1)"),
        "{}",
        m.stdout
    );
    assert!(
        m.stderr.contains(&format!("skipped {}", killed.display())),
        "{}",
        m.stderr
    );
}

#[test]
fn ctrl_c_reaches_every_worker_and_nothing_is_orphaned() {
    let b = Bench::new(Backend::Fake);
    std::fs::write(b.path().join("node.toml"), NO_BUSY).unwrap();
    let (mut node, out) = start_node(&b, LONG);
    let pids = wait_for_workers(&out, 3);
    let t0 = Instant::now();
    signal(node.id(), "-INT");
    let status = node.wait().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(status.code(), Some(130));
    let n = node_json(&out);
    assert_eq!(n["status"], "interrupted");
    for g in n["gpus"].as_array().unwrap() {
        assert_eq!(
            (g["outcome"].as_str(), g["exit_code"].as_i64()),
            (Some("ran"), Some(130))
        );
        assert_eq!(g["status"], "interrupted");
    }
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "a worker outlived its node"
    );
}

#[test]
fn workers_stop_on_their_own_when_the_node_process_is_killed() {
    let b = Bench::new(Backend::Fake);
    std::fs::write(b.path().join("node.toml"), NO_BUSY).unwrap();
    let (mut node, out) = start_node(&b, LONG);
    let pids = wait_for_workers(&out, 3);
    signal(node.id(), "-KILL");
    let _ = node.wait();
    let t0 = Instant::now();
    while pids.iter().any(|p| alive(*p)) {
        assert!(t0.elapsed() < Duration::from_secs(20), "workers orphaned");
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..3 {
        let dir = out.join(node_json(&out)["gpus"][i]["folder"].as_str().unwrap());
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(s["status"], "interrupted", "GPU {i} wrote its results");
    }
    assert_eq!(
        node_json(&out)["status"],
        "running",
        "the node itself never finished"
    );
}

/// One phase that finishes at once, then a minute of GPU work in short steps.
const FINISHED_THEN_LONG: &str = "[[phase]]\nname = \"load\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"128MiB\" }]\n\n[[phase]]\nname = \"serve\"\nsteps = [\n { op = \"repeat\", times = 3000, steps = [{ op = \"spin\", for = \"20ms\" }, { op = \"synchronize\" }] },\n]\n";

/// As Slurm's `scancel` and time limit, Kubernetes and systemd do: SIGTERM to the node and to
/// every worker at the same moment. Each worker hears it twice (its own and the node's
/// forwarded SIGINT) and takes it as one request: every record is `interrupted`, with the
/// phase it finished.
#[test]
fn a_node_and_all_its_workers_signalled_together_record_every_worker_interrupted() {
    let b = Bench::new(Backend::Fake);
    std::fs::write(b.path().join("node.toml"), NO_BUSY).unwrap();
    let (mut node, out) = start_node(&b, FINISHED_THEN_LONG);
    let pids = wait_for_workers(&out, 3);
    // Every worker inside its second phase before the signal.
    let t0 = Instant::now();
    for g in node_json(&out)["gpus"].as_array().unwrap() {
        let events = out.join(g["folder"].as_str().unwrap()).join("events.csv");
        while !std::fs::read_to_string(&events).is_ok_and(|t| t.contains("serve")) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "never reached serve"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut all: Vec<String> = vec!["-TERM".into(), node.id().to_string()];
    all.extend(pids.iter().map(u32::to_string));
    assert!(Command::new("kill").args(&all).status().unwrap().success());
    let status = node.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let n = node_json(&out);
    assert_eq!(n["status"], "interrupted");
    for (i, g) in n["gpus"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            (
                g["outcome"].as_str(),
                g["exit_code"].as_i64(),
                g["signal"].as_i64()
            ),
            (Some("ran"), Some(130), None),
            "GPU {i}: {g}"
        );
        assert_eq!(g["status"], "interrupted", "GPU {i}");
        let dir = out.join(g["folder"].as_str().unwrap());
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(s["status"], "interrupted", "GPU {i}");
        assert_eq!(s["phases"][0]["name"], "load");
        assert_eq!(s["phases"][0]["status"], "completed", "GPU {i}");
        assert_eq!(
            s["phases"][0]["peaks"]["own_bytes"]["bytes"],
            128 * 1024 * 1024,
            "GPU {i}"
        );
        assert_eq!(s["phases"][1]["name"], "serve");
        assert_eq!(s["phases"][1]["status"], "stopped", "GPU {i}");
    }
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "a worker outlived its node"
    );
}

/// A pseudo-terminal: its master and the slave's path.
fn pty() -> (std::fs::File, PathBuf) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt has no memory preconditions; the fd is checked.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(
        master >= 0,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `master` is the pty master just opened.
    assert_eq!(unsafe { libc::grantpt(master) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::unlockpt(master) }, 0);
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `name` is a writable buffer of the length given.
    assert_eq!(
        unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) },
        0
    );
    // SAFETY: ptsname_r wrote a NUL-terminated path into `name`.
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `master` is an open fd this function owns from here on.
    (
        unsafe { std::fs::File::from_raw_fd(master) },
        PathBuf::from(path),
    )
}

/// Only a deliberate second Ctrl-C at the terminal (more than a second after the first) quits
/// now: a second one at once, and a SIGINT from another process, are the same request. The
/// workers are stopped (SIGSTOP) so the node is still waiting for them when the signals come.
#[test]
fn only_a_deliberate_second_ctrl_c_at_the_terminal_kills_the_workers() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let b = Bench::new(Backend::Fake);
    std::fs::write(b.path().join("node.toml"), NO_BUSY).unwrap();
    let wl = b.workload("slow", LONG);
    let out = b.path().join("node");
    let (mut master, slave_path) = pty();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&slave_path)
        .unwrap();
    let slave_fd = slave.as_raw_fd();
    let mut cmd = b.command(&[
        "run",
        &wl,
        "--device",
        "all",
        "-q",
        "--out",
        out.to_str().unwrap(),
    ]);
    cmd.stdin(Stdio::from(slave))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setsid and ioctl are async-signal-safe; the slave fd stays open in the child
    // until exec (it is its stdin).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut node = cmd.spawn().unwrap();
    let pids = wait_for_workers(&out, 3);
    for p in &pids {
        signal(*p, "-STOP");
    }
    let ctrl_c = |m: &mut std::fs::File| m.write_all(b"\x03").unwrap();
    ctrl_c(&mut master);
    std::thread::sleep(Duration::from_millis(100));
    ctrl_c(&mut master);
    signal(node.id(), "-INT");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        node.try_wait().unwrap().is_none(),
        "a second Ctrl-C within the window, or a SIGINT from a process, ended the node"
    );
    assert!(pids.iter().all(|p| alive(*p)));
    let t0 = Instant::now();
    ctrl_c(&mut master);
    let status = loop {
        if let Some(s) = node.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the deliberate second Ctrl-C did not quit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut node.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("interrupted (SIGINT)"), "{stderr}");
    assert!(
        stderr.contains("SIGINT again: already stopping"),
        "{stderr}"
    );
    let t0 = Instant::now();
    while pids.iter().any(|p| alive(*p)) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "workers outlived the quit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
