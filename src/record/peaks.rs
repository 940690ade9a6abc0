//! True interval peaks, and the peaks a slower poller would have reported.
//!
//! A true peak is the maximum of a view over every reading in an interval (each event plus the
//! background sampler). A poller at rate R reads "the current value" every 1/R seconds: at each
//! of its ticks it sees the latest reading taken at or before the tick. Replaying the timeline
//! that way shows what a 1 Hz dashboard would have missed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::{Reading, Source, View};

/// The highest value a view reached, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Peak {
    pub bytes: u64,
    pub t_ns: u64,
    pub source: Source,
}

/// The peak of every view over one interval.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeakSet {
    peaks: [Option<Peak>; View::COUNT],
    readings: u64,
}

impl PeakSet {
    pub fn observe(&mut self, r: &Reading) {
        self.readings += 1;
        for (view, bytes) in r.views.iter() {
            let slot = &mut self.peaks[view.index()];
            if slot.is_none_or(|p| bytes > p.bytes) {
                *slot = Some(Peak {
                    bytes,
                    t_ns: r.t_ns,
                    source: r.source,
                });
            }
        }
    }

    pub fn get(&self, view: View) -> Option<Peak> {
        self.peaks[view.index()]
    }

    pub fn readings(&self) -> u64 {
        self.readings
    }

    /// View key → peak, for JSON.
    pub fn to_map(&self) -> BTreeMap<String, Peak> {
        View::ALL
            .into_iter()
            .filter_map(|v| self.get(v).map(|p| (v.key().to_string(), p)))
            .collect()
    }
}

/// A poller replayed over the timeline.
#[derive(Debug, Clone)]
pub struct Poller {
    pub name: String,
    pub period_ns: u64,
    next_tick_ns: u64,
    last: Option<Reading>,
    ticks: u64,
    peaks: PeakSet,
}

impl Poller {
    /// A poller whose first tick falls at `start_ns`.
    pub fn new(name: &str, period_ns: u64, start_ns: u64) -> Self {
        Poller {
            name: name.to_string(),
            period_ns: period_ns.max(1),
            next_tick_ns: start_ns,
            last: None,
            ticks: 0,
            peaks: PeakSet::default(),
        }
    }

    fn ticks_before(&mut self, t_ns: u64, inclusive: bool) {
        while self.next_tick_ns < t_ns || (inclusive && self.next_tick_ns == t_ns) {
            if let Some(last) = &self.last {
                let seen = Reading {
                    t_ns: self.next_tick_ns,
                    ..*last
                };
                self.peaks.observe(&seen);
                self.ticks += 1;
            }
            self.next_tick_ns += self.period_ns;
        }
    }

    /// Feeds the next reading in time order.
    pub fn observe(&mut self, r: &Reading) {
        self.ticks_before(r.t_ns, false);
        self.last = Some(*r);
    }

    /// Runs the ticks up to the end of the interval and returns what the poller saw.
    pub fn finish(&mut self, end_ns: u64) -> (&PeakSet, u64) {
        self.ticks_before(end_ns, true);
        (&self.peaks, self.ticks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ViewSet;

    fn reading(t_ns: u64, own: u64) -> Reading {
        Reading {
            t_ns,
            phase: 0,
            source: Source::Event,
            device_free_bytes: 0,
            views: ViewSet::default().with(View::OwnBytes, own),
        }
    }

    #[test]
    fn true_peak_keeps_the_maximum_and_its_time() {
        let mut p = PeakSet::default();
        for (t, v) in [(0, 5), (10, 9), (20, 7), (30, 9)] {
            p.observe(&reading(t, v));
        }
        assert_eq!(
            p.get(View::OwnBytes),
            Some(Peak {
                bytes: 9,
                t_ns: 10,
                source: Source::Event
            })
        );
        assert_eq!(p.get(View::AllocReserved), None);
    }

    #[test]
    fn a_1hz_poller_misses_a_50ms_spike() {
        const S: u64 = 1_000_000_000;
        let mut poll = Poller::new("1hz", S, 0);
        let mut fast = Poller::new("1khz", S / 1000, 0);
        let readings = [
            reading(0, 1),
            reading(S / 2, 100),
            reading(S / 2 + 50_000_000, 1),
            reading(2 * S, 1),
        ];
        for r in &readings {
            poll.observe(r);
            fast.observe(r);
        }
        let (seen, ticks) = poll.finish(2 * S);
        assert_eq!(ticks, 3);
        assert_eq!(seen.get(View::OwnBytes).unwrap().bytes, 1);
        let (seen, _) = fast.finish(2 * S);
        assert_eq!(seen.get(View::OwnBytes).unwrap().bytes, 100);
    }
}
