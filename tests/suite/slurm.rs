//! docs/fleet/slurm.sh on a real Slurm: Debian's `slurm-wlm` and `munge` (installed with apt
//! when this runs as root and they are missing), one node on the loopback interface only, with
//! eight placeholder GPUs. The test starts `munged`, `slurmctld` and `slurmd` itself and stops
//! them by their PIDs whatever happens (every process of the cluster carries a marker in its
//! environment, and none is left). It runs the two `sbatch` lines of docs/fleet.md as written,
//! with only the documented settings, on a 4-task array, and checks the node folders and the
//! merge; then, on the fake NVIDIA driver (where steps take real time), `scancel` of a running
//! task and a task past `--time`: both record every GPU's run `interrupted` with the phase it
//! finished. Where Slurm cannot be had the test says why and passes nothing else.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

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

fn sh(cmd: &mut Command) -> Out {
    let o = cmd.output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Slurm and munge found or installed; else why not.
fn slurm_available() -> Result<(), String> {
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The processes (not zombies) whose environment carries `MARK=dir`: pid and command line.
fn marked(dir: &Path) -> Vec<(i32, String)> {
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
struct Cluster {
    dir: tempfile::TempDir,
    daemons: Vec<(&'static str, Child)>,
}

impl Cluster {
    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A Slurm command (or any) with the cluster's configuration and marker.
    fn command(&self, program: &str) -> Command {
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

    fn start() -> Cluster {
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
            free_port(),
            free_port(),
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

    fn logs(&self) -> String {
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

    fn wait_for(&self, what: &str, mut ok: impl FnMut() -> bool) {
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
    fn queued(&self) -> Vec<String> {
        sh(self.command("squeue").args(["-h", "-o", "%i %T"]))
            .stdout
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn wait_for_queue_empty(&self, limit: Duration) {
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
    fn job_state(&self, id: &str) -> String {
        let r = sh(self.command("scontrol").args(["show", "job", id]));
        r.stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("JobState=").map(str::to_string))
            .unwrap_or_else(|| format!("unknown ({})", r.stderr.trim()))
    }

    /// Cancels every job, stops the daemons by pid (SIGTERM, then SIGKILL after 10 s), then
    /// kills any process still carrying the marker; returns what had to be killed that way.
    fn stop(&mut self) -> Vec<(i32, String)> {
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

/// The two `sbatch` lines of docs/fleet.md's Slurm section, as written.
fn documented_lines() -> (String, String) {
    let doc = std::fs::read_to_string(root().join("docs/fleet.md")).unwrap();
    let script = std::fs::read_to_string(root().join("docs/fleet/slurm.sh")).unwrap();
    let first = doc
        .lines()
        .find(|l| l.starts_with("jid=$(sbatch"))
        .expect("docs/fleet.md: jid=$(sbatch …")
        .to_string();
    let second = doc
        .lines()
        .find(|l| l.starts_with("sbatch --dependency="))
        .expect("docs/fleet.md: sbatch --dependency=…")
        .to_string();
    let command = |l: &str| l.split("  #").next().unwrap().trim().to_string();
    for l in [&first, &second] {
        assert!(
            script.contains(&format!("#   {}", command(l))),
            "slurm.sh's header differs from docs/fleet.md: {l}"
        );
    }
    (first, second)
}

/// A slow two-phase workload on the fake driver: `load` finishes at once, `serve` takes minutes
/// in 50 ms steps.
const SLOW: &str = "[[phase]]\nname = \"load\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"128MiB\" }]\n\n[[phase]]\nname = \"serve\"\nsteps = [\n { op = \"repeat\", times = 4000, steps = [{ op = \"spin\", for = \"50ms\" }, { op = \"synchronize\" }] },\n]\n";

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// Every GPU of a node folder recorded `interrupted`, `load` completed and `serve` stopped.
fn assert_interrupted(node: &Path) {
    let n = json(&node.join("node.json"));
    assert_eq!(n["status"], "interrupted", "{}: {n}", node.display());
    assert_eq!(n["exit_code"], 130, "{}", node.display());
    for g in n["gpus"].as_array().unwrap() {
        let what = format!("{} GPU {}", node.display(), g["index"]);
        assert_eq!(
            (
                g["outcome"].as_str(),
                g["exit_code"].as_i64(),
                g["status"].as_str()
            ),
            (Some("ran"), Some(130), Some("interrupted")),
            "{what}: {g}"
        );
        let s = json(
            &node
                .join(g["folder"].as_str().unwrap())
                .join("summary.json"),
        );
        assert_eq!(s["status"], "interrupted", "{what}");
        assert_eq!(s["phases"][0]["name"], "load");
        assert_eq!(s["phases"][0]["status"], "completed", "{what}");
        assert_eq!(
            s["phases"][0]["peaks"]["own_bytes"]["bytes"],
            128 * MIB,
            "{what}"
        );
        assert_eq!(s["phases"][1]["status"], "stopped", "{what}");
    }
}

#[test]
fn the_documented_slurm_array_runs_on_a_real_slurm_and_scancel_and_time_limits_interrupt() {
    if let Err(why) = slurm_available() {
        eprintln!("skipped: no Slurm: {why}");
        return;
    }
    let t0 = Instant::now();
    let mut cluster = Cluster::start();
    eprintln!("slurm: cluster up in {:?}", t0.elapsed());
    let home = cluster.path().join("home");
    let results = cluster.path().join("results");
    // The README's install step puts the binary in $CARGO_HOME/bin (~/.cargo/bin); this is the
    // test build's binary placed there, without the release build.
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_headroom"), bin.join("headroom")).unwrap();
    let submit = |extra: &[(&str, String)], script: &str| {
        let mut c = cluster.command("bash");
        c.args(["-c", script])
            .current_dir(root())
            .env("HOME", &home)
            .env_remove("CARGO_HOME")
            .env("RESULTS", &results);
        for (k, v) in extra {
            c.env(k, v);
        }
        sh(&mut c)
    };
    let before: Vec<_> = std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();

    // The documented lines, a 4-task array (sbatch's SBATCH_ARRAY_INX overrides the script's
    // --array), the simulator as the device. WORKLOAD: quickstart, the smallest shipped one.
    let (first, second) = documented_lines();
    let r = submit(
        &[
            (
                "HEADROOM_DEVICE_ARGS",
                "--profile 8xh100-80g --device all".into(),
            ),
            ("WORKLOAD", "workloads/quickstart.toml".into()),
        ],
        &format!(
            "set -euo pipefail\nexport SBATCH_ARRAY_INX=0-3\n{first}\nunset SBATCH_ARRAY_INX\n{second}\necho \"$jid\"\n"
        ),
    );
    assert_eq!(r.code, 0, "{}{}", r.stderr, cluster.logs());
    let jid = r.stdout.lines().last().unwrap().trim().to_string();
    cluster.wait_for_queue_empty(Duration::from_secs(180));
    eprintln!("slurm: 4 tasks and the merge done at {:?}", t0.elapsed());
    let job = results.join(&jid);
    for task in 0..4 {
        assert_eq!(
            cluster.job_state(&format!("{jid}_{task}")),
            "COMPLETED",
            "task {task}"
        );
        let n = json(&job.join(format!("node-{task}/node.json")));
        assert_eq!(
            (n["status"].as_str(), n["exit_code"].as_i64()),
            (Some("completed"), Some(0))
        );
        let gpus = n["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 8);
        assert_eq!(gpus.iter().filter(|g| g["outcome"] == "ran").count(), 7);
        assert!(job.join(format!("logs/task-{task}.log")).is_file());
    }
    let rows = csv_rows(&job.join("fleet.csv"));
    assert_eq!(rows.len(), 28);
    let uuids: std::collections::BTreeSet<&str> = rows.iter().map(|r| r["uuid"].as_str()).collect();
    assert_eq!(uuids.len(), 28, "every node's GPUs have UUIDs of their own");
    let md = std::fs::read_to_string(job.join("fleet.md")).unwrap();
    assert!(
        md.starts_with("## headroom merge: 28 runs on 4 nodes, 1 GPU model/driver group\n"),
        "{md}"
    );
    assert!(
        md.contains("- GPU index 3: CUDA-visible total 128.00 MiB below the median (79.19 GiB) on 4/4 nodes\n"),
        "{md}"
    );
    assert!(
        md.contains("- GPU index 5 not run on 4/4 nodes: in use by pid 4242"),
        "{md}"
    );
    assert!(!md.contains("duplicate UUID"), "{md}");
    assert!(
        std::fs::read_to_string(job.join("logs/merge.log"))
            .unwrap()
            .contains("wrote ")
    );
    let after: Vec<_> = std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let new: Vec<_> = after.iter().filter(|f| !before.contains(f)).collect();
    assert!(
        new.is_empty(),
        "the jobs wrote into the submit folder: {new:?}"
    );

    // scancel of a running task and a task past --time, on the fake driver's 2-GPU node.
    let node = cluster.path().join("2xtiny.toml");
    std::fs::write(
        &node,
        "[node]\nname = \"2xtiny\"\nbase = \"tiny-4g\"\ndevices = 2\n",
    )
    .unwrap();
    let slow = workload(cluster.path(), "slow", SLOW);
    let r = submit(
        &[
            ("HEADROOM_DEVICE_ARGS", "--backend cuda --device all".into()),
            ("HEADROOM_FAKE_PROFILE", node.display().to_string()),
            ("WORKLOAD", slow.display().to_string()),
        ],
        &format!(
            "exec bash {} sbatch --parsable --array=0-1 --time=1 docs/fleet/slurm.sh",
            root().join("scripts/fake-gpu").display()
        ),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let jid = r.stdout.trim().to_string();
    let job = results.join(&jid);
    let serving = |task: u32| {
        let n = job.join(format!("node-{task}"));
        std::fs::read_to_string(n.join("node.json")).is_ok_and(|t| {
            serde_json::from_str::<serde_json::Value>(&t).is_ok_and(|v| {
                v["gpus"].as_array().unwrap().iter().all(|g| {
                    g["pid"].is_u64()
                        && std::fs::read_to_string(
                            n.join(g["folder"].as_str().unwrap()).join("events.csv"),
                        )
                        .is_ok_and(|e| e.contains("serve"))
                })
            })
        })
    };
    let t1 = Instant::now();
    while !serving(0) {
        assert!(
            t1.elapsed() < Duration::from_secs(60),
            "task 0 never served\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = sh(cluster.command("scancel").arg(format!("{jid}_0")));
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Task 1 then runs until its one-minute limit (Slurm checks limits every 30 s).
    cluster.wait_for_queue_empty(Duration::from_secs(180));
    eprintln!("slurm: scancel and time limit done at {:?}", t0.elapsed());
    assert_eq!(cluster.job_state(&format!("{jid}_0")), "CANCELLED");
    assert_eq!(cluster.job_state(&format!("{jid}_1")), "TIMEOUT");
    assert_interrupted(&job.join("node-0"));
    assert_interrupted(&job.join("node-1"));

    let left = cluster.stop();
    assert!(
        left.is_empty(),
        "processes left after the daemons stopped: {left:?}"
    );
    assert!(marked(cluster.path()).is_empty());
    eprintln!("slurm: all done in {:?}, no process left", t0.elapsed());
}
