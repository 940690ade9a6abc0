//! `headroom exporter`: a daemon that samples every GPU and MIG instance on the node through
//! NVML (no CUDA context: it takes no device memory) and serves, for each scraper, the true
//! peak of every memory view since that scraper's previous scrape, beside the instantaneous
//! values and DCGM-named twins (`render`). Per process: NVML's process list at a slower rate,
//! placed in its container and pod by its cgroup (`cgroup`, `processes`); per device, the pods
//! the kubelet allocated it to, by name (`podresources`).
//!
//! Bounded as a daemon: a fixed number of scraper windows (`window::MAX_SCRAPERS`), processes
//! dropped a time-to-live after they leave the list, at most [`MAX_CONNECTIONS`] requests at
//! once. A sampler stuck inside an NVML call is reported as a metric (the call and how long it
//! has taken) while the endpoint keeps answering from the last readings: the watchdog's budget
//! is off here, so a stuck call never ends the daemon. SIGTERM or SIGINT ends it within
//! [`ACCEPT_POLL`]; a sampler thread stuck in the driver is left to the process's exit.

pub mod cgroup;
pub mod http;
pub mod podresources;
pub mod processes;
pub mod render;
pub mod window;

#[cfg(test)]
mod hour_tests;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use crate::device::nvml::{self, NvmlDevice};
use crate::sampler::{Failures, Tick, paced};
use processes::ProcessTable;
use render::{CallInProgress, DeviceScrape, Format, Identity};
use window::DeviceStats;

/// Requests served at once; one more is answered 503 at once.
pub const MAX_CONNECTIONS: usize = 8;

/// How often the accept loop looks at the stop flag.
pub const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// What the daemon is asked to do.
#[derive(Debug, Clone)]
pub struct ExporterOptions {
    pub listen: SocketAddr,
    /// Device memory readings' interval (0: back to back).
    pub interval_ns: u64,
    /// The process list's interval (it takes a global driver lock: seconds, not milliseconds).
    pub process_interval_ns: u64,
    /// How long a process that left the list keeps its series.
    pub process_ttl_ns: u64,
    /// How long a scraper that stopped scraping keeps its window.
    pub scraper_ttl_ns: u64,
    /// An NVML call in progress this long is reported stuck.
    pub stuck_after_ns: u64,
    /// The kubelet's pod-resources socket (asked at the process list's interval).
    pub pod_resources: std::path::PathBuf,
}

/// A call the sampler is inside: since when (ns from the origin, plus one; 0: none).
struct CallSlot {
    since: AtomicU64,
    call: &'static str,
}

impl CallSlot {
    fn new(call: &'static str) -> CallSlot {
        CallSlot {
            since: AtomicU64::new(0),
            call,
        }
    }

    fn in_progress(&self, now_ns: u64) -> Option<CallInProgress> {
        let s = self.since.load(Ordering::SeqCst);
        (s != 0).then(|| CallInProgress {
            call: self.call,
            seconds: now_ns.saturating_sub(s - 1) as f64 / 1e9,
        })
    }
}

struct UnitState {
    stats: DeviceStats,
    processes: ProcessTable,
}

/// One GPU or MIG instance and what its samplers keep.
struct Unit {
    id: Identity,
    state: Mutex<UnitState>,
    memory_call: CallSlot,
    process_call: CallSlot,
}

struct Shared {
    origin: Instant,
    units: Vec<Unit>,
    opts: ExporterOptions,
    stop: AtomicBool,
    connections: AtomicUsize,
    /// The kubelet's last answer (`None` before the first).
    allocations: Mutex<Option<Result<Vec<podresources::Allocation>, String>>>,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// The GPUs and MIG instances NVML lists, each with its identity.
fn discover() -> anyhow::Result<Vec<Identity>> {
    let gpus = nvml::gpus().ok_or_else(|| {
        anyhow!(
            "NVML is not available ({}); headroom exporter reads every GPU through NVML, which comes with the driver",
            nvml::init_failure().unwrap_or_else(|| "no devices".into())
        )
    })?;
    let mut out = Vec::new();
    for g in gpus {
        if g.mig_enabled {
            for i in g.instances {
                out.push(Identity {
                    gpu_index: g.index,
                    uuid: i.uuid,
                    model: g.name.clone(),
                    mig: Some((
                        i.identity.profile.clone().unwrap_or_default(),
                        i.identity.gpu_instance_id,
                    )),
                });
            }
        } else {
            out.push(Identity {
                gpu_index: g.index,
                uuid: g.uuid,
                model: g.name,
                mig: None,
            });
        }
    }
    if out.is_empty() {
        bail!("NVML lists no GPU on this node: nothing to export");
    }
    Ok(out)
}

/// Runs the exporter until `interrupted`; returns the exit code.
pub fn serve(opts: ExporterOptions, interrupted: &AtomicBool) -> anyhow::Result<i32> {
    // A stuck NVML call is a metric here, never the end of the daemon.
    crate::run::watchdog::set_budget(Some(0));
    crate::signals::set_stop_words("stopping the exporter");
    let ids = discover()?;
    let listener = TcpListener::bind(opts.listen)
        .with_context(|| format!("--listen {}: cannot bind", opts.listen))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let origin = Instant::now();
    let shared = Arc::new(Shared {
        origin,
        units: ids
            .into_iter()
            .map(|id| Unit {
                id,
                state: Mutex::new(UnitState {
                    stats: DeviceStats::new(opts.interval_ns, 0),
                    processes: ProcessTable::default(),
                }),
                memory_call: CallSlot::new("nvmlDeviceGetMemoryInfo_v2"),
                process_call: CallSlot::new("nvmlDeviceGetComputeRunningProcesses"),
            })
            .collect(),
        opts: opts.clone(),
        stop: AtomicBool::new(false),
        connections: AtomicUsize::new(0),
        allocations: Mutex::new(None),
    });
    {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("exporter-pod-resources".into())
            .spawn(move || ask_kubelet(&s))
            .context("cannot start the pod-resources thread")?;
    }
    for i in 0..shared.units.len() {
        for memory in [true, false] {
            let s = shared.clone();
            let name = format!(
                "exporter-{}-{i}",
                if memory { "memory" } else { "processes" }
            );
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let r = if memory {
                        sample_memory(&s, i)
                    } else {
                        sample_processes(&s, i)
                    };
                    if let Err(e) = r {
                        crate::errln!("warning: {}: {e}", s.units[i].id.uuid);
                    }
                })
                .context("cannot start a sampler thread")?;
        }
    }
    crate::errln!(
        "headroom exporter: serving http://{bound}/metrics for {} device(s), reading every {} (process lists every {})",
        shared.units.len(),
        duration_text(opts.interval_ns),
        duration_text(opts.process_interval_ns)
    );
    while !interrupted.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if shared.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                    shared.connections.fetch_sub(1, Ordering::SeqCst);
                    let mut stream = stream;
                    http::respond(
                        &mut stream,
                        "503 Service Unavailable",
                        "text/plain",
                        "busy\n",
                    );
                    continue;
                }
                let s = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("exporter-http".into())
                    .spawn(move || {
                        answer(&s, stream, peer);
                        s.connections.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    shared.connections.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) => crate::errln!("warning: accept on {bound}: {e}"),
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
    crate::errln!("headroom exporter: stopped");
    Ok(0)
}

/// `1ms`, `1s`, `250us`: the largest unit that divides it.
fn duration_text(ns: u64) -> String {
    match ns {
        0 => "0ns (back to back)".into(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

fn answer(shared: &Shared, mut stream: std::net::TcpStream, peer: SocketAddr) {
    let _ = stream.set_nonblocking(false);
    let Ok(head) = http::read_head(&mut stream) else {
        return;
    };
    match http::route(&head, Some(peer)) {
        http::Route::Metrics { scraper, accept } => {
            let format = Format::from_accept(&accept);
            let body = scrape(shared, &scraper, format);
            http::respond(&mut stream, "200 OK", format.content_type(), &body);
        }
        http::Route::Health => http::respond(&mut stream, "200 OK", "text/plain", "ok\n"),
        http::Route::NotFound => http::respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            "headroom exporter serves /metrics and /healthz\n",
        ),
        http::Route::MethodNotAllowed => http::respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n",
        ),
        http::Route::Bad(why) => http::respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            &format!("{why}\n"),
        ),
    }
}

/// One scrape of every unit for `scraper`.
fn scrape(shared: &Shared, scraper: &str, format: Format) -> String {
    let now = shared.now_ns();
    let opts = &shared.opts;
    // Each device's lock is held only to hand over its windows and copy what is shown, so
    // its sampler waits microseconds, not the whole rendering.
    let mut scrapers = 0;
    let copies: Vec<_> = shared
        .units
        .iter()
        .map(|u| {
            let mut g = u.state.lock().unwrap_or_else(|e| e.into_inner());
            let g = &mut *g;
            let scraped = g.stats.scrape(scraper, now, opts.scraper_ttl_ns);
            scrapers = scrapers.max(g.stats.scrapers().count());
            let process_peaks = g.processes.scrape(scraper, g.stats.scrapers());
            let calls: Vec<CallInProgress> = [&u.memory_call, &u.process_call]
                .iter()
                .filter_map(|c| c.in_progress(now))
                .collect();
            (
                g.stats.shown(),
                g.processes.shown(),
                scraped,
                process_peaks,
                calls,
            )
        })
        .collect();
    let kubelet = shared
        .allocations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let devices: Vec<DeviceScrape<'_>> = shared
        .units
        .iter()
        .zip(&copies)
        .map(
            |(u, (stats, processes, scraped, process_peaks, calls))| DeviceScrape {
                id: &u.id,
                interval_ns: opts.interval_ns,
                stats,
                scraped: *scraped,
                processes,
                process_peaks: process_peaks.clone(),
                calls: calls.clone(),
                stuck_after_s: opts.stuck_after_ns as f64 / 1e9,
                last_reading_age_s: stats
                    .last_reading_ns
                    .map(|t| now.saturating_sub(t) as f64 / 1e9),
                allocations: match &kubelet {
                    Some(Ok(all)) => all
                        .iter()
                        .filter(|a| a.device_id == u.id.uuid)
                        .cloned()
                        .collect(),
                    _ => vec![],
                },
            },
        )
        .collect();
    let answered = kubelet
        .as_ref()
        .map(|r| r.as_ref().map(Vec::len).map_err(Clone::clone));
    render::render(&devices, scrapers, answered.as_ref(), format)
}

/// The kubelet's allocations at the process list's interval, until stopped.
fn ask_kubelet(shared: &Shared) {
    while !shared.stop.load(Ordering::SeqCst) {
        let answer = podresources::list(&shared.opts.pod_resources);
        *shared.allocations.lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
        let next = Instant::now() + Duration::from_nanos(shared.opts.process_interval_ns);
        while !shared.stop.load(Ordering::SeqCst) && Instant::now() < next {
            let left = next.saturating_duration_since(Instant::now());
            std::thread::sleep(Duration::from_millis(20).min(left));
        }
    }
}

fn open_device(uuid: &str) -> anyhow::Result<NvmlDevice> {
    NvmlDevice::try_open(uuid).map_err(|e| anyhow!("NVML cannot open the device: {e}"))
}

/// Device memory at the interval, until stopped.
fn sample_memory(shared: &Shared, i: usize) -> anyhow::Result<()> {
    let unit = &shared.units[i];
    let dev = open_device(&unit.id.uuid)?;
    let reader = dev.reader(shared.origin).map_err(|e| anyhow!("{e}"))?;
    let failures = Failures {
        what: "the exporter's NVML memory reading",
        on_first: None,
    };
    paced(
        shared.opts.interval_ns,
        &shared.stop,
        false,
        failures,
        || {
            let started = shared.now_ns();
            unit.memory_call.since.store(started + 1, Ordering::SeqCst);
            let read = reader.memory();
            unit.memory_call.since.store(0, Ordering::SeqCst);
            let t_ns = shared.now_ns();
            let mut st = unit.state.lock().unwrap_or_else(|e| e.into_inner());
            match read {
                Ok(m) => {
                    st.stats.record(t_ns, m);
                    Tick::Read {
                        t_ns,
                        latency_ns: t_ns - started,
                    }
                }
                Err(error) => {
                    st.stats.record_failure();
                    Tick::Failed {
                        t_ns,
                        phase: 0,
                        error,
                    }
                }
            }
        },
    );
    Ok(())
}

/// The process list at its interval, until stopped.
fn sample_processes(shared: &Shared, i: usize) -> anyhow::Result<()> {
    let unit = &shared.units[i];
    let dev = open_device(&unit.id.uuid)?;
    let reader = dev.reader(shared.origin).map_err(|e| anyhow!("{e}"))?;
    let opts = &shared.opts;
    while !shared.stop.load(Ordering::SeqCst) {
        unit.process_call
            .since
            .store(shared.now_ns() + 1, Ordering::SeqCst);
        let list = reader.processes();
        unit.process_call.since.store(0, Ordering::SeqCst);
        let list: Result<Vec<(u32, Option<u64>)>, String> =
            list.map(|ps| ps.into_iter().map(|p| (p.pid, p.used_bytes)).collect());
        // New processes' cgroups are read outside the lock.
        let new: Vec<u32> = match &list {
            Ok(l) => {
                let st = unit.state.lock().unwrap_or_else(|e| e.into_inner());
                l.iter()
                    .map(|(pid, _)| *pid)
                    .filter(|pid| !st.processes.is_listed(*pid))
                    .collect()
            }
            Err(_) => vec![],
        };
        let placed: HashMap<u32, cgroup::Placement> = new
            .into_iter()
            .map(|pid| (pid, cgroup::of_pid(pid).unwrap_or_default()))
            .collect();
        let now = shared.now_ns();
        {
            let mut st = unit.state.lock().unwrap_or_else(|e| e.into_inner());
            st.processes.update(now, list, opts.process_ttl_ns, |pid| {
                placed.get(&pid).cloned().unwrap_or_default()
            });
        }
        let next = Instant::now() + Duration::from_nanos(opts.process_interval_ns);
        while !shared.stop.load(Ordering::SeqCst) && Instant::now() < next {
            let left = next.saturating_duration_since(Instant::now());
            std::thread::sleep(Duration::from_millis(20).min(left));
        }
    }
    Ok(())
}
