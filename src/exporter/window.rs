//! One device's readings as the exporter keeps them: the current value, counters since the
//! exporter started (readings taken and missed, a histogram of device used), and for each
//! scraper a window since its previous scrape (the peak of used and reserved, the minimum of
//! free, the readings in it). Scraping a window hands it over and starts the next one at the
//! current value, so two scrapers never take each other's peaks. Constant size: at most
//! [`MAX_SCRAPERS`] windows, a scraper unseen for the scraper time-to-live is forgotten.

use std::collections::BTreeMap;

use crate::device::NvmlMemory;

/// Windows kept at most; past it the scraper scraped longest ago is forgotten first.
pub const MAX_SCRAPERS: usize = 16;

/// The histogram's upper bounds, as parts per thousand of the device's total.
pub const BUCKET_PERMILLE: [u64; 12] =
    [100, 200, 300, 400, 500, 600, 700, 800, 900, 950, 990, 1000];

/// What one scraper's window saw since its previous scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// When the window started (the previous scrape, or the exporter's start).
    pub start_ns: u64,
    pub used_peak_bytes: u64,
    /// `None` where NVML reports no reserve (memory info v1: R470, or v2 failing).
    pub reserved_peak_bytes: Option<u64>,
    pub free_min_bytes: u64,
    /// Readings folded into the window.
    pub readings: u64,
    /// The last scrape that handed this window over (its scraper's time-to-live runs from it).
    pub scraped_ns: u64,
}

impl Window {
    fn starting_at(t_ns: u64, now: Option<NvmlMemory>) -> Window {
        Window {
            start_ns: t_ns,
            used_peak_bytes: now.map_or(0, |m| m.used_bytes),
            reserved_peak_bytes: now.and_then(|m| m.reserved_bytes),
            free_min_bytes: now.map_or(u64::MAX, |m| m.free_bytes),
            readings: 0,
            scraped_ns: t_ns,
        }
    }

    fn fold(&mut self, m: NvmlMemory) {
        self.used_peak_bytes = self.used_peak_bytes.max(m.used_bytes);
        if let Some(r) = m.reserved_bytes {
            self.reserved_peak_bytes = Some(self.reserved_peak_bytes.map_or(r, |p| p.max(r)));
        }
        self.free_min_bytes = self.free_min_bytes.min(m.free_bytes);
        self.readings += 1;
    }
}

/// A scrape's view of one device: its window and the achieved reading rate over it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scraped {
    pub window: Window,
    pub window_ns: u64,
    pub achieved_rate_hz: f64,
}

/// Everything kept about one device's readings.
#[derive(Debug, Clone)]
pub struct DeviceStats {
    /// The interval asked for (0: back to back): a longer gap counts as missed readings.
    interval_ns: u64,
    pub current: Option<NvmlMemory>,
    pub last_reading_ns: Option<u64>,
    pub readings_total: u64,
    /// Readings that failed, plus the ticks a late reading skipped.
    pub missed_total: u64,
    pub failed_total: u64,
    /// Cumulative counts per bound of `BUCKET_PERMILLE` (non-cumulative here; summed when
    /// rendered), the sum of used bytes read, for the histogram.
    pub bucket_counts: [u64; BUCKET_PERMILLE.len()],
    pub used_sum_bytes: u128,
    /// Since the exporter started: a scraper's first scrape reports this window.
    since_start: Window,
    windows: BTreeMap<String, Window>,
}

impl DeviceStats {
    pub fn new(interval_ns: u64, start_ns: u64) -> DeviceStats {
        DeviceStats {
            interval_ns,
            current: None,
            last_reading_ns: None,
            readings_total: 0,
            missed_total: 0,
            failed_total: 0,
            bucket_counts: [0; BUCKET_PERMILLE.len()],
            used_sum_bytes: 0,
            since_start: Window::starting_at(start_ns, None),
            windows: BTreeMap::new(),
        }
    }

    /// The histogram's bounds in bytes for a device of `total_bytes`.
    pub fn bucket_bounds_bytes(total_bytes: u64) -> [u64; BUCKET_PERMILLE.len()] {
        BUCKET_PERMILLE.map(|p| (total_bytes as u128 * p as u128 / 1000) as u64)
    }

    /// Folds one reading taken at `t_ns` into every window.
    pub fn record(&mut self, t_ns: u64, m: NvmlMemory) {
        if let Some(prev) = self.last_reading_ns {
            let gap = t_ns.saturating_sub(prev);
            if self.interval_ns > 0 && gap >= 2 * self.interval_ns {
                self.missed_total += gap / self.interval_ns - 1;
            }
        }
        self.last_reading_ns = Some(t_ns);
        self.current = Some(m);
        self.readings_total += 1;
        self.used_sum_bytes += m.used_bytes as u128;
        let bounds = Self::bucket_bounds_bytes(m.total_bytes);
        if let Some(i) = bounds.iter().position(|b| m.used_bytes <= *b) {
            self.bucket_counts[i] += 1;
        }
        self.since_start.fold(m);
        for w in self.windows.values_mut() {
            w.fold(m);
        }
    }

    /// A reading that failed: missed, and the last value stays the current one.
    pub fn record_failure(&mut self) {
        self.failed_total += 1;
        self.missed_total += 1;
    }

    /// Hands `scraper` its window at `now_ns` and starts its next one at the current value.
    /// Scrapers not seen for `ttl_ns` are forgotten first; past `MAX_SCRAPERS` the one
    /// scraped longest ago.
    pub fn scrape(&mut self, scraper: &str, now_ns: u64, ttl_ns: u64) -> Scraped {
        self.windows
            .retain(|_, w| now_ns.saturating_sub(w.scraped_ns) <= ttl_ns);
        let window = match self.windows.get(scraper) {
            Some(w) => *w,
            None => {
                while self.windows.len() >= MAX_SCRAPERS {
                    let oldest = self
                        .windows
                        .iter()
                        .min_by_key(|(_, w)| w.scraped_ns)
                        .map(|(k, _)| k.clone());
                    match oldest {
                        Some(k) => self.windows.remove(&k),
                        None => break,
                    };
                }
                self.since_start
            }
        };
        let mut next = Window::starting_at(now_ns, self.current);
        next.scraped_ns = now_ns;
        self.windows.insert(scraper.to_string(), next);
        let window_ns = now_ns.saturating_sub(window.start_ns);
        Scraped {
            window,
            window_ns,
            achieved_rate_hz: if window_ns == 0 {
                0.0
            } else {
                window.readings as f64 * 1e9 / window_ns as f64
            },
        }
    }

    /// A copy of what a scrape shows (everything but the scrapers' windows).
    pub fn shown(&self) -> DeviceStats {
        DeviceStats {
            interval_ns: self.interval_ns,
            current: self.current,
            last_reading_ns: self.last_reading_ns,
            readings_total: self.readings_total,
            missed_total: self.missed_total,
            failed_total: self.failed_total,
            bucket_counts: self.bucket_counts,
            used_sum_bytes: self.used_sum_bytes,
            since_start: self.since_start,
            windows: BTreeMap::new(),
        }
    }

    /// The scrapers with a window now.
    pub fn scrapers(&self) -> impl Iterator<Item = &str> {
        self.windows.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn mem(used: u64) -> NvmlMemory {
        NvmlMemory {
            total_bytes: 4 * GIB,
            reserved_bytes: Some(0),
            used_bytes: used,
            free_bytes: 4 * GIB - used,
        }
    }

    #[test]
    fn each_scraper_gets_the_peak_since_its_own_previous_scrape() {
        let mut s = DeviceStats::new(1_000_000, 0);
        s.record(1_000_000, mem(0));
        // A's first scrape: since the start.
        assert_eq!(s.scrape("a", 2_000_000, u64::MAX).window.used_peak_bytes, 0);
        s.record(3_000_000, mem(GIB + 5));
        s.record(4_000_000, mem(7));
        // A sees the spike; B's first scrape sees it too (since the start); A's next does not.
        let a = s.scrape("a", 5_000_000, u64::MAX);
        assert_eq!(a.window.used_peak_bytes, GIB + 5);
        assert_eq!(a.window.free_min_bytes, 3 * GIB - 5);
        assert_eq!(a.window.readings, 2);
        assert_eq!(a.window_ns, 3_000_000);
        assert!((a.achieved_rate_hz - 2.0 / 0.003).abs() < 1e-6);
        assert_eq!(
            s.scrape("b", 5_500_000, u64::MAX).window.used_peak_bytes,
            GIB + 5
        );
        // The next windows start at the current value, not at zero.
        assert_eq!(s.scrape("a", 6_000_000, u64::MAX).window.used_peak_bytes, 7);
        assert_eq!(s.scrape("a", 6_000_000, u64::MAX).window.readings, 0);
    }

    #[test]
    fn late_and_failed_readings_count_as_missed() {
        let mut s = DeviceStats::new(1_000, 0);
        s.record(1_000, mem(1));
        s.record(2_000, mem(1));
        s.record(6_000, mem(1)); // ticks at 3, 4, 5 µs skipped
        s.record_failure();
        assert_eq!(
            (s.readings_total, s.missed_total, s.failed_total),
            (3, 4, 1)
        );
    }

    #[test]
    fn the_histogram_puts_each_reading_under_its_bound() {
        let mut s = DeviceStats::new(0, 0);
        s.record(1, mem(0));
        s.record(2, mem(4 * GIB / 10)); // exactly the first bound
        s.record(3, mem(4 * GIB / 10 + 1));
        s.record(4, mem(4 * GIB));
        assert_eq!(s.bucket_counts[0], 2);
        assert_eq!(s.bucket_counts[1], 1);
        assert_eq!(s.bucket_counts[BUCKET_PERMILLE.len() - 1], 1);
        assert_eq!(s.used_sum_bytes, (4 * GIB / 10 * 2 + 1 + 4 * GIB) as u128);
    }

    #[test]
    fn scrapers_are_bounded_and_forgotten_after_their_time_to_live() {
        let mut s = DeviceStats::new(0, 0);
        for i in 0..100u64 {
            s.scrape(&format!("s{i}"), i, u64::MAX);
        }
        assert_eq!(s.scrapers().count(), MAX_SCRAPERS);
        assert!(s.scrapers().any(|k| k == "s99") && !s.scrapers().any(|k| k == "s0"));
        s.scrape("late", 1_000, 10);
        assert_eq!(s.scrapers().collect::<Vec<_>>(), ["late"]);
    }
}
