//! Helpers shared by the integration tests: run the binary, write workloads, read results.

#![allow(dead_code)]

pub mod fixtures;
pub mod plans;
pub mod rusage;
pub mod schema;
pub mod skip;
pub mod snapshot_writer;

use std::path::{Path, PathBuf};
use std::process::Command;

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
/// tiny-4g's context overhead.
pub const CTX: u64 = 256 * MIB;

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `headroom` with `args` in `cwd`.
pub fn headroom(cwd: &Path, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the binary runs");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `headroom ARGS` on the fake NVIDIA driver (`scripts/fake-gpu`) in `cwd` with `env`
/// set: a fresh shared state, the default driver branch unless `env` names one. A panic of
/// headroom fails the test.
pub fn on_fake(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fake-gpu"))
        .arg(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .current_dir(cwd)
        .env_remove("HEADROOM_FAKE_STATE")
        .env_remove("HEADROOM_FAKE_DRIVER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("scripts/fake-gpu runs");
    let o = Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !o.stderr.contains("panicked"),
        "headroom panicked: {}",
        o.stderr
    );
    o
}

/// Writes a workload with a `[workload]` header and the given body; returns its path.
pub fn workload(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, format!("[workload]\nname = \"{name}\"\n\n{body}")).unwrap();
    path
}

/// Runs a workload on tiny-4g into `<dir>/out-<name>` and returns (exit code, summary, dir).
pub fn run_tiny(dir: &Path, wl: &Path, extra: &[&str]) -> (Out, serde_json::Value, PathBuf) {
    let stem = wl.file_stem().unwrap().to_string_lossy().into_owned();
    let out_dir = dir.join(format!("out-{stem}"));
    let mut args = vec![
        "run",
        wl.to_str().unwrap(),
        "--profile",
        "tiny-4g",
        "--out",
        out_dir.to_str().unwrap(),
        "-q",
    ];
    args.extend_from_slice(extra);
    let out = headroom(dir, &args);
    let summary = std::fs::read_to_string(out_dir.join("summary.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    if !summary.is_null() {
        // Every summary a test writes matches the committed schema.
        schema::check("summary", &summary, &out_dir.display().to_string());
    }
    (out, summary, out_dir)
}

/// Rows of a CSV file as maps from column to value.
pub fn csv_rows(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let headers = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

pub fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}
