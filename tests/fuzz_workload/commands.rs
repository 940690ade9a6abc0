//! Cases that run the `headroom` binary: a `watch` on the fake NVIDIA driver with an NVML call
//! that never returns (the watchdog at 1 s, a SIGTERM at a random moment or none), a run on
//! the simulator signalled after its last step, a double-forked job under `watch` (its orphan
//! counted and none left running), and a file of up to 1 GiB in one line (sparse: nothing on
//! disk) for every command that reads a file. Each child runs under a 1 GiB address-space
//! limit and must end within 10 s; its folder is whole (a `summary.json` that says how it
//! ended, with the exit code the process gave) or absent, never half-written.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use proptest::prelude::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");
/// A case's child ends within this, or the case is a hang.
const CHILD_LIMIT: Duration = Duration::from_secs(10);
/// The address space a child may have (the long run's `ulimit -v`, also in the smoke run).
const ADDRESS_SPACE_BYTES: u64 = 1 << 30;
/// What a bounded reader may hold of a hostile file.
const RSS_BOUND_BYTES: u64 = 100 << 20;
/// From a signal after the last step to the exit: the CPU time the process spends (1 s, the
/// bound promised, on a machine of any load) and the wall time (with what other processes on
/// a loaded machine take).
const LATE_SIGNAL_CPU_BOUND: Duration = Duration::from_secs(1);
const LATE_SIGNAL_WALL_BOUND: Duration = Duration::from_secs(5);

/// NVML calls a watch makes, each asked to hang at its Nth call.
const NVML_CALLS: &[&str] = &[
    "nvmlInit_v2",
    "nvmlShutdown",
    "nvmlDeviceGetHandleByUUID",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetComputeRunningProcesses_v2",
];

/// Commands that read a file, with where the file goes: `F` the file, `D` a run folder's
/// copy with the file as `NAME` in it.
#[derive(Debug, Clone, Copy)]
pub enum Reader {
    Replay,
    ImportTorch,
    Explain,
    Diff,
    Run,
    WatchScript,
    PlanConfig,
    PlanIndex,
    /// `report`, `merge`, `compare` of a folder with one of its files replaced.
    Folder(&'static str, &'static str),
}

const READERS: &[Reader] = &[
    Reader::Replay,
    Reader::ImportTorch,
    Reader::Explain,
    Reader::Diff,
    Reader::Run,
    Reader::WatchScript,
    Reader::PlanConfig,
    Reader::PlanIndex,
    Reader::Folder("report", "timeline.csv"),
    Reader::Folder("report", "events.csv"),
    Reader::Folder("report", "summary.json"),
    Reader::Folder("merge", "timeline.csv"),
    Reader::Folder("merge", "summary.json"),
    Reader::Folder("compare", "summary.json"),
    Reader::Folder("compare", "events.csv"),
];

/// What a hostile file starts with before its long line (the rest: NUL bytes, sparse).
const HEADS: &[&str] = &[
    "",
    "{\"a\": \"",
    "t_ns,action,ptr,bytes,stream,detail\n1,",
    "[workload]\nname = \"",
    "\u{80}\u{4}\u{95}",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
];

#[derive(Debug, Clone)]
pub enum Case {
    /// `watch` of `sleep 0.3` with `call`'s Nth call hung, SIGTERM after `signal_ms` or none.
    WatchHang {
        call: &'static str,
        nth: u32,
        signal_ms: Option<u64>,
    },
    /// A `kv` run of `requests` on the simulator, `signal` sent `delay_ms` after its record
    /// says how it ended.
    LateSignal {
        requests: u32,
        interval: &'static str,
        sigint: bool,
        delay_ms: u64,
    },
    /// A job whose shell exits at once, leaving a `hold` of `mib` (double-forked) and a
    /// `sleep`, or is killed by SIGTERM.
    DoubleFork {
        mib: u64,
        hold_ms: u64,
        killed: bool,
    },
    /// `reader` on a file of `bytes` that starts with `HEADS[head]`.
    BigFile {
        reader: Reader,
        head: usize,
        bytes: u64,
    },
}

pub fn case() -> impl Strategy<Value = Case> {
    prop_oneof![
        (
            prop::sample::select(NVML_CALLS),
            1..40u32,
            prop::option::of(200..2_000u64),
        )
            .prop_map(|(call, nth, signal_ms)| Case::WatchHang {
                call,
                nth,
                signal_ms
            }),
        (
            10..300u32,
            prop::sample::select(&["100us", "1ms"][..]),
            any::<bool>(),
            0..300u64
        )
            .prop_map(|(requests, interval, sigint, delay_ms)| Case::LateSignal {
                requests,
                interval,
                sigint,
                delay_ms
            }),
        (64..1024u64, 300..1500u64, any::<bool>()).prop_map(|(mib, hold_ms, killed)| {
            Case::DoubleFork {
                mib,
                hold_ms,
                killed,
            }
        }),
        (
            0..READERS.len(),
            0..HEADS.len(),
            prop::sample::select(&[1u64 << 20, 70 << 20, 1 << 30][..])
        )
            .prop_map(|(r, head, bytes)| Case::BigFile {
                reader: READERS[r],
                head,
                bytes
            }),
    ]
}

/// Checks one case; `Err` says which rule it broke.
pub fn check(c: &Case) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    match c {
        Case::WatchHang {
            call,
            nth,
            signal_ms,
        } => watch_hang(dir.path(), call, *nth, *signal_ms),
        Case::LateSignal {
            requests,
            interval,
            sigint,
            delay_ms,
        } => late_signal(dir.path(), *requests, interval, *sigint, *delay_ms),
        Case::DoubleFork {
            mib,
            hold_ms,
            killed,
        } => double_fork(dir.path(), *mib, *hold_ms, *killed),
        Case::BigFile {
            reader,
            head,
            bytes,
        } => big_file(dir.path(), *reader, HEADS[*head], *bytes),
    }
}

/// `cmd` under the address-space limit, stderr piped, stdout dropped.
fn spawn(mut cmd: Command) -> Result<Child, String> {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_BYTES,
                rlim_max: ADDRESS_SPACE_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    cmd.spawn().map_err(|e| format!("cannot start: {e}"))
}

/// How a child ended.
struct Ended {
    /// Its exit code (`None`: killed by a signal).
    code: Option<i32>,
    signal: Option<i32>,
    stderr: String,
    /// CPU time, user and system.
    cpu: Duration,
    at: Instant,
}

/// Waits for `child` (reaped with `wait4` for its CPU time); killed and an error past
/// `CHILD_LIMIT` from `started`.
fn wait(mut child: Child, started: Instant) -> Result<Ended, String> {
    let mut pipe = child.stderr.take().expect("stderr piped");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let pid = child.id() as libc::pid_t;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, writing into the two locals above.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let at = Instant::now();
            let stderr = reader.join().unwrap_or_default();
            if stderr.contains("panicked") {
                return Err(format!("headroom panicked: {stderr}"));
            }
            return Ok(Ended {
                code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
                signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
                stderr,
                cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
                at,
            });
        }
        if r < 0 {
            return Err(format!("wait4: {}", std::io::Error::last_os_error()));
        }
        if started.elapsed() > CHILD_LIMIT {
            // SAFETY: kill only signals our own child (and its group, below).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = child.wait();
            return Err(format!(
                "a hang: still running {CHILD_LIMIT:?} after its start"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

/// A running process's CPU time so far, user and system (`/proc/PID/stat`, in clock ticks).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    // After the name: state is field 3, utime 14 and stime 15.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a system value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_millis(ticks * 1000 / hz))
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

fn summary(out: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(out.join("summary.json"))
        .map_err(|e| format!("a half-written folder: summary.json: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("a half-written folder: summary.json: {e}"))
}

/// The folder is whole: it says how the command ended, with the code it exited with.
fn whole(out: &Path, code: i32) -> Result<serde_json::Value, String> {
    let s = summary(out)?;
    let status = s["status"].as_str().unwrap_or_default();
    if !["completed", "failed", "interrupted"].contains(&status) {
        return Err(format!("a half-written folder: status {status:?}: {s}"));
    }
    if s["exit_code"] != code {
        return Err(format!(
            "exited {code}, summary.json says {}: {}",
            s["exit_code"], s["status_detail"]
        ));
    }
    for f in ["timeline.csv", "events.csv"] {
        if !out.join(f).is_file() {
            return Err(format!("a half-written folder: no {f}"));
        }
    }
    Ok(s)
}

fn fake_gpu() -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fake-gpu"))
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_DRIVER")
        .env_remove("HEADROOM_FAKE_FAULTS")
        .env_remove("HEADROOM_WATCHDOG")
        .env_remove("HEADROOM_MARK");
    cmd
}

fn watch_hang(dir: &Path, call: &str, nth: u32, signal_ms: Option<u64>) -> Result<(), String> {
    let out = dir.join("out");
    let mut cmd = fake_gpu();
    cmd.arg(HR)
        .args([
            "watch",
            "--backend",
            "cuda",
            "-q",
            "--interval",
            "10ms",
            "--out",
        ])
        .arg(&out)
        .args(["--", "sleep", "0.3"])
        .current_dir(dir)
        .env("HEADROOM_FAKE_FAULTS", format!("{call}@{nth}=hang:forever"))
        .env("HEADROOM_WATCHDOG", "1s");
    let started = Instant::now();
    let child = spawn(cmd)?;
    if let Some(ms) = signal_ms {
        std::thread::sleep(Duration::from_millis(ms));
        signal(&child, libc::SIGTERM);
    }
    let e = wait(child, started)?;
    // A SIGTERM that lands before any handler is in place (the fake driver's wrapper still
    // starting, or headroom's first instructions) ends the process as it ends any program: fine
    // while nothing was written.
    if e.code.is_none() && e.signal == Some(libc::SIGTERM) && signal_ms.is_some() && !out.exists() {
        return Ok(());
    }
    let code = e
        .code
        .ok_or_else(|| format!("killed by signal {:?}: {}", e.signal, e.stderr))?;
    let wedged = format!("the driver call {call} did not return");
    match code {
        0 | 130 | 143 => {}
        2 if e.stderr.contains(&wedged) => {}
        _ => return Err(format!("exit {code}: {}", e.stderr)),
    }
    if !out.exists() {
        // Only a signal before anything was read leaves no folder.
        return match code {
            130 | 143 => Ok(()),
            _ => Err(format!("exit {code} and no folder: {}", e.stderr)),
        };
    }
    let s = whole(&out, code)?;
    if code == 2 {
        let detail = s["status_detail"].as_str().unwrap_or_default();
        if s["status"] != "failed" || !detail.contains(call) {
            return Err(format!(
                "wedged in {call}, the folder says {}: {detail}",
                s["status"]
            ));
        }
    }
    Ok(())
}

fn late_signal(
    dir: &Path,
    requests: u32,
    interval: &str,
    sigint: bool,
    delay_ms: u64,
) -> Result<(), String> {
    let wl = dir.join("late.toml");
    std::fs::write(
        &wl,
        format!(
            "[workload]\nname = \"late\"\n\n[settings]\nsample_interval = \"{interval}\"\n\n[[phase]]\nname = \"decode\"\nsteps = [\n  {{ op = \"kv\", requests = {requests}, block = \"2MiB\", blocks_per_request = 16, prefill_blocks = 4, arrive_every = 2, tick = \"2ms\" }},\n]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let out = dir.join("out");
    let mut cmd = Command::new(HR);
    cmd.arg("run")
        .arg(&wl)
        .args(["--backend", "sim", "--profile", "h100-80g", "--out"])
        .arg(&out)
        .current_dir(dir);
    let started = Instant::now();
    let child = spawn(cmd)?;
    // The last step is done once summary.json says how the run ended.
    loop {
        let done = summary(&out).is_ok_and(|s| s["status"] != "running");
        if done || started.elapsed() > CHILD_LIMIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(delay_ms));
    let cpu_before = cpu_time(child.id());
    let signalled = Instant::now();
    signal(&child, if sigint { libc::SIGINT } else { libc::SIGTERM });
    let e = wait(child, started)?;
    let took = e.at.duration_since(signalled);
    let cpu_after = e.cpu.saturating_sub(cpu_before.unwrap_or(e.cpu));
    if took > LATE_SIGNAL_WALL_BOUND || cpu_after > LATE_SIGNAL_CPU_BOUND {
        return Err(format!(
            "exited {took:?} (and {cpu_after:?} of CPU) after a signal after the last step"
        ));
    }
    let code = e
        .code
        .ok_or_else(|| format!("killed by signal {:?}: {}", e.signal, e.stderr))?;
    let s = whole(&out, code)?;
    if s["status"] != "completed" || code != 0 {
        return Err(format!(
            "ended {} with exit {code}: {}",
            s["status"], e.stderr
        ));
    }
    // Every report is written or named as not written.
    let skipped = e.stderr.lines().find(|l| l.contains("not written"));
    for f in [
        "report.md",
        "junit.xml",
        "trace.json",
        "timeline.svg",
        "timeline.png",
    ] {
        let named = skipped.is_some_and(|l| l.contains(f));
        if out.join(f).is_file() == named {
            return Err(format!(
                "{f}: written {}, named as not written {named}",
                !named
            ));
        }
    }
    Ok(())
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        !st.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn double_fork(dir: &Path, mib: u64, hold_ms: u64, killed: bool) -> Result<(), String> {
    // Killed, the job's orphans get its signal (a `sleep 60` among them); exiting, it leaves
    // them watched until they end (the hold, after `hold_ms`).
    let pidfile = dir.join("orphan.pid");
    let (orphan, end) = if killed {
        ("sleep 60", "kill -TERM $$")
    } else {
        ("sleep 0.2", "exit 0")
    };
    let script = format!(
        "(HEADROOM_PARENT_PID=$PPID {HR} hold {mib}MiB --for {hold_ms}ms --backend cuda >/dev/null 2>&1 &); \
         ({orphan} & echo $! > '{}'); sleep 0.1; {end}",
        pidfile.display()
    );
    let out = dir.join("out");
    let mut cmd = fake_gpu();
    cmd.args([HR, "watch", "-q", "--backend", "cuda", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .current_dir(dir);
    let started = Instant::now();
    let e = wait(spawn(cmd)?, started)?;
    let code = e
        .code
        .ok_or_else(|| format!("killed by signal {:?}: {}", e.signal, e.stderr))?;
    let expected = if killed { 128 + libc::SIGTERM } else { 0 };
    if code != expected {
        return Err(format!(
            "exit {code}, the job's was {expected}: {}",
            e.stderr
        ));
    }
    let s = whole(&out, code)?;
    if let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    {
        // Ended by the watch; a moment for the kernel to reap it.
        let deadline = Instant::now() + Duration::from_secs(1);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if alive(pid) {
            // SAFETY: the orphan is a `sleep` this case started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            return Err(format!("the job's orphan {pid} was left running"));
        }
    } else {
        return Err("the job's orphan never wrote its pid".into());
    }
    // The hold's memory is the job's: counted whenever it was held before the job ended.
    let job_peak = s["peaks"]["run"]["job_used_bytes"]["bytes"]
        .as_u64()
        .unwrap_or(0);
    if !killed && job_peak < mib << 20 {
        return Err(format!("a double-forked {mib} MiB counted as {job_peak} B"));
    }
    Ok(())
}

/// A small finished run, made once per process, whose copies the folder readers are given.
fn run_folder() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("headroom-fuzz-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let wl = dir.join("small.toml");
        std::fs::write(
            &wl,
            "[workload]\nname = \"small\"\n\n[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"w\", size = \"1MiB\" }, { op = \"free\", name = \"w\" }]\n",
        )
        .map_err(|e| e.to_string())?;
        let out = dir.join("run");
        let o = Command::new(HR)
            .arg("run")
            .arg(&wl)
            .args(["--backend", "sim", "-q", "--out"])
            .arg(&out)
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(format!(
                "the small run failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(out)
    })
    .as_ref()
    .map(|p| p.as_path())
    .map_err(Clone::clone)
}

/// `path` made `bytes` long: `head`, then NUL bytes (a hole: nothing written).
fn sparse(path: &Path, head: &str, bytes: u64) -> Result<(), String> {
    std::fs::write(path, head).map_err(|e| e.to_string())?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(bytes.max(head.len() as u64)))
        .map_err(|e| e.to_string())
}

fn big_file(dir: &Path, reader: Reader, head: &str, bytes: u64) -> Result<(), String> {
    // A workload under its 128 MiB bound is read whole and parsed, as the loads of this fuzzer
    // check in-process: here only past the bound, refused by its size.
    let bytes = match reader {
        Reader::Run if bytes > 1 << 20 => 1 << 30,
        _ => bytes,
    };
    let f = dir.join("big");
    let args: Vec<String> = match reader {
        Reader::Folder(command, name) => {
            let src = run_folder()?;
            let copy = dir.join("run");
            std::fs::create_dir_all(&copy).map_err(|e| e.to_string())?;
            for entry in std::fs::read_dir(src).map_err(|e| e.to_string())? {
                let p = entry.map_err(|e| e.to_string())?.path();
                std::fs::copy(&p, copy.join(p.file_name().unwrap())).map_err(|e| e.to_string())?;
            }
            sparse(&copy.join(name), head, bytes)?;
            let d = copy.display().to_string();
            match command {
                "compare" => vec![command.into(), d, src.display().to_string()],
                "merge" => vec![
                    command.into(),
                    d,
                    "--out".into(),
                    dir.join("merged.csv").display().to_string(),
                ],
                _ => vec![command.into(), d],
            }
        }
        Reader::PlanIndex => {
            let m = dir.join("model");
            std::fs::create_dir_all(&m).map_err(|e| e.to_string())?;
            std::fs::write(
                m.join("config.json"),
                r#"{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}"#,
            )
            .map_err(|e| e.to_string())?;
            sparse(&m.join("model.safetensors.index.json"), head, bytes)?;
            vec!["plan".into(), "--model".into(), m.display().to_string()]
        }
        _ => {
            sparse(&f, head, bytes)?;
            let p = f.display().to_string();
            let words: &[&str] = match reader {
                Reader::Replay => &["replay", "--backend", "sim"],
                Reader::ImportTorch => &["import", "torch", "--backend", "sim"],
                Reader::Explain => &["explain"],
                Reader::Diff => &["diff"],
                Reader::Run => &["run", "--backend", "sim", "-q"],
                Reader::WatchScript => &["watch", "-q", "--sim-script"],
                _ => &["plan", "--model"],
            };
            let mut v: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            v.push(p.clone());
            match reader {
                Reader::Diff => v.push(p),
                Reader::WatchScript => v.extend(["--".into(), "true".into()]),
                Reader::ImportTorch | Reader::Run => {
                    v.extend(["--out".into(), dir.join("out").display().to_string()])
                }
                _ => {}
            }
            v
        }
    };
    // Measured through a small process: forked from this one, the command's peak would
    // include this process's own (see `measured`).
    let e = super::measured::run(HR, &args, dir, ADDRESS_SPACE_BYTES, CHILD_LIMIT)?;
    if e.stderr.contains("panicked") {
        return Err(format!("headroom panicked: {}", e.stderr));
    }
    let code = e
        .code
        .ok_or_else(|| format!("killed by signal {:?} (memory?): {}", e.signal, e.stderr))?;
    // Refused (2); `explain` may also read a file within its bounds and explain the message
    // its head holds (0) or find none (1).
    let read = matches!(reader, Reader::Explain) && (code == 0 || code == 1);
    if code != 2 && !read {
        return Err(format!("{args:?}: exit {code}, not 2: {}", e.stderr));
    }
    if e.stderr.len() > 1024 {
        return Err(format!("{args:?}: an error of {} bytes", e.stderr.len()));
    }
    // An allocation refused under the limit (the error's own words, not the file's quoted
    // head, which may say anything).
    let refused_memory = e.stderr.contains("memory allocation of")
        || e.stderr.contains("os error 12")
        || e.stderr
            .lines()
            .any(|l| l.trim_end().ends_with(": out of memory"));
    if refused_memory {
        return Err(format!("{args:?}: it tried to hold the file: {}", e.stderr));
    }
    if e.rss_bytes > RSS_BOUND_BYTES {
        return Err(format!("{args:?}: {} MiB resident", e.rss_bytes >> 20));
    }
    // Refused: nothing left in a folder of its own.
    let out = dir.join("out");
    if out.exists() {
        whole(&out, code).map(|_| ())?;
    }
    Ok(())
}
