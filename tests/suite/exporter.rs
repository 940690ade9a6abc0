//! `headroom exporter` on the fake NVIDIA driver, scraped by Debian's real `prometheus`: a
//! tenant holds 1 GiB (plus its 256 MiB context) for 100 ms between two scrapes, and
//! Prometheus's stored series hold that spike to the byte in the peak metric while the
//! instantaneous one never saw it. Also: `promtool check metrics` on a scrape, a hang
//! injected in NVML reported as a metric while the endpoint answers, SIGTERM ending it, a
//! process's exact peak and its series dropped after the time-to-live, and MIG instances with
//! the process list NVML refuses said as a metric, and the kubelet's pod-resources API (a fake
//! kubelet served by grpcio) naming the pod a GPU was allocated to.
//! Prometheus is installed with apt when missing and root; under `CI=true` its absence fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::*;

const HR: &str = env!("CARGO_BIN_EXE_headroom");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every process a test started, killed and waited for however the test ends.
#[derive(Default)]
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `scripts/fake-gpu ARGS…` sharing the fake's state file `state`.
fn fake(state: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/fake-gpu"))
        .args(args)
        .current_dir(root())
        .env("HEADROOM_FAKE_STATE", state)
        .envs(env.iter().copied());
    cmd
}

/// Starts the exporter on a free loopback port; returns its address and its stderr so far.
fn exporter(
    started: &mut Started,
    state: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (SocketAddr, Arc<Mutex<String>>) {
    let mut args = vec![HR, "exporter", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let mut child = fake(state, &args, env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    started.0.push(child);
    let log = Arc::new(Mutex::new(String::new()));
    let mut line = String::new();
    let addr = loop {
        line.clear();
        let n = lines.read_line(&mut line).unwrap();
        assert!(n > 0, "the exporter ended: {}", log.lock().unwrap());
        log.lock().unwrap().push_str(&line);
        if let Some(rest) = line.split("serving http://").nth(1) {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
    };
    let l = log.clone();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = lines.read_to_string(&mut rest);
        l.lock().unwrap().push_str(&rest);
    });
    (addr, log)
}

/// A GET: the status code and body.
fn get(addr: SocketAddr, path: &str, accept: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

/// The value of the one sample of `name` in a scrape.
fn sample(body: &str, name: &str) -> f64 {
    let line = body
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .unwrap_or_else(|| panic!("no {name} in\n{body}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Debian's prometheus and promtool, installed when missing (as root); `None` with the
/// reason printed where they cannot be had, a failure under `CI=true`.
fn prometheus() -> Option<(PathBuf, PathBuf)> {
    let find = || {
        let p = Path::new("/usr/bin/prometheus");
        let t = Path::new("/usr/bin/promtool");
        (p.is_file() && t.is_file()).then(|| (p.to_path_buf(), t.to_path_buf()))
    };
    if let Some(found) = find() {
        return Some(found);
    }
    // SAFETY: geteuid has no preconditions.
    let root_user = unsafe { libc::geteuid() } == 0;
    let why = if root_user {
        let o = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "prometheus"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
        match (o, find()) {
            (_, Some(found)) => return Some(found),
            (Ok(o), None) => format!(
                "apt-get install prometheus failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            (Err(e), None) => format!("apt-get cannot run: {e}"),
        }
    } else {
        "prometheus is not installed and this is not root (apt-get install prometheus)".into()
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: {why}"
    );
    let _ = writeln!(std::io::stderr(), "exporter: prometheus NOT RUN: {why}");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A query parameter's value, percent-encoded.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One instant query of Prometheus's HTTP API: each result's labels and value.
fn query(prom: SocketAddr, q: &str) -> Vec<(serde_json::Value, f64)> {
    let (code, body) = get(prom, &format!("/api/v1/query?query={}", encode(q)), "*/*");
    assert_eq!(code, 200, "{q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let value = &r["value"][1];
            (
                r["metric"].clone(),
                value.as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// The stored samples of a range-vector selector (one series).
fn stored(prom: SocketAddr, q: &str) -> Vec<f64> {
    let (code, body) = get(prom, &format!("/api/v1/query?query={}", encode(q)), "*/*");
    assert_eq!(code, 200, "{q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let result = v["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 1, "{body}");
    result[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_str().unwrap().parse().unwrap())
        .collect()
}

fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn prometheus_stores_the_spike_between_two_scrapes_to_the_byte_and_the_sample_never_sees_it() {
    let Some((prometheus, promtool)) = prometheus() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fake.state");
    let mut started = Started::default();
    let (exp, log) = exporter(&mut started, &state, &["--interval", "1ms"], &[]);

    let prom: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: headroom\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n    params:\n      scraper: [prometheus-test]\n    static_configs:\n      - targets: ['{exp}']\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    started.0.push(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={prom}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Ready, and the target scraped at least once.
    let t0 = Instant::now();
    let last_scrape_s = || {
        // timestamp() of the selector itself: the sample's time, the scrape's start.
        let up = query(prom, "up{job=\"headroom\"}");
        let r = query(prom, "timestamp(up{job=\"headroom\"})");
        (up.first().map(|(_, v)| *v) == Some(1.0)).then(|| r[0].1)
    };
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "prometheus never scraped the exporter"
        );
        let ready = TcpStream::connect(prom).is_ok() && get(prom, "/-/ready", "*/*").0 == 200;
        if ready && last_scrape_s().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A second scraper, before the spike: its windows are its own.
    assert_eq!(get(exp, "/metrics?scraper=other", "*/*").0, 200);

    // The tenant starts 150–400 ms after a scrape and holds 1 GiB for 100 ms.
    let spike_scrape = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "no scrape to start after"
        );
        let last = last_scrape_s().unwrap();
        let since = unix_now_s() - last;
        if (0.15..0.4).contains(&since) {
            break last;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let hold = fake(
        &state,
        &[HR, "hold", "1GiB", "--for", "100ms", "--backend", "cuda"],
        &[],
    )
    .output()
    .unwrap();
    assert!(
        hold.status.success(),
        "{}",
        String::from_utf8_lossy(&hold.stderr)
    );
    let held_until = unix_now_s() - spike_scrape;
    assert!(
        held_until < 0.85,
        "the tenant ended {held_until:.2} s after the scrape: too slow a machine for this test"
    );
    // Three more scrapes.
    std::thread::sleep(Duration::from_millis(3200));

    let spike = GIB + CTX;
    let peak = query(prom, "max_over_time(headroom_device_used_peak_bytes[1m])");
    assert_eq!(peak.len(), 1, "{peak:?}");
    assert_eq!(peak[0].1, spike as f64, "the peak series: {peak:?}");
    assert_eq!(peak[0].0["scraper"], serde_json::Value::Null);
    let seen = query(prom, "max_over_time(headroom_device_used_bytes[1m])");
    assert!(seen[0].1 < GIB as f64, "a scrape saw the spike: {seen:?}");
    // Every stored scrape of the peak: exactly one carries the spike (the next window
    // started after it), and at least four were taken.
    let stored = stored(prom, "headroom_device_used_peak_bytes[1m]");
    assert!(stored.len() >= 4, "{stored:?}");
    assert_eq!(
        stored.iter().filter(|v| **v == spike as f64).count(),
        1,
        "{stored:?}"
    );
    let dcgm = query(prom, "max_over_time(DCGM_FI_DEV_FB_USED_PEAK[1m])");
    assert_eq!(dcgm[0].1, (spike / MIB) as f64);
    assert_eq!(dcgm[0].0["UUID"], peak[0].0["uuid"]);
    // Every scrape parsed as OpenMetrics by Prometheus itself.
    let (_, targets) = get(prom, "/api/v1/targets", "*/*");
    let t: serde_json::Value = serde_json::from_str(&targets).unwrap();
    let target = &t["data"]["activeTargets"][0];
    assert_eq!(target["health"], "up", "{target}");
    assert_eq!(target["lastError"], "", "{target}");
    // It was OpenMetrics Prometheus read: only that format carries a metric's unit.
    let (_, meta) = get(
        prom,
        "/api/v1/metadata?metric=headroom_device_used_peak_bytes",
        "*/*",
    );
    let m: serde_json::Value = serde_json::from_str(&meta).unwrap();
    let m = &m["data"]["headroom_device_used_peak_bytes"][0];
    assert_eq!(
        (&m["type"], &m["unit"]),
        (&"gauge".into(), &"bytes".into()),
        "{meta}"
    );

    // The other scraper's window still holds the spike Prometheus took.
    let (_, other) = get(exp, "/metrics?scraper=other", "*/*");
    assert_eq!(
        sample(&other, "headroom_device_used_peak_bytes"),
        spike as f64
    );
    assert!(other.ends_with("# EOF\n"));

    // promtool: the text format (Accept: text/plain) parses and lints clean, but for the
    // DCGM twins' own camelCase labels (modelName), kept as dcgm-exporter names them.
    let (code, text) = get(exp, "/metrics?scraper=promtool", "text/plain");
    assert_eq!(code, 200);
    assert!(!text.contains("# EOF") && text.contains("# TYPE headroom_readings_total counter"));
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(matches!(o.status.code(), Some(0 | 3)), "promtool: {said}");
    for l in said.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            l.starts_with("DCGM_FI_DEV_FB_")
                && l.ends_with("label names should be written in 'snake_case' not 'camelCase'"),
            "promtool: {l}\n{said}"
        );
    }
    drop(started);
    assert!(!log.lock().unwrap().contains("panicked"));
}

#[test]
fn the_documented_rules_pass_promtool() {
    let Some((_, promtool)) = prometheus() else {
        return;
    };
    let rules = root().join("docs/fleet/headroom-rules.yml");
    let o = Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(said.contains("SUCCESS: 4 rules found"), "{said}");
    // The queries docs/fleet.md shows parse too: each as a recording rule of its own.
    let fleet = std::fs::read_to_string(root().join("docs/fleet.md")).unwrap();
    let block = fleet
        .split("```promql\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("docs/fleet.md shows PromQL queries");
    let mut queries: Vec<String> = vec![];
    for line in block.lines().filter(|l| !l.starts_with('#')) {
        match (line.starts_with("  "), queries.last_mut()) {
            (true, Some(q)) => q.push_str(line),
            _ => queries.push(line.to_string()),
        }
    }
    assert_eq!(queries.len(), 5, "{queries:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("queries.yml");
    let mut yaml = String::from("groups:\n  - name: docs\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        yaml.push_str(&format!(
            "      - record: docs_query_{i}\n        expr: '{q}'\n"
        ));
    }
    std::fs::write(&file, yaml).unwrap();
    let o = Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn a_hung_nvml_call_is_a_metric_the_endpoint_still_answers_and_sigterm_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fake.state");
    let mut started = Started::default();
    let (exp, log) = exporter(
        &mut started,
        &state,
        &["--interval", "1ms", "--stuck-after", "300ms"],
        &[(
            "HEADROOM_FAKE_FAULTS",
            "nvmlDeviceGetMemoryInfo_v2@100=hang:forever",
        )],
    );
    let t0 = Instant::now();
    let stuck = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "never reported stuck"
        );
        let (code, body) = get(exp, "/metrics", "*/*");
        assert_eq!(code, 200);
        if sample(&body, "headroom_nvml_call_stuck") == 1.0 {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        stuck.contains("call=\"nvmlDeviceGetMemoryInfo_v2\""),
        "{stuck}"
    );
    assert!(sample(&stuck, "headroom_nvml_call_in_progress_seconds") >= 0.3);
    // The readings stopped where the call hung: the 100th call, the first being the
    // inventory's before the sampler started.
    assert_eq!(sample(&stuck, "headroom_readings_total"), 98.0);
    let (code, body) = get(exp, "/metrics", "*/*");
    assert_eq!(code, 200);
    assert_eq!(sample(&body, "headroom_readings_total"), 98.0);
    assert!(sample(&body, "headroom_last_reading_age_seconds") >= 0.3);
    assert_eq!(get(exp, "/healthz", "*/*"), (200, "ok\n".to_string()));
    assert_eq!(get(exp, "/", "*/*").0, 404);

    let child = &mut started.0[0];
    let sent = Instant::now();
    // SAFETY: kill with a PID this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(3),
            "SIGTERM did not end it"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        sent.elapsed() < Duration::from_millis(1500),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(0), "{}", log.lock().unwrap());
    std::thread::sleep(Duration::from_millis(50));
    let said = log.lock().unwrap().clone();
    assert!(
        said.contains("interrupted (SIGTERM): stopping the exporter"),
        "{said}"
    );
}

#[test]
fn a_bad_listen_address_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = headroom(dir.path(), &["exporter", "--listen", "localhost"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr
            .contains("--listen \"localhost\": expected IP:PORT"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_process_gets_its_peak_and_its_series_is_dropped_after_the_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fake.state");
    let mut started = Started::default();
    let (exp, _log) = exporter(
        &mut started,
        &state,
        &["--process-interval", "10ms", "--process-ttl", "300ms"],
        &[],
    );
    assert_eq!(get(exp, "/metrics?scraper=t", "*/*").0, 200);
    let hold = fake(
        &state,
        &[HR, "hold", "1GiB", "--for", "300ms", "--backend", "cuda"],
        &[],
    )
    .output()
    .unwrap();
    assert!(hold.status.success());
    let said = String::from_utf8_lossy(&hold.stdout);
    let pid = said
        .split(" as pid ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{said}"));
    let (_, body) = get(exp, "/metrics?scraper=t", "*/*");
    let mine = format!("pid=\"{pid}\"");
    let peak = body
        .lines()
        .find(|l| l.starts_with("headroom_process_used_peak_bytes{") && l.contains(&mine))
        .unwrap_or_else(|| panic!("no peak for {pid}:\n{body}"));
    // Its 1 GiB and its context, as NVML's process list gave them.
    assert!(peak.ends_with(&format!(" {}", GIB + CTX)), "{peak}");
    assert_eq!(sample(&body, "headroom_process_list_available"), 1.0);
    // Gone from the list, and its series dropped once the time-to-live has passed.
    std::thread::sleep(Duration::from_millis(1000));
    let (_, body) = get(exp, "/metrics?scraper=t", "*/*");
    assert!(!body.contains(&mine), "{body}");
    assert_eq!(sample(&body, "headroom_process_series"), 0.0);
}

#[test]
fn on_mig_each_instance_is_exported_and_a_refused_process_list_is_said_not_zeroed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fake.state");
    let mut started = Started::default();
    let profile = root().join("tests/fake-gpu/profiles/mig-8g.toml");
    let (exp, _log) = exporter(
        &mut started,
        &state,
        &["--process-interval", "10ms"],
        &[
            ("HEADROOM_FAKE_PROFILE", profile.to_str().unwrap()),
            ("HEADROOM_FAKE_MIG", "1g.1gb,2g.2gb"),
            ("HEADROOM_FAKE_PRIVILEGED", "0"),
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    let (code, body) = get(exp, "/metrics", "*/*");
    assert_eq!(code, 200);
    let totals: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("headroom_device_total_bytes{"))
        .collect();
    assert_eq!(totals.len(), 2, "{body}");
    assert!(
        totals[0].contains("mig_profile=\"1g.1gb\",gpu_instance=\"1\"")
            && totals[0].ends_with(&format!(" {GIB}")),
        "{}",
        totals[0]
    );
    assert!(
        totals[1].contains("mig_profile=\"2g.2gb\",gpu_instance=\"2\"")
            && totals[1].ends_with(&format!(" {}", 2 * GIB)),
        "{}",
        totals[1]
    );
    assert!(
        body.contains("DCGM_FI_DEV_FB_TOTAL{gpu=\"0\",UUID=\"MIG-"),
        "{body}"
    );
    assert!(
        body.contains("GPU_I_PROFILE=\"1g.1gb\",GPU_I_ID=\"1\"} 1024\n"),
        "{body}"
    );
    let refused: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("headroom_process_list_available{"))
        .collect();
    assert_eq!(refused.len(), 2, "{body}");
    for l in refused {
        assert!(
            l.contains("NVML_ERROR_NO_PERMISSION") && l.ends_with(" 0"),
            "{l}"
        );
    }
    assert!(!body.contains("headroom_process_used_bytes{"), "{body}");
}

#[test]
fn an_address_in_use_and_a_zero_process_interval_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = on_fake(dir.path(), &["exporter", "--listen", &addr], &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("--listen {addr}: cannot bind")),
        "{}",
        o.stderr
    );
    let o = headroom(dir.path(), &["exporter", "--process-interval", "0s"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("--process-interval must be above zero"),
        "{}",
        o.stderr
    );
}

/// grpcio for the fake kubelet, installed into target/ci-tools/grpc on first use; `None` with
/// the reason printed where it cannot be, a failure under `CI=true`.
fn grpcio() -> Option<PathBuf> {
    let dir = root().join("target/ci-tools/grpc");
    let works = || {
        Command::new("python3")
            .args(["-c", "import grpc"])
            .env("PYTHONPATH", &dir)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works() {
        return Some(dir);
    }
    let o = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-input", "--only-binary=:all:", "--target"])
        .arg(&dir)
        .arg("grpcio==1.85.1")
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .output();
    if works() {
        return Some(dir);
    }
    let why = match o {
        Ok(o) => format!(
            "pip install grpcio failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("python3 cannot run: {e}"),
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: {why}"
    );
    let _ = writeln!(std::io::stderr(), "exporter: pod-resources NOT RUN: {why}");
    None
}

#[test]
fn the_kubelet_pod_resources_name_the_pod_a_gpu_was_allocated_to() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fake.state");
    let mut started = Started::default();
    // No socket: said, with the reason.
    let missing = dir.path().join("missing.sock");
    let (exp, _) = exporter(
        &mut started,
        &state,
        &[
            "--process-interval",
            "50ms",
            "--pod-resources",
            missing.to_str().unwrap(),
        ],
        &[],
    );
    std::thread::sleep(Duration::from_millis(200));
    let (_, body) = get(exp, "/metrics", "*/*");
    let line = body
        .lines()
        .find(|l| l.starts_with("headroom_pod_resources_available{"))
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        line.contains("missing.sock: ") && line.ends_with(" 0"),
        "{line}"
    );
    assert!(!body.contains("headroom_device_allocation{"));

    let Some(grpc) = grpcio() else {
        return;
    };
    let socket = dir.path().join("kubelet.sock");
    let uuid = get(exp, "/metrics", "*/*")
        .1
        .split("uuid=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    let mut kubelet = Command::new("python3")
        .arg(root().join("tests/fake-kubelet/serve.py"))
        .arg(&socket)
        .arg(format!("ml,train-0,trainer,nvidia.com/gpu,{uuid}"))
        .arg("ml,other,x,nvidia.com/gpu,GPU-not-on-this-node")
        .env("PYTHONPATH", &grpc)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    let out = kubelet.stdout.take().unwrap();
    started.0.push(kubelet);
    BufReader::new(out).read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    let (exp, _) = exporter(
        &mut started,
        &state,
        &[
            "--process-interval",
            "50ms",
            "--pod-resources",
            socket.to_str().unwrap(),
        ],
        &[],
    );
    std::thread::sleep(Duration::from_millis(300));
    let (_, body) = get(exp, "/metrics", "*/*");
    let allocated: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("headroom_device_allocation{"))
        .collect();
    assert_eq!(allocated.len(), 1, "{body}");
    assert!(
        allocated[0].ends_with(&format!(
            "uuid=\"{uuid}\",model=\"tiny 4 GiB GPU (fake driver)\",namespace=\"ml\",pod=\"train-0\",container=\"trainer\",resource=\"nvidia.com/gpu\"}} 1"
        )),
        "{}",
        allocated[0]
    );
    assert!(
        body.contains("headroom_pod_resources_available{reason=\"\"} 1\n"),
        "{body}"
    );
}
