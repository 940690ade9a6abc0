//! A simulated hour on a virtual clock: a reading every 100 ms, a process list every second
//! with one process starting and the previous one ending each time, two Prometheus servers
//! scraping every 15 s and 30 s, and a passer-by scraper with a new identity every 10 s. The
//! state the exporter keeps stays within its stated bound the whole hour: at most
//! `ttl / 1 s + 2` processes (302 with the default 5 min), at most `MAX_SCRAPERS` windows per
//! device and one process window per scraper and process, and a `/metrics` text that stops
//! growing once the first time-to-live has passed.

use super::cgroup::Placement;
use super::processes::ProcessTable;
use super::render::{DeviceScrape, Format, Identity, render};
use super::window::{DeviceStats, MAX_SCRAPERS};
use crate::device::NvmlMemory;

const S: u64 = 1_000_000_000;
const MIB: u64 = 1 << 20;

/// The most `/metrics` text one device with `processes` processes can take: the fixed families
/// (under 12 KiB with their help lines) and two lines per process of at most 400 bytes.
fn text_bound_bytes(processes: usize) -> usize {
    12 * 1024 + processes * 2 * 400
}

#[test]
fn an_hour_of_a_process_a_second_stays_within_the_bound() {
    let ttl_ns = 300 * S;
    let scraper_ttl_ns = 600 * S;
    let id = Identity {
        gpu_index: 0,
        uuid: "GPU-00000000-0000-4000-8000-000000000000".into(),
        model: "NVIDIA H100 80GB HBM3".into(),
        mig: None,
    };
    let total = 80 * 1024 * MIB;
    let mut stats = DeviceStats::new(100_000_000, 0);
    let mut table = ProcessTable::default();
    let placement = |pid: u32| Placement {
        runtime: "containerd",
        container_id: format!("{pid:064x}"),
        pod_uid: format!("00000000-0000-4000-8000-{pid:012x}"),
        qos: "burstable",
    };
    let (mut max_processes, mut max_text) = (0, 0);
    let mut text_at_30min = 0;
    let mut last_text = 0;
    for second in 1..=3600u64 {
        for tick in 0..10u64 {
            let t = (second - 1) * S + tick * 100_000_000;
            let used = (second % 7) * 1024 * MIB + tick * MIB;
            stats.record(
                t,
                NvmlMemory {
                    total_bytes: total,
                    reserved_bytes: Some(512 * MIB),
                    used_bytes: used,
                    free_bytes: total - used - 512 * MIB,
                },
            );
        }
        let now = second * S;
        let pid = 100_000 + second as u32;
        table.update(now, Ok(vec![(pid, Some(second * MIB))]), ttl_ns, placement);
        assert!(
            table.processes.len() <= 302,
            "second {second}: {}",
            table.processes.len()
        );
        max_processes = max_processes.max(table.processes.len());
        let mut scrape = |who: &str, rendered: bool| {
            let scraped = stats.scrape(who, now, scraper_ttl_ns);
            let peaks = table.scrape(who, stats.scrapers());
            if !rendered {
                return (String::new(), 0);
            }
            let d = DeviceScrape {
                id: &id,
                interval_ns: 100_000_000,
                stats: &stats,
                scraped,
                processes: &table,
                process_peaks: peaks,
                calls: vec![],
                stuck_after_s: 2.0,
                last_reading_age_s: Some(0.0),
                allocations: vec![],
            };
            let text = render(&[d], stats.scrapers().count(), None, Format::OpenMetrics);
            assert!(text.ends_with("# EOF\n"));
            (text, table.processes.len())
        };
        if second % 15 == 0 {
            let (text, processes) = scrape("prometheus-a", true);
            // The process that started this second, with its peak, in A's scrape.
            assert!(text.contains(&format!("pid=\"{pid}\"")), "second {second}");
            assert!(text.len() <= text_bound_bytes(processes), "{}", text.len());
            max_text = max_text.max(text.len());
            last_text = text.len();
            if second == 1800 {
                text_at_30min = text.len();
            }
        }
        if second % 30 == 0 {
            scrape("prometheus-b", false);
        }
        if second % 10 == 0 {
            scrape(&format!("passer-by-{second}"), false);
        }
        assert!(stats.scrapers().count() <= MAX_SCRAPERS);
        assert!(table.window_entries() <= MAX_SCRAPERS * table.processes.len());
    }
    // An ended process's series is gone after the time-to-live, and only then.
    assert!(table.processes.contains_key(&(100_000 + 3600 - 300)));
    assert!(!table.processes.contains_key(&(100_000 + 3600 - 302)));
    assert_eq!(max_processes, 302);
    assert!(max_text <= text_bound_bytes(302), "{max_text}");
    // Steady once the first time-to-live passed: the text at the hour's end is the half
    // hour's, within the digits a larger PID or peak takes.
    assert!(
        last_text.abs_diff(text_at_30min) < 2048,
        "{text_at_30min} → {last_text}"
    );
    assert_eq!(stats.readings_total, 36_000);
    assert_eq!(stats.missed_total, 0);
}
