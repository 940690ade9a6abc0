//! Whole nodes (`--device all` and lists): one worker process per GPU, the node summary, the
//! busy GPU skipped and the short one flagged, a worker killed, Ctrl-C, a node process killed.
//! Each node test runs on a simulated node and on the cuda backend over the fake driver with
//! the same node profile (there, the busy GPU is a real `headroom hold` process).

mod signals;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::*;

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Three tiny cards: card 1 is 128 MiB short; card 2 is busy (a tenant on the simulator; a
/// `hold` process on the fake, which does not model a profile's other processes).
const NODE: &str = r#"[node]
name = "3xtiny"
base = "tiny-4g"
devices = 3

[[node.card]]
index = 1
total_bytes = "3968MiB"

[[node.card]]
index = 2
other_processes = [{ pid = 4242, bytes = "1GiB" }]
"#;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Backend {
    Sim,
    Fake,
}

/// A test's folder, node profile and backend.
pub(crate) struct Bench {
    dir: tempfile::TempDir,
    backend: Backend,
    busy: Option<Child>,
}

impl Bench {
    pub(crate) fn new(backend: Backend) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("node.toml"), NODE).unwrap();
        std::fs::write(dir.path().join("fake-state"), "").unwrap();
        Bench {
            dir,
            backend,
            busy: None,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    fn profile(&self) -> String {
        self.path().join("node.toml").display().to_string()
    }

    /// `headroom ARGS` on this bench's node (sim: `--profile`; fake: `--backend cuda`).
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = match self.backend {
            Backend::Sim => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_headroom"));
                c.args(args).args(["--profile", &self.profile()]);
                c
            }
            Backend::Fake => {
                let mut c = Command::new("bash");
                c.arg(root().join("scripts/fake-gpu"))
                    .arg(env!("CARGO_BIN_EXE_headroom"))
                    .args(args)
                    .args(["--backend", "cuda"])
                    .env("HEADROOM_FAKE_PROFILE", self.profile())
                    .env("HEADROOM_FAKE_STATE", self.path().join("fake-state"))
                    .env("HEADROOM_FAKE_RELEASE_DELAY", "0ms");
                c
            }
        };
        cmd.current_dir(self.path())
            .env_remove("HEADROOM_RANK")
            .env_remove("HEADROOM_RANK_COUNT");
        cmd
    }

    pub(crate) fn run(&self, args: &[&str]) -> Out {
        let out = self.command(args).output().expect("headroom runs");
        let o = Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        o
    }

    /// On the fake, GPU 2 gets another process holding 1 GiB, as the simulated card has.
    fn make_gpu2_busy(&mut self) {
        if self.backend == Backend::Sim {
            return;
        }
        let mut c = self
            .command(&["hold", "1GiB", "--for", "120s", "--device", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(c.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert!(line.starts_with("holding"), "{line}");
        self.busy = Some(c);
    }

    pub(crate) fn workload(&self, name: &str, body: &str) -> String {
        workload(self.path(), name, body).display().to_string()
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(c) = &mut self.busy {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn node_json(dir: &Path) -> serde_json::Value {
    let v = serde_json::from_str(&std::fs::read_to_string(dir.join("node.json")).unwrap()).unwrap();
    crate::common::schema::check("node", &v, &dir.join("node.json").display().to_string());
    v
}

pub(crate) fn flags_of(n: &serde_json::Value, index: u64) -> Vec<String> {
    n["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["index"] == index)
        .map(|f| {
            format!(
                "{}: {}",
                f["what"].as_str().unwrap(),
                f["message"].as_str().unwrap()
            )
        })
        .collect()
}

/// The same three cards, none busy.
pub(crate) const NO_BUSY: &str = "[node]\nname = \"3xtiny\"\nbase = \"tiny-4g\"\ndevices = 3\n";

const SMALL: &str = "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x\", size = \"512MiB\" }, { op = \"sleep\", for = \"10ms\" }]\n";

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sim {
            $(#[test] fn $name() { super::$name(super::Backend::Sim) })*
        }
        mod fake {
            $(#[test] fn $name() { super::$name(super::Backend::Fake) })*
        }
    };
}

on_both!(
    a_node_runs_every_gpu_skips_the_busy_one_and_flags_the_short_one,
    shared_ok_runs_the_busy_gpu_and_flags_its_tenant,
    a_list_runs_those_gpus_with_ranks_and_an_unknown_index_is_refused,
);

fn a_node_runs_every_gpu_skips_the_busy_one_and_flags_the_short_one(b: Backend) {
    let mut b = Bench::new(b);
    b.make_gpu2_busy();
    let wl = b.workload("small", SMALL);
    let out = b.path().join("node");
    let r = b.run(&[
        "run",
        &wl,
        "--device",
        "all",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("GPU 2 (GPU-") && r.stderr.contains("skipped: in use by pid"),
        "{}",
        r.stderr
    );
    let n = node_json(&out);
    assert_eq!(n["status"], "completed");
    assert_eq!(n["exit_code"], 0);
    let gpus = n["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 3);
    let outcomes: Vec<&str> = gpus
        .iter()
        .map(|g| g["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ran", "ran", "skipped"]);
    for g in gpus {
        let folder = out.join(g["folder"].as_str().unwrap());
        assert!(folder.is_dir(), "{}", folder.display());
        let prefix = &g["uuid"].as_str().unwrap()[4..12];
        assert_eq!(g["folder"], format!("gpu{}-{prefix}", g["index"]));
    }
    let ran = out.join(gpus[0]["folder"].as_str().unwrap());
    assert!(ran.join("summary.json").is_file());
    assert!(
        out.join(gpus[2]["folder"].as_str().unwrap())
            .join("skipped.json")
            .is_file()
    );
    assert_eq!(u(&gpus[1]["total_bytes"]), 3968 * MIB);
    assert_eq!(u(&gpus[0]["figures"]["peak_own_bytes"]), 512 * MIB);
    assert_eq!(
        u(&gpus[0]["figures"]["headroom_at_peak_bytes"])
            - u(&gpus[1]["figures"]["headroom_at_peak_bytes"]),
        128 * MIB
    );
    assert_eq!(
        (gpus[0]["rank"].as_u64(), gpus[1]["rank"].as_u64()),
        (Some(0), Some(1))
    );
    let f1 = flags_of(&n, 1);
    assert!(
        f1.iter()
            .any(|f| f.starts_with("total_bytes: total_bytes 3.88 GiB is 128.00 MiB below")),
        "{f1:?}"
    );
    assert!(
        f1.iter().any(|f| f.starts_with("headroom_at_peak_bytes")),
        "{f1:?}"
    );
    let f2 = flags_of(&n, 2);
    assert!(
        f2.iter()
            .any(|f| f.starts_with("skipped: skipped: in use by pid")),
        "{f2:?}"
    );
    assert!(
        f2.iter()
            .any(|f| f.starts_with("processes: other processes present")),
        "{f2:?}"
    );
    assert!(flags_of(&n, 0).is_empty(), "{:?}", flags_of(&n, 0));
    let md = std::fs::read_to_string(out.join("node.md")).unwrap();
    assert_eq!(md, r.stdout);
    assert!(md.contains("2 ran, 1 skipped, 0 failed"), "{md}");
    // The node is a folder merge reads: the two runs, and the GPU it skipped as a finding.
    let m = b.run(&["merge", out.to_str().unwrap()]);
    assert_eq!(m.code, 0, "{}", m.stderr);
    assert!(
        m.stdout.contains("## headroom merge: 2 runs"),
        "{}",
        m.stdout
    );
    assert!(
        m.stdout
            .contains("- GPU index 2 not run on 1/1 nodes (node): in use by pid"),
        "{}",
        m.stdout
    );
    assert!(
        m.stdout
            .contains("- GPU index 1: CUDA-visible total 128.00 MiB below the median (4.00 GiB) on 1/1 nodes (node)\n"),
        "{}",
        m.stdout
    );
}

fn shared_ok_runs_the_busy_gpu_and_flags_its_tenant(b: Backend) {
    let mut b = Bench::new(b);
    b.make_gpu2_busy();
    let wl = b.workload("small", SMALL);
    let out = b.path().join("node");
    let r = b.run(&[
        "run",
        &wl,
        "--device",
        "all",
        "--shared-ok",
        "-q",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.is_empty() && r.stderr.is_empty(),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let n = node_json(&out);
    let g2 = &n["gpus"][2];
    assert_eq!(g2["outcome"], "ran");
    assert_eq!(g2["occupancy"]["verdict"], "busy");
    // The tenant's gigabyte (and its context, on the fake) is in device used at the peak.
    let tenant = u(&g2["figures"]["peak_device_used_bytes"])
        - u(&n["gpus"][0]["figures"]["peak_device_used_bytes"]);
    assert!(tenant >= GIB, "{tenant}");
    let f2 = flags_of(&n, 2);
    assert!(
        f2.iter()
            .any(|f| f.starts_with("processes: other processes present: pid")),
        "{f2:?}"
    );
    assert!(
        f2.iter().any(|f| f.starts_with("peak_device_used_bytes")),
        "{f2:?}"
    );
}

fn a_list_runs_those_gpus_with_ranks_and_an_unknown_index_is_refused(b: Backend) {
    let b = Bench::new(b);
    let wl = b.workload(
        "ranked",
        "[[phase]]\nname = \"p\"\nsteps = [{ op = \"allocate\", name = \"x.r{rank}of{rank_count}\", size = \"64MiB\" }, { op = \"comm\", name = \"c\", buffer = \"2MiB\", topology = \"all_to_all\" }]\n",
    );
    let out = b.path().join("node");
    let r = b.run(&[
        "run",
        &wl,
        "--device",
        "1,0",
        "-q",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let n = node_json(&out);
    let gpus = n["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!((u(&gpus[0]["index"]), u(&gpus[0]["rank"])), (1, 0));
    assert_eq!((u(&gpus[1]["index"]), u(&gpus[1]["rank"])), (0, 1));
    for (g, rank) in gpus.iter().zip(["r0of2", "r1of2"]) {
        let events = csv_rows(&out.join(g["folder"].as_str().unwrap()).join("events.csv"));
        assert_eq!(events[0]["name"], format!("x.{rank}"));
        // Two ranks all to all: a send and a receive buffer, outside the allocator.
        assert_eq!(
            events
                .iter()
                .filter(|e| e["name"].starts_with("c["))
                .count(),
            2
        );
        assert_eq!(u(&g["figures"]["peak_own_bytes"]), 68 * MIB);
        assert_eq!(u(&g["figures"]["peak_alloc_reserved_bytes"]), 64 * MIB);
    }
    let r = b.run(&[
        "run",
        &wl,
        "--device",
        "0,7",
        "--out",
        b.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("there is no GPU 7: the node has 3 (0 to 2)"),
        "{}",
        r.stderr
    );
    assert!(
        !b.path().join("x").exists(),
        "nothing written for a refused node"
    );
}

#[test]
fn serving_on_the_simulated_8xh100_node_flags_the_short_and_the_busy_card() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("node");
    let r = headroom(
        root(),
        &[
            "run",
            "workloads/serving.toml",
            "--profile",
            "8xh100-80g",
            "--device",
            "all",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let n = node_json(&out);
    let folders: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("gpu"))
        .collect();
    assert_eq!(folders.len(), 8);
    assert_eq!(n["exit_code"], 0);
    let whats = |i| flags_of(&n, i);
    assert!(
        whats(3)
            .iter()
            .any(|f| f.starts_with("total_bytes: total_bytes 79.06 GiB is 128.00 MiB below")),
        "{:?}",
        whats(3)
    );
    assert!(
        whats(5).iter().any(|f| f.starts_with("skipped")),
        "{:?}",
        whats(5)
    );
    for i in [0, 1, 2, 4, 6, 7] {
        assert!(whats(i).is_empty(), "GPU {i}: {:?}", whats(i));
    }
}

#[test]
fn devices_lists_every_gpu_of_a_simulated_node() {
    let r = headroom(root(), &["devices", "--profile", "8xh100-80g", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let d: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let gpus = d["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    let uuids: std::collections::BTreeSet<&str> =
        gpus.iter().map(|g| g["uuid"].as_str().unwrap()).collect();
    assert_eq!(uuids.len(), 8);
    assert_eq!(u(&gpus[3]["total_bytes"]), 80961 * MIB);
    assert_eq!(gpus[5]["processes"][0]["pid"], 4242);
    assert_eq!(gpus[0]["driver_version"], "sim");
    let r = headroom(root(), &["hold", "1GiB", "--for", "1s", "--device", "all"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("`headroom hold` drives one GPU"),
        "{}",
        r.stderr
    );
}

#[test]
fn bandwidth_and_calibrate_on_a_node_write_one_result_per_gpu() {
    let b = Bench::new(Backend::Sim);
    std::fs::write(
        b.path().join("node.toml"),
        NO_BUSY.replace("devices = 3", "devices = 2"),
    )
    .unwrap();
    let out = b.path().join("bw");
    let r = b.run(&[
        "bandwidth",
        "--device",
        "all",
        "--size",
        "64MiB",
        "--repeats",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let n = node_json(&out);
    assert_eq!(n["command"], "bandwidth");
    for g in n["gpus"].as_array().unwrap() {
        assert!(
            out.join(g["folder"].as_str().unwrap())
                .join("bandwidth.json")
                .is_file()
        );
        let copy = u(&g["figures"]["copy_bytes_per_s"]);
        assert!(
            copy.abs_diff(100_000_000_000) < 100_000_000,
            "tiny-4g copies at 100 GB/s: {copy}"
        );
    }
    let out = b.path().join("cal");
    let r = b.run(&[
        "calibrate",
        "--device",
        "0,1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let n = node_json(&out);
    assert_eq!(u(&n["gpus"][1]["figures"]["context_overhead_bytes"]), CTX);
}
