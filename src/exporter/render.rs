//! `/metrics` as text: OpenMetrics 1.0 (`# UNIT`, counters typed without `_total`, `# EOF`)
//! by default and for Prometheus, which asks for it; the Prometheus text format 0.0.4 for a
//! client that asks for `text/plain` alone (`promtool check metrics` reads that one). The
//! same families and samples either way, headroom's in base units (bytes, seconds), and beside
//! them the DCGM field names dashboards already use, in DCGM's unit (MiB), named after
//! dcgm-exporter's default counters (`DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_FB_FREE`:
//! github.com/NVIDIA/dcgm-exporter, `etc/default-counters.csv`; its labels `gpu`, `UUID`,
//! `modelName`, `GPU_I_PROFILE`, `GPU_I_ID`).

use std::fmt::Write as _;

use super::podresources::Allocation;
use super::processes::ProcessTable;
use super::window::{BUCKET_PERMILLE, DeviceStats, Scraped};

/// Which text format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    PrometheusText,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// OpenMetrics unless the client accepts `text/plain` and not OpenMetrics.
    pub fn from_accept(accept: &str) -> Format {
        if accept.contains("text/plain") && !accept.contains("application/openmetrics-text") {
            Format::PrometheusText
        } else {
            Format::OpenMetrics
        }
    }
}

/// A GPU or MIG instance as its series name it.
#[derive(Debug, Clone)]
pub struct Identity {
    pub gpu_index: u32,
    pub uuid: String,
    pub model: String,
    /// `1g.18gb` and the GPU instance's id, for a MIG instance.
    pub mig: Option<(String, Option<u32>)>,
}

/// A driver call that has not returned, as the sampler saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallInProgress {
    pub call: &'static str,
    pub seconds: f64,
}

/// What one scrape shows of one device.
pub struct DeviceScrape<'a> {
    pub id: &'a Identity,
    pub interval_ns: u64,
    pub stats: &'a DeviceStats,
    pub scraped: Scraped,
    pub processes: &'a ProcessTable,
    pub process_peaks: std::collections::BTreeMap<u32, u64>,
    /// The sampler's calls in progress (memory info, the process list).
    pub calls: Vec<CallInProgress>,
    /// A call still in progress after this long is reported stuck.
    pub stuck_after_s: f64,
    /// Seconds since the last reading (`None`: none yet).
    pub last_reading_age_s: Option<f64>,
    /// The containers the kubelet allocated this device to.
    pub allocations: Vec<Allocation>,
}

/// Label values escaped as both formats want (`\\`, `\"`, `\n`).
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn headroom_labels(id: &Identity) -> String {
    let mut s = format!(
        "gpu=\"{}\",uuid=\"{}\",model=\"{}\"",
        id.gpu_index,
        escape(&id.uuid),
        escape(&id.model)
    );
    if let Some((profile, gi)) = &id.mig {
        let _ = write!(s, ",mig_profile=\"{}\"", escape(profile));
        if let Some(gi) = gi {
            let _ = write!(s, ",gpu_instance=\"{gi}\"");
        }
    }
    s
}

fn dcgm_labels(id: &Identity) -> String {
    let mut s = format!(
        "gpu=\"{}\",UUID=\"{}\",modelName=\"{}\"",
        id.gpu_index,
        escape(&id.uuid),
        escape(&id.model)
    );
    if let Some((profile, gi)) = &id.mig {
        let _ = write!(s, ",GPU_I_PROFILE=\"{}\"", escape(profile));
        if let Some(gi) = gi {
            let _ = write!(s, ",GPU_I_ID=\"{gi}\"");
        }
    }
    s
}

#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// One family's samples across every device, written together as both formats require.
struct Family {
    name: &'static str,
    kind: Kind,
    /// OpenMetrics' `# UNIT` (the name ends with it); empty for none.
    unit: &'static str,
    help: &'static str,
    samples: String,
}

impl Family {
    fn new(name: &'static str, kind: Kind, unit: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind,
            unit,
            help,
            samples: String::new(),
        }
    }

    /// A sample of this family: `suffix` is `_total`, `_bucket`, … or empty.
    fn sample(&mut self, suffix: &str, labels: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.samples, "{}{suffix}{{{labels}}} {value}", self.name);
    }

    fn write(&self, out: &mut String, format: Format) {
        let (kind, typed) = match (self.kind, format) {
            (Kind::Gauge, _) => ("gauge", self.name.to_string()),
            (Kind::Histogram, _) => ("histogram", self.name.to_string()),
            (Kind::Counter, Format::OpenMetrics) => ("counter", self.name.to_string()),
            (Kind::Counter, Format::PrometheusText) => ("counter", format!("{}_total", self.name)),
        };
        let _ = writeln!(out, "# HELP {typed} {}", self.help);
        let _ = writeln!(out, "# TYPE {typed} {kind}");
        if format == Format::OpenMetrics && !self.unit.is_empty() {
            let _ = writeln!(out, "# UNIT {typed} {}", self.unit);
        }
        out.push_str(&self.samples);
    }
}

const MIB: u64 = 1 << 20;

/// The whole `/metrics` text for one scrape.
/// `pod_resources`: the kubelet's answer (the allocations it listed, or why none), `None`
/// before the first.
pub fn render(
    devices: &[DeviceScrape<'_>],
    scrapers: usize,
    pod_resources: Option<&Result<usize, String>>,
    format: Format,
) -> String {
    use Kind::*;
    let f = |n, k, u, h| Family::new(n, k, u, h);
    let mut total = f(
        "headroom_device_total_bytes",
        Gauge,
        "bytes",
        "Device memory, NVML's total.",
    );
    let mut used = f(
        "headroom_device_used_bytes",
        Gauge,
        "bytes",
        "Device memory used (NVML), at the last reading: an instantaneous sample.",
    );
    let mut used_peak = f(
        "headroom_device_used_peak_bytes",
        Gauge,
        "bytes",
        "The highest device used of every reading since this scraper's previous scrape (since the exporter started, on its first).",
    );
    let mut reserved = f(
        "headroom_device_reserved_bytes",
        Gauge,
        "bytes",
        "The driver's reserved share (NVML memory info v2), at the last reading.",
    );
    let mut reserved_peak = f(
        "headroom_device_reserved_peak_bytes",
        Gauge,
        "bytes",
        "The highest reserved share since this scraper's previous scrape.",
    );
    let mut free = f(
        "headroom_device_free_bytes",
        Gauge,
        "bytes",
        "Device memory free (NVML), at the last reading.",
    );
    let mut free_min = f(
        "headroom_device_free_min_bytes",
        Gauge,
        "bytes",
        "The lowest device free of every reading since this scraper's previous scrape.",
    );
    let mut hist = f(
        "headroom_device_used_readings_bytes",
        Histogram,
        "bytes",
        "Every reading of device used since the exporter started, by tenths of the total (and 95 %, 99 %).",
    );
    let mut taken = f(
        "headroom_readings",
        Counter,
        "",
        "Device memory readings taken since the exporter started.",
    );
    let mut missed = f(
        "headroom_readings_missed",
        Counter,
        "",
        "Readings missed since the exporter started: failed ones and the ticks a late reading skipped.",
    );
    let mut failed = f(
        "headroom_readings_failed",
        Counter,
        "",
        "Readings NVML failed since the exporter started.",
    );
    let mut rate = f(
        "headroom_reading_rate_hertz",
        Gauge,
        "hertz",
        "Readings per second achieved over this scraper's window.",
    );
    let mut interval = f(
        "headroom_reading_interval_seconds",
        Gauge,
        "seconds",
        "The reading interval asked for (0: back to back).",
    );
    let mut window = f(
        "headroom_scrape_window_seconds",
        Gauge,
        "seconds",
        "The window this scrape's peaks cover: since this scraper's previous scrape.",
    );
    let mut age = f(
        "headroom_last_reading_age_seconds",
        Gauge,
        "seconds",
        "Seconds since the last reading returned.",
    );
    let mut stuck = f(
        "headroom_nvml_call_stuck",
        Gauge,
        "",
        "1 while an NVML call of the sampler has been in progress longer than the stuck threshold.",
    );
    let mut in_call = f(
        "headroom_nvml_call_in_progress_seconds",
        Gauge,
        "seconds",
        "How long the sampler's NVML call now in progress has taken (0: none).",
    );
    let mut p_used = f(
        "headroom_process_used_bytes",
        Gauge,
        "bytes",
        "A process's device memory at the last process list (0 once it left the list).",
    );
    let mut p_peak = f(
        "headroom_process_used_peak_bytes",
        Gauge,
        "bytes",
        "A process's highest listed memory since this scraper's previous scrape.",
    );
    let mut p_avail = f(
        "headroom_process_list_available",
        Gauge,
        "",
        "1 when NVML gave the last process list; 0 with the reason when it refused (no permission, for one).",
    );
    let mut p_lists = f(
        "headroom_process_lists",
        Counter,
        "",
        "Process lists asked of NVML since the exporter started.",
    );
    let mut p_lists_failed = f(
        "headroom_process_lists_failed",
        Counter,
        "",
        "Process lists NVML refused since the exporter started.",
    );
    let mut p_series = f(
        "headroom_process_series",
        Gauge,
        "",
        "Processes kept (listed now or gone for less than the time-to-live).",
    );
    let mut d_used = f(
        "DCGM_FI_DEV_FB_USED",
        Gauge,
        "",
        "Framebuffer memory used (in MiB), at the last reading; named as dcgm-exporter's field.",
    );
    let mut d_free = f(
        "DCGM_FI_DEV_FB_FREE",
        Gauge,
        "",
        "Framebuffer memory free (in MiB), at the last reading; named as dcgm-exporter's field.",
    );
    let mut d_total = f(
        "DCGM_FI_DEV_FB_TOTAL",
        Gauge,
        "",
        "Framebuffer memory total (in MiB).",
    );
    let mut d_reserved = f(
        "DCGM_FI_DEV_FB_RESERVED",
        Gauge,
        "",
        "Framebuffer memory reserved (in MiB), at the last reading.",
    );
    let mut d_used_peak = f(
        "DCGM_FI_DEV_FB_USED_PEAK",
        Gauge,
        "",
        "Framebuffer memory used (in MiB), the highest reading since this scraper's previous scrape (headroom's; not a DCGM field).",
    );
    let mut d_free_min = f(
        "DCGM_FI_DEV_FB_FREE_MIN",
        Gauge,
        "",
        "Framebuffer memory free (in MiB), the lowest reading since this scraper's previous scrape (headroom's; not a DCGM field).",
    );
    let mut scraper_count = f(
        "headroom_exporter_scrapers",
        Gauge,
        "",
        "Scrapers with a window of their own (at most 16).",
    );
    let _ = writeln!(
        scraper_count.samples,
        "headroom_exporter_scrapers {scrapers}"
    );
    let mut allocated = f(
        "headroom_device_allocation",
        Gauge,
        "",
        "1 for each container the kubelet's pod-resources API says the device was allocated to.",
    );
    let mut kubelet = f(
        "headroom_pod_resources_available",
        Gauge,
        "",
        "1 when the kubelet's pod-resources socket answered the last list; 0 with the reason.",
    );
    match pod_resources {
        Some(Ok(_)) => kubelet.sample("", "reason=\"\"", 1),
        Some(Err(why)) => kubelet.sample("", &format!("reason=\"{}\"", escape(why)), 0),
        None => {}
    }

    for d in devices {
        let l = headroom_labels(d.id);
        let dl = dcgm_labels(d.id);
        let w = d.scraped.window;
        interval.sample("", &l, d.interval_ns as f64 / 1e9);
        window.sample("", &l, d.scraped.window_ns as f64 / 1e9);
        rate.sample("", &l, d.scraped.achieved_rate_hz);
        taken.sample("_total", &l, d.stats.readings_total);
        missed.sample("_total", &l, d.stats.missed_total);
        failed.sample("_total", &l, d.stats.failed_total);
        if let Some(a) = d.last_reading_age_s {
            age.sample("", &l, a);
        }
        let longest = d
            .calls
            .iter()
            .copied()
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds));
        match longest {
            Some(c) => {
                let cl = format!("{l},call=\"{}\"", c.call);
                stuck.sample("", &cl, u8::from(c.seconds >= d.stuck_after_s));
                in_call.sample("", &cl, c.seconds);
            }
            None => {
                stuck.sample("", &format!("{l},call=\"\""), 0);
                in_call.sample("", &format!("{l},call=\"\""), 0);
            }
        }
        if let Some(m) = d.stats.current {
            total.sample("", &l, m.total_bytes);
            used.sample("", &l, m.used_bytes);
            // No reserve series where NVML reports none (memory info v1), never a zero.
            if let Some(reserved_bytes) = m.reserved_bytes {
                reserved.sample("", &l, reserved_bytes);
                d_reserved.sample("", &dl, reserved_bytes / MIB);
            }
            free.sample("", &l, m.free_bytes);
            d_total.sample("", &dl, m.total_bytes / MIB);
            d_used.sample("", &dl, m.used_bytes / MIB);
            d_free.sample("", &dl, m.free_bytes / MIB);
            // A window with no reading in it (none yet) has no peak to say.
            if w.free_min_bytes != u64::MAX {
                used_peak.sample("", &l, w.used_peak_bytes);
                if let Some(peak) = w.reserved_peak_bytes {
                    reserved_peak.sample("", &l, peak);
                }
                free_min.sample("", &l, w.free_min_bytes);
                d_used_peak.sample("", &dl, w.used_peak_bytes / MIB);
                d_free_min.sample("", &dl, w.free_min_bytes / MIB);
            }
            let bounds = DeviceStats::bucket_bounds_bytes(m.total_bytes);
            let mut cumulative = 0;
            for (i, b) in bounds.iter().enumerate().take(BUCKET_PERMILLE.len()) {
                cumulative += d.stats.bucket_counts[i];
                hist.sample("_bucket", &format!("{l},le=\"{b}\""), cumulative);
            }
            hist.sample(
                "_bucket",
                &format!("{l},le=\"+Inf\""),
                d.stats.readings_total,
            );
            hist.sample("_count", &l, d.stats.readings_total);
            hist.sample("_sum", &l, d.stats.used_sum_bytes);
        }
        for a in &d.allocations {
            let al = format!(
                "{l},namespace=\"{}\",pod=\"{}\",container=\"{}\",resource=\"{}\"",
                escape(&a.namespace),
                escape(&a.pod),
                escape(&a.container),
                escape(&a.resource)
            );
            allocated.sample("", &al, 1);
        }
        let t = d.processes;
        p_lists.sample("_total", &l, t.lists_total);
        p_lists_failed.sample("_total", &l, t.lists_failed_total);
        p_series.sample("", &l, t.processes.len());
        if t.lists_total > 0 {
            match &t.unavailable {
                None => p_avail.sample("", &format!("{l},reason=\"\""), 1),
                Some(why) => p_avail.sample("", &format!("{l},reason=\"{}\"", escape(why)), 0),
            }
        }
        for (pid, p) in &t.processes {
            let pl = format!(
                "{l},pid=\"{pid}\",runtime=\"{}\",container_id=\"{}\",pod_uid=\"{}\",qos=\"{}\"",
                p.placement.runtime, p.placement.container_id, p.placement.pod_uid, p.placement.qos
            );
            if let Some(b) = p.used_bytes {
                p_used.sample("", &pl, b);
            }
            if let Some(peak) = d.process_peaks.get(pid) {
                p_peak.sample("", &pl, peak);
            }
        }
    }
    let mut out = String::new();
    for fam in [
        &total,
        &used,
        &used_peak,
        &reserved,
        &reserved_peak,
        &free,
        &free_min,
        &hist,
        &taken,
        &missed,
        &failed,
        &rate,
        &interval,
        &window,
        &age,
        &stuck,
        &in_call,
        &p_used,
        &p_peak,
        &p_avail,
        &p_lists,
        &p_lists_failed,
        &p_series,
        &d_used,
        &d_free,
        &d_total,
        &d_reserved,
        &d_used_peak,
        &d_free_min,
        &scraper_count,
        &allocated,
        &kubelet,
    ] {
        fam.write(&mut out, format);
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::NvmlMemory;

    fn one(format: Format, unavailable: Option<&str>) -> String {
        let id = Identity {
            gpu_index: 3,
            uuid: "GPU-1".into(),
            model: "A \"quoted\" GPU".into(),
            mig: None,
        };
        let mut stats = DeviceStats::new(1_000_000, 0);
        stats.record(
            1,
            NvmlMemory {
                total_bytes: 8 << 30,
                reserved_bytes: Some(0),
                used_bytes: (1 << 30) + (1 << 19),
                free_bytes: (7 << 30) - (1 << 19),
            },
        );
        let scraped = stats.scrape("s", 2, u64::MAX);
        let mut processes = ProcessTable::default();
        processes.update(
            2,
            match unavailable {
                Some(why) => Err(why.to_string()),
                None => Ok(vec![]),
            },
            1,
            |_| Default::default(),
        );
        let d = DeviceScrape {
            id: &id,
            interval_ns: 1_000_000,
            stats: &stats,
            scraped,
            processes: &processes,
            process_peaks: Default::default(),
            calls: vec![],
            stuck_after_s: 2.0,
            last_reading_age_s: None,
            allocations: vec![],
        };
        render(&[d], 1, None, format)
    }

    #[test]
    fn the_two_formats_differ_only_where_their_specifications_do() {
        let om = one(Format::OpenMetrics, None);
        let text = one(Format::PrometheusText, None);
        assert!(om.ends_with("# EOF\n") && !text.contains("# EOF"));
        assert!(om.contains("# TYPE headroom_readings counter\n"));
        assert!(text.contains("# TYPE headroom_readings_total counter\n"));
        assert!(om.contains("# UNIT headroom_device_used_peak_bytes bytes\n"));
        assert!(!text.contains("# UNIT"));
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(String::from)
                .collect()
        };
        assert_eq!(samples(&om), samples(&text));
        // Bytes raw; MiB rounded down for the DCGM twins; labels escaped.
        let labels = "gpu=\"3\",uuid=\"GPU-1\",model=\"A \\\"quoted\\\" GPU\"";
        assert!(
            om.contains(&format!(
                "headroom_device_used_peak_bytes{{{labels}}} 1074266112\n"
            )),
            "{om}"
        );
        assert!(om.contains("DCGM_FI_DEV_FB_USED_PEAK{gpu=\"3\",UUID=\"GPU-1\",modelName=\"A \\\"quoted\\\" GPU\"} 1024\n"), "{om}");
        assert!(om.contains(&format!(
            "headroom_process_list_available{{{labels},reason=\"\"}} 1\n"
        )));
    }

    #[test]
    fn prometheus_gets_openmetrics_and_a_plain_text_client_the_text_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(prometheus), Format::OpenMetrics);
        assert_eq!(Format::from_accept("*/*"), Format::OpenMetrics);
        assert_eq!(Format::from_accept(""), Format::OpenMetrics);
        assert_eq!(Format::from_accept("text/plain"), Format::PrometheusText);
    }

    #[test]
    fn a_refused_list_says_why_escaped() {
        let om = one(Format::OpenMetrics, Some("NO \"PERMISSION\"\nfor MIG"));
        assert!(
            om.contains("reason=\"NO \\\"PERMISSION\\\"\\nfor MIG\"} 0\n"),
            "{om}"
        );
    }
}
