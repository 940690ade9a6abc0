//! The test's own one-node Slurm: the packages found or installed, the configuration written,
//! the daemons started and stopped by pid, and every process of it found by a marker in its
//! environment.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// The environment variable every process of the test's cluster carries (its folder).
const MARK: &str = "HEADROOM_SLURM_TEST_CLUSTER";

const TOOLS: [&str; 8] = [
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "scancel",
    "squeue",
    "scontrol",
    "sinfo",
];

/// The system's folders only: an installed headroom elsewhere on the test's PATH must not be
/// what the jobs find.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn find(tool: &str) -> Option<PathBuf> {
    SYSTEM_PATH
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

pub(super) fn sh(cmd: &mut Command) -> Out {
    let o = cmd.output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Slurm and munge found or installed; else why not.
pub(super) fn slurm_available() -> Result<(), String> {
    if TOOLS.iter().all(|t| find(t).is_some()) {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("slurm-wlm and munge are not installed and this is not root (apt)".into());
    }
    if find("apt-get").is_none() {
        return Err("slurm-wlm and munge are not installed and there is no apt-get".into());
    }
    // The packages' own services must not start: this test runs its own daemons.
    let policy = Path::new("/usr/sbin/policy-rc.d");
    let ours = !policy.exists()
        && std::fs::write(policy, "#!/bin/sh\nexit 101\n").is_ok()
        && sh(Command::new("chmod").args(["755", "/usr/sbin/policy-rc.d"])).code == 0;
    let install = || {
        sh(Command::new("timeout")
            .args([
                "300",
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
            ])
            .args(["slurm-wlm", "munge"])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    let mut r = install();
    if r.code != 0 {
        let _ = sh(Command::new("timeout").args(["300", "apt-get", "update", "-q"]));
        r = install();
    }
    if ours {
        let _ = std::fs::remove_file(policy);
    }
    if r.code != 0 {
        let last = r.stderr.lines().last().unwrap_or_default().to_string();
        return Err(format!("apt-get install slurm-wlm munge failed: {last}"));
    }
    match TOOLS.iter().find(|t| find(t).is_none()) {
        Some(t) => Err(format!("installed, but {t} is missing")),
        None => Ok(()),
    }
}

/// Two free TCP ports on the loopback interface (held together while chosen, so they differ).
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// The processes (not zombies) whose environment carries `MARK=dir`: pid and command line.
pub(super) fn marked(dir: &Path) -> Vec<(i32, String)> {
    let want = format!("{MARK}={}", dir.display()).into_bytes();
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if !env.split(|b| *b == 0).any(|v| v == want.as_slice()) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        out.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
    }
    out
}

/// A one-node Slurm in a temporary folder; stopped (every process of it, by pid) when dropped.
pub(super) struct Cluster {
    dir: tempfile::TempDir,
    daemons: Vec<(&'static str, Child)>,
}

impl Cluster {
    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A Slurm command (or any) with the cluster's configuration and marker.
    pub(super) fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        for (k, _) in std::env::vars() {
            if k.starts_with("SLURM_") || k.starts_with("SBATCH_") || k.starts_with("HEADROOM_") {
                c.env_remove(k);
            }
        }
        c.env("SLURM_CONF", self.conf())
            .env(MARK, self.path())
            .env("PATH", SYSTEM_PATH)
            .stdin(Stdio::null());
        c
    }

    pub(super) fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["state", "spool", "munge", "home", "results"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let mut key = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
            .unwrap();
        std::fs::write(d.join("munge/munge.key"), key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            d.join("munge/munge.key"),
            std::fs::Permissions::from_mode(0o400),
        )
        .unwrap();
        std::fs::set_permissions(d.join("munge"), std::fs::Permissions::from_mode(0o711)).unwrap();
        // Eight placeholder GPUs for the GRES, so --gpus-per-node=8 is satisfied.
        for i in 0..8 {
            std::fs::write(d.join(format!("gpu{i}")), "").unwrap();
        }
        let cpus = sh(Command::new(find("slurmd").unwrap()).arg("-C"))
            .stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("CPUs=").map(str::to_string))
            .unwrap_or_else(|| "1".into());
        let d_ = d.display();
        let (ctld_port, slurmd_port) = free_ports();
        let conf = format!(
            "ClusterName=headroom\nSlurmctldHost=localhost(127.0.0.1)\nSlurmUser=root\n\
             SlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n\
             AuthInfo=socket={d_}/munge/munge.socket\nSlurmctldPort={}\nSlurmdPort={}\n\
             StateSaveLocation={d_}/state\nSlurmdSpoolDir={d_}/spool\n\
             SlurmctldPidFile={d_}/slurmctld.pid\nSlurmdPidFile={d_}/slurmd.pid\n\
             SlurmctldLogFile={d_}/slurmctld.log\nSlurmdLogFile={d_}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nSchedulerType=sched/builtin\n\
             GresTypes=gpu\nMpiDefault=none\nReturnToService=2\nKillWait=10\n\
             CommunicationParameters=NoInAddrAny,NoCtldInAddrAny\n\
             NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:8 State=UNKNOWN\n\
             PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            ctld_port, slurmd_port,
        );
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        std::fs::write(
            d.join("gres.conf"),
            format!("NodeName=localhost Name=gpu File={d_}/gpu[0-7]\n"),
        )
        .unwrap();
        let mut c = Cluster {
            dir,
            daemons: Vec::new(),
        };
        let base = c.path().to_path_buf();
        let log = |name: &str| std::fs::File::create(base.join(format!("{name}.out"))).unwrap();
        let m = c.path().join("munge");
        let munged = c
            .command("munged")
            .arg("-F")
            .arg("--force")
            .arg(format!("--key-file={}", m.join("munge.key").display()))
            .arg(format!("--socket={}", m.join("munge.socket").display()))
            .arg(format!("--pid-file={}", m.join("munged.pid").display()))
            .arg(format!("--log-file={}", m.join("munged.log").display()))
            .arg(format!("--seed-file={}", m.join("seed").display()))
            .stdout(log("munged"))
            .stderr(log("munged"))
            .spawn()
            .unwrap();
        c.daemons.push(("munged", munged));
        c.wait_for("munged's socket", || m.join("munge.socket").exists());
        let ctld = c
            .command("slurmctld")
            .args(["-D", "-i"])
            .stdout(log("slurmctld"))
            .stderr(log("slurmctld"))
            .spawn()
            .unwrap();
        c.daemons.push(("slurmctld", ctld));
        let slurmd = c
            .command("slurmd")
            .args(["-D", "-N", "localhost"])
            .stdout(log("slurmd"))
            .stderr(log("slurmd"))
            .spawn()
            .unwrap();
        c.daemons.push(("slurmd", slurmd));
        c.wait_for("the node to be idle", || {
            sh(c.command("sinfo")
                .args(["-h", "-n", "localhost", "-o", "%T"]))
            .stdout
            .trim()
                == "idle"
        });
        c
    }

    pub(super) fn logs(&self) -> String {
        [
            "slurmctld.log",
            "slurmd.log",
            "slurmctld.out",
            "slurmd.out",
            "munged.out",
        ]
        .iter()
        .map(|f| {
            let t = std::fs::read_to_string(self.path().join(f)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            format!(
                "--- {f}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    }

    pub(super) fn wait_for(&self, what: &str, mut ok: impl FnMut() -> bool) {
        let t0 = Instant::now();
        while !ok() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "waited 30 s for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The jobs still queued or running.
    pub(super) fn queued(&self) -> Vec<String> {
        sh(self.command("squeue").args(["-h", "-o", "%i %T"]))
            .stdout
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub(super) fn wait_for_queue_empty(&self, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let q = self.queued();
            if q.is_empty() {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "jobs left after {limit:?}: {q:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `JobState` of one job (`123_0` for an array task).
    pub(super) fn job_state(&self, id: &str) -> String {
        let r = sh(self.command("scontrol").args(["show", "job", id]));
        r.stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("JobState=").map(str::to_string))
            .unwrap_or_else(|| format!("unknown ({})", r.stderr.trim()))
    }

    /// Cancels every job, stops the daemons by pid (SIGTERM, then SIGKILL after 10 s), then
    /// kills any process still carrying the marker; returns what had to be killed that way.
    pub(super) fn stop(&mut self) -> Vec<(i32, String)> {
        if self.daemons.is_empty() {
            return vec![];
        }
        let _ = sh(self.command("scancel").args(["--quiet", "--user=root"]));
        let t0 = Instant::now();
        while !self.queued().is_empty() && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(250));
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let t0 = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if t0.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.daemons.clear();
        let left = marked(self.path());
        for (pid, _) in &left {
            // SAFETY: kill(2) of a process carrying this test's marker: one this cluster started.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        left
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
