//! What a run's record says when something around its steps goes wrong: a disk too full for
//! the plots, another tenant that comes and goes under `--shared-ok`, the driver out of room
//! for a stream's own state.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn reports_lost_to_a_full_disk_do_not_exit_0() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "full",
        "[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"1GiB\" },\n  { op = \"free\", name = \"a\" },\n]\n",
    );
    let out_dir = dir.path().join("out");
    let mut cmd = Command::new(HR);
    cmd.args([
        "run",
        wl.to_str().unwrap(),
        "--profile",
        "tiny-4g",
        "-q",
        "--out",
    ])
    .arg(&out_dir);
    // A file-size limit stands in for a full disk: the CSVs and summary.json fit under it, the
    // PNG plot does not (EFBIG, as ENOSPC would be).
    // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, signal).
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 32 << 10,
                rlim_max: 32 << 10,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the run's reports could not be written"),
        "{stderr}"
    );
    let s = summary(&out_dir);
    assert_eq!(s["exit_code"], 2);
    assert!(
        s["status_detail"]
            .as_str()
            .unwrap()
            .contains("writes them again"),
        "{}",
        s["status_detail"]
    );
}

#[test]
fn under_shared_ok_another_tenants_change_is_not_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fake-state");
    let fake = |args: &[&str]| {
        let mut c = Command::new("bash");
        c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fake-gpu"))
            .arg(HR)
            .args(args)
            .current_dir(dir.path())
            .env("HEADROOM_FAKE_STATE", &state)
            .env_remove("HEADROOM_FAKE_DRIVER")
            .env_remove("HEADROOM_FAKE_FAULTS");
        c
    };
    // Another process holds 256 MiB (and its context) at the idle reading and leaves during
    // the run.
    let mut other = fake(&["hold", "256MiB", "--for", "1500ms", "--backend", "cuda"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 7];
    std::io::Read::read_exact(other.stdout.as_mut().unwrap(), &mut first).unwrap();
    assert_eq!(&first, b"holding");
    let wl = workload(
        dir.path(),
        "shared",
        "[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"64MiB\" },\n  { op = \"sleep\", for = \"2500ms\" },\n  { op = \"free\", name = \"a\" },\n]\n",
    );
    let out_dir = dir.path().join("out");
    let out = fake(&[
        "run",
        wl.to_str().unwrap(),
        "--backend",
        "cuda",
        "--shared-ok",
        "-q",
        "--out",
        out_dir.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    let _ = other.wait();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&out_dir);
    let r = &s["release"];
    // Device free rose by the other tenant's 256 MiB and context; none of it is the run's.
    assert_eq!(
        u(&r["final_device_free_bytes"]) - u(&r["idle_device_free_bytes"]),
        256 * MIB + CTX
    );
    assert_eq!(r["difference_bytes"], 0);
    assert_eq!(r["within_one_page"], true);
    assert!(
        r["note"]
            .as_str()
            .unwrap()
            .contains("other processes' memory changed by -512.00 MiB"),
        "{}",
        r["note"]
    );
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn an_oom_creating_a_stream_names_the_drivers_state_not_zero_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "stream",
        "[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"64MiB\", stream = \"side\" },\n  { op = \"free\", name = \"a\" },\n]\n",
    );
    let out_dir = dir.path().join("out");
    let out = on_fake(
        dir.path(),
        &[
            "run",
            wl.to_str().unwrap(),
            "--backend",
            "cuda",
            "-q",
            "--out",
            out_dir.to_str().unwrap(),
        ],
        &[(
            "HEADROOM_FAKE_FAULTS",
            "cuStreamCreate@2=CUDA_ERROR_OUT_OF_MEMORY",
        )],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    let s = summary(&out_dir);
    assert_eq!(s["status"], "failed");
    let detail = s["status_detail"].as_str().unwrap();
    assert!(
        detail.contains("cannot create stream \"side\": cuStreamCreate failed")
            && detail.contains("no room for the driver's own state")
            && !detail.contains("refused 0 bytes"),
        "{detail}"
    );
    assert!(s["ooms"].as_array().unwrap().is_empty());
}

#[test]
fn a_failing_driver_call_is_named_once_with_the_step_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let wl = workload(
        dir.path(),
        "trim",
        "[allocator]\nkind = \"pool\"\nrelease_threshold = \"1TiB\"\n\n[[phase]]\nname = \"p\"\nsteps = [\n  { op = \"allocate\", name = \"a\", size = \"64MiB\" },\n  { op = \"free\", name = \"a\" },\n  { op = \"trim\" },\n]\n",
    );
    let wl = wl.to_str().unwrap();
    let run = |faults: &str, out: &str| {
        on_fake(
            dir.path(),
            &["run", wl, "--backend", "cuda", "-q", "--out", out],
            &[("HEADROOM_FAKE_FAULTS", faults)],
        )
    };
    // A trim the driver refuses: the step is named by its op alone (it acts on no name), and
    // the call once.
    let r = run("cuMemPoolTrimTo@1=CUDA_ERROR_UNKNOWN", "trim");
    assert_eq!(r.code, 2, "{}", r.stderr);
    let s = summary(&dir.path().join("trim"));
    assert_eq!(
        s["status_detail"],
        "phase \"p\", step s3: trim: cuMemPoolTrimTo failed: CUDA_ERROR_UNKNOWN (unknown error)"
    );
    let rows = csv_rows(&dir.path().join("trim/events.csv"));
    let last = rows.last().unwrap();
    assert_eq!(last["op"], "trim");
    assert_eq!(last["result"], "error");
    assert_eq!(
        last["detail"],
        "cuMemPoolTrimTo failed: CUDA_ERROR_UNKNOWN (unknown error)"
    );
    // The idle reading and the device's opening fail: "cuMemGetInfo failed:" appears once.
    for (faults, lead) in [
        (
            "cuMemGetInfo_v2@2=CUDA_ERROR_UNKNOWN",
            "error: the idle reading (cuMemGetInfo) failed: cuMemGetInfo failed: CUDA_ERROR_UNKNOWN",
        ),
        (
            "cuMemGetInfo_v2@*=CUDA_ERROR_UNKNOWN",
            "error: cannot open CUDA device 0: cuMemGetInfo failed: CUDA_ERROR_UNKNOWN",
        ),
    ] {
        let r = run(faults, "idle");
        assert_eq!(r.code, 2, "{faults}: {}", r.stderr);
        assert!(r.stderr.contains(lead), "{faults}: {}", r.stderr);
        assert_eq!(
            r.stderr.matches("cuMemGetInfo failed:").count(),
            1,
            "{faults}: {}",
            r.stderr
        );
    }
}
