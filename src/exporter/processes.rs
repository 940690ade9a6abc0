//! One device's processes as NVML's process list shows them, each with where it lives
//! (`cgroup`): its current memory, its peak since each scraper's previous scrape, and for a
//! process that left the list, the time it left. A process gone for the time-to-live is
//! dropped with its series, so the table holds at most the processes of the last
//! time-to-live, however long the exporter runs. A list NVML refuses (no permission on a MIG
//! instance, for one) is kept as the reason, never as zeros.

use std::collections::{BTreeMap, HashMap};

use super::cgroup::Placement;

/// One process on the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub placement: Placement,
    /// Its memory at the last list (0 once it left the list); `None` where NVML does not say.
    pub used_bytes: Option<u64>,
    /// The peak since the exporter first listed it (a scraper's first scrape reports this).
    pub peak_since_listed_bytes: u64,
    /// When it left the list.
    pub gone_since_ns: Option<u64>,
}

/// The processes of one device.
#[derive(Debug, Clone, Default)]
pub struct ProcessTable {
    pub processes: BTreeMap<u32, Process>,
    /// Per scraper, each process's peak since that scraper's previous scrape.
    windows: HashMap<String, HashMap<u32, u64>>,
    /// Lists taken and lists NVML refused, since the start.
    pub lists_total: u64,
    pub lists_failed_total: u64,
    /// Why the last list failed (`None`: it worked, or none was taken yet).
    pub unavailable: Option<String>,
}

impl ProcessTable {
    /// Folds one process list at `now_ns` in: `place` says where a newly listed process lives.
    /// Processes gone for more than `ttl_ns` are dropped.
    pub fn update(
        &mut self,
        now_ns: u64,
        list: Result<Vec<(u32, Option<u64>)>, String>,
        ttl_ns: u64,
        mut place: impl FnMut(u32) -> Placement,
    ) {
        self.lists_total += 1;
        let list = match list {
            Ok(l) => l,
            Err(why) => {
                self.lists_failed_total += 1;
                self.unavailable = Some(why);
                return;
            }
        };
        self.unavailable = None;
        let listed: HashMap<u32, Option<u64>> = list.into_iter().collect();
        for (pid, p) in self.processes.iter_mut() {
            if !listed.contains_key(pid) && p.gone_since_ns.is_none() {
                p.gone_since_ns = Some(now_ns);
                p.used_bytes = p.used_bytes.map(|_| 0);
            }
        }
        for (&pid, &used) in &listed {
            let p = self.processes.entry(pid).or_insert_with(|| Process {
                placement: place(pid),
                used_bytes: None,
                peak_since_listed_bytes: 0,
                gone_since_ns: None,
            });
            // A PID listed again after it left is a new process with the same number.
            if p.gone_since_ns.is_some() {
                p.placement = place(pid);
                p.peak_since_listed_bytes = 0;
                p.gone_since_ns = None;
            }
            p.used_bytes = used;
            let b = used.unwrap_or(0);
            p.peak_since_listed_bytes = p.peak_since_listed_bytes.max(b);
            for w in self.windows.values_mut() {
                let peak = w.entry(pid).or_insert(0);
                *peak = (*peak).max(b);
            }
        }
        let expired: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, p)| {
                p.gone_since_ns
                    .is_some_and(|g| now_ns.saturating_sub(g) > ttl_ns)
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in expired {
            self.processes.remove(&pid);
            for w in self.windows.values_mut() {
                w.remove(&pid);
            }
        }
    }

    /// Each process's peak since `scraper`'s previous scrape (since it was first listed, on a
    /// scraper's first scrape); the next window starts at each one's current memory. Windows
    /// of scrapers not in `scrapers` (forgotten by the device's windows) are dropped.
    pub fn scrape<'a>(
        &mut self,
        scraper: &str,
        scrapers: impl Iterator<Item = &'a str>,
    ) -> BTreeMap<u32, u64> {
        let keep: Vec<&str> = scrapers.collect();
        self.windows
            .retain(|k, _| k == scraper || keep.contains(&k.as_str()));
        let old = self.windows.remove(scraper);
        let peaks = self
            .processes
            .iter()
            .map(|(pid, p)| {
                let peak = match &old {
                    Some(w) => w.get(pid).copied().unwrap_or(0),
                    None => p.peak_since_listed_bytes,
                };
                (*pid, peak.max(p.used_bytes.unwrap_or(0)))
            })
            .collect();
        let next = self
            .processes
            .iter()
            .map(|(pid, p)| (*pid, p.used_bytes.unwrap_or(0)))
            .collect();
        self.windows.insert(scraper.to_string(), next);
        peaks
    }

    /// Whether `pid` is on the list now (a new process's cgroup is read before `update`).
    pub fn is_listed(&self, pid: u32) -> bool {
        self.processes
            .get(&pid)
            .is_some_and(|p| p.gone_since_ns.is_none())
    }

    /// A copy of what a scrape shows (everything but the scrapers' windows).
    pub fn shown(&self) -> ProcessTable {
        ProcessTable {
            processes: self.processes.clone(),
            windows: HashMap::new(),
            lists_total: self.lists_total,
            lists_failed_total: self.lists_failed_total,
            unavailable: self.unavailable.clone(),
        }
    }

    /// Entries held across all scrapers' windows (the memory bound's measure).
    pub fn window_entries(&self) -> usize {
        self.windows.values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn at(table: &mut ProcessTable, t_s: u64, list: &[(u32, u64)]) {
        let l = list.iter().map(|&(p, b)| (p, Some(b))).collect();
        table.update(t_s * S, Ok(l), 60 * S, |_| Placement::default());
    }

    #[test]
    fn a_process_peak_is_per_scraper_and_an_ended_process_is_dropped_after_the_ttl() {
        let mut t = ProcessTable::default();
        at(&mut t, 0, &[(7, 100)]);
        assert_eq!(t.scrape("a", std::iter::empty())[&7], 100);
        at(&mut t, 1, &[(7, 900)]);
        at(&mut t, 2, &[(7, 50)]);
        assert_eq!(t.scrape("a", std::iter::empty())[&7], 900);
        // b's first scrape: since the process was first listed.
        assert_eq!(t.scrape("b", ["a"].into_iter())[&7], 900);
        assert_eq!(t.scrape("a", ["b"].into_iter())[&7], 50);
        at(&mut t, 3, &[]);
        assert_eq!(t.processes[&7].used_bytes, Some(0));
        at(&mut t, 63, &[]);
        assert!(t.processes.contains_key(&7));
        at(&mut t, 64, &[]);
        assert!(t.processes.is_empty());
        assert_eq!(t.window_entries(), 0);
    }

    #[test]
    fn a_refused_list_is_a_reason_not_zeros() {
        let mut t = ProcessTable::default();
        at(&mut t, 0, &[(7, 100)]);
        t.update(S, Err("NVML_ERROR_NO_PERMISSION".into()), 60 * S, |_| {
            Placement::default()
        });
        assert_eq!(t.unavailable.as_deref(), Some("NVML_ERROR_NO_PERMISSION"));
        assert_eq!(t.processes[&7].used_bytes, Some(100));
        assert_eq!((t.lists_total, t.lists_failed_total), (2, 1));
    }
}
